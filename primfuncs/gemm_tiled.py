"""GEMM on plain row-major buffers with local-memory tiling (big GPUs): ``GemmConfig(tiled=True)``.

The same products, views, ``out_perm``, ``alpha``, epilogue and dtypes as the register-tiled
kernel (:func:`primfuncs.gemm.gemm`, which builds this one for a tiled config), the way the
tiled conv (:mod:`primfuncs.conv.tiled`) runs a 1x1 conv. A work group of ``ty`` x ``tx``
items owns ``ty * rows`` output rows x ``tx * cols`` pixels of 4 columns; item ``(y, x)``
accumulates rows ``y + i * ty`` x pixels ``x + j * tx`` in registers (strided, so neighbouring
items read neighbouring local-memory pixels of B and store neighbouring output pixels). Per
step the group copies ``k_chunk`` blocks of 4 reduction indices of A and of B into local
memory, each item a slot at a time, neighbouring items reading neighbouring addresses along
whichever axis is contiguous in the stored operand (K for A, N for B, or M and K when read
transposed): one vector load per slot where 4 elements are contiguous and aligned, else one
scalar. Reads past the rows and columns are clamped (their products only reach accumulators
that are never stored); values past K are zeroed, so a NaN in a clamped element never leaks
into a product. After the copies (TVM's storage sync puts a barrier between a step's stores to
local memory and its reads, and another before the next step overwrites them) each item does
``16 rows cols`` FMAs per block of 4 from local memory. With ``config.prefetch`` each item
reads its slots of the next step into registers right after storing the current step's to local
memory, so those reads are in flight while the step multiplies (a product too small to fill the
GPU, a transformer's 197 tokens, runs one work group per compute unit: nothing else hides the
latency of its reads, and without it every step waits for them). Buffers only: the texture cache already
serves the register kernel's reuse (the tiled conv was slower on textures than on buffers).

``norm_eps``: a layer norm over A's rows (K) folded in, as the tiled conv folds one over its input
channels (:mod:`primfuncs.conv.norm`: ``y = r (sum W' d - (S1 / K) s) + b'`` with ``W'``, ``s`` =
``WeightSum`` and ``b'`` folded by the caller): each staged value of A is shifted by its row's
element 0 (``d = a - K_row``, before the zeroing past K), each item sums its rows' staged values
(S1, S2: two accumulator columns after its tile) as it multiplies them, and normalizes its
accumulators before alpha and the epilogue.
"""

from __future__ import annotations

from tvm.script import tirx as T

from ._common import BUFFER, LANES, ceildiv, dtype_bytes, select_params, whole
from .conv.config import MAX_LOCAL_BYTES
from .conv.norm import shifted_rstd
from .epilogue import Epilogue
from .gemm_parts import GemmConfig, GemmGeometry, a_operand, contiguous, indexers, register_product, store_macros, stored_out_shape, views


def tiled_local_bytes(config: GemmConfig, dtype: str = "float32") -> int:
    """Local memory of the tiled kernel with ``config``: ``4 k_chunk`` reduction indices of the
    work group's ``ty * rows`` rows of A and ``4 tx * cols`` columns of B, in ``dtype``."""
    return LANES * config.k_chunk * (config.ty * config.rows + LANES * config.tx * config.cols) * dtype_bytes(dtype)


def tiled_work_groups(geom: GemmGeometry, config: GemmConfig) -> int:
    """Work groups the tiled kernel launches for ``geom`` with ``config``."""
    return geom.batch * ceildiv(geom.m, config.ty * config.rows) * ceildiv(ceildiv(geom.n, LANES), config.tx * config.cols)


def gemm_tiled(geom: GemmGeometry, config: GemmConfig, epilogue: Epilogue, dtype: str, acc_dtype: str, scope: str, alpha: float,
               out_perm=None, a_view=None, b_view=None, norm_eps=None, a_producer=None):
    """The tiled kernel of :func:`primfuncs.gemm.gemm`'s arguments, checked there (``geom``
    its geometry, ``acc_dtype`` resolved, ``norm_eps`` a float32 kernel's, ``a_producer``
    normalized: A's slots are then scalars, each the producer's value); ValueError for a texture placement or a config whose
    tiles need more than ``MAX_LOCAL_BYTES`` of local memory."""
    if scope != BUFFER:
        raise ValueError(f"the tiled gemm (config.tiled) runs on buffers, got scope {scope!r} (use an untiled config for textures)")
    local_bytes = tiled_local_bytes(config, dtype)
    if local_bytes > MAX_LOCAL_BYTES:
        raise ValueError(f"config {config} needs {local_bytes} bytes of local memory for its tiles, more than "
                         f"MAX_LOCAL_BYTES = {MAX_LOCAL_BYTES}; use a smaller work group, tile or k_chunk")
    m, k, n = geom.m, geom.k, geom.n
    n4 = ceildiv(n, LANES)
    tm, tn, gy, gx, kc, prefetch = config.rows, config.cols, config.ty, config.tx, config.k_chunk, config.prefetch
    rows, pixels, depth = gy * tm, gx * tn, LANES * kc  # the work group's tile: rows x pixels, reduction indices a step
    threads = gy * gx
    steps = ceildiv(k, depth)
    k_tail = k % depth != 0  # the last step reads past K: those values are zeroed
    y_shape = stored_out_shape(geom, out_perm)
    (a_view, a_buffer), (b_view, b_buffer) = views(geom, a_view, b_view, scope)
    at_a, at_b, at_y = indexers(geom, out_perm, a_view, b_view)
    read_a, a_shapes, a_names = a_operand(geom, a_producer, a_buffer, dtype)
    zero, acc_zero = T.FloatImm(dtype, 0.0), T.FloatImm(acc_dtype, 0.0)
    store_tile = store_macros(geom, epilogue, at_y, dtype, acc_dtype, alpha, False, tm, tn, gy, gx)
    accumulate = register_product(tm, tn)
    normed = norm_eps is not None  # a folded layer norm: S1, S2 of row i in acc[i, stat], acc[i, stat + 1]
    stat, inv_k = tn * 4, T.FloatImm(acc_dtype, 1.0 / k)

    # Each operand's stored contiguous axis: K for A [.., M, K] and B [.., N, K] (trans_b), the
    # rows for A [.., K, M] (trans_a), the columns for B [.., K, N]. A slot copies 4 elements
    # along it with one vector load where they are contiguous (no view breaking the last axis)
    # and the axis is a multiple of 4 (aligned, never past its end); else one element.
    a_along_k, b_along_k = not geom.trans_a, geom.trans_b
    a_width = 4 if read_a is None and contiguous(a_view, geom.a_shape) and (k if a_along_k else m) % LANES == 0 and (a_along_k or rows % LANES == 0) else 1
    b_width = 4 if contiguous(b_view, geom.b_shape) and (k if b_along_k else n) % LANES == 0 else 1

    def a_source(vb, tile, kg, x, lane):
        """A's stored index of reduction index ``kg`` of the tile's row ``x`` (4-element slots: their
        first; ``lane`` added along the contiguous axis), clamped inside the tensor."""
        if a_width == 1:
            return at_a(vb, T.min(tile * rows + x, m - 1), T.min(kg, k - 1))
        if a_along_k:
            return at_a(vb, T.min(tile * rows + x, m - 1), T.min(kg, k - LANES) if k_tail else kg, lane)
        return at_a(vb, T.min(tile * rows + x, m - LANES), T.min(kg, k - 1), lane)

    def b_source(vb, tile, kg, x, lane):
        """B's stored index of reduction index ``kg`` of the tile's column ``x`` (as :func:`a_source`)."""
        if b_width == 1:
            return at_b(vb, T.min(kg, k - 1), T.min(tile * pixels * LANES + x, n - 1))
        if b_along_k:
            return at_b(vb, T.min(kg, k - LANES) if k_tail else kg, T.min(tile * pixels * LANES + x, n - 1), lane)
        return at_b(vb, T.min(kg, k - 1), T.min(tile * pixels * LANES + x, n - LANES), lane)

    def a_place(kk, x):
        return (kk // LANES, x, kk % LANES)  # a_s[block, row, index in the block]: an item reads a row's 4 as one vector

    def b_place(kk, x):
        return (kk // LANES, kk % LANES, x // LANES, x % LANES)  # b_s[block, index, pixel, lane]

    def staging(extent, along_k, width, source, place, lanes_last, read, shift=None):
        """The macros ``(fetch, put)`` of the work group's ``depth`` x ``extent`` slice of an operand
        (``extent`` rows of A or columns of B) at K step ``step``: ``fetch(Src, regs, vb, tile, step,
        item)`` reads (``read(Src, index)``: the operand's element at a stored index) slot ``e`` of round ``r`` (``width`` elements along the contiguous axis, copied
        by item ``e - r threads``: neighbouring items read neighbouring addresses) into ``regs[r]``,
        shifted (``shift(vb, tile, x)``: the stored index of the value subtracted from the tile's row
        ``x``, a folded norm's), zeros past K; ``put(regs, dst, item)`` stores them into local ``dst``
        (``place``; ``lanes_last``: a slot's elements are adjacent there, one vector store)."""
        shifted = shift is not None
        units = (depth if along_k else extent) // width
        slots = units * (extent if along_k else depth)
        rounds = ceildiv(slots, threads)

        def k_of(e):
            return e % units * width if along_k else e // units

        def x_of(e):
            return e // units if along_k else e % units * width

        def in_slots(e):  # a last round with fewer slots than items: the others skip it
            return e < slots if slots % threads else T.bool(True)

        def valid(step, e, lane):
            return step * depth + k_of(e) + (lane if along_k else 0) < k

        @T.macro
        def fetch(Src, regs, vb, tile, step, item):
            for rnd in T.unroll(rounds):
                if in_slots(rnd * threads + item):
                    if width == 1:
                        regs[rnd, 0] = read(Src, source(vb, tile, step * depth + k_of(rnd * threads + item), x_of(rnd * threads + item), None))
                    else:
                        for lane in T.vectorized(4):
                            regs[rnd, lane] = read(Src, source(vb, tile, step * depth + k_of(rnd * threads + item), x_of(rnd * threads + item), lane))
                    if shifted:  # before the zeroing past K: the padding stays 0
                        for lane in T.unroll(width):
                            regs[rnd, lane] = regs[rnd, lane] - read(Src, shift(vb, tile, x_of(rnd * threads + item)))
                    if k_tail:
                        for lane in T.unroll(width):
                            regs[rnd, lane] = T.Select(valid(step, rnd * threads + item, lane), regs[rnd, lane], zero)

        @T.macro
        def put(regs, dst, item):
            for rnd in T.unroll(rounds):
                if in_slots(rnd * threads + item):
                    if lanes_last and width == 4:
                        for lane in T.vectorized(4):
                            dst[(*place(k_of(rnd * threads + item), x_of(rnd * threads + item))[:-1], lane)] = regs[rnd, lane]
                    else:
                        for lane in T.unroll(width):
                            dst[place(k_of(rnd * threads + item) + (lane if along_k else 0),
                                      x_of(rnd * threads + item) + (0 if along_k else lane))] = regs[rnd, lane]

        return fetch, put, rounds

    fetch_a, put_a, rounds_a = staging(rows, a_along_k, a_width, a_source, a_place, a_along_k, read_a or (lambda As, i: As[0][i]),
                                       (lambda vb, tile, x: at_a(vb, T.min(tile * rows + x, m - 1), 0)) if normed else None)
    fetch_b, put_b, rounds_b = staging(pixels * LANES, b_along_k, b_width, b_source, b_place, not b_along_k, lambda B, i: B[i])

    @T.macro
    def multiply_tiles(a_s, b_s, a_px, b_px, acc, ty, tx):
        """acc += the step's products: per block of 4 reduction indices, each of the item's rows'
        4 values and each of its pixels' 4 rows read from local memory as vectors, then 16 FMAs per pair."""
        for kb in T.unroll(kc):
            for i in T.unroll(tm):
                for kk in T.vectorized(4):
                    a_px[i, kk] = a_s[kb, i * gy + ty, kk]
            if normed:  # the staged values are shifted, zero past K: S1, S2 of each row
                for i in T.unroll(tm):
                    for kk in T.unroll(4):
                        acc[i, stat] = acc[i, stat] + a_px[i, kk]
                        acc[i, stat + 1] = acc[i, stat + 1] + a_px[i, kk] * a_px[i, kk]
            for kk in T.unroll(4):
                for j in T.unroll(tn):
                    for lane in T.vectorized(4):
                        b_px[kk, j * 4 + lane] = b_s[kb, kk, j * gx + tx, lane]
            accumulate(acc, a_px, b_px)

    @T.macro
    def normalize(acc, WeightSum, ws, bx, tx):
        """``acc[i, c] = r_i (acc - (mu_i - K_i) s_c)``: the layer norm of the item's rows applied to
        its products (``s = WeightSum``; ``ws`` a local pixel)."""
        for i in T.unroll(tm):
            acc[i, stat] = acc[i, stat] * inv_k
            acc[i, stat + 1] = shifted_rstd(acc[i, stat + 1], acc[i, stat], inv_k, norm_eps)
        for j in T.unroll(tn):
            for lane in T.vectorized(4):
                ws[lane] = WeightSum[T.min(bx * pixels + j * gx + tx, n4 - 1), lane]
            for i in T.unroll(tm):
                for lane in T.unroll(4):
                    acc[i, j * 4 + lane] = (acc[i, j * 4 + lane] - acc[i, stat] * ws[lane]) * acc[i, stat + 1]

    @T.prim_func(s_tir=True)
    def func(a: T.handle, a1: T.handle, a2: T.handle, a3: T.handle, b: T.handle, weight_sum: T.handle, bias: T.handle, residual: T.handle,
             residual2: T.handle, y: T.handle):
        T.func_attr({"global_symbol": "gemm_tiled", "tirx.noalias": True})
        A = T.match_buffer(a, a_shapes[0], dtype, scope=BUFFER)
        A1 = T.match_buffer(a1, a_shapes[1], dtype, scope=BUFFER)
        A2 = T.match_buffer(a2, a_shapes[2], dtype, scope=BUFFER)
        A3 = T.match_buffer(a3, a_shapes[3], dtype, scope=BUFFER)
        B = T.match_buffer(b, b_buffer, dtype, scope=BUFFER)
        WeightSum = T.match_buffer(weight_sum, (n4, 4), dtype, scope=BUFFER)
        Bias = T.match_buffer(bias, epilogue.bias_shape(n4), dtype, scope=BUFFER)
        Residual = T.match_buffer(residual, y_shape, dtype, scope=BUFFER)
        Residual2 = T.match_buffer(residual2, y_shape, dtype, scope=BUFFER)
        Y = T.match_buffer(y, y_shape, dtype, scope=BUFFER)
        for bz in T.thread_binding(geom.batch, thread="blockIdx.z"):
            for by in T.thread_binding(ceildiv(m, rows), thread="blockIdx.y"):
                for bx in T.thread_binding(ceildiv(n4, pixels), thread="blockIdx.x"):
                    # whole buffers as regions: an inferred region prints as TVMScript that parses back reordered (upstream defect 16)
                    with T.sblock("gemm_tiled"):
                        T.reads([whole(X) for X in (A, A1, A2, A3)[:len(a_names)]] + [whole(B)])
                        T.writes(whole(Y))
                        a_s = T.sblock_alloc_buffer((kc, rows, 4), dtype, scope="shared")
                        b_s = T.sblock_alloc_buffer((kc, 4, pixels, 4), dtype, scope="shared")
                        for ty in T.thread_binding(gy, thread="threadIdx.y"):
                            for tx in T.thread_binding(gx, thread="threadIdx.x"):
                                with T.sblock("tile"):
                                    T.reads([whole(X) for X in (A, A1, A2, A3)[:len(a_names)]] + [whole(B), whole(a_s), whole(b_s)])
                                    T.writes(whole(Y), whole(a_s), whole(b_s))
                                    acc = T.sblock_alloc_buffer((tm, stat + 2 * normed), acc_dtype, scope="local")
                                    a_px = T.sblock_alloc_buffer((tm, 4), dtype, scope="local")
                                    b_px = T.sblock_alloc_buffer((4, tn * 4), dtype, scope="local")
                                    regs_a = T.sblock_alloc_buffer((rounds_a, 4), dtype, scope="local")
                                    regs_b = T.sblock_alloc_buffer((rounds_b, 4), dtype, scope="local")
                                    px = T.sblock_alloc_buffer((2 + epilogue.reads_second, 4), dtype, scope="local")
                                    ws = T.sblock_alloc_buffer((4,), dtype, scope="local")  # a folded norm's weight sums
                                    for i in T.unroll(tm):
                                        for c in T.unroll(stat + 2 * normed):
                                            acc[i, c] = acc_zero
                                    if prefetch:  # step 0's slices in registers before the loop
                                        fetch_a((A, A1, A2, A3), regs_a, bz, by, 0, ty * gx + tx)
                                        fetch_b(B, regs_b, bz, bx, 0, ty * gx + tx)
                                    for step in T.serial(steps):
                                        if not prefetch:
                                            fetch_a((A, A1, A2, A3), regs_a, bz, by, step, ty * gx + tx)
                                            fetch_b(B, regs_b, bz, bx, step, ty * gx + tx)
                                        put_a(regs_a, a_s, ty * gx + tx)
                                        put_b(regs_b, b_s, ty * gx + tx)
                                        if prefetch and steps > 1:  # the next step's reads in flight while this one multiplies
                                            if step + 1 < steps:
                                                fetch_a((A, A1, A2, A3), regs_a, bz, by, step + 1, ty * gx + tx)
                                                fetch_b(B, regs_b, bz, bx, step + 1, ty * gx + tx)
                                        multiply_tiles(a_s, b_s, a_px, b_px, acc, ty, tx)
                                    if normed:
                                        normalize(acc, WeightSum, ws, bx, tx)
                                    store_tile(Y, Bias, Residual, Residual2, acc, px, bz, by * rows + ty, bx * pixels + tx)

    return select_params(func, epilogue.params([*a_names, "B", *["WeightSum"] * normed], "Y"))
