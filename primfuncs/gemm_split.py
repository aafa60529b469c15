"""GEMM with the reduction split across a work group: ``GemmConfig(split_k=S)``.

For a product with a long K and few outputs, where the register and tiled kernels launch too
few items and each walks all of K one block after another (a classifier head: 1 row, K = 384 to
1152; the last stage's MLP on 16 to 50 tokens, K = 768 to 1280; CoaT's factorized attention
Kᵀ V: K = 3137 tokens, 8 x 8 outputs per head). The same products, views, ``out_perm``,
``alpha``, epilogue, placements and dtypes as the register kernel (:func:`primfuncs.gemm.gemm`,
which builds this one for a split config).

A work group is ``split_k`` x ``tx`` items. Item ``(s, x)`` owns the register tile of
``rows`` output rows x ``cols`` pixels of 4 columns that the register kernel's item would (the
group's ``x``-th along the pixels), but accumulates only blocks ``s, s + split_k, ...`` of 4
reduction indices: neighbouring items of a column read neighbouring blocks of A's rows, and
neighbouring columns neighbouring pixels of B. Each item then writes its partial tile to local
memory; after the barrier (TVM's storage sync puts one between those stores and the reads)
items ``s = 0`` add the other ``split_k - 1`` partials in order of ``s``, in the accumulator
dtype, and store through the epilogue.
"""

from __future__ import annotations

from tvm.script import tirx as T

from ._common import BUFFER, LANES, TEXTURE, ceildiv, dtype_bytes, select_params, whole
from .conv.config import MAX_LOCAL_BYTES
from .epilogue import Epilogue
from .gemm_parts import GemmConfig, GemmGeometry, a_operand, gemm_grid, indexers, pixel_shape, register_loads, register_product, store_macros, stored_out_shape, views


def split_local_bytes(config: GemmConfig, acc_dtype: str = "float32") -> int:
    """Local memory of the split kernel with ``config``: every item's partial tile, in ``acc_dtype``."""
    return config.split_k * config.tx * config.rows * config.cols * LANES * dtype_bytes(acc_dtype)


def split_work_groups(geom: GemmGeometry, config: GemmConfig) -> int:
    """Work groups the split kernel launches for ``geom`` with ``config``: the register kernel's
    tiles (:func:`gemm_grid`), ``tx`` along the pixels a group."""
    grid = gemm_grid(geom, config)
    return grid.layers * grid.rows * ceildiv(grid.cols, config.tx)


def gemm_split(geom: GemmGeometry, config: GemmConfig, epilogue: Epilogue, dtype: str, acc_dtype: str, scope: str, alpha: float,
               out_perm=None, a_view=None, b_view=None, a_producer=None):
    """The split kernel of :func:`primfuncs.gemm.gemm`'s arguments, checked there (``geom`` its
    geometry, ``acc_dtype`` resolved, ``a_producer`` normalized); ValueError for a config whose partial tiles need more than
    ``MAX_LOCAL_BYTES`` of local memory."""
    local_bytes = split_local_bytes(config, acc_dtype)
    if local_bytes > MAX_LOCAL_BYTES:
        raise ValueError(f"config {config} needs {local_bytes} bytes of local memory for its partial tiles, more than "
                         f"MAX_LOCAL_BYTES = {MAX_LOCAL_BYTES}; use a smaller split_k, work group or tile")
    n4, k4 = ceildiv(geom.n, LANES), ceildiv(geom.k, LANES)
    tm, tn, ks, gx = config.rows, config.cols, config.split_k, config.tx
    grid = gemm_grid(geom, config)  # the register kernel's tiles: one item's per (layer, row tile, pixel tile)
    steps = ceildiv(k4, ks)
    y_shape = stored_out_shape(geom, out_perm)
    (a_view, a_buffer), (b_view, b_buffer) = views(geom, a_view, b_view, scope)
    at_a, at_b, at_y = indexers(geom, out_perm, a_view, b_view)
    acc_zero = T.FloatImm(acc_dtype, 0.0)
    texture = scope == TEXTURE
    store_tile = store_macros(geom, epilogue, at_y, dtype, acc_dtype, alpha, texture, tm, tn)
    accumulate = register_product(tm, tn)

    def stored(shape):
        return pixel_shape(shape) if texture else tuple(shape)

    read_a, a_shapes, a_names = a_operand(geom, a_producer, stored(a_buffer), dtype)
    load_a, load_b = register_loads(geom, at_a, at_b, a_view, b_view, dtype, texture, tm, tn, read_a)

    def in_k(kb):  # a last round with fewer blocks than items: the others add none
        return kb < k4 if k4 % ks else T.bool(True)

    @T.macro
    def accumulate_block(As, B, acc, a_px, b_px, vb, r0, c0, kb):
        # the item's products of reduction block kb
        if in_k(kb):
            load_a(a_px, As, vb, r0, kb)
            load_b(b_px, B, vb, c0, kb)
            accumulate(acc, a_px, b_px)

    @T.prim_func(s_tir=True)
    def func(a: T.handle, a1: T.handle, a2: T.handle, a3: T.handle, b: T.handle, bias: T.handle, residual: T.handle, residual2: T.handle,
             y: T.handle):
        T.func_attr({"global_symbol": "gemm_split", "tirx.noalias": True})
        A = T.match_buffer(a, a_shapes[0], dtype, scope=scope)
        A1 = T.match_buffer(a1, a_shapes[1], dtype, scope=scope)
        A2 = T.match_buffer(a2, a_shapes[2], dtype, scope=scope)
        A3 = T.match_buffer(a3, a_shapes[3], dtype, scope=scope)
        B = T.match_buffer(b, stored(b_buffer), dtype, scope=scope)
        Bias = T.match_buffer(bias, epilogue.bias_shape(n4), dtype, scope=BUFFER)
        Residual = T.match_buffer(residual, stored(y_shape), dtype, scope=scope)
        Residual2 = T.match_buffer(residual2, stored(y_shape), dtype, scope=scope)
        Y = T.match_buffer(y, stored(y_shape), dtype, scope=scope)
        for bz in T.thread_binding(grid.layers, thread="blockIdx.z"):
            for by in T.thread_binding(grid.rows, thread="blockIdx.y"):
                for bx in T.thread_binding(ceildiv(grid.cols, gx), thread="blockIdx.x"):
                    # whole buffers as regions: an inferred region prints as TVMScript that parses back reordered (upstream defect 16)
                    with T.sblock("gemm_split"):
                        T.reads([whole(X) for X in (A, A1, A2, A3)[:len(a_names)]] + [whole(B)])
                        T.writes(whole(Y))
                        partial = T.sblock_alloc_buffer((ks, gx, tm, tn * 4), acc_dtype, scope="shared")
                        for s in T.thread_binding(ks, thread="threadIdx.y"):
                            for tx in T.thread_binding(gx, thread="threadIdx.x"):
                                with T.sblock("tile"):
                                    T.reads([whole(X) for X in (A, A1, A2, A3)[:len(a_names)]] + [whole(B), whole(partial)])
                                    T.writes(whole(Y), whole(partial))
                                    acc = T.sblock_alloc_buffer((tm, tn * 4), acc_dtype, scope="local")
                                    a_px = T.sblock_alloc_buffer((tm, 4), dtype, scope="local")
                                    b_px = T.sblock_alloc_buffer((4, tn * 4), dtype, scope="local")
                                    px = T.sblock_alloc_buffer((2 + epilogue.reads_second, 4), dtype, scope="local")
                                    for i in T.unroll(tm):
                                        for c in T.unroll(tn * 4):
                                            acc[i, c] = acc_zero
                                    for step in T.serial(steps):
                                        accumulate_block((A, A1, A2, A3), B, acc, a_px, b_px, bz, by * tm, (bx * gx + tx) * tn, step * ks + s)
                                    for i in T.unroll(tm):
                                        for c in T.unroll(tn * 4):
                                            partial[s, tx, i, c] = acc[i, c]
                                    if s == 0:
                                        for t in T.serial(1, ks):
                                            for i in T.unroll(tm):
                                                for c in T.unroll(tn * 4):
                                                    acc[i, c] = acc[i, c] + partial[t, tx, i, c]
                                        store_tile(Y, Bias, Residual, Residual2, acc, px, bz, by * tm, (bx * gx + tx) * tn)

    return select_params(func, epilogue.params([*a_names, "B"], "Y"))
