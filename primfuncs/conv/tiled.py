"""Dense conv2d on NCHW4c as a local-memory tiled implicit GEMM (big GPUs).

Same tensors, epilogue and scopes as :func:`primfuncs.conv.direct.conv2d_nchw4c` with
``groups == 1``. The conv is the GEMM ``Y[pixel, o] = sum_k X'[pixel, k] W'[k, o]``
over output pixels (rows x columns of one image, flattened) and ``k`` = (input
channel block, tap) pairs of 4 channels each, ``k = cb * KH * KW + tap``.

A work group of ``gx x gy`` items (``ConvConfig.work_group``) owns a tile of
``gx * w_block`` output pixels x ``gy * oc_block`` output channel blocks; item
``(tx, ty)`` accumulates pixels ``tx + i * gx`` x blocks ``ty + j * gy`` in
registers (strided, so neighbouring items read neighbouring local-memory pixels
and store neighbouring output pixels). Per step the group copies ``k_chunk``
K-blocks of the input tile (im2col on the fly: every copy reads at a clamped
coordinate and zeroes the padding) and of the weights into local memory, one
pixel per copy, neighbouring items reading neighbouring pixels (coalesced on
buffers); after a barrier each item does ``16 * oc_block * w_block`` FMAs per
K-block from local memory. What cuBLAS-style kernels do, in NCHW4c: the direct
kernel reads each input pixel once per channel tile from global memory or the
texture cache, this one once per work group.
"""

from __future__ import annotations

from tvm.script import tirx as T

from .._common import BUFFER, LANES, ceildiv, check_accumulator, check_scope, dtype_bytes, convert_tile, load_pixel, multiply_add, select_params, whole
from ..epilogue import Epilogue, check_epilogue, store_output_pixel
from .config import MAX_LOCAL_BYTES, ConvConfig, check_conv_args
from .geometry import ConvWindow, InputLayout, all_of, conv2d_geometry
from ..grn import grn_macros
from ..layernorm import PARTIAL_FIELDS, partials_fold_macros
from .norm import GroupNormFold, check_grn, check_group_norm, check_norm, fold_items, norm_macros
from .prologue import DIRECT, Prologue, check_prologue


def tiled_local_bytes(config: ConvConfig, dtype: str = "float32", acc_dtype: str | None = None, normed: bool = False,
                      group_norm: GroupNormFold | None = None, grn_blocks: int = 0) -> int:
    """Local memory of ``config``: each K slice's input and weight tiles, and with
    ``split_k`` > 1 the partial sums (in ``acc_dtype``) of all slices but the first (with a folded
    layer norm, ``normed``, its statistics rows too); with a folded ``group_norm`` its items' folded
    partials and each group's mean and 1 / std (float32); with GRN's scale folded in (``grn_blocks``
    input channel blocks) the scale of every input channel, the items' partial sums and the mean (float32)."""
    gx, gy, _ = config.work_group
    split = config.split_k
    tiles = split * config.k_chunk * (gx * config.w_block + LANES * gy * config.oc_block)
    partials = (split - 1) * gx * gy * (config.oc_block + normed) * config.w_block if split > 1 else 0
    stats = 0 if group_norm is None else 4 * group_norm.groups * (PARTIAL_FIELDS * fold_items(group_norm.slices, split * gx * gy) + 2)
    if grn_blocks:
        stats += 4 * (LANES * grn_blocks + fold_items(grn_blocks, split * gx * gy) + 1)
    return LANES * (tiles * dtype_bytes(dtype) + partials * dtype_bytes(acc_dtype or dtype)) + stats


def conv2d_tiled_nchw4c(
    data_shape,
    weight_shape,
    strides=1,
    padding=0,
    dilation=1,
    epilogue: Epilogue = Epilogue(),
    prologue: Prologue = Prologue(),
    dtype: str = "float32",
    config: ConvConfig | None = None,
    scope: str = BUFFER,
):
    """Dense conv2d (``groups == 1``) as a tiled implicit GEMM; arguments as
    :func:`primfuncs.conv.direct.conv2d_nchw4c`, ``config.tiled`` must be set; below, the
    :class:`~primfuncs.conv.prologue.Prologue`'s fields. With an input gate
    (``gate_scope``) each input pixel is multiplied by its block's gate pixel as it is staged in
    local memory: once per work group, not per output channel tile. ``data_layout`` "NCHW" / "NHWC": X is
    a plain buffer, each staged pixel read as four channels (``epilogue.out_layout``: Y plain too). ``norm_eps``: a layer norm over X's
    channels folded in (:mod:`primfuncs.conv.norm`; ``WeightSum`` after ``W``): each staged pixel is
    shifted by its pixel's channel 0 (padding channels zeroed), and each item sums its pixels'
    staged values (S1, S2) as it multiplies them: statistics rows after its tile, split_k partials too.
    ``group_norm`` (a :class:`~primfuncs.conv.norm.GroupNormFold`): a group norm of X folded in: the
    kernel takes ``Stats`` (``group_norm_partials``' output) right after ``X``; each work group first
    folds its sample's partials into each group's mean and 1 / std (shared memory, the step
    ``group_norm_apply`` takes: ``primfuncs.layernorm.partials_fold_macros``), then stages every
    input pixel normalized, ``(x - mean) / std`` (padding channels zeroed); the caller folds gamma
    into ``W`` and ``W . beta`` into the bias. ``grn_eps`` (ConvNeXt-V2's GRN, with a gate): the Gate
    is GRN's float32 sums of squares ``S`` over H, W (``sum_squares_hw``' output), followed by
    ``Gamma (C/4, 4)``; each work group first computes the scale ``1 + Gamma sqrt(S) / (mean_c
    sqrt(S) + grn_eps)`` of every input channel into shared memory (``primfuncs.grn.grn_macros``:
    ``fold_items(C/4, items)`` items sum the square roots, one adds their sums in order) and
    stages each input pixel times its block's scale, as a gate; the caller puts ``W . beta`` into
    the bias."""
    check_prologue(prologue, "conv2d_tiled_nchw4c", DIRECT)
    check_epilogue(epilogue, plain_residual=True)  # store_output_pixel reads a plain residual as the direct conv's does
    weight_scope, acc_dtype, gate_scope, data_layout = prologue.weight_scope, prologue.acc_dtype, prologue.gate_scope, prologue.data_layout
    norm_eps, group_norm, grn_eps = prologue.norm_eps, prologue.group_norm, prologue.grn_eps
    out_scope, residual_scope = epilogue.out_scope, epilogue.residual_scope
    geom = conv2d_geometry(data_shape, weight_shape, strides, padding, dilation, 1)
    if config is None:
        config = ConvConfig(oc_block=2, w_block=4, work_group=(16, 8, 1), tiled=True)
    scope, weight_scope, out_scope, residual_scope = check_conv_args(
        epilogue, dtype, config, scope, weight_scope, out_scope, residual_scope)
    if not config.tiled:
        raise ValueError(f"config must have tiled=True, got {config!r}")
    gated = gate_scope is not None
    if gated:
        check_scope(gate_scope)
    folds = norm_eps is not None or group_norm is not None
    refused = "a gated conv reads a blocked input" if gated else "a folded norm reads a blocked input" if folds else None
    layout = InputLayout(geom, data_layout, scope, refused, prologue.x_view)
    acc_dtype = check_accumulator(dtype, acc_dtype)
    normed = check_norm(geom, norm_eps, dtype, acc_dtype, "a layer norm and an input gate do not fold into one conv" if gated else None)
    grouped = check_group_norm(geom, group_norm, dtype, acc_dtype, "a group norm and an input gate do not fold into one conv" if gated
                               else "a group norm and a layer norm do not fold into one conv" if normed else None)
    grn = check_grn(grn_eps, gated, dtype, acc_dtype)
    converts = acc_dtype != dtype  # the tile is converted to dtype before its epilogue
    local_bytes = tiled_local_bytes(config, dtype, acc_dtype, normed, group_norm, geom.c4 if grn else 0)
    if local_bytes > MAX_LOCAL_BYTES:
        raise ValueError(f"config {config} needs {local_bytes} bytes of local memory for its "
                         f"tiles, more than {MAX_LOCAL_BYTES}; use a smaller work group, tile or k_chunk")

    n, c, o, c4, o4 = geom.n, geom.c, geom.o, geom.c4, geom.o4
    kh, kw, oh, ow = geom.kh, geom.kw, geom.oh, geom.ow
    ocb, pb, kc = config.oc_block, config.w_block, config.k_chunk
    gx, gy, _ = config.work_group
    split = config.split_k
    tm, tn = gx * pb, gy * ocb  # the work group's tile: output pixels x output channel blocks
    pixels, taps = oh * ow, kh * kw
    k_blocks = c4 * taps
    steps = ceildiv(k_blocks, kc)
    rounds = ceildiv(steps, split)  # slice z takes steps z, z + split, ...
    # K-blocks past the end: a partial last chunk, or a last round some slices have no step of
    k_tail = k_blocks % kc != 0 or steps % split != 0
    win = ConvWindow(geom, ow, 1)
    threads = gx * gy
    x_rounds, w_rounds = ceildiv(kc * tm, threads), ceildiv(kc * LANES * tn, threads)
    zero, acc_zero = T.Cast(dtype, 0), T.Cast(acc_dtype, 0)
    acc_rows = (ocb + normed) * pb  # the item's tile, then a folded norm's statistics rows
    accumulate_statistics, normalize = norm_macros(
        ocb, pb, c, norm_eps or 0.0, lambda by, ty, q: T.min(by * tn + q * gy + ty, o4 - 1) if o4 % tn else by * tn + q * gy + ty)
    # a folded group norm: its groups, their channel blocks, its partials and the items that fold them
    ngroups, nslices = (group_norm.groups, group_norm.slices) if grouped else (1, 1)
    group_blocks = c4 // ngroups
    items = split * threads
    folders = fold_items(nslices, items)  # the items that fold the partials (the others wait at the barrier)
    fold_item, combine = partials_fold_macros(nslices, folders, group_norm.epsilon if grouped else 0.0)
    # GRN's scale folded in: the items that sum the square roots, the macros grn_scale runs
    grn_folders = fold_items(c4, items)
    grn_rounds, grn_sum_rounds = ceildiv(c4, items), ceildiv(c4, grn_folders)
    sum_roots, mean_of, scale_pixel = grn_macros(c4, c, grn_eps or 0.0, True)

    def guard(cond, needed):
        return cond if needed else T.bool(True)

    # Copy slot ``e`` of a step: input slot (K-block e // tm, pixel e % tm); weight slot
    # (K-block e // 4 % kc, lane e % 4, output block e // (4 kc)): neighbouring items read
    # neighbouring input pixels, and for a 1x1 conv neighbouring input channels of a weight.
    def x_row(tile, step, e):
        return win.raw_row(T.min(tile * tm + e % tm, pixels - 1) // ow, (step * kc + e // tm % kc) % taps // kw)

    def x_col(tile, step, e):
        return win.raw_col(T.min(tile * tm + e % tm, pixels - 1) % ow, (step * kc + e // tm % kc) % taps % kw)

    def x_block(step, e):
        return T.min((step * kc + e // tm % kc) // taps, c4 - 1)

    def x_valid(step, e, ih, iw):
        return all_of([guard(step * kc + e // tm % kc < k_blocks, k_tail), win.inside(ih, iw)])

    def w_channel(step, e):
        return (step * kc + e // LANES % kc) // taps * LANES + e % LANES

    def w_valid(otile, step, e):
        return all_of([guard(step * kc + e // LANES % kc < k_blocks, k_tail),
                       guard(w_channel(step, e) < c, c % LANES != 0),
                       guard(otile * tn + e // (LANES * kc) < o4, o4 % tn != 0)])

    @T.macro
    def load_inputs(X, Gate, gs, scales, xs, px, gp, nn, tile, step, item, z):
        """``xs[kk, p]`` = input pixel that output pixel ``p`` of the tile reads at K-block ``kk``
        (zeroed in registers, ``px``, then one vector store: no barrier between the lanes)."""
        for rnd in T.unroll(x_rounds):
            if guard(rnd * threads + item < kc * tm, (kc * tm) % threads != 0):
                if layout.plain:  # four channels of a plain input: four reads
                    for lane in T.unroll(4):
                        px[lane] = layout.lane(
                            X, nn, x_block(step, rnd * threads + item), win.clamp_row(x_row(tile, step, rnd * threads + item)),
                            win.clamp_col(x_col(tile, step, rnd * threads + item)), lane,
                        )
                else:
                    for lane in T.vectorized(4):
                        px[lane] = layout.block(
                            X, nn, x_block(step, rnd * threads + item), win.clamp_row(x_row(tile, step, rnd * threads + item)),
                            win.clamp_col(x_col(tile, step, rnd * threads + item)), lane,
                        )
                if normed:  # x - K, K = the pixel's channel 0 (read into gp: the gate is not read then)
                    for lane in T.vectorized(4):
                        gp[lane] = layout.block(X, nn, 0, win.clamp_row(x_row(tile, step, rnd * threads + item)),
                                                win.clamp_col(x_col(tile, step, rnd * threads + item)), lane)
                    for lane in T.unroll(4):
                        px[lane] = px[lane] - gp[0]
                if grouped:  # (x - mean) / std of the block's group (gs: the work group's folded statistics, in registers)
                    for lane in T.unroll(4):
                        px[lane] = (px[lane] - gs[x_block(step, rnd * threads + item) // group_blocks * 2]) * gs[
                            x_block(step, rnd * threads + item) // group_blocks * 2 + 1]
                for lane in T.unroll(4):
                    px[lane] = T.Select(
                        all_of([x_valid(step, rnd * threads + item, x_row(tile, step, rnd * threads + item),
                                        x_col(tile, step, rnd * threads + item)),
                                *layout.lane_guard(x_block(step, rnd * threads + item), lane),
                                guard(x_block(step, rnd * threads + item) * LANES + lane < c, (normed or grouped) and c % LANES != 0)]),
                        px[lane], zero,
                    )
                if gated:  # X * Gate[n, c] (0 stays 0 in the padding for any finite gate), or GRN's scale
                    if grn:
                        for lane in T.vectorized(4):
                            gp[lane] = scales[x_block(step, rnd * threads + item), lane]
                    else:
                        load_pixel(gp, Gate, nn, x_block(step, rnd * threads + item), 0, 0)
                    for lane in T.unroll(4):
                        px[lane] = px[lane] * gp[lane]
                for lane in T.vectorized(4):
                    xs[z, (rnd * threads + item) // tm % kc, (rnd * threads + item) % tm, lane] = px[lane]

    @T.macro
    def fold_statistics(Stats, folded, gs, bz):
        """A folded group norm: ``folders`` items of the work group fold sample ``bz``'s partials of
        each group (item ``(tz gy + ty) gx + tx`` takes partials of its index, its index + folders, ...), then
        items ``0 .. groups - 1`` combine them into ``gs[2 g] = mean``, ``gs[2 g + 1] = 1 / std``."""
        for tz in T.thread_binding(split, thread="threadIdx.z"):
            for ty in T.thread_binding(gy, thread="threadIdx.y"):
                for tx in T.thread_binding(gx, thread="threadIdx.x"):
                    with T.sblock("fold"):
                        T.reads(whole(Stats))
                        T.writes(whole(folded))
                        for g in T.serial(ngroups):
                            fold_item(Stats, folded, bz * ngroups + g, g, (tz * gy + ty) * gx + tx)
        for tz in T.thread_binding(split, thread="threadIdx.z"):
            for ty in T.thread_binding(gy, thread="threadIdx.y"):
                for tx in T.thread_binding(gx, thread="threadIdx.x"):
                    with T.sblock("combine"):
                        T.reads(whole(folded))
                        T.writes(whole(gs))
                        for r in T.serial(ceildiv(ngroups, items)):
                            if r * items + (tz * gy + ty) * gx + tx < ngroups:
                                combine(folded, r * items + (tz * gy + ty) * gx + tx, gs, (r * items + (tz * gy + ty) * gx + tx) * 2)

    @T.macro
    def grn_scales(Sums, Gamma, roots, mean, scales, bz):
        """GRN folded in: items ``0 .. grn_folders - 1`` sum the square roots of sample ``bz``'s
        ``Sums`` of blocks ``t, t + grn_folders, ...`` into ``roots[t]``, item 0 adds them in order
        (``mean``), then item ``t`` writes the scale of blocks ``t, t + items, ...`` into ``scales``."""
        for tz in T.thread_binding(split, thread="threadIdx.z"):
            for ty in T.thread_binding(gy, thread="threadIdx.y"):
                for tx in T.thread_binding(gx, thread="threadIdx.x"):
                    with T.sblock("grn_roots"):
                        T.reads(whole(Sums))
                        T.writes(whole(roots))
                        if (tz * gy + ty) * gx + tx < grn_folders:
                            px = T.sblock_alloc_buffer((4,), "float32", scope="local")
                            acc = T.sblock_alloc_buffer((1,), "float32", scope="local")
                            acc[0] = T.float32(0)
                            for r in T.serial(grn_sum_rounds):
                                if r * grn_folders + (tz * gy + ty) * gx + tx < c4:
                                    sum_roots(Sums, acc, px, bz, r * grn_folders + (tz * gy + ty) * gx + tx)
                            roots[(tz * gy + ty) * gx + tx] = acc[0]
        for tz in T.thread_binding(split, thread="threadIdx.z"):
            for ty in T.thread_binding(gy, thread="threadIdx.y"):
                for tx in T.thread_binding(gx, thread="threadIdx.x"):
                    with T.sblock("grn_mean"):
                        T.reads(whole(roots))
                        T.writes(whole(mean))
                        if (tz * gy + ty) * gx + tx == 0:
                            mean_of(roots, grn_folders, mean)
        for tz in T.thread_binding(split, thread="threadIdx.z"):
            for ty in T.thread_binding(gy, thread="threadIdx.y"):
                for tx in T.thread_binding(gx, thread="threadIdx.x"):
                    with T.sblock("grn_scale"):
                        T.reads(whole(Sums), whole(Gamma), whole(mean))
                        T.writes(whole(scales))
                        px = T.sblock_alloc_buffer((4,), "float32", scope="local")
                        out = T.sblock_alloc_buffer((4,), "float32", scope="local")
                        for r in T.serial(grn_rounds):
                            if r * items + (tz * gy + ty) * gx + tx < c4:
                                scale_pixel(Sums, Gamma, mean, px, out, bz, r * items + (tz * gy + ty) * gx + tx)
                                for lane in T.vectorized(4):
                                    scales[r * items + (tz * gy + ty) * gx + tx, lane] = out[lane]

    @T.macro
    def load_weights(W, ws, px, otile, step, item, z):
        """``ws[kk, j, q]`` = weight pixel of output block ``q`` of the tile, input lane ``j`` of K-block ``kk``."""
        for rnd in T.unroll(w_rounds):
            if guard(rnd * threads + item < kc * LANES * tn, (kc * LANES * tn) % threads != 0):
                for lane in T.vectorized(4):
                    px[lane] = W[
                        T.min(otile * tn + (rnd * threads + item) // (LANES * kc), o4 - 1),
                        T.min(w_channel(step, rnd * threads + item), c - 1),
                        (step * kc + (rnd * threads + item) // LANES % kc) % taps // kw,
                        (step * kc + (rnd * threads + item) // LANES % kc) % taps % kw, lane,
                    ]
                for lane in T.unroll(4):
                    px[lane] = T.Select(w_valid(otile, step, rnd * threads + item), px[lane], zero)
                for lane in T.vectorized(4):
                    ws[z, (rnd * threads + item) // LANES % kc, (rnd * threads + item) % LANES,
                       (rnd * threads + item) // (LANES * kc), lane] = px[lane]

    @T.macro
    def multiply_tiles(xs, ws, xr, wr, acc, tx, ty, z):
        """acc[q, i] += sum over the chunk's K-blocks of x.s0 * w0 + x.s1 * w1 + x.s2 * w2 + x.s3 * w3."""
        for kk in T.unroll(kc):
            for i in T.unroll(pb):
                for lane in T.vectorized(4):
                    xr[i, lane] = xs[z, kk, i * gx + tx, lane]
            if normed:  # the staged values are shifted, padding zero: S1, S2 of each pixel
                for i in T.unroll(pb):
                    accumulate_statistics(acc, xr, i, 4)
            for j in T.unroll(LANES):
                for q in T.unroll(ocb):
                    for lane in T.vectorized(4):
                        wr[q, lane] = ws[z, kk, j, q * gy + ty, lane]
                for q in T.unroll(ocb):
                    for i in T.unroll(pb):
                        for lane in T.unroll(4):
                            acc[q * pb + i, lane] = multiply_add(acc[q * pb + i, lane], xr[i, j], wr[q, lane])

    @T.macro
    def store_pixels(Y, Bias, Residual, acc, tmp, bz, by, bx, ty, tx):
        for q in T.unroll(ocb):
            for i in T.unroll(pb):
                if all_of([guard(bx * tm + i * gx + tx < pixels, pixels % tm != 0),
                           guard(by * tn + q * gy + ty < o4, o4 % tn != 0)]):
                    store_output_pixel(
                        Y, acc, q * pb + i, tmp, epilogue, Bias, Residual, bz,
                        by * tn + q * gy + ty, (bx * tm + i * gx + tx) // ow,
                        (bx * tm + i * gx + tx) % ow, o,
                    )

    @T.macro
    def store_tile(Y, WeightSum, Bias, Residual, acc, tmp, bz, by, bx, ty, tx):
        """Epilogue and store of the item's pixels inside the output; a folded norm applied first,
        then a float32 ``acc`` of a half kernel converted (``res``), so the epilogue and the store
        stay in ``dtype``."""
        if normed:
            normalize(acc, WeightSum, by, ty)
        if converts:
            res = T.sblock_alloc_buffer((ocb * pb, 4), dtype, scope="local")
            convert_tile(res, acc)
            store_pixels(Y, Bias, Residual, res, tmp, bz, by, bx, ty, tx)
        else:
            store_pixels(Y, Bias, Residual, acc, tmp, bz, by, bx, ty, tx)

    # The blocks declare their regions (whole buffers): inferred ones, unions of clamped
    # indices, print as extents TVM 0.27 re-derives in another term order on parse (defect 16),
    # and a dumped kernel must parse back to exactly this PrimFunc.
    def reads(X, Gate, W, WeightSum, Bias, Residual, *local):
        return [whole(b) for b in (X, *[Gate] * (gated and not grn), W, *[WeightSum] * normed, *[Bias] * epilogue.reads_bias,
                                   *[Residual] * epilogue.reads_residual, *local)]

    @T.prim_func(s_tir=True)
    def func(data: T.handle, gate: T.handle, gamma: T.handle, stats: T.handle, weight: T.handle, weight_sum: T.handle, bias: T.handle,
             residual: T.handle, out: T.handle):
        T.func_attr({"global_symbol": "conv2d_tiled_nchw4c", "tirx.noalias": True})
        X = T.match_buffer(data, layout.shape(geom, geom.h, geom.w), dtype, scope=scope)
        Gate = T.match_buffer(gate, (n, c4, 1, 1, 4), dtype, scope=gate_scope or scope)
        Gamma = T.match_buffer(gamma, (c4, 4), dtype, scope=BUFFER)
        Stats = T.match_buffer(stats, (n * ngroups, nslices, PARTIAL_FIELDS), "float32", scope=BUFFER)
        W = T.match_buffer(weight, (o4, c, kh, kw, 4), dtype, scope=weight_scope)
        WeightSum = T.match_buffer(weight_sum, (o4, 4), dtype, scope=BUFFER)
        Bias = T.match_buffer(bias, epilogue.bias_shape(o4), dtype, scope=BUFFER)
        Residual = T.match_buffer(residual, epilogue.residual_shape((n, o4, oh, ow, 4)), dtype, scope=residual_scope)
        Y = T.match_buffer(out, epilogue.out_shape(n, o, oh, ow), dtype, scope=out_scope)
        for bz in T.thread_binding(n, thread="blockIdx.z"):
            for by in T.thread_binding(ceildiv(o4, tn), thread="blockIdx.y"):
                for bx in T.thread_binding(ceildiv(pixels, tm), thread="blockIdx.x"):
                    with T.sblock("conv2d_tiled"):
                        T.reads(*reads(X, Gate, W, WeightSum, Bias, Residual, *[Stats] * grouped, *[Gate, Gamma] * grn))
                        T.writes(whole(Y))
                        xs = T.sblock_alloc_buffer((split, kc, tm, 4), dtype, scope="shared")
                        ws = T.sblock_alloc_buffer((split, kc, LANES, tn, 4), dtype, scope="shared")
                        partial = T.sblock_alloc_buffer((max(split - 1, 1), acc_rows, 4, threads), acc_dtype, scope="shared")
                        folded = T.sblock_alloc_buffer((ngroups * PARTIAL_FIELDS, folders), "float32", scope="shared")
                        gs = T.sblock_alloc_buffer((ngroups * 2,), "float32", scope="shared")  # each group's mean, 1 / std
                        roots = T.sblock_alloc_buffer((grn_folders,), "float32", scope="shared")  # GRN: the items' sums of sqrt(S)
                        mean = T.sblock_alloc_buffer((1,), "float32", scope="shared")  # GRN: mean_c sqrt(S) + eps
                        scales = T.sblock_alloc_buffer((c4 if grn else 1, 4), "float32", scope="shared")  # GRN: each channel's scale
                        if grouped:
                            fold_statistics(Stats, folded, gs, bz)
                        if grn:
                            grn_scales(Gate, Gamma, roots, mean, scales, bz)
                        for tz in T.thread_binding(split, thread="threadIdx.z"):
                            for ty in T.thread_binding(gy, thread="threadIdx.y"):
                                for tx in T.thread_binding(gx, thread="threadIdx.x"):
                                    with T.sblock("tile"):
                                        T.reads(*reads(X, Gate, W, WeightSum, Bias, Residual, xs, ws, partial, *[gs] * grouped,
                                                        *[scales] * grn))
                                        T.writes(whole(Y), whole(xs), whole(ws), whole(partial))
                                        acc = T.sblock_alloc_buffer((acc_rows, 4), acc_dtype, scope="local")
                                        xr = T.sblock_alloc_buffer((pb, 4), dtype, scope="local")
                                        wr = T.sblock_alloc_buffer((ocb, 4), dtype, scope="local")
                                        tmp = T.sblock_alloc_buffer((4,), dtype, scope="local")
                                        px = T.sblock_alloc_buffer((4,), dtype, scope="local")
                                        gp = T.sblock_alloc_buffer((4,), dtype, scope="local")
                                        # the folded statistics in registers, read once by every item: staged
                                        # reads of the shared copy inside a partial round's guard made TVM put a
                                        # barrier there, which only some items reach (UB: PoCL crashed)
                                        gr = T.sblock_alloc_buffer((ngroups * 2,), "float32", scope="local")
                                        if grouped:
                                            for i in T.unroll(ngroups * 2):
                                                gr[i] = gs[i]
                                        for k in T.unroll(acc_rows):
                                            for lane in T.unroll(4):
                                                acc[k, lane] = acc_zero
                                        for r in T.serial(rounds):
                                            load_inputs(X, Gate, gr, scales, xs, px, gp, bz, bx, r * split + tz, ty * gx + tx, tz)
                                            load_weights(W, ws, px, by, r * split + tz, ty * gx + tx, tz)
                                            multiply_tiles(xs, ws, xr, wr, acc, tx, ty, tz)
                                        if split > 1:  # slices 1.. hand their sums to slice 0
                                            if tz > 0:
                                                for k in T.unroll(acc_rows):
                                                    for lane in T.unroll(4):
                                                        partial[tz - 1, k, lane, ty * gx + tx] = acc[k, lane]
                                            if tz == 0:
                                                for zz in T.serial(split - 1):
                                                    for k in T.unroll(acc_rows):
                                                        for lane in T.unroll(4):
                                                            acc[k, lane] = acc[k, lane] + partial[zz, k, lane, ty * gx + tx]
                                        if tz == 0:
                                            store_tile(Y, WeightSum, Bias, Residual, acc, tmp, bz, by, bx, ty, tx)

    return select_params(func, epilogue.params(["X", *["Gate"] * gated, *["Gamma"] * grn, *["Stats"] * grouped, "W", *["WeightSum"] * normed], "Y"))
