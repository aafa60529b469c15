"""Half arithmetic on devices that run ``half`` but lack the ``cl_khr_fp16`` builtins.

NVIDIA's OpenCL (H200, driver 580) builds and runs ``half``/``half4`` arithmetic, half pointers
and ``read_imagef``/``write_imagef`` on half images, but not ``read_imageh``/``write_imageh``,
``as_half4``, ``convert_half``/``convert_half4``/``convert_float4``, ``vload4``/``vstore4`` on ``half*`` or the math builtins
on half (``exp``, ``fmax``, ``sqrt``: "ambiguous"); nor does it define ``cl_khr_fp16``, so
TVM's guard ``#error``s (../shared/DESIGN.md). TVM's float16 kernels use exactly those.

:func:`with_prelude` puts :data:`PRELUDE` before such a kernel's source: it defines
``cl_khr_fp16`` and enables the pragma, declares overloaded helpers ``tad_NAME`` (clang's
``__attribute__((overloadable))``) for every builtin name the float16 kernels call, whose half
overloads are built from what the device has (``read_imagef`` plus element casts, element-wise
loads and stores through the half pointer, math through float: ``(half)exp((float)x)``) and
whose other overloads forward to the builtin, then ``#define NAME tad_NAME``. The kernel source
itself is unchanged; a call the helpers do not cover fails to build (no silent fallback).
Arithmetic outside the renamed builtins stays in half. ``opencl.half_mode`` decides per device
and driver whether a device runs half natively, with this prelude, or not at all.

No TVM here (the runtime runs on machines without it).
"""

from __future__ import annotations

#: Scalar and 4-lane types the helpers are declared for.
_FLOATS = ("half", "float")
#: Unary math builtins of the float16 kernels (epilogue activations, softmax, layer norm, resize).
UNARY = ("exp", "log", "sqrt", "rsqrt", "tanh", "erf", "fabs", "floor", "ceil", "round")
#: Binary math builtins on floating point.
BINARY = ("fmax", "fmin", "pow")
#: ``max``/``min``: floating point (through ``fmax``/``fmin``) and integer (TVM's index clamps).
INTEGER_TYPES = ("int", "uint", "long", "ulong")
#: Address spaces a vector load/store may point into (TVM: global buffers, private registers, local tiles).
_SPACES = ("__global", "__private", "__local")

_HEAD = """\
// tir-adreno half compatibility prelude (tir_adreno/runtime/half_compat.py)
#ifndef cl_khr_fp16
#define cl_khr_fp16 1
#endif
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#define TAD_OL __attribute__((overloadable))
TAD_OL half4 tad_h4(float4 v) { return (half4)((half)v.s0, (half)v.s1, (half)v.s2, (half)v.s3); }
TAD_OL float4 tad_f4(half4 v) { return (float4)((float)v.s0, (float)v.s1, (float)v.s2, (float)v.s3); }
"""


def _images() -> list[str]:
    coord = "int4"
    return [
        f"TAD_OL half4 tad_read_imageh(__read_only image2d_array_t im, sampler_t s, {coord} c) "
        "{ return tad_h4(read_imagef(im, s, c)); }",
        f"TAD_OL half4 tad_read_imageh(__read_only image2d_array_t im, {coord} c) {{ return tad_h4(read_imagef(im, c)); }}",
        f"TAD_OL void tad_write_imageh(__write_only image2d_array_t im, {coord} c, half4 v) {{ write_imagef(im, c, tad_f4(v)); }}",
    ]


def _conversions() -> list[str]:
    # as_half4 of a half4 (TVM wraps every image read and write in it) is not declared without
    # cl_khr_fp16; other 8-byte types reinterpret through a union.
    lines = ["TAD_OL half4 tad_as_half4(half4 x) { return x; }"]
    for other in ("short4", "ushort4", "float2", "int2", "uint2", "long", "ulong"):
        lines.append(f"TAD_OL half4 tad_as_half4({other} x) {{ union {{ {other} a; half4 b; }} u; u.a = x; return u.b; }}")
    for to in _FLOATS:
        for frm in _FLOATS + INTEGER_TYPES:
            lines.append(f"TAD_OL {to} tad_convert_{to}({frm} x) {{ return ({to})x; }}")
    lines += [
        "TAD_OL half4 tad_convert_half4(float4 x) { return tad_h4(x); }",
        "TAD_OL half4 tad_convert_half4(half4 x) { return x; }",
        "TAD_OL float4 tad_convert_float4(half4 x) { return tad_f4(x); }",
        "TAD_OL float4 tad_convert_float4(float4 x) { return x; }",
        "TAD_OL float4 tad_convert_float4(int4 x) { return convert_float4(x); }",
    ]
    return lines


def _vectors() -> list[str]:
    lines = []
    for space in _SPACES + ("__constant",):
        lines.append(f"TAD_OL half4 tad_vload4(size_t i, const {space} half* p) "
                     "{ p += 4 * i; return (half4)(p[0], p[1], p[2], p[3]); }")
        lines.append(f"TAD_OL float4 tad_vload4(size_t i, const {space} float* p) {{ return vload4(i, p); }}")
        lines.append(f"TAD_OL int4 tad_vload4(size_t i, const {space} int* p) {{ return vload4(i, p); }}")
    for space in _SPACES:
        lines.append(f"TAD_OL void tad_vstore4(half4 v, size_t i, {space} half* p) "
                     "{ p += 4 * i; p[0] = v.s0; p[1] = v.s1; p[2] = v.s2; p[3] = v.s3; }")
        lines.append(f"TAD_OL void tad_vstore4(float4 v, size_t i, {space} float* p) {{ vstore4(v, i, p); }}")
        lines.append(f"TAD_OL void tad_vstore4(int4 v, size_t i, {space} int* p) {{ vstore4(v, i, p); }}")
    return lines


def _math() -> list[str]:
    lines = []
    for f in UNARY:
        lines += [
            f"TAD_OL half tad_{f}(half x) {{ return (half){f}((float)x); }}",
            f"TAD_OL half4 tad_{f}(half4 x) {{ return tad_h4({f}(tad_f4(x))); }}",
            f"TAD_OL float tad_{f}(float x) {{ return {f}(x); }}",
            f"TAD_OL float4 tad_{f}(float4 x) {{ return {f}(x); }}",
        ]
    for f, through in [(f, f) for f in BINARY] + [("max", "fmax"), ("min", "fmin")]:
        lines += [
            f"TAD_OL half tad_{f}(half a, half b) {{ return (half){through}((float)a, (float)b); }}",
            f"TAD_OL half4 tad_{f}(half4 a, half4 b) {{ return tad_h4({through}(tad_f4(a), tad_f4(b))); }}",
            f"TAD_OL float tad_{f}(float a, float b) {{ return {f}(a, b); }}",
            f"TAD_OL float4 tad_{f}(float4 a, float4 b) {{ return {f}(a, b); }}",
        ]
    for f in ("max", "min"):
        lines += [f"TAD_OL {t} tad_{f}({t} a, {t} b) {{ return {f}(a, b); }}" for t in INTEGER_TYPES]
    return lines


#: Every builtin name the prelude renames to its ``tad_`` helpers.
RENAMED = (("read_imageh", "write_imageh", "as_half4", "convert_half", "convert_float", "convert_half4", "convert_float4",
            "vload4", "vstore4") + UNARY + BINARY + ("max", "min"))


def _prelude() -> str:
    body = _images() + _conversions() + _vectors() + _math()
    renames = [f"#define {name} tad_{name}" for name in RENAMED]
    return _HEAD + "\n".join(body + renames) + "\n// end of prelude\n"


#: The prelude (helpers first, then the renames, so the helpers still reach the builtins).
PRELUDE = _prelude()


def uses_half(source: str) -> bool:
    """Whether ``source`` is a float16 kernel (TVM guards those with ``cl_khr_fp16``)."""
    return "cl_khr_fp16" in source


def with_prelude(source: str) -> str:
    """``source`` with :data:`PRELUDE` before it when it is a float16 kernel (once), else ``source``."""
    return PRELUDE + source if uses_half(source) and not source.startswith(PRELUDE) else source
