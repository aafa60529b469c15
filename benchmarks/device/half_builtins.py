"""Which half builtins a device's OpenCL compiler builds natively, and whether the half prelude
(``tir_adreno.runtime.half_compat``) builds and runs the probe kernel.

    source benchmarks/device/setup.sh && python3 benchmarks/device/half_builtins.py
"""
import sys
from pathlib import Path

import pyopencl as cl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tir_adreno.runtime import half_compat, opencl as runtime  # noqa: E402

HEAD = "#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n"
#: One statement per builtin, in a kernel with half/float locals and pointers.
SNIPPETS = {
    "half arithmetic": "h = h * (half)2 + (half)0.5f;",
    "as_half4": "h4 = as_half4(h4);",
    "convert_half": "h = convert_half(f);",
    "convert_float": "f = convert_float(h);",
    "convert_half4": "h4 = convert_half4(f4);",
    "convert_float4": "f4 = convert_float4(h4);",
    "vload4 half*": "h4 = vload4(0, p);",
    "vstore4 half*": "vstore4(h4, 0, p);",
    "vload4 private half*": "half a[4]; h4 = vload4(0, a);",
    "vload_half4": "f4 = vload_half4(0, p);",
    "read_imageh": "h4 = read_imageh(im, (int4)(0));",
    "read_imageh sampler": "const sampler_t s = CLK_NORMALIZED_COORDS_FALSE | CLK_FILTER_NEAREST; h4 = read_imageh(im, s, (int4)(0));",
    "exp half": "h = exp(h);",
    "max half": "h = max(h, (half)0);",
    "fmax half": "h = fmax(h, (half)0);",
    "max int": "i = max(i, 0);",
}


def kernel(statement: str) -> str:
    return (HEAD + "__kernel void k(__global half* p, __read_only image2d_array_t im, __global float* out) {\n"
            "  half h = p[0]; half4 h4 = (half4)(h); float f = out[0]; float4 f4 = (float4)(f); int i = 1;\n"
            f"  {statement}\n  out[0] = (float)h + (float)h4.s1 + f + f4.s2 + (float)i;\n}}\n")


def builds(ctx, source: str) -> str:
    try:
        cl.Program(ctx, source).build()
        return "ok"
    except cl.Error as err:
        lines = [x for x in str(err).splitlines() if "error:" in x]
        return (lines[0] if lines else "failed").strip()[:200]


def main():
    device = runtime.get_device()
    print(f"{device.name}; driver {device.cl_device.driver_version}; cl_khr_fp16 listed: "
          f"{'cl_khr_fp16' in device.cl_device.extensions}")
    for name, statement in SNIPPETS.items():
        native = builds(device.context, kernel(statement))
        prelude = builds(device.context, half_compat.with_prelude(kernel(statement)))
        print(f"  {name:22s} native: {native:60s} prelude: {prelude}")
    print(f"probe kernel: native {builds(device.context, half_compat.HALF_PROBE)}; "
          f"prelude {builds(device.context, half_compat.with_prelude(half_compat.HALF_PROBE))}")
    print(f"half_mode: {runtime.half_mode(device)}")


if __name__ == "__main__":
    main()
