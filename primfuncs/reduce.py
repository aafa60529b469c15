"""Reductions of NCHW4c tensors (textures or buffers): sum/mean/max/min, softmax.

``reduce`` reduces any non-empty set of the axes C, H, W of an NCHW tensor held
as NCHW4c ``(N, C4, H, W, 4)``. It is a window reduction
(:func:`primfuncs.pool2d.window_reduce`) whose windows are whole axes, so it has
the same two schedules (one work item, or a work group combining in shared
memory, per output pixel). Reducing C crosses the 4-lane pixel: the lanes of
the last block beyond the real channel count are padding and are excluded (for
max/min/mean they must never count as 0).

Output: with ``keepdims`` the blocked tensor of the kept-dims NCHW shape in
``scope`` (reducing C leaves one channel: lane 0 of one block, the other lanes
zero); without it a plain row-major buffer of the NCHW result shape (the
reduced axes dropped, padded channels dropped), see :func:`reduce_output`.
"""

from __future__ import annotations

import numbers

from tvm.script import tirx as T

from ._common import LANES, TEXTURE, accumulator_dtype, check_dtype, check_scope, load_pixel, pixel_grid, pixel_launch, store_pixel
from .elementwise import _check_nchw4c
from .pool2d import GROUP_SIZE, GROUP_THRESHOLD, REDUCERS, Window, window_reduce

REDUCE_OPS = ("sum", "mean", "max", "min")


def normalize_axis(axis, ndim: int = 4) -> tuple[int, ...]:
    """Sorted, non-negative NCHW axes; the batch axis is not supported."""
    if axis is None:  # Relax/NumPy: all axes, the batch axis included
        raise NotImplementedError("axis=None reduces the batch axis too, which is not supported; pass axis=(1, 2, 3)")
    axes = (axis,) if isinstance(axis, numbers.Integral) else tuple(axis) if isinstance(axis, (tuple, list)) else None
    if axes is None or not all(isinstance(a, numbers.Integral) for a in axes):
        raise TypeError(f"axis must be an int or a tuple of ints, got {axis!r}")
    if not axes:
        raise ValueError("axis must name at least one axis")
    out = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise ValueError(f"axis {a!r} is out of range for a {ndim}-d NCHW tensor")
        out.append(int(a) % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"axis has repeated axes: {axes}")
    if 0 in out:
        raise NotImplementedError(
            f"reducing over the batch axis (axis={axis}) is not supported; reduce over axes 1, 2, 3 (C, H, W)"
        )
    return tuple(sorted(out))


def _check_channels(shape, channels: int) -> int:
    c4 = shape[1]
    if not isinstance(channels, int) or not 4 * (c4 - 1) < channels <= 4 * c4:
        raise ValueError(f"channels={channels!r} does not fit the {c4} channel blocks of shape {tuple(shape)}")
    return channels


def reduce_output(shape, channels: int, axis, keepdims: bool = True):
    """``(shape, is_blocked)`` of :func:`reduce`'s output for the NCHW4c input ``shape``."""
    n, c4, h, w, _ = _check_nchw4c(shape)
    axes = normalize_axis(axis)
    kept = {1: channels, 2: h, 3: w}
    if keepdims:
        return (n, 1 if 1 in axes else c4, 1 if 2 in axes else h, 1 if 3 in axes else w, LANES), True
    return (n,) + tuple(kept[a] for a in (1, 2, 3) if a not in axes), False


def reduce(
    shape,
    channels: int,
    op: str,
    axis=(2, 3),
    keepdims: bool = True,
    dtype: str = "float32",
    scope: str = TEXTURE,
    strategy: str = "auto",
    group_threshold: int | None = GROUP_THRESHOLD,
    group_size: int = GROUP_SIZE,
    square: bool = False,
    out_dtype: str | None = None,
    epilogue=None,
):
    """``op`` (sum, mean, max, min) over NCHW ``axis`` of the NCHW4c ``shape`` holding ``channels``.
    ``square`` (sum only): the sum of the squares, each squared in the accumulator's dtype as it is
    read (``sum_squares_hw``: GRN's ``sum_hw x * x`` in one launch); ``out_dtype``: the output's
    dtype (default ``dtype``; float32 keeps a half tensor's sums of squares finite). ``epilogue``: as
    :func:`primfuncs.pool2d.window_reduce` takes it (a reduction over H and W kept blocked: a global pool)."""
    n, c4, h, w, _ = _check_nchw4c(shape)
    _check_channels(shape, channels)
    if op not in REDUCE_OPS:
        raise ValueError(f"op must be one of {REDUCE_OPS}, got {op!r}")
    if square and op != "sum":
        raise ValueError(f"square=True takes op 'sum' (a sum of squares), got {op!r}")
    axes = normalize_axis(axis)
    windows = tuple(
        Window.whole(extent) if a in axes else Window.point(extent) for a, extent in zip((1, 2, 3), (c4, h, w))
    )
    count = (channels if 1 in axes else 1) * (h if 2 in axes else 1) * (w if 3 in axes else 1)
    return window_reduce(
        shape,
        windows,
        "sum" if op == "mean" else op,
        name=f"{op}{'_squares' if square else ''}_{''.join('nchw'[a] for a in axes)}",
        divisor=(lambda co, vh, vw: count) if op == "mean" else None,
        fold_lanes=1 in axes,
        channels=channels,
        plain_axes=None if keepdims else tuple("chw"[a - 1] for a in (1, 2, 3) if a not in axes),
        dtype=dtype,
        acc_dtype=accumulator_dtype(dtype),
        scope=scope,
        strategy=strategy,
        group_threshold=group_threshold,
        group_size=group_size,
        square=square,
        out_dtype=out_dtype,
        epilogue=epilogue,
    )


def sum(shape, channels, axis=(2, 3), keepdims=True, **config):  # noqa: A001 (Relax's name)
    return reduce(shape, channels, "sum", axis, keepdims, **config)


def mean(shape, channels, axis=(2, 3), keepdims=True, **config):
    return reduce(shape, channels, "mean", axis, keepdims, **config)


def max(shape, channels, axis=(2, 3), keepdims=True, **config):  # noqa: A001
    return reduce(shape, channels, "max", axis, keepdims, **config)


def min(shape, channels, axis=(2, 3), keepdims=True, **config):  # noqa: A001
    return reduce(shape, channels, "min", axis, keepdims, **config)


#: The NCHW axes :func:`softmax` takes: channels, or the last axis (MobileViT-v2's attention over patches).
SOFTMAX_AXES = (1, 3)


def softmax(shape, channels: int, dtype: str = "float32", scope: str = TEXTURE, axis: int = 1):
    """Softmax over NCHW ``axis`` (1: channels, 3: W; negative counts from the end) of the NCHW4c
    ``shape`` holding ``channels`` (``relax.op.nn.softmax``).

    Over channels, one work item per (n, h, w) walks the channel blocks three times: the max
    (stability: exp never overflows), the sum of ``exp(x - max)``, then writes
    ``exp(x - max) / sum``. Padded lanes are excluded from both reductions and
    written as 0. Half kernels keep the max and the sum in float32.
    Over W, see :func:`_softmax_w`.
    """
    n, c4, h, w, _ = _check_nchw4c(shape)
    _check_channels(shape, channels)
    check_dtype(dtype)
    check_scope(scope)
    if axis not in (*SOFTMAX_AXES, *(a - 4 for a in SOFTMAX_AXES)):
        raise NotImplementedError(f"softmax over NCHW axis {axis!r}: only channels (1) and W (3, -1) are supported")
    if axis % 4 == 3:
        return _softmax_w(shape, channels, dtype, scope)
    g = pixel_grid(n, h, w)
    acc_dtype = accumulator_dtype(dtype)
    combine_max, lowest = REDUCERS["max"][0], REDUCERS["max"][1](acc_dtype)
    zero = T.FloatImm(acc_dtype, 0.0)

    def real(cb, lane):
        return cb * 4 + lane < channels

    launch = pixel_launch()

    @T.macro
    def per_pixel(A, B, vn, vh, vw):
        x = T.sblock_alloc_buffer((4,), dtype, scope="local")
        m = T.sblock_alloc_buffer((4,), acc_dtype, scope="local")
        s = T.sblock_alloc_buffer((1,), acc_dtype, scope="local")
        # 1. m[0] = max over the real channels
        for lane in T.unroll(4):
            m[lane] = lowest
        for cb in T.serial(c4):
            load_pixel(x, A, vn, cb, vh, vw)
            for lane in T.unroll(4):
                m[lane] = T.if_then_else(real(cb, lane), combine_max(m[lane], T.Cast(acc_dtype, x[lane])), m[lane])
        m[0] = combine_max(m[0], m[1])
        m[2] = combine_max(m[2], m[3])
        m[0] = combine_max(m[0], m[2])
        # 2. s[0] = sum of exp(x - m) over the real channels
        s[0] = zero
        for cb in T.serial(c4):
            load_pixel(x, A, vn, cb, vh, vw)
            for lane in T.unroll(4):
                s[0] = s[0] + T.if_then_else(real(cb, lane), T.exp(T.Cast(acc_dtype, x[lane]) - m[0]), zero)
        # 3. y = exp(x - m) / s, padded lanes 0
        for cb in T.serial(c4):
            load_pixel(x, A, vn, cb, vh, vw)
            for lane in T.unroll(4):
                x[lane] = T.Cast(dtype, T.if_then_else(real(cb, lane), T.exp(T.Cast(acc_dtype, x[lane]) - m[0]) / s[0], zero))
            store_pixel(B, vn, cb, vh, vw, x)

    @T.prim_func(s_tir=True)
    def func(a: T.handle, b: T.handle):
        T.func_attr({"global_symbol": "softmax_c", "tirx.noalias": True})
        A = T.match_buffer(a, (n, c4, h, w, 4), dtype, scope=scope)
        B = T.match_buffer(b, (n, c4, h, w, 4), dtype, scope=scope)
        launch(g, h, w, "softmax", lambda vz, vh, vw: per_pixel(A, B, vz, vh, vw))

    return func



def _softmax_w(shape, channels: int, dtype: str, scope: str):
    """Softmax over W of the NCHW4c ``shape``: each lane (channel) of a row on its own.

    One work item per (n, channel block, h) row walks the row's pixels three times (max, sum of
    ``exp(x - max)``, write), the 4 lanes side by side in registers. Padded lanes hold the
    softmax of their zeros (1 / W), not 0, so they are written as 0 (MobileViT-v2 takes the
    softmax of a 1-channel map: 3 of 4 lanes are padding). Half kernels keep max and sum in float32.
    """
    n, c4, h, w, _ = shape
    g = pixel_grid(n * c4, h, 1)
    acc_dtype = accumulator_dtype(dtype)
    combine_max, lowest = REDUCERS["max"][0], REDUCERS["max"][1](acc_dtype)
    zero = T.FloatImm(acc_dtype, 0.0)

    launch = pixel_launch()

    @T.macro
    def per_row(A, B, vz, vh):
        x = T.sblock_alloc_buffer((4,), dtype, scope="local")
        m = T.sblock_alloc_buffer((4,), acc_dtype, scope="local")
        s = T.sblock_alloc_buffer((4,), acc_dtype, scope="local")
        # 1. m = the row's max, lane by lane
        for lane in T.unroll(4):
            m[lane] = lowest
        for col in T.serial(w):
            load_pixel(x, A, vz // c4, vz % c4, vh, col)
            for lane in T.unroll(4):
                m[lane] = combine_max(m[lane], T.Cast(acc_dtype, x[lane]))
        # 2. s = sum of exp(x - m)
        for lane in T.unroll(4):
            s[lane] = zero
        for col in T.serial(w):
            load_pixel(x, A, vz // c4, vz % c4, vh, col)
            for lane in T.unroll(4):
                s[lane] = s[lane] + T.exp(T.Cast(acc_dtype, x[lane]) - m[lane])
        # 3. y = exp(x - m) / s, padded lanes 0
        for col in T.serial(w):
            load_pixel(x, A, vz // c4, vz % c4, vh, col)
            for lane in T.unroll(4):
                x[lane] = T.Cast(dtype, T.Select((vz % c4) * 4 + lane < channels, T.exp(T.Cast(acc_dtype, x[lane]) - m[lane]) / s[lane], zero))
            store_pixel(B, vz // c4, vz % c4, vh, col, x)

    @T.prim_func(s_tir=True)
    def func(a: T.handle, b: T.handle):
        T.func_attr({"global_symbol": "softmax_w", "tirx.noalias": True})
        A = T.match_buffer(a, (n, c4, h, w, 4), dtype, scope=scope)
        B = T.match_buffer(b, (n, c4, h, w, 4), dtype, scope=scope)
        launch(g, h, 1, "softmax", lambda vz, vh, vw: per_row(A, B, vz, vh))

    return func
