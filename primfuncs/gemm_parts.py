"""Pieces both GEMM kernels share (:mod:`primfuncs.gemm`, the register-tiled kernel, and
:mod:`primfuncs.gemm_tiled`, the local-memory tiled one): the config, the geometry of a product
(rows folded, broadcast batch dims, transposed reads), the stored index of each operand's and
the output's elements (views, ``out_perm``), the argument checks and the epilogue store.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tvm.script import tirx as T

from ._common import BUFFER, LANES, TEXTURE, PixelGrid, ceildiv, check_accumulator, check_dtype, check_scope, multiply_add, unravel
from . import gather
from .gather import through, view_buffer  # noqa: F401 (view_buffer: primfuncs.gemm's)
from .epilogue import Epilogue, activate, check_epilogue, expression
from .plain_elementwise import Producer

#: Largest register tile: rows x pixels of 4 columns (the accumulators are rows x 4 pixels floats).
MAX_TILE_ROWS, MAX_TILE_COLS = 8, 4
#: Most work items per work group (OpenCL's smallest CL_DEVICE_MAX_WORK_GROUP_SIZE on our devices).
MAX_WORK_GROUP = 256


@dataclass(frozen=True)
class GemmConfig:
    """A GEMM kernel's schedule: each work item ``rows`` x ``cols`` pixels (4 columns each) of the
    output; work groups of ``ty`` x ``tx`` items (rows x columns). ``tiled``: the local-memory
    tiled kernel (:mod:`primfuncs.gemm_tiled`, buffers only): the work group stages ``k_chunk``
    blocks of 4 reduction indices of A and B in local memory per step (``k_chunk`` is unused
    otherwise). ``split_k > 1``: the split-reduction kernel (:mod:`primfuncs.gemm_split`, a long
    K with few outputs): ``split_k`` x ``tx`` items per work group (``ty`` 1), the items of a
    column splitting K between them and summing their partial tiles in local memory."""

    rows: int = 4
    cols: int = 1
    ty: int = 8
    tx: int = 8
    tiled: bool = False
    k_chunk: int = 4
    split_k: int = 1
    prefetch: bool = False

    def __post_init__(self):
        for name in ("rows", "cols", "ty", "tx", "k_chunk", "split_k"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"GemmConfig.{name} must be an int >= 1, got {getattr(self, name)!r}")
        for name in ("tiled", "prefetch"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"GemmConfig.{name} must be a bool, got {getattr(self, name)!r}")
        if self.prefetch and not self.tiled:
            raise ValueError("GemmConfig.prefetch is the tiled kernel's (tiled=True)")
        if self.rows > MAX_TILE_ROWS or self.cols > MAX_TILE_COLS:
            raise ValueError(f"GemmConfig tile {self.rows} x {self.cols} exceeds {MAX_TILE_ROWS} rows x {MAX_TILE_COLS} pixels")
        if self.ty * self.tx > MAX_WORK_GROUP:
            raise ValueError(f"GemmConfig work group {self.ty} x {self.tx} exceeds {MAX_WORK_GROUP} items")
        if self.split_k > 1 and (self.tiled or self.ty != 1):
            raise ValueError(f"GemmConfig.split_k = {self.split_k} takes ty = 1 and no tiled (its work group is split_k x tx), "
                             f"got ty = {self.ty}, tiled = {self.tiled}")
        if self.split_k * self.tx > MAX_WORK_GROUP:
            raise ValueError(f"GemmConfig work group {self.split_k} x {self.tx} (split_k x tx) exceeds {MAX_WORK_GROUP} items")

    def __str__(self) -> str:
        kernel = f" tiled c{self.k_chunk}" + " pf" * self.prefetch if self.tiled else f" split{self.split_k}" if self.split_k > 1 else ""
        return f"gemm r{self.rows}c{self.cols} wg{self.ty}x{self.tx}" + kernel


@dataclass(frozen=True)
class GemmGeometry:
    """A GEMM as its kernel sees it: ``batch`` products of ``[m, k] x [k, n]``. ``rows_folded``:
    ``A``'s leading dims are folded into ``m`` (a Linear: ``B`` has no batch dims)."""

    a_shape: tuple
    b_shape: tuple
    trans_a: bool
    trans_b: bool
    batch: int
    m: int
    k: int
    n: int
    out_shape: tuple
    rows_folded: bool

    @property
    def macs(self) -> int:
        return self.batch * self.m * self.k * self.n


def gemm_geometry(a_shape, b_shape, trans_a: bool = False, trans_b: bool = False) -> GemmGeometry:
    """The :class:`GemmGeometry` of ``op(A) @ op(B)`` for stored shapes ``a_shape``, ``b_shape``
    (rank >= 2; ``B`` of rank 2 is shared by every batch, else both have batch dims of one rank that
    broadcast: each pair equal or one of them 1);
    ValueError naming what does not fit."""
    a_shape, b_shape = tuple(int(d) for d in a_shape), tuple(int(d) for d in b_shape)
    if len(a_shape) < 2 or len(b_shape) < 2:
        raise ValueError(f"gemm operands need rank >= 2, got A {a_shape} and B {b_shape}")
    if min(a_shape + b_shape) < 1:
        raise ValueError(f"gemm operands need dims >= 1, got A {a_shape} and B {b_shape}")
    m, k = a_shape[-2:][::-1] if trans_a else a_shape[-2:]
    kb, n = b_shape[-2:][::-1] if trans_b else b_shape[-2:]
    if k != kb:
        raise ValueError(f"gemm reduction lengths differ: A {a_shape} (trans_a={trans_a}) has K={k}, "
                         f"B {b_shape} (trans_b={trans_b}) has K={kb}")
    batch = _broadcast_batch(a_shape[:-2], b_shape[:-2]) if len(b_shape) > 2 else a_shape[:-2]
    folded = len(b_shape) == 2 and not trans_a
    out_shape = (*batch, m, n)
    if folded:
        return GemmGeometry(a_shape, b_shape, trans_a, trans_b, 1, math.prod(a_shape[:-1]), k, n, out_shape, True)
    return GemmGeometry(a_shape, b_shape, trans_a, trans_b, math.prod(batch), m, k, n, out_shape, False)


def _broadcast_batch(a_batch, b_batch) -> tuple:
    """The batch dims of a product whose operands have batch dims ``a_batch`` and ``b_batch`` of one
    rank, each pair equal or one of them 1 (NumPy broadcasting: multi-query attention's shared K and
    V ``[N, 1, L, d]`` against queries ``[N, heads, L, d]``); ValueError otherwise."""
    if len(a_batch) != len(b_batch) or any(x != y and 1 not in (x, y) for x, y in zip(a_batch, b_batch)):
        raise ValueError(f"gemm batch dims differ: A {a_batch}, B {b_batch} (B must have A's rank, each dim equal or 1, or none)")
    return tuple(max(x, y) for x, y in zip(a_batch, b_batch))


def gemm_grid(geom: GemmGeometry, config: GemmConfig) -> PixelGrid:
    """The launch: one work item per (batch, tile of rows, tile of pixels)."""
    return PixelGrid(geom.batch, ceildiv(geom.m, config.rows), ceildiv(ceildiv(geom.n, LANES), config.cols), config.ty, config.tx)


def pixel_shape(shape) -> tuple:
    """``shape`` with its last axis as RGBA pixels, ``(..., ceil(L/4), 4)``: a tensor in texture
    placement (padding lanes 0)."""
    return (*shape[:-1], ceildiv(shape[-1], LANES), LANES)


def stored_out_shape(geom: GemmGeometry, out_perm=None) -> tuple:
    """The shape ``Y`` is stored in: the product's, its axes permuted by ``out_perm`` (stored axis
    ``i`` is the product's axis ``out_perm[i]``; the last stays last)."""
    if out_perm is None:
        return geom.out_shape
    out_perm, rank = tuple(int(a) for a in out_perm), len(geom.out_shape)
    if sorted(out_perm) != list(range(rank)) or out_perm[-1] != rank - 1:
        raise ValueError(f"out_perm {out_perm} must permute the {rank} output axes and keep the last one last")
    return tuple(geom.out_shape[a] for a in out_perm)


def indexers(geom: GemmGeometry, out_perm=None, a_view=(), b_view=()):
    """(at_a, at_b, at_y): the stored index of element ``(b, row, col)`` of op(A), op(B) and Y
    (Y's axes permuted by ``out_perm``: :func:`stored_out_shape`; A and B read through their views,
    :func:`view_buffer`); ``lane``: added to the last axis after the view."""
    a, b, y = geom.a_shape, geom.b_shape, geom.out_shape

    def batch_index(vb, own):
        # the operand's batch index of product ``vb``: a broadcast (size-1) dim reads its index 0
        if own == y[:-2]:
            return unravel(vb, own)
        return tuple(0 if d == 1 else i for i, d in zip(unravel(vb, y[:-2]), own))

    def at_a(vb, row, col, lane=None):
        if geom.rows_folded:
            return through(a_view, a, (*unravel(row, a[:-1]), col), lane)
        return through(a_view, a, (*batch_index(vb, a[:-2]), *((col, row) if geom.trans_a else (row, col))), lane)

    def at_b(vb, row, col, lane=None):
        lead = () if len(b) == 2 else batch_index(vb, b[:-2])
        return through(b_view, b, (*lead, *((col, row) if geom.trans_b else (row, col))), lane)

    def at_y(vb, row, col):
        index = (*unravel(row, y[:-1]), col) if geom.rows_folded else (*unravel(vb, y[:-2]), row, col)
        return index if out_perm is None else tuple(index[a] for a in out_perm)

    return at_a, at_b, at_y


def contiguous(view, shape) -> bool:
    return not view or gather.contiguous_last_axis(gather.Source(0, view), shape)


def views(geom: GemmGeometry, a_view, b_view, scope):
    """((steps, buffer shape) of A, of B): :func:`view_buffer`; ValueError for a view that leaves
    elements unread or a texture operand (its pixels are read as stored)."""
    out = []
    for name, shape, view in (("a_view", geom.a_shape, a_view), ("b_view", geom.b_shape, b_view)):
        if view and scope == TEXTURE:
            raise ValueError(f"gemm in texture placement reads its operands as stored: {name} needs buffers")
        out.append(gather.read_view(shape, view, f"gemm {name}"))
    return out


#: The kernel parameters A is read from: ``A`` as stored, or a producer's inputs (:func:`a_operand`).
A_PARAMS = ("A", "A1", "A2", "A3")


def check_producer(geom: GemmGeometry, a_producer, a_view, scope, norm_eps):
    """``a_producer`` (a ``plain_elementwise.Producer`` computing op(A) as stored, or None) checked
    for ``geom``; ValueError for a texture placement, an ``a_view`` beside it (its operands' views
    read through movement ops) or a folded norm (which reads A's stored rows twice)."""
    if a_producer is None:
        return None
    if not isinstance(a_producer, Producer):
        raise TypeError(f"a_producer must be a plain_elementwise.Producer, got {type(a_producer).__name__}")
    refusal = (f"scope {scope!r}: a producer's inputs are plain buffers" if scope != BUFFER else
               "a_view: the producer's operands carry their own views" if a_view else
               "norm_eps: a folded layer norm reads A as stored" if norm_eps is not None else None)
    if refusal is not None:
        raise ValueError(f"gemm reads A through a producer, not with {refusal}")
    return a_producer.check(geom.a_shape)


def a_operand(geom: GemmGeometry, a_producer, a_stored, dtype: str):
    """How a kernel reads op(A): ``(read, shapes, names)``. ``read(bufs, index)`` is A's element at
    stored ``index`` (an indexer's tuple) from the kernel's A buffers ``bufs`` (a tuple in
    :data:`A_PARAMS` order): ``a_producer`` evaluated there from its inputs, or None: ``bufs[0]``
    is A as stored (``a_stored`` its buffer shape, read through any view). ``shapes``: those
    buffers' (``(1,)`` for the unused ones), ``names``: the parameters read."""
    if a_producer is None:
        return None, (tuple(a_stored),) + ((1,),) * (len(A_PARAMS) - 1), [A_PARAMS[0]]
    count = len(a_producer.input_shapes)
    return ((lambda bufs, index: a_producer.value(bufs, geom.a_shape, index, dtype)),
            tuple(a_producer.input_shapes) + ((1,),) * (len(A_PARAMS) - count), list(A_PARAMS[:count]))


def check_gemm(geom: GemmGeometry, config, epilogue, dtype, acc_dtype, scope, alpha):
    """The checks both GEMM factories make; returns the accumulator dtype."""
    if not isinstance(config, GemmConfig):
        raise TypeError(f"config must be a GemmConfig, got {type(config).__name__}")
    check_epilogue(epilogue, reads_second=True)
    if any(kind != "full" for kind in epilogue.operand_kinds):
        raise ValueError(f"gemm's expression epilogue reads operands of the output's shape, got kinds {epilogue.operand_kinds!r}")
    check_dtype(dtype)
    check_scope(scope)
    if scope == TEXTURE and (geom.trans_a or geom.trans_b):
        raise ValueError("gemm in texture placement reads its operands as stored: trans_a and trans_b need buffers")
    if not math.isfinite(alpha):
        raise ValueError(f"alpha must be finite, got {alpha}")
    return check_accumulator(dtype, acc_dtype)


def lane_of(index, lane):
    """A texture pixel's index (an indexer's tuple) with the lane appended: one element of the pixel."""
    return (*index, lane)


def store_macros(geom: GemmGeometry, epilogue: Epilogue, at_y, dtype: str, acc_dtype: str, alpha: float, texture: bool,
                 tm: int, tn: int, row_step: int = 1, col_step: int = 1):
    """The macro ``store_tile(Y, Bias, Residual, Residual2, acc, px, vb, r0, c0)``: an item's
    accumulators ``acc (tm, tn * 4)`` through ``alpha``, the epilogue and the store, row ``i`` of
    the tile being output row ``r0 + i * row_step`` and pixel ``j`` output pixel ``c0 + j * col_step``
    (the register kernel's are adjacent; the tiled kernel's strided by the work group, so
    neighbouring items store neighbouring pixels); rows and pixels past the output are skipped.
    ``at_y``: Y's indexer (:func:`indexers`); ``px``: a local ``(2 + reads_second, 4)`` scratch."""
    m, n = geom.m, geom.n
    n4 = ceildiv(n, LANES)
    y_vector = n % LANES == 0
    acc_zero, zero = T.FloatImm(acc_dtype, 0.0), T.FloatImm(dtype, 0.0)

    def row_at(r0, i):
        return r0 + i if row_step == 1 else r0 + i * row_step

    def pixel_at(c0, j):
        return c0 + j if col_step == 1 else c0 + j * col_step

    @T.macro
    def load_y_pixel(px, row, Operand, vb, r, c):
        # px[row] = pixel c of output row r of Operand, a tensor of Y's shape: the residual or an
        # expression's operand (lanes past N: 0)
        if texture:
            for lane in T.vectorized(4):
                px[row, lane] = Operand[lane_of(at_y(vb, r, c), lane)]
        elif y_vector:
            for lane in T.vectorized(4):
                px[row, lane] = Operand[at_y(vb, r, c * 4 + lane)]
        else:
            for lane in T.unroll(4):
                px[row, lane] = T.if_then_else(c * 4 + lane < n, Operand[at_y(vb, r, T.min(c * 4 + lane, n - 1))], zero)

    def operands(px, lane):
        # the expression's operands in ``lane``: px rows 1, 2 hold Residual's and Residual2's pixels
        # (a residual's is added before the activation: no operand)
        extras = max(len(epilogue.extra_kinds), 1)
        return tuple(T.Cast(acc_dtype, px[1 + i, lane]) for i in range(extras))[int(epilogue.residual):]

    @T.macro
    def store_pixel_of(Y, acc, i, j, vb, r, c):
        # Y's pixel c of output row r = acc[i, 4 j : 4 j + 4] converted (one vector store; buffers: a
        # scalar per column when N % 4 != 0). Stored from its own accumulators, never through a
        # scratch pixel: TVM compacts a scratch buffer whose rows do not overlap in time and then
        # reuses its first vector load as every later texture store's value (all pixels the first).
        if texture:
            Y[lane_of(at_y(vb, r, c), T.Ramp(0, 1, 4))] = T.Cast(dtype + "x4", acc[i, T.Ramp(j * 4, 1, 4)])
        elif y_vector:
            Y[at_y(vb, r, T.Ramp(c * 4, 1, 4))] = T.Cast(dtype + "x4", acc[i, T.Ramp(j * 4, 1, 4)])
        else:
            for lane in T.unroll(4):
                if c * 4 + lane < n:
                    Y[at_y(vb, r, c * 4 + lane)] = T.Cast(dtype, acc[i, j * 4 + lane])

    @T.macro
    def store_tile(Y, Bias, Residual, Residual2, acc, px, vb, r0, c0):
        # px[0]: the bias pixel, px[1]: the residual pixel (px[2]: Residual2's)
        for i in T.unroll(tm):
            for j in T.unroll(tn):
                if row_at(r0, i) < m and pixel_at(c0, j) < n4:
                    if epilogue.bias:
                        for lane in T.vectorized(4):
                            px[0, lane] = Bias[pixel_at(c0, j), lane]
                    if epilogue.reads_residual:  # the residual, or the expression's operand
                        load_y_pixel(px, 1, Residual, vb, row_at(r0, i), pixel_at(c0, j))
                    if epilogue.reads_second:
                        load_y_pixel(px, 2, Residual2, vb, row_at(r0, i), pixel_at(c0, j))
                    for lane in T.unroll(4):
                        # padded lanes of a texture's last pixel stay 0 (the next kernel reads them)
                        acc[i, j * 4 + lane] = T.Select((pixel_at(c0, j)) * 4 + lane < n, expression(epilogue, activate(
                            (acc[i, j * 4 + lane] if alpha == 1.0 else acc[i, j * 4 + lane] * T.FloatImm(acc_dtype, float(alpha)))
                            + (T.Cast(acc_dtype, px[0, lane]) if epilogue.bias else acc_zero)
                            + (T.Cast(acc_dtype, px[1, lane]) if epilogue.residual else acc_zero),
                            epilogue.activation, acc_dtype, epilogue.clip_min, epilogue.clip_max),
                            operands(px, lane),
                            lambda e: T.Cast(acc_dtype, Bias[pixel_at(c0, j), (int(epilogue.bias) + e) * 4 + lane]), acc_dtype), acc_zero)
                    store_pixel_of(Y, acc, i, j, vb, row_at(r0, i), pixel_at(c0, j))

    return store_tile


def register_product(tm: int, tn: int):
    """The macro ``accumulate(acc, a_px, b_px)``: ``acc[i, c] += sum_kk a_px[i, kk] b_px[kk, c]``
    over 4 reduction indices, ``16 tm tn`` FMAs from registers (``acc (tm, 4 tn)``, ``a_px (tm, 4)``:
    4 reduction indices of each row, ``b_px (4, 4 tn)``: 4 rows of the item's columns)."""

    @T.macro
    def accumulate(acc, a_px, b_px):
        for kk in T.unroll(4):
            for i in T.unroll(tm):
                for c in T.unroll(tn * 4):
                    acc[i, c] = multiply_add(acc[i, c], a_px[i, kk], b_px[kk, c])

    return accumulate


def register_loads(geom: GemmGeometry, at_a, at_b, a_view, b_view, dtype: str, texture: bool, tm: int, tn: int, read_a=None):
    """The macros ``load_a(a_px, As, vb, r0, kb)`` and ``load_b(b_px, B, vb, c0, kb)``: an item's
    4 reduction indices ``4 kb ..`` of rows ``r0 ..`` of ``op(A)`` (``a_px (tm, 4)``; ``As`` the
    A buffers :func:`a_operand`'s ``read_a`` reads, None: ``As[0]`` as stored) and of pixels
    ``c0 ..`` of ``op(B)`` (``b_px (4, 4 tn)``), from registers' view of the stored operands (the
    register and split kernels). Rows and pixels past the operand are clamped, indices past K
    zeroed (a NaN in a clamped element never reaches a product); buffers use one vector load
    where the 4 elements are contiguous and never run past the axis (a producer's A: scalars)."""
    m, k, n = geom.m, geom.k, geom.n
    n4 = ceildiv(n, LANES)
    zero = T.FloatImm(dtype, 0.0)
    produced = read_a is not None
    read_a = read_a or (lambda bufs, index: bufs[0][index])
    a_vector = not produced and not geom.trans_a and k % LANES == 0 and contiguous(a_view, geom.a_shape)
    b_vector = not geom.trans_b and n % LANES == 0 and contiguous(b_view, geom.b_shape)

    def a_at(vb, r, kb, kk):
        """``A``'s element (texture: pixel and lane) for row ``r`` (clamped), reduction index ``4 kb + kk``."""
        if texture:
            return lane_of(at_a(vb, T.min(r, m - 1), kb), kk)
        if a_vector:
            return at_a(vb, T.min(r, m - 1), kb * 4, kk)
        return at_a(vb, T.min(r, m - 1), T.min(kb * 4 + kk, k - 1))

    @T.macro
    def zero_past_k(px, kb, rows, cols, by_row):
        # px[r, c] = 0 where its reduction index 4 kb + (c or r) is past K (a partial last step)
        if k % LANES != 0:
            for r in T.unroll(rows):
                for c in T.unroll(cols):
                    px[r, c] = T.Select(kb * 4 + (r if by_row else c) < k, px[r, c], zero)

    @T.macro
    def load_a(a_px, As, vb, r0, kb):
        # a_px[i, kk] = op(A)[vb, row i of the tile (clamped), 4 kb + kk] (0 past K)
        for i in T.unroll(tm):
            if texture or a_vector:
                for kk in T.vectorized(4):
                    a_px[i, kk] = read_a(As, a_at(vb, r0 + i, kb, kk))
            else:
                for kk in T.unroll(4):
                    a_px[i, kk] = read_a(As, a_at(vb, r0 + i, kb, kk))
        zero_past_k(a_px, kb, tm, 4, False)

    @T.macro
    def load_b(b_px, B, vb, c0, kb):
        # b_px[kk, 4 j + lane] = op(B)[vb, 4 kb + kk, 4 (pixel j of the tile, clamped) + lane] (0 outside)
        for j in T.unroll(tn):
            for kk in T.unroll(4):
                if texture:
                    for lane in T.vectorized(4):
                        b_px[kk, j * 4 + lane] = B[lane_of(at_b(vb, T.min(kb * 4 + kk, k - 1), T.min(c0 + j, n4 - 1)), lane)]
                elif b_vector:
                    for lane in T.vectorized(4):
                        b_px[kk, j * 4 + lane] = B[at_b(vb, T.min(kb * 4 + kk, k - 1), T.min(c0 + j, n4 - 1) * 4, lane)]
                else:
                    for lane in T.unroll(4):
                        b_px[kk, j * 4 + lane] = T.if_then_else(
                            T.min(c0 + j, n4 - 1) * 4 + lane < n,
                            B[at_b(vb, T.min(kb * 4 + kk, k - 1), T.min(T.min(c0 + j, n4 - 1) * 4 + lane, n - 1))], zero)
        zero_past_k(b_px, kb, 4, tn * 4, True)

    return load_a, load_b
