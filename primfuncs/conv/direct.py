"""Direct 2-D convolution on NCHW4c tensors: dense, grouped and depthwise.

Input ``[N, C/4, H, W, 4]`` (an activation texture or a buffer), weights
``[O/4, C/groups, KH, KW, 4]`` (OIHW4o: one pixel = 4 output channels of one
input channel and tap), output ``[N, O/4, OH, OW, 4]``. Channels that do not
fill a block are zero (the layout kernels pad them).

Schedule (docs/design.md, the practice of MNN / TFLite GPU): a work item owns a
register tile of ``oc_block`` output channel blocks x ``w_block`` adjacent
output columns of one output row. It walks the input channel blocks and the
kernel window; per step it reads ``w_block`` input pixels and ``4 * oc_block``
weight pixels and does ``acc += x.s0*w0 + x.s1*w1 + x.s2*w2 + x.s3*w3``. The
NDRange is (column tiles x N, OH, O/4 / oc_block) along OpenCL dims (0, 1, 2):
neighbouring work items read neighbouring pixels. A tile that overhangs the
output (OW or O/4 not a multiple of the tile) is computed whole from clamped
reads and only its valid pixels are stored.

``ConvConfig.split_k`` > 1 also splits a tile's input channel blocks over that
many work items of one work group; each sums its slice, the partial tiles meet
in local memory and the first slice adds them up and stores (big GPUs, whose
late layers otherwise have too few work items with too long loops).

Three accumulation bodies share that skeleton:

- blocked: every output block lies in one group and each group's input
  channels start at a block boundary (``groups == 1``, or ``C/groups`` and
  ``O/groups`` multiples of 4): the loop walks input blocks, 4 lanes each (the
  last block of ``groups == 1`` only its valid lanes);
- general grouped: any other ``groups``: each output lane finds its own group
  and input channel (one weight pixel serves the 4 lanes, the input lane is
  picked from its pixel);
- depthwise (``groups == C``, ``O = C * multiplier``): :func:`depthwise_conv2d_nchw4c`.

A 1x1 conv may take a depthwise conv as its prologue (:func:`depthwise_pointwise_nchw4c`,
MobileNet's block tail in one launch): the blocked body then computes each input pixel it
would read, the depthwise output of that channel block with its epilogue, in registers.

Padding reads are guarded explicitly (an out-of-range texture read is
undefined on OpenCL 1.2 devices and array layers are clamped, never zeroed):
every read is at a coordinate clamped into the image, and a select puts 0
where the tap lies in the padding (branch-free, faster on PoCL than a
conditional read). Guards that no stored output needs are left out at build
time, so a 1x1 stride-1 unpadded conv has none: that is the 1x1 fast path (a
separate 1x1 kernel, its channel loop unrolled by 2, measured no faster).
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm.script import tirx as T

from .._common import BUFFER, LANES, TEXTURE, ceildiv, check_scope, select_params
from ..epilogue import Epilogue, check_epilogue
from .config import ConvConfig, check_conv_args, fallback_config
from .direct_body import (
    blocked_macro,
    depthwise_macro,
    depthwise_register_macros,
    input_macros,
    lanes_macro,
    load_shifts_macro,
    store_macro,
)
from .direct_tiling import DirectTiling
from .geometry import ConvGeometry, InputLayout, conv2d_geometry
from .prologue import DEPTHWISE, DIRECT, FUSED, Prologue, check_prologue
from .tiled import conv2d_tiled_nchw4c


def _tile_macros(tiling: DirectTiling, epilogue: Epilogue):
    """``(conv_tile, accumulate_blocked, store_tile, load_shifts)``: ``conv_tile`` is one work
    item's tile (zeroed accumulators, the mode's accumulation body, the stores) in a block; the
    split_k kernel uses the other three."""
    load_pixel, load_input = input_macros(tiling)
    accumulate_depthwise_registers, depthwise_prologue = depthwise_register_macros(tiling, load_pixel)
    accumulate_blocked = blocked_macro(tiling, load_input, depthwise_prologue)
    accumulate_lanes = lanes_macro(tiling, load_input)
    accumulate_depthwise = depthwise_macro(tiling, load_input)
    store_tile = store_macro(tiling, epilogue)
    load_shifts = load_shifts_macro(tiling, load_input)
    g = tiling.geom
    n, oh, kh, kw = g.n, g.oh, g.kh, g.kw
    ot, wt, ocb, wb, span, dw_taps = tiling.ot, tiling.wt, tiling.ocb, tiling.wb, tiling.span, tiling.dw_taps
    dtype, zero, mode, register_window = tiling.dtype, tiling.zero, tiling.mode, tiling.register_window
    acc_dtype, acc_zero = tiling.acc_dtype, tiling.acc_zero
    multiplier, blocks_per_group, tail = tiling.multiplier, tiling.blocks_per_group, tiling.tail
    first_block, out_block = tiling.first_block, tiling.out_block
    acc_rows, normed = tiling.acc_rows, tiling.normed

    @T.macro
    def conv_tile(X, W_dw, Bias_dw, Gate, W, WeightSum, Bias, Residual, Residual2, Y, t, r, i, valid):
        """The tile of channel tile ``t``, output row ``r`` and column tile ``i`` (image ``i // wt``)."""
        with T.sblock("conv2d"):
            # Tile: channel blocks vt*ocb.., output row voh, columns vwt*wb.. of image nn.
            vt = T.axis.spatial(ot, t)
            voh = T.axis.spatial(oh, r)
            nn = T.axis.spatial(n, i // wt)
            vwt = T.axis.spatial(wt, i % wt)
            T.where(valid)
            acc = T.sblock_alloc_buffer((acc_rows, 4), acc_dtype, scope="local")
            xp = T.sblock_alloc_buffer((wb, 4), dtype, scope="local")
            wp = T.sblock_alloc_buffer((ocb, 4, 4), dtype, scope="local")
            tmp = T.sblock_alloc_buffer((4,), dtype, scope="local")
            xs = T.sblock_alloc_buffer((span, 4), dtype, scope="local")
            wr = T.sblock_alloc_buffer((ocb, kh * kw if register_window else 1, 4), dtype, scope="local")
            wd = T.sblock_alloc_buffer((1, dw_taps, 4), dtype, scope="local")
            gp = T.sblock_alloc_buffer((4,), dtype, scope="local")  # the gate pixel, or a folded norm's shifts
            for ob in T.unroll(ocb):
                for wi in T.unroll(wb):
                    for lane in T.unroll(4):
                        acc[ob * wb + wi, lane] = acc_zero
            if normed:  # the statistics rows, and the shifts
                for wi in T.unroll(wb):
                    for lane in T.unroll(4):
                        acc[ocb * wb + wi, lane] = acc_zero
                load_shifts(X, xp, gp, nn, voh, vwt * wb)
            if mode == "blocked":
                for cb in T.serial(blocks_per_group):
                    accumulate_blocked(
                        X, W, xp, wp, acc, nn, voh, vwt * wb, vt, first_block(vt) + cb, cb, 4, W_dw, Bias_dw, xs, wd, tmp,
                        Gate, gp,
                    )
                if tail > 0:  # groups == 1, C % 4 channels in the last block
                    accumulate_blocked(
                        X, W, xp, wp, acc, nn, voh, vwt * wb, vt, blocks_per_group, blocks_per_group, tail,
                        W_dw, Bias_dw, xs, wd, tmp, Gate, gp,
                    )
            elif register_window:
                accumulate_depthwise_registers(X, W, xs, wr, acc, nn, voh, vwt * wb, vt, ocb, out_block)
            elif mode == "depthwise" and multiplier == 1:
                accumulate_depthwise(X, W, xp, wp, acc, nn, voh, vwt * wb, vt)
            else:
                accumulate_lanes(X, W, xp, wp, acc, nn, voh, vwt * wb, vt)
            store_tile(Y, Bias, Residual, Residual2, acc, tmp, nn, voh, vwt * wb, vt, WeightSum)

    return conv_tile, accumulate_blocked, store_tile, load_shifts


def _plain_kernel(tiling: DirectTiling, conv_tile, name: str, scopes, epilogue: Epilogue, y_shape):
    """The kernel without split_k: one tile per work item, on a 3-D grid or (``config.flat``) a 1-D one;
    Y of ``y_shape`` (its epilogue's ``out_layout``)."""
    scope, weight_scope, out_scope, residual_scope = scopes
    g = tiling.geom
    n, oh, ow, c4, o4, cg, kh, kw = g.n, g.oh, g.ow, g.c4, g.o4, g.cg, g.kh, g.kw
    x_shape, dw_shape, dtype, config = tiling.x_shape, tiling.dw_shape, tiling.dtype, tiling.config
    gate_scope = tiling.gate_scope or scope
    ot, cols, tiles, gf = tiling.ot, tiling.cols, tiling.tiles, tiling.gf
    gx, gy, gz = tiling.gx, tiling.gy, tiling.gz

    @T.prim_func(s_tir=True)
    def func(
        data: T.handle, dw_weight: T.handle, dw_bias: T.handle, gate: T.handle, weight: T.handle, weight_sum: T.handle,
        bias: T.handle, residual: T.handle, residual2: T.handle, out: T.handle,
    ):
        T.func_attr({"global_symbol": name, "tirx.noalias": True})
        X = T.match_buffer(data, x_shape, dtype, scope=scope)
        W_dw = T.match_buffer(dw_weight, dw_shape, dtype, scope=weight_scope)
        Bias_dw = T.match_buffer(dw_bias, (c4, 4), dtype, scope=BUFFER)
        Gate = T.match_buffer(gate, (n, c4, 1, 1, 4), dtype, scope=gate_scope)
        W = T.match_buffer(weight, (o4, cg, kh, kw, 4), dtype, scope=weight_scope)
        WeightSum = T.match_buffer(weight_sum, (o4, 4), dtype, scope=BUFFER)
        Bias = T.match_buffer(bias, epilogue.bias_shape(o4), dtype, scope=BUFFER)
        Residual = T.match_buffer(residual, epilogue.residual_shape((n, o4, oh, ow, 4)), dtype, scope=residual_scope)
        Residual2 = T.match_buffer(residual2, epilogue.residual_shape((n, o4, oh, ow, 4), 1), dtype, scope=residual_scope)
        Y = T.match_buffer(out, y_shape, dtype, scope=out_scope)
        if config.flat:
            for bx in T.thread_binding(ceildiv(tiles, gf), thread="blockIdx.x"):
                for tx in T.thread_binding(gf, thread="threadIdx.x"):
                    conv_tile(X, W_dw, Bias_dw, Gate, W, WeightSum, Bias, Residual, Residual2, Y, *tiling.flat_tile(bx * gf + tx), bx * gf + tx < tiles)
        else:
            for bz in T.thread_binding(ceildiv(ot, gz), thread="blockIdx.z"):
                for by in T.thread_binding(ceildiv(oh, gy), thread="blockIdx.y"):
                    for bx in T.thread_binding(ceildiv(cols, gx), thread="blockIdx.x"):
                        for tz in T.thread_binding(gz, thread="threadIdx.z"):
                            for ty in T.thread_binding(gy, thread="threadIdx.y"):
                                for tx in T.thread_binding(gx, thread="threadIdx.x"):
                                    conv_tile(
                                        X, W_dw, Bias_dw, Gate, W, WeightSum, Bias, Residual, Residual2, Y, bz * gz + tz, by * gy + ty, bx * gx + tx,
                                        bz * gz + tz < ot and by * gy + ty < oh and bx * gx + tx < cols,
                                    )

    return func


def _split_kernel(tiling: DirectTiling, accumulate_blocked, store_tile, load_shifts, name: str, scopes, epilogue: Epilogue, y_shape):
    """The split_k kernel: the work group's z dim holds gz channel tiles x ``split`` slices of the
    input channel blocks (slice k walks blocks k, k + split, ...). Each item writes its partial
    tile to local memory (item index fastest: conflict-free); after the barrier the slice-0 item
    of each tile sums the slices, applies the epilogue and stores. A folded layer norm's statistics
    rows (each slice's sums over its blocks, all with the same shifts) add up with the tile's."""
    scope, weight_scope, out_scope, residual_scope = scopes
    g = tiling.geom
    n, oh, ow, c4, o4, cg, kh, kw = g.n, g.oh, g.ow, g.c4, g.o4, g.cg, g.kh, g.kw
    x_shape, dw_shape, dtype, span, dw_taps = tiling.x_shape, tiling.dw_shape, tiling.dtype, tiling.span, tiling.dw_taps
    gate_scope = tiling.gate_scope or scope
    ot, wt, ocb, wb, cols = tiling.ot, tiling.wt, tiling.ocb, tiling.wb, tiling.cols
    acc_dtype, acc_zero, acc_rows, normed = tiling.acc_dtype, tiling.acc_zero, tiling.acc_rows, tiling.normed
    gx, gy, gz, split = tiling.gx, tiling.gy, tiling.gz, tiling.split
    blocks_per_group, tail, first_block = tiling.blocks_per_group, tiling.tail, tiling.first_block

    items = gz * gy * gx
    rounds = ceildiv(blocks_per_group, split)
    uneven = blocks_per_group % split != 0

    @T.macro
    def accumulate_slice(X, W, xp, wp, acc, nn, r, x0, t, k, W_dw, Bias_dw, xs, wd, tmp, Gate, gp):
        """Slice ``k`` of tile ``t``: its group's input blocks k, k + split, ...; the last slice
        also the C % 4 channels of a last partial block."""
        for i in T.serial(rounds):
            if uneven:
                if i * split + k < blocks_per_group:
                    accumulate_blocked(X, W, xp, wp, acc, nn, r, x0, t, first_block(t) + i * split + k, i * split + k, 4, W_dw, Bias_dw, xs, wd, tmp, Gate, gp)
            else:
                accumulate_blocked(X, W, xp, wp, acc, nn, r, x0, t, first_block(t) + i * split + k, i * split + k, 4, W_dw, Bias_dw, xs, wd, tmp, Gate, gp)
        if tail > 0:
            if k == split - 1:
                accumulate_blocked(X, W, xp, wp, acc, nn, r, x0, t, blocks_per_group, blocks_per_group, tail, W_dw, Bias_dw, xs, wd, tmp, Gate, gp)

    @T.prim_func(s_tir=True)
    def func_split(
        data: T.handle, dw_weight: T.handle, dw_bias: T.handle, gate: T.handle, weight: T.handle, weight_sum: T.handle,
        bias: T.handle, residual: T.handle, residual2: T.handle, out: T.handle,
    ):
        T.func_attr({"global_symbol": name, "tirx.noalias": True})
        X = T.match_buffer(data, x_shape, dtype, scope=scope)
        W_dw = T.match_buffer(dw_weight, dw_shape, dtype, scope=weight_scope)
        Bias_dw = T.match_buffer(dw_bias, (c4, 4), dtype, scope=BUFFER)
        Gate = T.match_buffer(gate, (n, c4, 1, 1, 4), dtype, scope=gate_scope)
        W = T.match_buffer(weight, (o4, cg, kh, kw, 4), dtype, scope=weight_scope)
        WeightSum = T.match_buffer(weight_sum, (o4, 4), dtype, scope=BUFFER)
        Bias = T.match_buffer(bias, epilogue.bias_shape(o4), dtype, scope=BUFFER)
        Residual = T.match_buffer(residual, epilogue.residual_shape((n, o4, oh, ow, 4)), dtype, scope=residual_scope)
        Residual2 = T.match_buffer(residual2, epilogue.residual_shape((n, o4, oh, ow, 4), 1), dtype, scope=residual_scope)
        Y = T.match_buffer(out, y_shape, dtype, scope=out_scope)
        for bz in T.thread_binding(ceildiv(ot, gz), thread="blockIdx.z"):
            for by in T.thread_binding(ceildiv(oh, gy), thread="blockIdx.y"):
                for bx in T.thread_binding(ceildiv(cols, gx), thread="blockIdx.x"):
                    with T.sblock("conv2d"):
                        partial = T.sblock_alloc_buffer((split, acc_rows, 4, items), acc_dtype, scope="shared")
                        # 1. slice tk // gz of tile (channel tile bz*gz + tk%gz, row, column tile)
                        for tk in T.thread_binding(gz * split, thread="threadIdx.z"):
                            for ty in T.thread_binding(gy, thread="threadIdx.y"):
                                for tx in T.thread_binding(gx, thread="threadIdx.x"):
                                    with T.sblock("partial_sums"):
                                        acc = T.sblock_alloc_buffer((acc_rows, 4), acc_dtype, scope="local")
                                        xp = T.sblock_alloc_buffer((wb, 4), dtype, scope="local")
                                        wp = T.sblock_alloc_buffer((ocb, 4, 4), dtype, scope="local")
                                        xs = T.sblock_alloc_buffer((span, 4), dtype, scope="local")
                                        wd = T.sblock_alloc_buffer((1, dw_taps, 4), dtype, scope="local")
                                        tmp = T.sblock_alloc_buffer((4,), dtype, scope="local")
                                        gp = T.sblock_alloc_buffer((4,), dtype, scope="local")
                                        for i in T.unroll(acc_rows):
                                            for lane in T.unroll(4):
                                                acc[i, lane] = acc_zero
                                        if bz * gz + tk % gz < ot and by * gy + ty < oh and bx * gx + tx < cols:
                                            if normed:
                                                load_shifts(X, xp, gp, (bx * gx + tx) // wt, by * gy + ty, (bx * gx + tx) % wt * wb)
                                            accumulate_slice(
                                                X, W, xp, wp, acc, (bx * gx + tx) // wt, by * gy + ty,
                                                (bx * gx + tx) % wt * wb, bz * gz + tk % gz, tk // gz,
                                                W_dw, Bias_dw, xs, wd, tmp, Gate, gp,
                                            )
                                        for i in T.unroll(acc_rows):
                                            for lane in T.unroll(4):
                                                partial[tk // gz, i, lane, ((tk % gz) * gy + ty) * gx + tx] = acc[i, lane]
                        # 2. slice 0 sums the slices and stores the tile
                        for tk in T.thread_binding(gz * split, thread="threadIdx.z"):
                            for ty in T.thread_binding(gy, thread="threadIdx.y"):
                                for tx in T.thread_binding(gx, thread="threadIdx.x"):
                                    with T.sblock("reduce_store"):
                                        if tk < gz and bz * gz + tk < ot and by * gy + ty < oh and bx * gx + tx < cols:
                                            acc = T.sblock_alloc_buffer((acc_rows, 4), acc_dtype, scope="local")
                                            tmp = T.sblock_alloc_buffer((4,), dtype, scope="local")
                                            for i in T.unroll(acc_rows):
                                                for lane in T.unroll(4):
                                                    acc[i, lane] = partial[0, i, lane, (tk * gy + ty) * gx + tx]
                                            for k in T.serial(1, split):  # rolled: the sum is cheap, unrolled it bloats the code
                                                for i in T.unroll(acc_rows):
                                                    for lane in T.unroll(4):
                                                        acc[i, lane] = acc[i, lane] + partial[k, i, lane, (tk * gy + ty) * gx + tx]
                                            store_tile(
                                                Y, Bias, Residual, Residual2, acc, tmp, (bx * gx + tx) // wt, by * gy + ty,
                                                (bx * gx + tx) % wt * wb, bz * gz + tk, WeightSum,
                                            )

    return func_split


def _direct_conv(geom: ConvGeometry, mode: str, epilogue, dtype, config, scope, weight_scope, name, prologue=None,
                 out_scope=None, residual_scope=None, acc_dtype=None, gate_scope=None, data_layout="NCHW4c", norm_eps=None, x_view=()):
    """The shared skeleton: tiling, guards, accumulation body ``mode``, epilogue and stores.
    ``prologue`` (:class:`DepthwisePrologue`, a 1x1 conv only): X is the depthwise conv's input.
    ``gate_scope``: X is read times the input gate ``Gate`` held in that scope. ``data_layout``
    "NCHW": X is a plain buffer (the blocked path without prologue or gate only). ``norm_eps``: X is read
    through a layer norm over its channels (:mod:`primfuncs.conv.norm`)."""
    if config is None:
        config = fallback_config(geom, depthwise=mode == "depthwise")
    scopes = check_conv_args(epilogue, dtype, config, scope, weight_scope, out_scope, residual_scope)
    if gate_scope is not None:
        check_scope(gate_scope)
    plain_refused = None if mode != "grouped" and prologue is None and gate_scope is None and norm_eps is None else (
        f"only the blocked path (dense convs) and depthwise convs without a prologue, input gate or folded norm read a plain input; this conv "
        f"has the {mode} path{' with a prologue' if prologue is not None else ''}{' with a gate' if gate_scope is not None else ''}"
        f"{' with a folded norm' if norm_eps is not None else ''}")
    input_layout = InputLayout(geom, data_layout, scopes[0], plain_refused, x_view)
    tiling = DirectTiling(geom, mode, config, dtype, prologue, acc_dtype, gate_scope, input_layout, norm_eps)
    conv_tile, accumulate_blocked, store_tile, load_shifts = _tile_macros(tiling, epilogue)
    y_shape = epilogue.out_shape(geom.n, geom.o, geom.oh, geom.ow)
    # Parse only the kernel this config uses (TVMScript parsing is the factory's main cost).
    if tiling.split > 1:
        kernel = _split_kernel(tiling, accumulate_blocked, store_tile, load_shifts, name, scopes, epilogue, y_shape)
    else:
        kernel = _plain_kernel(tiling, conv_tile, name, scopes, epilogue, y_shape)
    inputs = ["X", "W"] if prologue is None else ["X", "W_dw", *["Bias_dw"] * prologue.epilogue.bias, "W"]
    if gate_scope is not None:
        inputs.insert(1, "Gate")
    if tiling.normed:
        inputs.append("WeightSum")
    return select_params(kernel, epilogue.params(inputs, "Y"))




def conv2d_nchw4c(
    data_shape,
    weight_shape,
    strides=1,
    padding=0,
    dilation=1,
    groups: int = 1,
    epilogue: Epilogue = Epilogue(),
    prologue: Prologue = Prologue(),
    dtype: str = "float32",
    config: ConvConfig | None = None,
    scope: str = TEXTURE,
):
    """Direct conv2d ``Y = act(conv(X, W) + bias + residual)`` on NCHW4c, any groups.

    ``data_shape`` (N, C, H, W) and ``weight_shape`` (O, C/groups, KH, KW) are the
    logical shapes; the kernel takes ``X [N, C/4, H, W, 4]`` in ``scope``,
    ``W [O/4, C/groups, KH, KW, 4]`` in ``prologue.weight_scope`` (default: the weight
    texture for a texture ``scope``, else a buffer), then ``Bias (O/4, 4)`` and
    ``Residual [N, O/4, OH, OW, 4]`` (in ``epilogue.residual_scope``, default ``out_scope``) when
    ``epilogue`` asks for them, and writes ``Y [N, O/4, OH, OW, 4]`` in ``epilogue.out_scope``
    (default ``scope``): a conv at a texture/buffer boundary needs no copy kernel. The
    :class:`~primfuncs.conv.prologue.Prologue`'s fields below are the input side. ``acc_dtype``
    (default ``dtype``; "float32" for a float16 kernel) is the accumulators' dtype: each half
    product is converted and added in float32, the tile converted back before the epilogue. ``padding`` is an int, (pad_h, pad_w) or
    (top, left, bottom, right). ``config`` None: :func:`~primfuncs.conv.config.fallback_config`
    (``tir_adreno.strategy.defaults`` gives each device's). For ``groups == C`` prefer :func:`depthwise_conv2d_nchw4c`.

    ``gate_scope`` (the input gate, a squeeze-excitation's multiply fused in): the conv reads
    ``X[n, c, h, w] * Gate[n, c]``; ``Gate [N, C/4, 1, 1, 4]`` (the excitation's output) comes
    right after ``X``, in that scope. Each work item multiplies the input pixels it reads (one gate
    read per input block; the tiled kernel as it stages them); the blocked path only (dense convs,
    block-aligned groups) or tiled.

    ``data_layout`` "NCHW" or "NHWC" (dense convs, no gate): X is a plain ``[N, C, H, W]`` or
    channels-last ``[N, H, W, C]`` buffer (``scope`` "global"), each blocked input pixel read as four
    channels: a model's first conv reads the input itself, a conv after tokens (``[N, H * W, C]``)
    reads them in place, with no layout kernel before it; ``prologue.x_view`` (``primfuncs.gather``
    steps from that logical ``X`` to the buffer): X read through them (a channel slice of a Linear's
    output: MambaOut's depthwise conv), the buffer's shape the view's. ``epilogue.out_layout`` "NHWC" or "NCHW"
    (``out_scope`` "global"): Y is that plain buffer instead (tokens for a GEMM or upstream op).
    ``epilogue.residual_layout`` "NHWC" or "NCHW" (``residual_scope`` "global", O a multiple of 4):
    Residual is that plain buffer (a map held plain, added where it is: no packing kernel before it).

    ``norm_eps`` (a dense 1x1 conv, stride 1, unpadded; a float32 kernel): the conv reads the
    layer norm over the channels of X, with that epsilon, folded in (:mod:`primfuncs.conv.norm`):
    the caller folds its gamma into ``W`` and ``W . beta`` into the bias, and the kernel takes
    ``WeightSum (O/4, 4)`` (``sum_c W[o, c]``, in ``dtype``) right after ``W``; each work item sums
    its pixels' shifted channels next to its products and normalizes before the epilogue. Direct
    (any config) or tiled.

    ``group_norm`` (a :class:`~primfuncs.conv.norm.GroupNormFold`; the tiled kernel only): the conv
    reads a group norm of X folded in, its statistics from ``group_norm_partials``' output ``Stats``
    (after ``X``) (:func:`~primfuncs.conv.tiled.conv2d_tiled_nchw4c`).

    ``grn_eps`` (with ``gate_scope``; the tiled kernel only): the conv reads ConvNeXt-V2's GRN scale
    folded in: its Gate is GRN's float32 sums of squares over H, W, ``Gamma (C/4, 4)`` follows, and
    each work group computes the scale ``1 + Gamma * Nx`` itself (:func:`~primfuncs.conv.tiled.conv2d_tiled_nchw4c`).
    """
    check_epilogue(epilogue, reads_second=True, plain_residual=True)
    geom = conv2d_geometry(data_shape, weight_shape, strides, padding, dilation, groups)
    if config is not None and config.tiled:
        if geom.groups != 1:
            raise ValueError(f"config.tiled=True is for dense convs (groups=1), got groups={geom.groups}")
        return conv2d_tiled_nchw4c(data_shape, weight_shape, strides, padding, dilation, epilogue, prologue, dtype, config, scope)
    check_prologue(prologue, "conv2d_nchw4c", DIRECT)
    grn_eps, group_norm = prologue.grn_eps, prologue.group_norm
    if grn_eps is not None:  # each work group computes the scale in shared memory: the tiled kernel's
        raise ValueError(f"grn_eps: GRN's scale folds into the tiled conv only (config.tiled=True), got config {config!r}")
    if group_norm is not None:  # its statistics are folded per work group, in shared memory: the tiled kernel's
        raise ValueError(f"group_norm: a group norm folds into the tiled conv only (config.tiled=True), got config {config!r}")
    mode = "blocked" if blocked_path(geom) else "grouped"
    return _direct_conv(geom, mode, epilogue, dtype, config, scope, prologue.weight_scope, "conv2d_nchw4c",
                        out_scope=epilogue.out_scope, residual_scope=epilogue.residual_scope, acc_dtype=prologue.acc_dtype,
                        gate_scope=prologue.gate_scope, data_layout=prologue.data_layout, norm_eps=prologue.norm_eps,
                        x_view=prologue.x_view)


def blocked_path(geom: ConvGeometry) -> bool:
    """Whether the direct conv of ``geom`` takes the blocked path (dense, or groups whose channels
    fill whole blocks): the one that reads an input gate (``gate_scope``)."""
    return geom.groups == 1 or (geom.cg % LANES == 0 and geom.og % LANES == 0)


def depthwise_conv2d_nchw4c(
    data_shape,
    weight_shape,
    strides=1,
    padding=0,
    dilation=1,
    epilogue: Epilogue = Epilogue(),
    prologue: Prologue = Prologue(),
    dtype: str = "float32",
    config: ConvConfig | None = None,
    scope: str = TEXTURE,
):
    """Depthwise conv2d (``groups == C``), weight ``(C * multiplier, 1, KH, KW)``.

    Output channel ``o`` reads input channel ``o // multiplier``. With multiplier 1
    a work item multiplies input and weight pixels lane by lane; otherwise each
    output lane picks its input channel from the pixel holding it. Tensors and
    epilogue and ``config`` as in :func:`conv2d_nchw4c`; the prologue's ``weight_scope``,
    ``acc_dtype`` and ``data_layout`` only.
    """
    check_prologue(prologue, "depthwise_conv2d_nchw4c", DEPTHWISE)
    check_epilogue(epilogue, reads_second=True, plain_residual=True)
    data_shape = tuple(int(d) for d in data_shape)
    if len(data_shape) != 4:
        raise ValueError(f"data_shape must be NCHW (4-d), got {data_shape}")
    geom = conv2d_geometry(data_shape, weight_shape, strides, padding, dilation, groups=data_shape[1])
    return _direct_conv(
        geom, "depthwise", epilogue, dtype, config, scope, prologue.weight_scope, "depthwise_conv2d_nchw4c",
        out_scope=epilogue.out_scope, residual_scope=epilogue.residual_scope, acc_dtype=prologue.acc_dtype,
        data_layout=prologue.data_layout, x_view=prologue.x_view,
    )


@dataclass(frozen=True)
class DepthwisePrologue:
    """A depthwise conv (multiplier 1) with its epilogue (bias, activation), computed in a 1x1
    conv's registers as that conv's input pixels: the intermediate tensor never exists."""

    geometry: ConvGeometry
    epilogue: Epilogue = Epilogue()


def depthwise_pointwise_geometry(data_shape, dw_weight_shape, pw_weight_shape, strides=1, padding=0, dilation=1,
                                 groups: int = 1):
    """(depthwise geometry, 1x1 conv geometry) of a fusable pair, validated: depthwise weights
    ``(C, 1, KH, KW)`` (multiplier 1), 1x1 weights ``(O, C/groups, 1, 1)``, its ``groups``
    block-aligned (:func:`blocked_path`: the fused kernel is the blocked body); ValueError naming the culprit."""
    data_shape = tuple(int(d) for d in data_shape)
    if len(data_shape) != 4:
        raise ValueError(f"data_shape must be NCHW (4-d), got {data_shape}")
    dw = conv2d_geometry(data_shape, dw_weight_shape, strides, padding, dilation, groups=data_shape[1],
                         names=("data_shape", "dw_weight_shape"))
    if dw.o != dw.c:
        raise ValueError(f"dw_weight_shape {tuple(dw_weight_shape)} must have O = C = {dw.c} (depthwise multiplier 1)")
    pw_weight_shape = tuple(int(d) for d in pw_weight_shape)
    if len(pw_weight_shape) != 4 or pw_weight_shape[2:] != (1, 1):
        raise ValueError(f"pw_weight_shape must be (O, {dw.c} / groups, 1, 1) (a 1x1 conv), got {pw_weight_shape}")
    pw = conv2d_geometry(dw.out_shape, pw_weight_shape, groups=groups, names=("depthwise output", "pw_weight_shape"))
    if not blocked_path(pw):
        raise ValueError(f"groups={groups}: a depthwise prologue feeds a dense 1x1 conv or one whose groups fill whole "
                         f"channel blocks (C/groups = {pw.cg} and O/groups = {pw.og} multiples of {LANES})")
    return dw, pw


def depthwise_pointwise_nchw4c(data_shape, dw_weight_shape, pw_weight_shape, strides=1, padding=0, dilation=1,
                               groups: int = 1, epilogue: Epilogue = Epilogue(), prologue: Prologue = Prologue(),
                               dtype: str = "float32", config: ConvConfig | None = None, scope: str = TEXTURE):
    """Depthwise conv then 1x1 conv in one kernel: ``Y = act(conv1x1(act_dw(dwconv(X) + Bias_dw),
    W) + Bias + Residual)`` (MobileNet's inverted-residual tail).

    The 1x1 conv's tile (``config``: ``oc_block`` output blocks x ``w_block`` columns, work
    group, ``split_k``) walks the middle channel blocks; for each it computes the depthwise
    output of its ``w_block`` pixels in registers (window weights once, each input row's pixels
    once) and multiplies them in. Each of the O/4 / ``oc_block`` tiles of a pixel recomputes
    the depthwise conv: the price of one launch and one activation round trip less.

    Kernel parameters: ``X [N, C/4, H, W, 4]``, ``W_dw [C/4, 1, KH, KW, 4]``, ``Bias_dw (C/4, 4)``
    when ``dw_epilogue.bias``, ``W [O/4, C/groups, 1, 1, 4]``, then ``epilogue``'s Bias / Residual, ``Y``.
    ``strides``/``padding``/``dilation`` are the depthwise conv's (the 1x1 has none); ``groups`` the
    1x1 conv's, block-aligned (each group's C/groups and O/groups multiples of 4: EfficientViT's
    multi-scale aggregation): a tile lies in one group and computes the depthwise output of that
    group's input blocks only. ``X`` is
    read in ``scope``, ``Y`` written in ``out_scope`` and ``Residual`` read in ``residual_scope``
    (defaults as in :func:`conv2d_nchw4c`). ``acc_dtype`` is the 1x1 conv's accumulators'
    (:func:`conv2d_nchw4c`); the depthwise prologue's stay in ``dtype``.
    """
    check_prologue(prologue, "depthwise_pointwise_nchw4c", FUSED)
    check_epilogue(epilogue, reads_second=True)
    dw_epilogue = prologue.depthwise
    if not isinstance(dw_epilogue, Epilogue) or dw_epilogue.residual:
        raise ValueError(f"prologue.depthwise must be an Epilogue without residual, got {dw_epilogue!r}")
    dw, pw = depthwise_pointwise_geometry(data_shape, dw_weight_shape, pw_weight_shape, strides, padding, dilation, groups)
    return _direct_conv(pw, "blocked", epilogue, dtype, config, scope, prologue.weight_scope, "depthwise_pointwise_nchw4c",
                        DepthwisePrologue(dw, dw_epilogue), out_scope=epilogue.out_scope, residual_scope=epilogue.residual_scope,
                        acc_dtype=prologue.acc_dtype)