"""Concatenation of NCHW4c tensors along channels (``relax.op.concat`` axis=1).

When every input's channel count is a multiple of 4 (all but possibly the
last), each output block is one input block: one read, one write. Otherwise
output lanes straddle input blocks, and each lane is picked from the input
pixel that holds its channel. A blocked input may be read through a view
(``views``: :mod:`primfuncs.gather` steps, a window of whole channel blocks of a
wider map): a split's part read in place, no ``split_channels`` launch before it.
"""

from __future__ import annotations

from tvm.script import tirx as T

from ._common import (
    BUFFER, LANES, TEXTURE, blocked, check_dtype, check_scope, load_pixel, pixel_grid, pixel_launch, select_params, store_pixel,
)
from .epilogue import check_map_epilogue, map_epilogue_inputs, store_output_pixel
from .gather import read_blocked_view, through

MAX_INPUTS = 4
_NAMES = ("A", "B", "C", "D")


@T.macro(hygienic=False)
def pick_lanes(px, src, X, n, cb, h, w, offset, count, load):
    """Lanes of output block ``cb`` whose channel lies in input ``X`` (channels
    ``[offset, offset + count)``) take it from the pixel holding it (read by macro ``load``)."""
    for lane in T.unroll(4):
        if offset <= cb * 4 + lane and cb * 4 + lane < offset + count:
            load(src, X, n, (cb * 4 + lane - offset) // 4, h, w)
            px[lane] = src[(cb * 4 + lane - offset) % 4]


@T.macro(hygienic=False)
def pick_plain_lanes(px, X, n, cb, h, w, offset, count):
    """Lanes of output block ``cb`` whose channel lies in plain input ``X`` (``[N, count, H, W]``,
    channels ``[offset, offset + count)`` of the output) read it from the buffer."""
    for lane in T.unroll(4):
        if offset <= cb * 4 + lane and cb * 4 + lane < offset + count:
            px[lane] = X[n, T.min(T.max(cb * 4 + lane - offset, 0), count - 1), h, w]


def _pixel_loader(view, shape):
    """``load_pixel``, or (``view``: gather steps from blocked ``shape`` to a wider buffer) the
    macro that reads the pixel through them."""
    if not view:
        return load_pixel

    @T.macro
    def load_viewed(dst, src, n, c, h, w):
        for lane in T.vectorized(4):
            dst[lane] = src[through(view, shape, (n, c, h, w, 0), lane)]

    return load_viewed


def concat_channels(n: int, channels, h: int, w: int, dtype: str = "float32", scope: str = TEXTURE, plain=(), epilogue=None,
                    views=()):
    """Concatenate ``len(channels)`` (2..4) NCHW4c tensors ``(n, ceil(c_i/4), h, w, 4)``; the
    inputs whose index is in ``plain`` are plain ``(n, c_i, h, w)`` buffers of ``dtype`` instead.
    ``epilogue`` (an :class:`~primfuncs.epilogue.Epilogue`, as the convs apply theirs) on each output
    pixel: the elementwise chain after the concat (GhostNet's ``cat([a, b]) + shortcut``).
    ``views`` (one entry per input, () for none): blocked input ``i`` read through
    :mod:`primfuncs.gather` steps to the buffer it is a window of (whole channel blocks)."""
    channels = tuple(int(c) for c in channels)
    if not 2 <= len(channels) <= MAX_INPUTS or min(channels) < 1:
        raise ValueError(f"concat takes 2..{MAX_INPUTS} inputs with >= 1 channel each, got channels={channels}")
    plain = frozenset(int(i) for i in plain)
    if not plain <= set(range(len(channels))):
        raise ValueError(f"plain inputs {sorted(plain)} are not among the {len(channels)} inputs")
    views = tuple(tuple(v or ()) for v in views) or ((),) * len(channels)
    if len(views) != len(channels) or any(views[i] for i in plain):
        raise ValueError(f"views: one per input, none for a plain input; got {len(views)} for {len(channels)} inputs, "
                         f"plain {sorted(plain)}")
    check_dtype(dtype)
    check_scope(scope)
    check_map_epilogue(epilogue, "concat")
    k = len(channels)
    offsets = [sum(channels[:i]) for i in range(k)]
    blocks = [blocked(c) for c in channels] + [1] * (MAX_INPUTS - k)  # unused inputs: dummies, dropped below
    shapes = [(n, channels[i], h, w) if i in plain else (n, blocks[i], h, w, 4) for i in range(k)]
    loads = [_pixel_loader(views[i], shapes[i]) for i in range(k)] + [load_pixel] * (MAX_INPUTS - k)
    shapes = [read_blocked_view(shapes[i], views[i], f"views[{i}]")[1] if views[i] else shapes[i] for i in range(k)]
    shapes += [(n, 1, h, w, 4)] * (MAX_INPUTS - k)
    scopes = [BUFFER if i in plain else scope for i in range(MAX_INPUTS)]
    total = sum(channels)
    c4 = blocked(total)
    aligned = all(c % LANES == 0 for c in channels[:-1]) and not plain
    first_block = [o // LANES for o in offsets] + [c4] * (MAX_INPUTS - k)
    spec, bias_shape, residual_shape, residual_scope = map_epilogue_inputs(epilogue, (n, c4, h, w, 4), scope)
    g = pixel_grid(n * c4, h, w)

    launch = pixel_launch()

    @T.macro
    def per_pixel(A, B, C, D, Y, Bias, Residual, vz, vh, vw):
        px = T.sblock_alloc_buffer((4,), dtype, scope="local")
        src = T.sblock_alloc_buffer((4,), dtype, scope="local")
        if aligned:
            # Output block cb is block cb - first_block[i] of input i. The
            # `k ==` tests run at parse time: no branch names a dropped input
            # (the printed TVMScript must parse back, see test_script_roundtrip).
            if vz % c4 < first_block[1]:
                loads[0](px, A, vz // c4, vz % c4, vh, vw)
            elif k == 2:
                loads[1](px, B, vz // c4, vz % c4 - first_block[1], vh, vw)
            elif vz % c4 < first_block[2]:
                loads[1](px, B, vz // c4, vz % c4 - first_block[1], vh, vw)
            elif k == 3:
                loads[2](px, C, vz // c4, vz % c4 - first_block[2], vh, vw)
            elif vz % c4 < first_block[3]:
                loads[2](px, C, vz // c4, vz % c4 - first_block[2], vh, vw)
            else:
                loads[3](px, D, vz // c4, vz % c4 - first_block[3], vh, vw)
        else:
            for lane in T.unroll(4):
                px[lane] = T.Cast(dtype, 0)
            # the `in plain` and `k >` tests run at parse time, as above
            if 0 in plain:
                pick_plain_lanes(px, A, vz // c4, vz % c4, vh, vw, offsets[0], channels[0])
            else:
                pick_lanes(px, src, A, vz // c4, vz % c4, vh, vw, offsets[0], channels[0], loads[0])
            if 1 in plain:
                pick_plain_lanes(px, B, vz // c4, vz % c4, vh, vw, offsets[1], channels[1])
            else:
                pick_lanes(px, src, B, vz // c4, vz % c4, vh, vw, offsets[1], channels[1], loads[1])
            if k > 2 and 2 in plain:
                pick_plain_lanes(px, C, vz // c4, vz % c4, vh, vw, offsets[2], channels[2])
            elif k > 2:
                pick_lanes(px, src, C, vz // c4, vz % c4, vh, vw, offsets[2], channels[2], loads[2])
            if k > 3 and 3 in plain:
                pick_plain_lanes(px, D, vz // c4, vz % c4, vh, vw, offsets[3], channels[3])
            elif k > 3:
                pick_lanes(px, src, D, vz // c4, vz % c4, vh, vw, offsets[3], channels[3], loads[3])
        if epilogue is None:
            store_pixel(Y, vz // c4, vz % c4, vh, vw, px)
        else:
            acc = T.sblock_alloc_buffer((1, 4), dtype, scope="local")
            for lane in T.unroll(4):
                acc[0, lane] = px[lane]
            store_output_pixel(Y, acc, 0, src, epilogue, Bias, Residual, vz // c4, vz % c4, vh, vw, total)

    @T.prim_func(s_tir=True)
    def func(a: T.handle, b: T.handle, c: T.handle, d: T.handle, bias: T.handle, residual: T.handle, out: T.handle):
        T.func_attr({"global_symbol": "concat_channels", "tirx.noalias": True})
        A = T.match_buffer(a, shapes[0], dtype, scope=scopes[0])
        B = T.match_buffer(b, shapes[1], dtype, scope=scopes[1])
        C = T.match_buffer(c, shapes[2], dtype, scope=scopes[2])
        D = T.match_buffer(d, shapes[3], dtype, scope=scopes[3])
        Bias = T.match_buffer(bias, bias_shape, dtype, scope=BUFFER)
        Residual = T.match_buffer(residual, residual_shape, dtype, scope=residual_scope)
        Y = T.match_buffer(out, (n, c4, h, w, 4), dtype, scope=scope)
        launch(g, h, w, "concat", lambda vz, vh, vw: per_pixel(A, B, C, D, Y, Bias, Residual, vz, vh, vw))

    return select_params(func, spec.params(list(_NAMES[:k]), "Y"))

