"""Layout transforms between plain tensors (buffers) and blocked ones.

``NCHW <-> NCHW4c`` and ``NHWC <-> NCHW4c`` for activations, ``OIHW -> OIHW4o``
for weights. Channels that do not fill the last block are zero: kernels read
whole pixels, so padding lanes must hold a neutral value, never garbage.
The blocked side is a texture by default; pass ``scope="global"`` for a buffer.
"""

from __future__ import annotations

import math

from tvm.script import tirx as T

from ._common import (
    BUFFER,
    TEXTURE,
    TEXTURE_WEIGHT,
    blocked,
    check_dtype,
    check_positive,
    check_scope,
    load_pixel,
    pixel_grid,
    pixel_launch,
    store_pixel,
)


def nchw_to_nchw4c(shape, dtype: str = "float32", scope: str = TEXTURE, plain_dtype: str | None = None):
    """``[N, C, H, W]`` buffer -> ``[N, ceil(C/4), H, W, 4]``, padded channels zero."""
    n, c, h, w = _dims(shape, "NCHW")
    return _pack_activation(n, c, h, w, dtype, scope, "nchw_to_nchw4c", channels_last=False, plain_dtype=plain_dtype)


def nhwc_to_nchw4c(shape, dtype: str = "float32", scope: str = TEXTURE, plain_dtype: str | None = None):
    """``[N, H, W, C]`` buffer -> ``[N, ceil(C/4), H, W, 4]``, padded channels zero."""
    n, h, w, c = _dims(shape, "NHWC")
    return _pack_activation(n, c, h, w, dtype, scope, "nhwc_to_nchw4c", channels_last=True, plain_dtype=plain_dtype)


def nchw4c_to_nchw(shape, dtype: str = "float32", scope: str = TEXTURE, plain_dtype: str | None = None, out_shape=None):
    """``[N, ceil(C/4), H, W, 4]`` -> ``[N, C, H, W]`` buffer; ``shape`` is the NCHW shape.
    ``out_shape``: the buffer's shape when it is a reshape of ``[N, C, H, W]`` (the same elements
    in the same order: a classifier's ``[N, C]``, tokens ``[N, C, H * W]``), so the plan needs no
    reshape kernel after it."""
    n, c, h, w = _dims(shape, "NCHW")
    return _unpack_activation(n, c, h, w, dtype, scope, "nchw4c_to_nchw", channels_last=False, plain_dtype=plain_dtype, out_shape=out_shape)


def nchw4c_to_nhwc(shape, dtype: str = "float32", scope: str = TEXTURE, plain_dtype: str | None = None, out_shape=None):
    """``[N, ceil(C/4), H, W, 4]`` -> ``[N, H, W, C]`` buffer; ``shape`` is the NHWC shape;
    ``out_shape`` a reshape of it, as for :func:`nchw4c_to_nchw`."""
    n, h, w, c = _dims(shape, "NHWC")
    return _unpack_activation(n, c, h, w, dtype, scope, "nchw4c_to_nhwc", channels_last=True, plain_dtype=plain_dtype, out_shape=out_shape)


def _reshaped(shape, out_shape) -> tuple:
    """``out_shape`` (a tuple of ints) when it holds as many elements as ``shape``; ``shape`` for None."""
    if out_shape is None:
        return tuple(shape)
    out_shape = tuple(int(d) for d in out_shape)
    if not out_shape or min(out_shape) < 1 or math.prod(out_shape) != math.prod(shape):
        raise ValueError(f"out_shape {out_shape} is not a reshape of {tuple(shape)}")
    return out_shape


def _unravel(index, shape, out_shape) -> list:
    """The indices into ``out_shape`` of element ``index`` (indices into ``shape``), row-major."""
    if tuple(shape) == tuple(out_shape):
        return list(index)
    flat = index[0]
    for i, d in zip(index[1:], shape[1:]):
        flat = flat * d + i
    out = []
    for d in reversed(out_shape[1:]):
        out.append(flat % d)
        flat = flat // d
    return [flat, *reversed(out)]


def _dims(shape, layout):
    shape = tuple(int(d) for d in shape)
    if len(shape) != 4:
        raise ValueError(f"expected a 4-d {layout} shape, got {shape}")
    check_positive(**dict(zip(layout, shape)))
    return shape


def _cast(to: str, frm: str, value):
    """``value`` (of dtype ``frm``) in ``to``: the plain side of a layout transform may differ from
    the blocked side (precision "float16": float32 plain tensors of upstream ops, half blocked ones)."""
    return value if to == frm else T.Cast(to, value)


def _pack_activation(n, c, h, w, dtype, scope, name, channels_last, plain_dtype=None):
    check_dtype(dtype)
    plain_dtype = check_dtype(plain_dtype or dtype)
    check_scope(scope)
    c4 = blocked(c)
    src_shape = (n, h, w, c) if channels_last else (n, c, h, w)
    g = pixel_grid(n * c4, h, w)

    launch = pixel_launch()

    @T.macro
    def per_pixel(A, B, vz, vh, vw):
        x = T.sblock_alloc_buffer((4,), dtype, scope="local")
        for lane in T.unroll(4):
            if channels_last:
                x[lane] = T.if_then_else(
                    (vz % c4) * 4 + lane < c,
                    _cast(dtype, plain_dtype, A[vz // c4, vh, vw, T.min((vz % c4) * 4 + lane, c - 1)]),
                    T.Cast(dtype, 0),
                )
            else:
                x[lane] = T.if_then_else(
                    (vz % c4) * 4 + lane < c,
                    _cast(dtype, plain_dtype, A[vz // c4, T.min((vz % c4) * 4 + lane, c - 1), vh, vw]),
                    T.Cast(dtype, 0),
                )
        store_pixel(B, vz // c4, vz % c4, vh, vw, x)

    @T.prim_func(s_tir=True)
    def func(a: T.handle, b: T.handle):
        T.func_attr({"global_symbol": name, "tirx.noalias": True})
        A = T.match_buffer(a, src_shape, plain_dtype, scope=BUFFER)
        B = T.match_buffer(b, (n, c4, h, w, 4), dtype, scope=scope)
        launch(g, h, w, "pack", lambda vz, vh, vw: per_pixel(A, B, vz, vh, vw))

    return func


def _unpack_activation(n, c, h, w, dtype, scope, name, channels_last, plain_dtype=None, out_shape=None):
    check_dtype(dtype)
    plain_dtype = check_dtype(plain_dtype or dtype)
    check_scope(scope)
    c4 = blocked(c)
    dst_shape = (n, h, w, c) if channels_last else (n, c, h, w)
    out_shape = _reshaped(dst_shape, out_shape)

    def at(*index):
        return _unravel(index, dst_shape, out_shape)
    g = pixel_grid(n * c4, h, w)

    launch = pixel_launch()

    @T.macro
    def per_pixel(A, B, vz, vh, vw):
        x = T.sblock_alloc_buffer((4,), dtype, scope="local")
        load_pixel(x, A, vz // c4, vz % c4, vh, vw)
        for lane in T.unroll(4):
            if (vz % c4) * 4 + lane < c:
                if channels_last:
                    B[*at(vz // c4, vh, vw, (vz % c4) * 4 + lane)] = _cast(plain_dtype, dtype, x[lane])
                else:
                    B[*at(vz // c4, (vz % c4) * 4 + lane, vh, vw)] = _cast(plain_dtype, dtype, x[lane])

    @T.prim_func(s_tir=True)
    def func(a: T.handle, b: T.handle):
        T.func_attr({"global_symbol": name, "tirx.noalias": True})
        A = T.match_buffer(a, (n, c4, h, w, 4), dtype, scope=scope)
        B = T.match_buffer(b, out_shape, plain_dtype, scope=BUFFER)
        launch(g, h, w, "unpack", lambda vz, vh, vw: per_pixel(A, B, vz, vh, vw))

    return func


def oihw_to_oihw4o(shape, dtype: str = "float32", scope: str = TEXTURE_WEIGHT):
    """``[O, I, KH, KW]`` buffer -> ``[ceil(O/4), I, KH, KW, 4]``: one pixel holds 4 output
    channels of one input channel and tap; padded output channels are zero."""
    shape = tuple(int(d) for d in shape)
    if len(shape) != 4:
        raise ValueError(f"expected a 4-d OIHW shape, got {shape}")
    o, i, kh, kw = shape
    check_positive(O=o, I=i, KH=kh, KW=kw)
    check_dtype(dtype)
    check_scope(scope, (TEXTURE_WEIGHT, BUFFER))
    o4 = blocked(o)
    g = pixel_grid(o4, i, kh * kw)

    @T.prim_func(s_tir=True)
    def func(a: T.handle, b: T.handle):
        T.func_attr({"global_symbol": "oihw_to_oihw4o", "tirx.noalias": True})
        A = T.match_buffer(a, (o, i, kh, kw), dtype, scope=BUFFER)
        B = T.match_buffer(b, (o4, i, kh, kw, 4), dtype, scope=scope)
        for z in T.thread_binding(o4, thread="blockIdx.z"):
            for by in T.thread_binding(g.by, thread="blockIdx.y"):
                for bx in T.thread_binding(g.bx, thread="blockIdx.x"):
                    for ty in T.thread_binding(g.ty, thread="threadIdx.y"):
                        for tx in T.thread_binding(g.tx, thread="threadIdx.x"):
                            with T.sblock("pack_weight"):
                                vo = T.axis.spatial(o4, z)
                                vi = T.axis.spatial(i, by * g.ty + ty)
                                vk = T.axis.spatial(kh * kw, bx * g.tx + tx)
                                T.where(by * g.ty + ty < i and bx * g.tx + tx < kh * kw)
                                x = T.sblock_alloc_buffer((4,), dtype, scope="local")
                                for lane in T.unroll(4):
                                    x[lane] = T.if_then_else(
                                        vo * 4 + lane < o,
                                        A[T.min(vo * 4 + lane, o - 1), vi, vk // kw, vk % kw],
                                        T.Cast(dtype, 0),
                                    )
                                store_pixel(B, vo, vi, vk // kw, vk % kw, x)

    return func
