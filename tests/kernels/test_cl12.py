"""Every kernel family built as for an OpenCL C 1.2 driver (runtime.CL12_OPTIONS): TVM's
READ_IMAGEF then takes its sampler-less branch, which many Adreno drivers compile and PoCL
(device version 3.0) otherwise never does."""

import numpy as np
import pytest

from tir_adreno.runtime import opencl as runtime
from tir_adreno.tools import tour

SHAPE = (1, 6, 7, 9)
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


@pytest.fixture
def cl12_device(device):
    saved = device.build_options
    device.build_options = runtime.CL12_OPTIONS
    yield device
    device.build_options = saved


def test_options_select_the_sampler_less_branch(device):
    device.build_program(PROBE, runtime.CL12_OPTIONS)
    with pytest.raises(RuntimeError, match="sampler branch of READ_IMAGEF was taken"):
        device.build_program(PROBE, "-cl-std=CL1.2")  # PoCL keeps __OPENCL_VERSION__ at 300


@pytest.mark.parametrize("case", tour.CASES, ids=lambda c: c.name)
def test_every_family_on_opencl_c_1_2(cl12_device, case):
    result = tour.check(case, cl12_device, np.random.default_rng(7), SHAPE)
    assert result == "ok", result
