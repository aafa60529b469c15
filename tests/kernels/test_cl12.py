"""The OpenCL C 1.2 build options (runtime.CL12_OPTIONS): TVM's READ_IMAGEF then takes its
sampler-less branch, which many Adreno drivers compile and PoCL (device version 3.0) otherwise
never does. Every kernel family runs built this way in test_bounds.py (with the sanitizer)."""

import pytest

from tir_adreno.runtime import opencl as runtime

#: Redefining CL_VERSION_* makes the compiler warn "macro redefined": expected here, not a defect.
pytestmark = pytest.mark.filterwarnings("ignore::pyopencl.CompilerWarning")

#: Fails to build unless TVM's version test (copied from its emitted source) picks the 1.2 branch.
PROBE = """
#if __OPENCL_VERSION__ == CL_VERSION_2_0 || __OPENCL_VERSION__ == CL_VERSION_3_0
#error the sampler branch of READ_IMAGEF was taken
#endif
#if __OPENCL_C_VERSION__ != 120
#error not compiled as OpenCL C 1.2
#endif
__kernel void probe(__global int* out) { out[0] = 1; }
"""


def test_options_select_the_sampler_less_branch(device):
    device.build_program(PROBE, runtime.CL12_OPTIONS)
    with pytest.raises(RuntimeError, match="sampler branch of READ_IMAGEF was taken"):
        device.build_program(PROBE, "-cl-std=CL1.2")  # PoCL keeps __OPENCL_VERSION__ at 300
