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

Also here: the probe that decides it (:func:`half_mode`, :data:`HALF_PROBE`) and whether a
device has half images (:func:`half_images`). No TVM here (the runtime runs on machines without it).
"""

from __future__ import annotations

import contextlib
import os

import numpy as np
import pyopencl as cl

from tir_adreno.runtime import cache
from tir_adreno.runtime.bundle import TensorSpec

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


# -- which devices run half: the probe ------------------------------------------------------


def half_images(device) -> bool:
    """Whether ``device`` has RGBA half-float image arrays (storage in half, math in float)."""
    if not device.limits.image_support:
        return False
    formats = cl.get_supported_image_formats(device.context, cl.mem_flags.READ_WRITE, cl.mem_object_type.IMAGE2D_ARRAY)
    return any(f.channel_order == cl.channel_order.RGBA and f.channel_data_type == cl.channel_type.HALF_FLOAT for f in formats)


#: Runs what TVM's float16 kernels use: the pragma, half4 arithmetic, ``read_imageh`` /
#: ``write_imageh`` on a half image array through a named sampler, ``as_half4`` and
#: ``vload4`` / ``vstore4`` of half.
HALF_PROBE = """
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
__kernel void probe(__read_only image2d_array_t src, __write_only image2d_array_t dst, __global half* buf) {
  const sampler_t smp = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_CLAMP | CLK_FILTER_NEAREST;
  int4 p = (int4)(get_global_id(0), 0, 0, 0);
  half4 v = as_half4(read_imageh(src, smp, p));
  half4 b = vload4(get_global_id(0), buf);
  half4 r = v * b + (half4)((half)0.5f);
  vstore4(r, get_global_id(0), buf);
  write_imageh(dst, p, as_half4(r));
}
"""


def half_math(device) -> bool:
    """Whether ``device`` runs TVM's float16 kernels: natively or through the half prelude
    (:func:`half_mode`)."""
    return half_mode(device) is not None


def half_mode(device) -> str | None:
    """How ``device`` runs TVM's float16 kernels: "native" (it builds and correctly runs
    :data:`HALF_PROBE`), "prelude" (it does so with :data:`PRELUDE` before the source:
    half arithmetic without the half builtins, NVIDIA) or None (PoCL: no half arithmetic).
    Cached per device and driver (the key holds the probe and the prelude)."""
    if device not in _HALF_MODE:
        d = device.cl_device
        key = cache.key("half-probe", HALF_PROBE, PRELUDE, d.platform.name, d.platform.version, d.name,
                        d.driver_version)
        path = cache.cache_dir() / "probes" / f"{key}.bin"
        known = cache.read(path, key)
        if known is None:
            known = _probe_half_mode(device).encode()
            cache.store(path, known, key)
        _HALF_MODE[device] = None if known == b"none" else known.decode()
    return _HALF_MODE[device]


def _probe_half_mode(device) -> str:
    if not half_images(device):
        return "none"
    if _run_half_probe(device, HALF_PROBE):
        return "native"
    return "prelude" if _run_half_probe(device, with_prelude(HALF_PROBE)) else "none"


def _run_half_probe(device, source: str) -> bool:
    try:
        with _quiet_stderr():  # the compiler's own diagnostics of a refused probe are noise here
            prg = cl.Program(device.context, source).build()
    except cl.Error:
        return False
    n = 4
    spec = lambda name: TensorSpec(name, (1, 1, n, 4), "float16", "global.texture")  # noqa: E731
    a = np.arange(4 * n, dtype=np.float16).reshape(1, 1, n, 4) * np.float16(0.25)
    b = np.full(4 * n, 2, np.float16)
    src, dst = device.empty(spec("src")).upload(a), device.empty(spec("dst"))
    buf = cl.Buffer(device.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=b)
    try:
        prg.probe(device.queue, (n,), None, src.mem, dst.mem, buf)
        device.queue.finish()
    except cl.Error:
        return False
    want = a.reshape(-1) * np.float16(2) + np.float16(0.5)
    got = np.empty_like(b)
    cl.enqueue_copy(device.queue, got, buf)
    device.queue.finish()
    return bool(np.array_equal(got, want) and np.array_equal(dst.numpy().reshape(-1), want))


@contextlib.contextmanager
def _quiet_stderr():
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


_HALF_MODE: dict = {}
