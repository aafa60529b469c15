"""The macros of the direct conv kernels (:mod:`primfuncs.conv.direct`): input reads, the three
accumulation bodies (blocked, per-lane, depthwise; the depthwise window in registers, also as
the fused 1x1 conv's prologue) and the tile's store.

Each builder takes a :class:`~primfuncs.conv.direct_tiling.DirectTiling` and returns fresh
macros: TVM 0.27 suffixes the block names of a macro's second and later expansions, and a
kernel's text must not depend on what was built before it. The macros are hygienic: they see
the tiling; the kernel's buffers and loop variables come in as arguments.
"""

from __future__ import annotations

from tvm.script import tirx as T

from .._common import convert_tile, load_pixel, multiply_add
from ..epilogue import apply_epilogue, store_output_pixel
from .geometry import all_of
from .norm import norm_macros


def input_macros(k):
    """``(load_pixel, load_input)``: one input pixel into a local pixel, 0 in the padding."""
    win, zero, layout = k.win, k.zero, k.input

    @T.macro
    def load_pixel(X, xp, i, nn, cb, ih, iw):
        """``xp[i]`` = pixel ``(ih, iw)`` of input block ``cb``, 0 in the padding."""
        # Read at the clamped coordinate, then zero outside: branch-free. The select is
        # per lane: a vectorized T.Select on a scalar condition miscompiles (TVM 0.27).
        if layout.vector:  # NHWC, C a multiple of 4: the block's channels are one vector
            for lane in T.vectorized(4):
                xp[i, lane] = X[layout.at((nn, win.clamp_row(ih), win.clamp_col(iw), cb * 4), lane)]
        elif layout.plain:  # four channels of a plain input: four reads
            for lane in T.unroll(4):
                xp[i, lane] = layout.lane(X, nn, cb, win.clamp_row(ih), win.clamp_col(iw), lane)
        else:
            for lane in T.vectorized(4):
                xp[i, lane] = layout.block(X, nn, cb, win.clamp_row(ih), win.clamp_col(iw), lane)
        for lane in T.unroll(4):
            xp[i, lane] = T.Select(all_of([win.inside(ih, iw), *layout.lane_guard(cb, lane)]), xp[i, lane], zero)

    @T.macro
    def load_input(X, xp, wi, nn, cb, r, x, k_h, k_w):
        """``xp[wi]`` = input pixel of block ``cb`` read by output ``(r, x)`` at tap ``(k_h, k_w)``."""
        load_pixel(X, xp, wi, nn, cb, win.raw_row(r, k_h), win.raw_col(x, k_w))

    return load_pixel, load_input


def depthwise_register_macros(k, load_pixel):
    """``(accumulate_depthwise_registers, depthwise_prologue)``: a multiplier-1 depthwise window
    with its weights and each kernel row's input pixels in registers (``register_window``), and
    that window as a fused 1x1 conv's input pixels."""
    win, wb, zero, prologue = k.win, k.wb, k.zero, k.prologue

    @T.macro
    def accumulate_depthwise_registers(X, W, xs, wr, acc, nn, r, x0, t, blocks, block_of):
        """Multiplier 1, ``register_window``: of the ``blocks`` channel blocks ``block_of(t, ob)``,
        the window's weights once, then per kernel row the ``span`` input pixels under the
        tile's columns once; column ``wi`` at tap ``k_w`` reads span pixel ``wi * sw + k_w * dw``
        (the depthwise window ``win``: this conv's, or its depthwise prologue's)."""
        for ob in T.unroll(blocks):
            for k_h in T.unroll(win.kh):
                for k_w in T.unroll(win.kw):
                    for lane in T.vectorized(4):
                        wr[ob, k_h * win.kw + k_w, lane] = W[block_of(t, ob), 0, k_h, k_w, lane]
        for k_h in T.unroll(win.kh):
            for ob in T.unroll(blocks):
                for j in T.unroll(win.span):
                    load_pixel(X, xs, j, nn, block_of(t, ob), win.raw_row(r, k_h), x0 * win.sw - win.pl + j)
                for k_w in T.unroll(win.kw):
                    for wi in T.unroll(wb):
                        for lane in T.unroll(4):
                            acc[ob * wb + wi, lane] = multiply_add(
                                acc[ob * wb + wi, lane], xs[wi * win.sw + k_w * win.dw, lane], wr[ob, k_h * win.kw + k_w, lane]
                            )

    def own_block(t, ob):
        """The depthwise prologue's one block: the 1x1 conv's input block ``t`` itself."""
        return t

    @T.macro
    def depthwise_prologue(X, W_dw, Bias_dw, xs, wd, xp, tmp, nn, cin, r, x0):
        """``xp[wi]`` = the 1x1 conv's input pixel of block ``cin`` at ``(r, x0 + wi)``: the
        depthwise conv of X with its epilogue, computed in registers (never stored)."""
        for wi in T.unroll(wb):
            for lane in T.unroll(4):
                xp[wi, lane] = zero
        accumulate_depthwise_registers(X, W_dw, xs, wd, xp, nn, r, x0, cin, 1, own_block)
        for wi in T.unroll(wb):
            apply_epilogue(xp, wi, tmp, prologue.epilogue, Bias_dw, Bias_dw, nn, cin, r, x0 + wi)

    return accumulate_depthwise_registers, depthwise_prologue


def tile_norm_macros(k):
    """A folded layer norm's ``(accumulate_statistics, normalize)`` for the direct tile
    (:func:`primfuncs.conv.norm.norm_macros`; ``normalize(acc, WeightSum, t, 0)``)."""
    return norm_macros(k.ocb, k.wb, k.geom.c, k.norm_eps or 0.0, lambda t, _, ob: k.out_block(t, ob))


def load_shifts_macro(k, load_input):
    """``load_shifts``: a folded layer norm's per-pixel shifts ``K`` (:mod:`primfuncs.conv.norm`)."""
    wb = k.wb

    @T.macro
    def load_shifts(X, xp, gp, nn, r, x0):
        """``gp[wi]`` = channel 0 of input pixel ``(r, x0 + wi)``: the shift of column ``wi``."""
        for wi in T.unroll(wb):
            load_input(X, xp, wi, nn, 0, r, x0 + wi, 0, 0)
            gp[wi] = xp[wi, 0]

    return load_shifts


def blocked_macro(k, load_input, depthwise_prologue):
    """``accumulate_blocked``: one input channel block (4 lanes, or the last block's valid ones)."""
    kh, kw, wb, ocb, window, fused, gated = k.geom.kh, k.geom.kw, k.wb, k.ocb, k.window, k.fused, k.gated
    out_block, normed = k.out_block, k.normed
    accumulate_statistics = tile_norm_macros(k)[0]

    @T.macro
    def accumulate_blocked(X, W, xp, wp, acc, nn, r, x0, t, cin, cb, lanes, W_dw, Bias_dw, xs, wd, tmp, Gate, gp):
        """Input block ``cin`` (the ``cb``-th of its group), its first ``lanes`` channels, into the
        tile. With a depthwise ``prologue`` (a 1x1 conv) the input pixels are computed from X;
        with an input gate each input pixel is multiplied by the block's gate pixel ``gp``; with a
        folded layer norm ``gp[wi]`` is column ``wi``'s shift, subtracted from its input pixel, whose
        sum and sum of squares go to the column's statistics row."""
        if gated:  # one gate read per input block, whatever the window
            load_pixel(gp, Gate, nn, cin, 0, 0)
        for k_h in window(kh):
            for k_w in window(kw):
                if not fused:
                    for wi in T.unroll(wb):
                        load_input(X, xp, wi, nn, cin, r, x0 + wi, k_h, k_w)
                        if gated:  # X * Gate[n, c] (0 stays 0 in the padding for any finite gate)
                            for lane in T.unroll(4):
                                xp[wi, lane] = xp[wi, lane] * gp[lane]
                        if normed:  # x - K, and its S1, S2 (primfuncs.conv.norm)
                            for lane in T.unroll(4):
                                xp[wi, lane] = xp[wi, lane] - gp[wi]
                            accumulate_statistics(acc, xp, wi, lanes)
                else:
                    depthwise_prologue(X, W_dw, Bias_dw, xs, wd, xp, tmp, nn, cin, r, x0)
                for ob in T.unroll(ocb):
                    for j in T.unroll(lanes):
                        for lane in T.vectorized(4):
                            wp[ob, j, lane] = W[out_block(t, ob), cb * 4 + j, k_h, k_w, lane]
                # acc += x.s0 * w0 + x.s1 * w1 + x.s2 * w2 + x.s3 * w3
                for ob in T.unroll(ocb):
                    for wi in T.unroll(wb):
                        for j in T.unroll(lanes):
                            for lane in T.unroll(4):
                                acc[ob * wb + wi, lane] = multiply_add(acc[ob * wb + wi, lane], xp[wi, j], wp[ob, j, lane])

    return accumulate_blocked


def lanes_macro(k, load_input):
    """``accumulate_lanes``: general groups and depthwise x M, each output lane its own input channel."""
    kh, kw, cg, wb, ocb, window, one_block = k.geom.kh, k.geom.kw, k.geom.cg, k.wb, k.ocb, k.window, k.one_block
    out_block, in_channel = k.out_block, k.in_channel

    @T.macro
    def accumulate_lanes(X, W, xp, wp, acc, nn, r, x0, t):
        """Each output lane reads its own input channel :func:`in_channel` (grouped, depthwise x M).

        One weight pixel serves the 4 lanes; the input value is picked from the pixel
        holding the lane's channel (one pixel for all lanes when ``one_block``).
        """
        for ci in T.serial(cg):
            for k_h in window(kh):
                for k_w in window(kw):
                    for ob in T.unroll(ocb):
                        for lane in T.vectorized(4):
                            wp[ob, 0, lane] = W[out_block(t, ob), ci, k_h, k_w, lane]
                        if one_block:
                            for wi in T.unroll(wb):
                                load_input(X, xp, wi, nn, in_channel(t, ob, 0, ci) // 4, r, x0 + wi, k_h, k_w)
                            for wi in T.unroll(wb):
                                for lane in T.unroll(4):
                                    acc[ob * wb + wi, lane] = multiply_add(
                                        acc[ob * wb + wi, lane], xp[wi, in_channel(t, ob, lane, ci) % 4], wp[ob, 0, lane]
                                    )
                        else:
                            for lane in T.unroll(4):
                                for wi in T.unroll(wb):
                                    load_input(X, xp, wi, nn, in_channel(t, ob, lane, ci) // 4, r, x0 + wi, k_h, k_w)
                                    acc[ob * wb + wi, lane] = multiply_add(
                                        acc[ob * wb + wi, lane], xp[wi, in_channel(t, ob, lane, ci) % 4], wp[ob, 0, lane]
                                    )

    return accumulate_lanes


def depthwise_macro(k, load_input):
    """``accumulate_depthwise``: multiplier 1, the window read tap by tap."""
    kh, kw, wb, ocb, window, out_block = k.geom.kh, k.geom.kw, k.wb, k.ocb, k.window, k.out_block

    @T.macro
    def accumulate_depthwise(X, W, xp, wp, acc, nn, r, x0, t):
        """Multiplier 1: output block ``b`` reads input block ``b``, lane by lane."""
        for k_h in window(kh):
            for k_w in window(kw):
                for ob in T.unroll(ocb):
                    for lane in T.vectorized(4):
                        wp[ob, 0, lane] = W[out_block(t, ob), 0, k_h, k_w, lane]
                    for wi in T.unroll(wb):
                        load_input(X, xp, wi, nn, out_block(t, ob), r, x0 + wi, k_h, k_w)
                    for wi in T.unroll(wb):
                        for lane in T.unroll(4):
                            acc[ob * wb + wi, lane] = multiply_add(acc[ob * wb + wi, lane], xp[wi, lane], wp[ob, 0, lane])

    return accumulate_depthwise


def store_macro(k, epilogue):
    """``store_tile``: the epilogue and store of a tile's pixels that lie inside the output."""
    ocb, wb, o, store_ok, converts, dtype, normed = k.ocb, k.wb, k.geom.o, k.store_ok, k.converts, k.dtype, k.normed
    normalize = tile_norm_macros(k)[1]

    @T.macro
    def store_pixels(Y, Bias, Residual, Residual2, acc, tmp, nn, r, x0, t):
        for ob in T.unroll(ocb):
            for wi in T.unroll(wb):
                if store_ok(t, ob, x0 + wi):
                    store_output_pixel(
                        Y, acc, ob * wb + wi, tmp, epilogue, Bias, Residual, nn, t * ocb + ob, r, x0 + wi, o, Residual2
                    )

    @T.macro
    def store_tile(Y, Bias, Residual, Residual2, acc, tmp, nn, r, x0, t, WeightSum):
        """Epilogue and store of the tile's pixels that lie inside the output. A folded layer norm
        is applied first (float32); a float32 ``acc`` of a half kernel is then converted (``res``):
        the epilogue and the store stay in the kernel's dtype."""
        if normed:
            normalize(acc, WeightSum, t, 0)
        if converts:
            res = T.sblock_alloc_buffer((ocb * wb, 4), dtype, scope="local")
            convert_tile(res, acc)  # the tile's rows (res has no statistics rows)
            store_pixels(Y, Bias, Residual, Residual2, res, tmp, nn, r, x0, t)
        else:
            store_pixels(Y, Bias, Residual, Residual2, acc, tmp, nn, r, x0, t)

    return store_tile
