"""Pooling on NCHW4c tensors (textures or buffers): max/avg, adaptive, global.

Every pooling here is a *window reduction*: an output pixel (4 channels)
combines the input pixels of a box ``channel blocks x rows x columns``, one
texture read per tap. Along each axis the box is a :class:`Window` (a sliding
window with stride/padding/dilation, an adaptive window, the whole axis, or
the output position itself). :func:`window_reduce` turns three windows and a
reducer into a kernel; :mod:`primfuncs.reduce` uses it for sum/mean/max/min.

Two schedules (``strategy``):

- ``"thread"``: one work item owns an output pixel and walks its window with
  the accumulator in registers. Best for small windows (3x3 max pool).
- ``"group"``: a work group of G items owns an output pixel; item t reduces
  taps t, t+G, t+2G, ... and the G partial pixels are combined in shared
  (local) memory in two levels: sqrt(G) items each combine sqrt(G) partials,
  then item 0 combines those (2 barriers, chains of at most 8 for G = 64; a
  halving tree needs 2 log2(G) barriers, which cost more than they save on
  PoCL). Best for large windows (global pooling of 7x7 or 56x56), where one
  item per output leaves most of the device idle.

``"auto"`` picks ``"group"`` when a window has at least ``group_threshold``
taps (:data:`GROUP_THRESHOLD`, measured with benchmarks/pooling.py; ``None``:
never, the right choice on CPU OpenCL).
Padding never reads the texture out of range: coordinates are clamped and
the tap is skipped, as if the reducer's identity were combined (-inf for max,
so an all-negative window next to padding still gives its true maximum, never
0; padding is never NaN).

An ``epilogue`` (:class:`~primfuncs.epilogue.Epilogue`, the convs': an elementwise chain's
expression with its per-channel constants and one operand) is applied to each result pixel before
it is stored (blocked outputs), so a pool and the chain after it are one launch.

NaN and Inf behave as in NumPy in both schedules: max/min propagate a NaN from
any tap (``np.max``; OpenCL's fmax would drop it), sums and averages propagate
NaN and +-Inf arithmetically (``inf + -inf`` is NaN).
"""

from __future__ import annotations

import math

from tvm.script import tirx as T

from ._common import (
    BUFFER, TEXTURE, accumulator_dtype, ceildiv, check_dtype, check_positive, check_scope, load_pixel, maximum,
    minimum, pixel_grid, pixel_launch, select_params, store_pixel,
)
from .elementwise import _check_nchw4c
from .epilogue import check_map_epilogue, map_epilogue_inputs, store_output_pixel
from .pool_windows import (  # noqa: F401 (pool2d's names: the rules, tune and tests read them here)
    Window, _pair, normalize_padding, padding_past_half_window, pool_windows, sliding_output_size,
)

#: Window taps from which ``strategy="auto"`` uses a work group per output pixel (GPUs).
#: Measured with ``benchmarks/pooling.py --threshold-sweep`` (benchmarks/results/pooling-*.json).
#: GPU (NVIDIA H200, OpenCL, two runs): from 25 to 64 taps the schedules tie within 10% (near
#: the ~7 us launch floor; global 7x7 pools 1.00-1.11x for the group); the group wins from
#: 100 taps (1.2x), 3x at 28x28, 7x at 56x56; it loses on small windows with many outputs
#: (2x2 to 5x5: 0.5-0.9x, the 3x3/2 stem max pool: 0.2x). PoCL (CPU): the group never wins
#: (0.4-0.8x up to 3136 taps; a work group runs on one core, splitting a window only adds the
#: combine), hence ``tir_adreno.strategy.pool.group_threshold`` passes None (never) for CPU profiles.
GROUP_THRESHOLD = 49
#: Work items per group in the ``"group"`` schedule (at most; fewer for small windows).
GROUP_SIZE = 64
#: Windows with at most this many taps (3x3) are fully unrolled in the ``"thread"`` schedule;
#: longer loops are left to the OpenCL compiler (unrolling 49 taps made PoCL compile ~1.5x
#: slower, with no measurable speedup).
UNROLL_TAPS = 9
STRATEGIES = ("auto", "thread", "group")
POOL_TYPES = ("max", "avg")


def _inf(dtype: str, sign: float):
    return T.FloatImm(dtype, sign * math.inf)


#: name -> (combine(a, b), identity(dtype)): the reducers a window can apply.
REDUCERS = {
    "sum": (lambda a, b: a + b, lambda dtype: T.FloatImm(dtype, 0.0)),
    "max": (maximum, lambda dtype: _inf(dtype, -1.0)),  # NaN wins, as np.max (fmax would drop it)
    "min": (minimum, lambda dtype: _inf(dtype, 1.0)),
}


def _pick_strategy(strategy: str, taps: int, group_threshold: int) -> str:
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    if strategy == "auto":
        return "group" if group_threshold is not None and taps >= group_threshold else "thread"
    return strategy


def _group_threads(taps: int, group_size: int) -> int:
    """A power of two (it splits into equal chunks), at most ``group_size``, no more than the taps need."""
    check_positive(group_size=group_size)
    g = 1
    while g * 2 <= group_size and g < taps:
        g *= 2
    return g


def window_reduce(
    shape,
    windows: tuple[Window, Window, Window],
    reducer: str,
    *,
    name: str,
    divisor=None,
    fold_lanes: bool = False,
    channels: int | None = None,
    plain_axes: tuple[str, ...] | None = None,
    dtype: str = "float32",
    scope: str = TEXTURE,
    strategy: str = "auto",
    group_threshold: int | None = GROUP_THRESHOLD,
    group_size: int = GROUP_SIZE,
    acc_dtype: str | None = None,
    square: bool = False,
    out_dtype: str | None = None,
    epilogue=None,
):
    """``Out[n, co, oh, ow] = reduce over the box of windows (c, h, w) of A``, lane by lane.

    ``windows``: along channel blocks, rows and columns of the NCHW4c input ``shape``.
    ``fold_lanes``: the channel axis is reduced, so the 4 lanes of each pixel are
    reduced too; lanes ``>= channels`` (padding of the last block) are excluded, never
    reduced as 0. The result is channel 0 of the output block, its other lanes zero.
    ``divisor(co, oh, ow)``: an integer (TIR expression or int) the result is divided
    by (mean, average pooling).
    ``plain_axes``: write a plain row-major buffer ``(N, *plain_axes)`` (axes among
    ``"c"`` (``channels`` long), ``"h"``, ``"w"``; ``keepdims=False``) instead of the
    blocked ``(N, C4o, OH, OW, 4)`` tensor in ``scope``.
    ``acc_dtype``: the accumulator's dtype (default ``dtype``); taps are converted to it when
    read, the result back to ``dtype`` when stored.
    ``square``: each tap is squared (in ``acc_dtype``) before it is combined: with "sum", a sum of
    squares without the squared tensor (GRN's statistics).
    ``out_dtype``: the output's dtype (default ``dtype``): float32 keeps large sums (of squares) of
    a half tensor finite.
    ``epilogue``: a :class:`~primfuncs.epilogue.Epilogue` applied to each result pixel as the convs
    apply theirs (its ``Bias`` and ``Residual`` parameters between ``A`` and ``Out``; padding lanes
    past ``channels`` kept 0); blocked outputs only.
    """
    n, c4, h, w, _ = _check_nchw4c(shape)
    check_dtype(dtype)
    check_scope(scope)
    if reducer not in REDUCERS:
        raise ValueError(f"reducer must be one of {sorted(REDUCERS)}, got {reducer!r}")
    out_dtype = out_dtype or dtype
    check_dtype(out_dtype)
    wc, wh, ww = windows
    if (wc.extent, wh.extent, ww.extent) != (c4, h, w):
        raise ValueError(f"windows cover {(wc.extent, wh.extent, ww.extent)}, the input has {(c4, h, w)}")
    needs_channels = fold_lanes or plain_axes is not None or (epilogue is not None and channels is not None)
    if needs_channels and (channels is None or not 4 * (c4 - 1) < channels <= 4 * c4):
        raise ValueError(f"channels={channels} does not fill the input's {c4} channel blocks")
    if fold_lanes and wc.out != 1:
        raise ValueError("fold_lanes needs the channel window to reduce all blocks to one")
    c4o, oh, ow = wc.out, wh.out, ww.out
    check_map_epilogue(epilogue, "pooling", fold_lanes or plain_axes is not None or out_dtype != dtype)
    taps = wc.taps * wh.taps * ww.taps
    strategy = _pick_strategy(strategy, taps, group_threshold)
    combine, identity_of = REDUCERS[reducer]
    acc_dtype = acc_dtype or dtype
    identity = identity_of(acc_dtype)
    zero = T.FloatImm(acc_dtype, 0.0)

    if plain_axes is not None:
        sizes = {"c": channels, "h": oh, "w": ow}
        if not set(plain_axes) <= set(sizes):
            raise ValueError(f"plain_axes must be among 'c', 'h', 'w', got {plain_axes}")
        out_shape, out_scope = (n,) + tuple(sizes[a] for a in plain_axes), BUFFER
    else:
        out_shape, out_scope = (n, c4o, oh, ow, 4), scope
    store_lanes = 1 if fold_lanes else 4
    # the epilogue's inputs (declared always; ``_params`` keeps those it reads)
    spec, bias_shape, residual_shape, residual_scope = map_epilogue_inputs(epilogue, (n, c4o, oh, ow, 4), out_scope)

    def _params(func):
        return select_params(func, spec.params(["A"], "Out"))

    def usable(co, vh, vw, ic, ih, iw, lane):
        """The tap is a real input element (not padding) and the lane a real channel."""
        conds = [wc.inside(co, ic), wh.inside(vh, ih), ww.inside(vw, iw)]
        if fold_lanes:
            conds.append(wc.clamped(co, ic) * 4 + lane < channels)
        return all_of(conds)

    def plain_index(vn, co, vh, vw, lane):
        at = {"c": co * 4 + lane, "h": vh, "w": vw}
        return (vn,) + tuple(at[a] for a in plain_axes)

    def scale(co, vh, vw):
        d = divisor(co, vh, vw)
        return T.FloatImm(acc_dtype, float(d)) if isinstance(d, int) else T.Cast(acc_dtype, d)

    @T.macro
    def finish(acc, Out, vn, co, vh, vw, Bias, Residual):
        # acc holds 4 per-lane results: fold the lanes (channel reduction), divide, store.
        if fold_lanes:  # (a0 + a1) + (a2 + a3), each combine of two plain loads
            acc[0] = combine(acc[0], acc[1])
            acc[2] = combine(acc[2], acc[3])
            acc[0] = combine(acc[0], acc[2])
            for lane in T.unroll(1, 4):
                acc[lane] = zero
        if divisor is not None:
            for lane in T.unroll(4):
                acc[lane] = acc[lane] / scale(co, vh, vw)
        if plain_axes is not None:  # real channels only, one scalar each
            for lane in T.unroll(store_lanes):
                if co * 4 + lane < channels:
                    Out[plain_index(vn, co, vh, vw, lane)] = T.Cast(out_dtype, acc[lane])
        elif epilogue is not None:  # the convs' epilogue on a (1, 4) pixel of the output's dtype
            px = T.sblock_alloc_buffer((1, 4), out_dtype, scope="local")
            tmp = T.sblock_alloc_buffer((4,), out_dtype, scope="local")
            for lane in T.unroll(4):
                px[0, lane] = T.Cast(out_dtype, acc[lane])
            store_output_pixel(Out, px, 0, tmp, epilogue, Bias, Residual, vn, co, vh, vw, channels)
        else:
            store_pixel(Out, vn, co, vh, vw, acc)

    def term(v):
        return v * v if square else v

    @T.macro
    def accumulate(acc, x, A, vn, co, vh, vw, ic, ih, iw):
        # One tap: read the (clamped) pixel; padding and padded lanes leave acc as it is (as if
        # the identity were combined), so they never count (a NaN-aware max repeats its operand
        # b, which is therefore a plain load, not a select).
        load_pixel(x, A, vn, wc.clamped(co, ic), wh.clamped(vh, ih), ww.clamped(vw, iw))
        for lane in T.unroll(4):
            acc[lane] = T.if_then_else(usable(co, vh, vw, ic, ih, iw, lane), combine(acc[lane], term(T.Cast(acc_dtype, x[lane]))), acc[lane])

    if strategy == "thread":
        g = pixel_grid(n * c4o, oh, ow)
        loop = T.unroll if taps <= UNROLL_TAPS else T.serial

        launch = pixel_launch()

        @T.macro
        def per_pixel(A, Out, Bias, Residual, vz, vh, vw):
            acc = T.sblock_alloc_buffer((4,), acc_dtype, scope="local")
            x = T.sblock_alloc_buffer((4,), dtype, scope="local")
            for lane in T.unroll(4):
                acc[lane] = identity
            for ic in loop(wc.taps):
                for ih in loop(wh.taps):
                    for iw in loop(ww.taps):
                        accumulate(acc, x, A, vz // c4o, vz % c4o, vh, vw, ic, ih, iw)
            finish(acc, Out, vz // c4o, vz % c4o, vh, vw, Bias, Residual)

        @T.prim_func(s_tir=True)
        def func(a: T.handle, bias: T.handle, residual: T.handle, b: T.handle):
            T.func_attr({"global_symbol": name, "tirx.noalias": True})
            A = T.match_buffer(a, (n, c4, h, w, 4), dtype, scope=scope)
            Bias = T.match_buffer(bias, bias_shape, dtype, scope=BUFFER)
            Residual = T.match_buffer(residual, residual_shape, dtype, scope=residual_scope)
            Out = T.match_buffer(b, out_shape, out_dtype, scope=out_scope)
            launch(g, oh, ow, "window", lambda vz, vh, vw: per_pixel(A, Out, Bias, Residual, vz, vh, vw))

        return _params(func)

    gs = _group_threads(taps, group_size)
    log2_gs = gs.bit_length() - 1
    chunk = 1 << ((log2_gs + 1) // 2)  # ~sqrt(gs): two levels of 8 for 64 items
    chunks = gs // chunk
    rounds = ceildiv(taps, gs)
    th, tw = wh.taps, ww.taps

    @T.prim_func(s_tir=True)
    def func(a: T.handle, bias: T.handle, residual: T.handle, b: T.handle):
        T.func_attr({"global_symbol": name, "tirx.noalias": True})
        A = T.match_buffer(a, (n, c4, h, w, 4), dtype, scope=scope)
        Bias = T.match_buffer(bias, bias_shape, dtype, scope=BUFFER)
        Residual = T.match_buffer(residual, residual_shape, dtype, scope=residual_scope)
        Out = T.match_buffer(b, out_shape, out_dtype, scope=out_scope)
        for z in T.thread_binding(n * c4o, thread="blockIdx.z"):
            for by in T.thread_binding(oh, thread="blockIdx.y"):
                for bx in T.thread_binding(ow, thread="blockIdx.x"):
                    with T.sblock("group"):
                        vz, vh, vw = T.axis.remap("SSS", [z, by, bx])
                        partial = T.sblock_alloc_buffer((gs, 4), acc_dtype, scope="shared")
                        chunk_result = T.sblock_alloc_buffer((chunks, 4), acc_dtype, scope="shared")
                        # 1. item t reduces taps t, t + gs, t + 2 gs, ... of the flattened window
                        for t in T.thread_binding(gs, thread="threadIdx.x"):
                            with T.sblock("taps"):
                                acc = T.sblock_alloc_buffer((4,), acc_dtype, scope="local")
                                x = T.sblock_alloc_buffer((4,), dtype, scope="local")
                                for lane in T.unroll(4):
                                    acc[lane] = identity
                                for r in T.serial(rounds):
                                    if r * gs + t < taps:
                                        accumulate(
                                            acc, x, A, vz // c4o, vz % c4o, vh, vw,
                                            (r * gs + t) // (th * tw), (r * gs + t) // tw % th, (r * gs + t) % tw,
                                        )
                                for lane in T.unroll(4):
                                    partial[t, lane] = acc[lane]
                        # 2. item t < chunks combines partials [t*chunk, (t+1)*chunk)
                        for t in T.thread_binding(gs, thread="threadIdx.x"):
                            with T.sblock("combine_chunks"):
                                if t < chunks:
                                    y = T.sblock_alloc_buffer((4,), acc_dtype, scope="local")
                                    for lane in T.unroll(4):
                                        y[lane] = partial[t * chunk, lane]
                                    for k in T.unroll(1, chunk):
                                        for lane in T.unroll(4):
                                            y[lane] = combine(y[lane], partial[t * chunk + k, lane])
                                    for lane in T.unroll(4):
                                        chunk_result[t, lane] = y[lane]
                        # 3. item 0 combines the chunk results and stores the pixel
                        for t in T.thread_binding(gs, thread="threadIdx.x"):
                            with T.sblock("store"):
                                if t == 0:
                                    res = T.sblock_alloc_buffer((4,), acc_dtype, scope="local")
                                    for lane in T.unroll(4):
                                        res[lane] = chunk_result[0, lane]
                                    for k in T.unroll(1, chunks):
                                        for lane in T.unroll(4):
                                            res[lane] = combine(res[lane], chunk_result[k, lane])
                                    finish(res, Out, vz // c4o, vz % c4o, vh, vw, Bias, Residual)

    return _params(func)


def all_of(conds):
    """Conjunction of TIR conditions, skipping the ones known true in Python."""
    conds = [c for c in conds if c is not True]
    if not conds:
        return T.bool(True)
    out = conds[0]
    for c in conds[1:]:
        out = T.And(out, c)
    return out


# -- pooling factories -------------------------------------------------------------------------


def _check_pool_type(pool_type: str) -> str:
    if pool_type not in POOL_TYPES:
        raise ValueError(f"pool_type must be one of {POOL_TYPES}, got {pool_type!r}")
    return pool_type


def pool2d(
    shape,
    pool_type: str,
    pool_size,
    strides=1,
    padding=0,
    dilation=1,
    ceil_mode: bool = False,
    count_include_pad: bool = False,
    dtype: str = "float32",
    scope: str = TEXTURE,
    strategy: str = "auto",
    group_threshold: int | None = GROUP_THRESHOLD,
    group_size: int = GROUP_SIZE,
    epilogue=None,
    channels: int | None = None,
    plain_axes: tuple[str, ...] | None = None,
):
    """Max or average pool2d of the NCHW4c ``shape`` (attributes as ``relax.op.nn.max_pool2d``).

    ``padding``: int, (pad_h, pad_w) or (top, left, bottom, right); each side at most
    half the window span. Average pooling divides by the taps inside the input, or with
    ``count_include_pad`` by those inside the padded input (PyTorch).
    Output: ``(N, C4, OH, OW, 4)`` in ``scope``; see :func:`pool2d_output_shape`.
    ``epilogue``: an :class:`~primfuncs.epilogue.Epilogue` (an elementwise chain's expression, a bias,
    an activation) on each output pixel, as the convs take it; ``channels`` the real channel count
    (its padding lanes stay 0). ``plain_axes`` (with ``channels``, no epilogue): the output as a plain
    buffer in that axis order, ``("c", "h", "w")`` NCHW or ``("h", "w", "c")`` NHWC
    (:func:`window_reduce`): a pool whose readers take plain tensors, with no layout kernel after it.
    """
    _check_pool_type(pool_type)
    wh, ww = pool_windows(shape, pool_size, strides, padding, dilation, ceil_mode)
    wc = Window.point(shape[1])
    divisor = None
    if pool_type == "avg":
        def divisor(co, vh, vw):  # >= 1: a window entirely in padding (dilation) averages to 0
            return T.max(wh.count(vh, count_include_pad) * ww.count(vw, count_include_pad), 1)

    return window_reduce(
        shape,
        (wc, wh, ww),
        "max" if pool_type == "max" else "sum",
        name=f"{pool_type}_pool2d",
        divisor=divisor,
        dtype=dtype,
        acc_dtype=accumulator_dtype(dtype) if pool_type == "avg" else None,  # a max of halves is exact
        scope=scope,
        strategy=strategy,
        group_threshold=group_threshold,
        group_size=group_size,
        epilogue=epilogue,
        channels=channels,
        **({} if plain_axes is None else {"plain_axes": tuple(plain_axes)}),
    )


def max_pool2d(shape, pool_size, strides=1, padding=0, dilation=1, ceil_mode=False, **config):
    return pool2d(shape, "max", pool_size, strides, padding, dilation, ceil_mode, **config)


def avg_pool2d(shape, pool_size, strides=1, padding=0, dilation=1, ceil_mode=False, count_include_pad=False, **config):
    return pool2d(shape, "avg", pool_size, strides, padding, dilation, ceil_mode, count_include_pad, **config)


def pool2d_output_shape(shape, pool_size, strides=1, padding=0, dilation=1, ceil_mode=False):
    """NCHW4c output shape of :func:`pool2d`."""
    wh, ww = pool_windows(shape, pool_size, strides, padding, dilation, ceil_mode)
    return (shape[0], shape[1], wh.out, ww.out, 4)


def adaptive_pool2d(
    shape,
    pool_type: str,
    output_size,
    dtype: str = "float32",
    scope: str = TEXTURE,
    strategy: str = "auto",
    group_threshold: int | None = GROUP_THRESHOLD,
    group_size: int = GROUP_SIZE,
    epilogue=None,
    channels: int | None = None,
):
    """Adaptive max/avg pool2d to ``output_size`` (int or (OH, OW); any size >= 1, also larger
    than the input): output ``i`` pools ``[floor(i*H/OH), ceil((i+1)*H/OH))`` (PyTorch);
    ``epilogue`` and ``channels`` as :func:`pool2d` takes them."""
    _check_pool_type(pool_type)
    _, c4, h, w, _ = _check_nchw4c(shape)
    oh, ow = _pair(output_size, "output_size")
    check_positive(output_size_h=oh, output_size_w=ow)
    wh, ww = Window.adaptive_window(h, oh), Window.adaptive_window(w, ow)
    divisor = None
    if pool_type == "avg":
        def divisor(co, vh, vw):
            return wh.count(vh) * ww.count(vw)

    return window_reduce(
        shape,
        (Window.point(c4), wh, ww),
        "max" if pool_type == "max" else "sum",
        name=f"adaptive_{pool_type}_pool2d",
        divisor=divisor,
        dtype=dtype,
        acc_dtype=accumulator_dtype(dtype) if pool_type == "avg" else None,
        scope=scope,
        strategy=strategy,
        group_threshold=group_threshold,
        group_size=group_size,
        epilogue=epilogue,
        channels=channels,
    )


def adaptive_avg_pool2d(shape, output_size, **config):
    return adaptive_pool2d(shape, "avg", output_size, **config)


def adaptive_max_pool2d(shape, output_size, **config):
    return adaptive_pool2d(shape, "max", output_size, **config)


def global_pool2d(shape, pool_type: str, **config):
    """Global max/avg pooling: ``(N, C4, H, W, 4) -> (N, C4, 1, 1, 4)``."""
    return adaptive_pool2d(shape, pool_type, 1, **config)


def global_avg_pool2d(shape, **config):
    return global_pool2d(shape, "avg", **config)


def global_max_pool2d(shape, **config):
    return global_pool2d(shape, "max", **config)
