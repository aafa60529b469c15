"""2-D resize of NCHW4c tensors, as ONNX ``Resize`` / ``relax.image.resize2d`` define it.

One work item per output pixel (4 channels). The input coordinate of output
index ``i`` is an exact fraction ``num / den`` of integers for every supported
``coordinate_transformation_mode`` (half_pixel: ``((2i + 1) in - out) / (2 out)``),
so nearest-neighbour indices are rounded exactly with integer division (no float
coordinate that lands a hair below a tie); bilinear weights are ``num / den`` in
float, the coordinate clamped to the edges as ONNX does.
"""

from __future__ import annotations

from tvm.script import tirx as T

from ._common import (
    BUFFER, LANES, TEXTURE, check_dtype, check_positive, check_scope, load_pixel, nchw4c, pixel_grid, pixel_launch, select_params,
    store_pixel,
)
from .epilogue import check_map_epilogue, map_epilogue_inputs, store_output_pixel

METHODS = ("nearest", "linear")
COORDINATE_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")
ROUNDING_METHODS = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _coordinate(mode: str, i, size_in: int, size_out: int):
    """Input coordinate of output index ``i`` (a TIR int expression) as ``(num, den)``, ``den > 0``."""
    if mode == "asymmetric":
        return i * size_in, size_out
    if mode == "half_pixel" or (mode == "pytorch_half_pixel" and size_out > 1):
        return (2 * i + 1) * size_in - size_out, 2 * size_out
    if mode == "align_corners" and size_out > 1:
        return i * (size_in - 1), size_out - 1
    return i * 0, 1  # pytorch_half_pixel / align_corners onto one pixel: coordinate 0


def _nearest(mode: str, rounding: str, i, size_in: int, size_out: int):
    """Nearest input index of output index ``i``, rounded exactly and clamped to the edge."""
    num, den = _coordinate(mode, i, size_in, size_out)
    if rounding == "round_prefer_floor":  # ceil(x - 1/2)
        index = -T.floordiv(den - 2 * num, 2 * den)
    elif rounding == "round_prefer_ceil":  # floor(x + 1/2)
        index = T.floordiv(2 * num + den, 2 * den)
    elif rounding == "floor":
        index = T.floordiv(num, den)
    else:
        index = -T.floordiv(-num, den)
    return T.min(T.max(index, 0), size_in - 1)


def _linear(mode: str, i, size_in: int, size_out: int, dtype: str, part: str):
    """``part`` of the bilinear tap of output index ``i`` on one axis: ``"lo"`` and ``"hi"``
    (input indices) or ``"weight"`` (of ``hi``). Expressions, so TVMScript inlines them."""
    num, den = _coordinate(mode, i, size_in, size_out)
    c = T.min(T.max(T.Cast(dtype, num) / T.FloatImm(dtype, float(den)), T.FloatImm(dtype, 0.0)), T.FloatImm(dtype, float(size_in - 1)))
    lo = T.Cast("int32", T.floor(c))
    return {"lo": lo, "hi": T.min(lo + 1, size_in - 1), "weight": c - T.Cast(dtype, lo)}[part]


def resize2d(
    shape, size, method: str = "nearest", coordinate_transformation_mode: str = "half_pixel",
    rounding_method: str = "round_prefer_floor", dtype: str = "float32", scope: str = TEXTURE,
    epilogue=None, channels: int | None = None,
):
    """``Y = resize(X)`` from NCHW4c ``shape`` ``(N, C/4, H, W, 4)`` to ``(N, C/4, size[0], size[1], 4)``.

    ``method``: ``"nearest"`` (index rounded by ``rounding_method``, ONNX's ``nearest_mode``)
    or ``"linear"`` (bilinear); ``coordinate_transformation_mode`` as in ONNX. ``epilogue``: an
    :class:`~primfuncs.epilogue.Epilogue` applied to each output pixel as the convs apply theirs
    (an elementwise chain after the resize: FPN's ``upsample(p) + lateral``, a gate's
    ``x * upsample(g)``), ``channels`` the real channel count it keeps the padded lanes of."""
    shape = nchw4c(shape)
    n, c4, h, w, _ = shape
    check_positive(N=n, C4=c4, H=h, W=w)
    if len(size) != 2:
        raise ValueError(f"size must be (out_h, out_w), got {size}")
    oh, ow = (int(s) for s in size)
    check_positive(out_h=oh, out_w=ow)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if coordinate_transformation_mode not in COORDINATE_MODES:
        raise ValueError(f"coordinate_transformation_mode must be one of {COORDINATE_MODES}, got {coordinate_transformation_mode!r}")
    if method == "nearest" and rounding_method not in ROUNDING_METHODS:
        raise ValueError(f"rounding_method must be one of {ROUNDING_METHODS}, got {rounding_method!r}")
    check_dtype(dtype)
    check_scope(scope)
    check_map_epilogue(epilogue, "resize")
    spec, bias_shape, residual_shape, residual_scope = map_epilogue_inputs(epilogue, (n, c4, oh, ow, 4), scope)
    g = pixel_grid(n * c4, oh, ow)
    mode = coordinate_transformation_mode
    one = T.FloatImm(dtype, 1.0)

    launch = pixel_launch()

    @T.macro
    def per_pixel(X, Y, Bias, Residual, vz, vh, vw):
        out = T.sblock_alloc_buffer((4,), dtype, scope="local")
        p00 = T.sblock_alloc_buffer((4,), dtype, scope="local")
        p01 = T.sblock_alloc_buffer((4,), dtype, scope="local")
        p10 = T.sblock_alloc_buffer((4,), dtype, scope="local")
        p11 = T.sblock_alloc_buffer((4,), dtype, scope="local")
        if method == "nearest":
            load_pixel(out, X, vz // c4, vz % c4, _nearest(mode, rounding_method, vh, h, oh), _nearest(mode, rounding_method, vw, w, ow))
        else:
            load_pixel(p00, X, vz // c4, vz % c4, _linear(mode, vh, h, oh, dtype, "lo"), _linear(mode, vw, w, ow, dtype, "lo"))
            load_pixel(p01, X, vz // c4, vz % c4, _linear(mode, vh, h, oh, dtype, "lo"), _linear(mode, vw, w, ow, dtype, "hi"))
            load_pixel(p10, X, vz // c4, vz % c4, _linear(mode, vh, h, oh, dtype, "hi"), _linear(mode, vw, w, ow, dtype, "lo"))
            load_pixel(p11, X, vz // c4, vz % c4, _linear(mode, vh, h, oh, dtype, "hi"), _linear(mode, vw, w, ow, dtype, "hi"))
            for lane in T.unroll(4):
                out[lane] = (p00[lane] * (one - _linear(mode, vw, w, ow, dtype, "weight")) + p01[lane] * _linear(mode, vw, w, ow, dtype, "weight")) * (
                    one - _linear(mode, vh, h, oh, dtype, "weight")
                ) + (p10[lane] * (one - _linear(mode, vw, w, ow, dtype, "weight")) + p11[lane] * _linear(mode, vw, w, ow, dtype, "weight")) * _linear(
                    mode, vh, h, oh, dtype, "weight"
                )
        if epilogue is None:
            store_pixel(Y, vz // c4, vz % c4, vh, vw, out)
        else:
            px = T.sblock_alloc_buffer((1, 4), dtype, scope="local")
            tmp = T.sblock_alloc_buffer((4,), dtype, scope="local")
            for lane in T.unroll(4):
                px[0, lane] = out[lane]
            store_output_pixel(Y, px, 0, tmp, epilogue, Bias, Residual, vz // c4, vz % c4, vh, vw, channels)

    @T.prim_func(s_tir=True)
    def func(x: T.handle, bias: T.handle, residual: T.handle, y: T.handle):
        T.func_attr({"global_symbol": f"resize2d_{method}", "tirx.noalias": True})
        X = T.match_buffer(x, (n, c4, h, w, 4), dtype, scope=scope)
        Bias = T.match_buffer(bias, bias_shape, dtype, scope=BUFFER)
        Residual = T.match_buffer(residual, residual_shape, dtype, scope=residual_scope)
        Y = T.match_buffer(y, (n, c4, oh, ow, 4), dtype, scope=scope)
        launch(g, oh, ow, "pixel", lambda vz, vh, vw: per_pixel(X, Y, Bias, Residual, vz, vh, vw))

    return select_params(func, spec.params(["X"], "Y"))
