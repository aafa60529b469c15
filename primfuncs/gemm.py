"""Tiled GEMM on plain row-major tensors: ``Y = act(alpha op(A) @ op(B) + Bias + Residual)``.

One factory, :func:`gemm`, covers the matmul family as the ONNX importer writes it:

- activation x constant weight (a Linear): ``A [..., M, K]`` of any rank (tokens ``[N, L, C]``,
  channels-last maps ``[N, H, W, C]``) times ``B [K, N]``; every leading dim of ``A`` is folded
  into the rows, so the whole product is one ``[rows, K] x [K, N]`` GEMM;
- batched activation x activation: ``A [B..., M, K]`` times ``B [B..., K, N]`` with batch dims
  that broadcast (any count: ``[N, heads, L, d]``; a size-1 dim of either is shared, as
  multi-query attention's K and V), flattened into one batch axis; either operand may
  be stored transposed (``trans_a``: ``A [B..., K, M]``, ``trans_b``: ``B [B..., N, K]``: Q Kᵀ
  reads K as stored), so no transpose kernel runs before it.

Tensors are the plain buffers upstream ops read and write (the token layout of
docs/design.md): no layout transform on either side. With ``scope=TEXTURE`` the operands and
the output are textures with their last axis as RGBA pixels (:func:`pixel_shape`, padding lanes
0), read as stored (no transposes). Each work item owns a register tile of
``config.rows`` output rows x ``config.cols`` pixels of 4 adjacent columns; its loop walks K in
steps of 4, reading a 4-wide strip of A per row and 4 rows of B per pixel, and does 16 FMAs per
(row, pixel) pair from registers (the conv kernels' design, docs/design.md). A work group is
``config.ty`` x ``config.tx`` items (columns fastest, so neighbours read neighbouring pixels of B
and the same rows of A). Loads along a contiguous axis whose length is a multiple of 4 are one
vector load; the rest are scalar loads guarded at the edges (zeros past K, so a NaN in a clamped
element never leaks into a product). The epilogue (:class:`primfuncs.epilogue.Epilogue`: bias,
residual, activation) runs on the accumulators before the store.

``GemmConfig(tiled=True)`` builds the local-memory tiled kernel instead (:mod:`primfuncs.gemm_tiled`,
buffers, big GPUs), ``GemmConfig(split_k=S)`` the split-reduction kernel (:mod:`primfuncs.gemm_split`:
a long K with few outputs, such as a classifier head or the last stage's MLP); all take their
geometry, indexers, checks, loads and epilogue store from :mod:`primfuncs.gemm_parts`.

dtypes: ``float32`` (also float16_acc32: the same kernel on half buffers,
``codegen.half_buffers``), ``float16`` with ``acc_dtype="float32"`` (the strategy picks it for
long reductions, docs/precision.md).
"""

from __future__ import annotations

from tvm.script import tirx as T

from ._common import BUFFER, LANES, TEXTURE, ceildiv, pixel_launch, select_params, whole
from .epilogue import BIAS, RESIDUAL, SECOND, Epilogue
from .gemm_parts import (MAX_TILE_COLS, MAX_TILE_ROWS, MAX_WORK_GROUP, GemmConfig, GemmGeometry, a_operand, check_gemm, check_producer,
                         gemm_geometry, gemm_grid, indexers, pixel_shape, register_loads, register_product, store_macros, stored_out_shape, view_buffer, views)
from .conv.norm import check_norm
from .gemm_split import gemm_split
from .gemm_tiled import gemm_tiled


def gemm(a_shape, b_shape, trans_a: bool = False, trans_b: bool = False, config: GemmConfig = GemmConfig(),
         epilogue: Epilogue = Epilogue(), dtype: str = "float32", acc_dtype: str | None = None, scope: str = BUFFER,
         alpha: float = 1.0, out_perm=None, a_view=None, b_view=None, norm_eps=None, a_producer=None):
    """``Y = act(op(A) @ op(B) + Bias + Residual)`` (:func:`gemm_geometry` for the shapes; ``Y``
    of shape ``A``'s leading dims + ``(M, N)``), plain row-major buffers, or with ``scope=TEXTURE``
    textures of the :func:`pixel_shape` of each (``trans_a``, ``trans_b`` False). ``Bias``: ``(ceil(N/4), 4)``
    zero-padded (``strategy.packing.pack_bias``), ``Residual`` (and ``Residual2``, an expression's
    second operand): ``Y``'s shape; parameters ``A, B, [Bias], [Residual], [Residual2], Y`` as ``epilogue`` says. ``acc_dtype``: the accumulators'
    (float32 for a float16 kernel's long reductions; default ``dtype``). ``alpha``: a constant the
    product is scaled by before the epilogue (attention's ``q * scale`` read through). ``out_perm``:
    ``Y`` (and ``Residual``) stored with the product's axes permuted (:func:`stored_out_shape`:
    attention x V ``[N, heads, L, d]`` written as ``[N, L, heads, d]``, so no transpose runs after it).
    ``a_view``, ``b_view``: gather steps (``primfuncs.gather``) from the operand's stored shape to
    the buffer it is read from (q, k and v of attention read in the qkv Linear's output: no gather
    kernel before the product); each must read an element for every index (``gather.covers_all``).
    ``norm_eps``: a layer norm over A's rows (its last axis, K) folded in, the tiled kernel's only
    (:mod:`primfuncs.gemm_tiled`; float32, buffers, not ``trans_a``): B is the norm's folded weight
    ``W' = diag(gamma) W``, ``Bias`` ``W beta + b``, and ``WeightSum`` (``(ceil(N/4), 4)`` float32,
    zero-padded like the bias: the column sums of ``W'``) comes right after ``B``.
    ``a_producer``: a ``plain_elementwise.Producer`` that computes op(A) as stored, evaluated as A
    is read (buffers; no ``a_view`` or ``norm_eps`` beside it): its input buffers ``A, A1, ..``
    take A's place among the parameters, and the elementwise kernel before the product never runs."""
    geom = gemm_geometry(a_shape, b_shape, trans_a, trans_b)
    acc_dtype = check_gemm(geom, config, epilogue, dtype, acc_dtype, scope, alpha)
    a_producer = check_producer(geom, a_producer, a_view, scope, norm_eps)
    if check_gemm_norm(geom, config, norm_eps, dtype, acc_dtype, scope):
        return gemm_tiled(geom, config, epilogue, dtype, acc_dtype, scope, alpha, out_perm, a_view, b_view, norm_eps)
    if config.tiled:
        return gemm_tiled(geom, config, epilogue, dtype, acc_dtype, scope, alpha, out_perm, a_view, b_view, a_producer=a_producer)
    if config.split_k > 1:
        return gemm_split(geom, config, epilogue, dtype, acc_dtype, scope, alpha, out_perm, a_view, b_view, a_producer)
    grid = gemm_grid(geom, config)
    n4, k4 = ceildiv(geom.n, LANES), ceildiv(geom.k, LANES)
    tm, tn = config.rows, config.cols
    y_shape = stored_out_shape(geom, out_perm)
    (a_view, a_buffer), (b_view, b_buffer) = views(geom, a_view, b_view, scope)
    at_a, at_b, at_y = indexers(geom, out_perm, a_view, b_view)
    acc_zero = T.FloatImm(acc_dtype, 0.0)
    texture = scope == TEXTURE

    def stored(shape):
        return pixel_shape(shape) if texture else tuple(shape)

    read_a, a_shapes, a_names = a_operand(geom, a_producer, stored(a_buffer), dtype)
    launch = pixel_launch()
    store_tile = store_macros(geom, epilogue, at_y, dtype, acc_dtype, alpha, texture, tm, tn)
    accumulate = register_product(tm, tn)
    load_a, load_b = register_loads(geom, at_a, at_b, a_view, b_view, dtype, texture, tm, tn, read_a)

    @T.macro
    def tile(As, B, Bias, Residual, Residual2, Y, vb, vr, vc):
        # whole operands: an inferred region prints as TVMScript that parses back reordered (upstream defect 16)
        T.reads([whole(A) for A in As[:len(a_names)]] + [whole(B)])
        acc = T.sblock_alloc_buffer((tm, tn * 4), acc_dtype, scope="local")
        a_px = T.sblock_alloc_buffer((tm, 4), dtype, scope="local")
        b_px = T.sblock_alloc_buffer((4, tn * 4), dtype, scope="local")
        px = T.sblock_alloc_buffer((2 + epilogue.reads_second, 4), dtype, scope="local")
        for i in T.unroll(tm):
            for c in T.unroll(tn * 4):
                acc[i, c] = acc_zero
        for kb in T.serial(k4):
            load_a(a_px, As, vb, vr * tm, kb)
            load_b(b_px, B, vb, vc * tn, kb)
            accumulate(acc, a_px, b_px)
        store_tile(Y, Bias, Residual, Residual2, acc, px, vb, vr * tm, vc * tn)

    @T.prim_func(s_tir=True)
    def func(a: T.handle, a1: T.handle, a2: T.handle, a3: T.handle, b: T.handle, bias: T.handle, residual: T.handle, residual2: T.handle,
             y: T.handle):
        T.func_attr({"global_symbol": "gemm", "tirx.noalias": True})
        A = T.match_buffer(a, a_shapes[0], dtype, scope=scope)
        A1 = T.match_buffer(a1, a_shapes[1], dtype, scope=scope)
        A2 = T.match_buffer(a2, a_shapes[2], dtype, scope=scope)
        A3 = T.match_buffer(a3, a_shapes[3], dtype, scope=scope)
        B = T.match_buffer(b, stored(b_buffer), dtype, scope=scope)
        Bias = T.match_buffer(bias, epilogue.bias_shape(n4), dtype, scope=BUFFER)
        Residual = T.match_buffer(residual, stored(y_shape), dtype, scope=scope)
        Residual2 = T.match_buffer(residual2, stored(y_shape), dtype, scope=scope)
        Y = T.match_buffer(y, stored(y_shape), dtype, scope=scope)
        launch(grid, grid.rows, grid.cols, "tile", lambda vz, vh, vw: tile((A, A1, A2, A3), B, Bias, Residual, Residual2, Y, vz, vh, vw))

    return select_params(func, epilogue.params([*a_names, "B"], "Y"))


def check_gemm_norm(geom: GemmGeometry, config: GemmConfig, norm_eps, dtype: str, acc_dtype: str, scope: str) -> bool:
    """Whether :func:`gemm` folds a layer norm (``norm_eps`` not None), checked as a conv's is
    (``primfuncs.conv.norm.check_norm``): the tiled kernel on buffers, A read as stored (not
    ``trans_a``), float32; ValueError naming the culprit."""
    refusal = (None if norm_eps is None else
               f"only the tiled kernel (config.tiled) folds a layer norm, got {'a split' if config.split_k > 1 else 'a register'} "
               f"config {config}" if not config.tiled else
               "trans_a: the norm's rows are A's stored rows (a transposed A is read along its columns)" if geom.trans_a else
               f"scope {scope!r}: the tiled kernel runs on buffers" if scope != BUFFER else None)
    return check_norm(None, norm_eps, dtype, acc_dtype, refusal)


__all__ = ["GemmConfig", "GemmGeometry", "MAX_TILE_COLS", "MAX_TILE_ROWS", "MAX_WORK_GROUP", "gemm", "gemm_geometry", "gemm_grid", "pixel_shape",
           "stored_out_shape", "view_buffer", "BIAS", "RESIDUAL", "SECOND"]
