"""Winograd conv2d F(2x2, 3x3) and F(4x4, 3x3) on NCHW4c tensors.

For a 3x3 conv with stride 1, dilation 1 and groups 1 (any padding, also
asymmetric), the output is cut into ``m x m`` tiles (``m`` = 2 or 4). Tile ``t``
reads an ``alpha x alpha`` input patch ``d`` (``alpha = m + 2``) and (Lavin & Gray,
"Fast Algorithms for Convolutional Neural Networks", 2016)::

    Y_t = A^T [ sum_c U_oc (.) V_ct ] A,   U_oc = G g_oc G^T,   V_ct = B^T d_ct B

``(.)`` is the element-wise product over the ``alpha^2`` positions ``e``. ``U`` is
computed once, at compile time, by :func:`winograd_weight_transform` (NumPy, float64,
then cast). The rest is three kernels, each its own PrimFunc (a kernel may not
allocate global workspace), chained through two intermediate tensors:

1. :func:`winograd_input_transform`: ``V = B^T d B`` for every tile and input block;
2. :func:`winograd_batched_gemm`: ``M[e] = U[e] V[e]`` for each position ``e``, the
   direct conv's register-tiled loop (``oc_block`` output blocks x ``w_block``
   adjacent tiles, ``acc += x.s0*w0 + x.s1*w1 + x.s2*w2 + x.s3*w3``) with the
   kernel window replaced by the position;
3. :func:`winograd_output_transform`: ``Y = A^T M A`` for every tile and output block,
   then the conv epilogue (bias, residual, activation) and the stores of the pixels
   that lie inside the output (border tiles are exact: reads outside the input are
   zero, pixels past the output are not stored).

Tensors (``T = N * ceil(OH/m) * ceil(OW/m)`` tiles, ordered (n, tile row, tile column)):

- ``X [N, C/4, H, W, 4]`` input, ``Y``/``Residual [N, O/4, OH, OW, 4]`` (``scope``);
- ``V [alpha^2, C/4, T, 4]`` transformed input tiles, ``M [alpha^2, O/4, T, 4]``
  products (``tile_scope``): in a texture, alpha^2 layers of channel-block rows x
  tile columns;
- ``U [alpha^2 * O/4, 4 * ceil(C/4), 4]`` transformed weights (``weight_scope``; in the
  weight texture one row per (position, output block), one column per input
  channel, a pixel = 4 output channels like OIHW4o); input channels padded to
  whole blocks with zeros, so the GEMM loop has no tail.

F(2x2) does 16 multiplies per 4 outputs (direct: 36), F(4x4) 36 per 16 (direct:
144), at the cost of the transforms and of accuracy: F(4x4)'s transforms carry
coefficients up to 8 (output) and 5 (input), so in float32 its bound is 1e-3
relative (tested; measured up to 2e-5 on ResNet-50/VGG-16 layers) where direct and
F(2x2) are held to 1e-4.

Non-finite inputs (tests/kernels/test_nonfinite.py): every output whose 3x3 window holds a NaN
is NaN, as in the direct conv, but the transforms mix a whole tile, so the spread is
the tiles whose input patch holds it. Measured, one NaN at each position of a 12x12
map: F(2x2) makes exactly the direct conv's outputs NaN (the zeros of ``B^T`` and
``A^T`` keep a tap in its window); F(4x4) 18.8 outputs per channel on average (16 to
25, whole 4x4 tiles) where the direct conv has 8.0 (at most 9). An Inf is subtracted
from itself in the transforms, so where NumPy (and the direct conv) give +-Inf these
mostly give NaN (F(2x2) 84%, F(4x4) 99% of those outputs); no output NumPy makes
non-finite comes out finite, and none outside those tiles changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm.script import tirx as T

from .._common import (
    BUFFER,
    LANES,
    TEXTURE,
    TEXTURE_WEIGHT,
    ceildiv,
    check_accumulator,
    check_dtype,
    check_io_scopes,
    check_scope,
    convert_tile,
    multiply_add,
    pixel_grid,
    select_params,
)
from ..epilogue import Epilogue, check_epilogue, store_output_pixel
from .config import MIN_WORK_ITEMS, ConvConfig, fit_work_group, shrink_tile
from .geometry import ConvGeometry, all_of, conv2d_geometry
from .prologue import WINOGRAD, Prologue, check_prologue
from .winograd_math import TILE_SIZES, check_tile, winograd_matrices, winograd_weight_transform  # noqa: F401 (re-exported)

def winograd_ineligibility(geom: ConvGeometry) -> str | None:
    """Why ``geom`` cannot run as Winograd F(m x m, 3 x 3), or None when it can."""
    if (geom.kh, geom.kw) != (3, 3):
        return f"kernel must be 3x3, got {geom.kh}x{geom.kw}"
    if geom.strides != (1, 1):
        return f"strides must be 1, got {geom.strides}"
    if geom.dilation != (1, 1):
        return f"dilation must be 1, got {geom.dilation}"
    if geom.groups != 1:
        return f"groups must be 1, got {geom.groups}"
    return None


def winograd_eligible(geom: ConvGeometry) -> bool:
    return winograd_ineligibility(geom) is None


def check_winograd(geom: ConvGeometry) -> ConvGeometry:
    """``geom`` if Winograd can run it, else ValueError naming the attribute."""
    why = winograd_ineligibility(geom)
    if why is not None:
        raise ValueError(f"Winograd conv2d needs a 3x3 kernel, stride 1, dilation 1 and groups 1: {why}")
    return geom


@dataclass(frozen=True)
class WinogradShapes:
    """Sizes of F(m x m, 3 x 3) for one conv: tiles and the shapes of the chained tensors."""

    m: int
    alpha: int
    tiles_h: int
    tiles_w: int
    tiles: int  # N * tiles_h * tiles_w
    data: tuple  # X (N, C/4, H, W, 4)
    tile: tuple  # V (alpha^2, C/4, T, 4)
    weight: tuple  # U (alpha^2 * O/4, 4 * C/4, 4)
    product: tuple  # M (alpha^2, O/4, T, 4)
    out: tuple  # Y, Residual (N, O/4, OH, OW, 4)


def winograd_shapes(geom: ConvGeometry, m: int) -> WinogradShapes:
    m = check_tile(m)
    alpha = m + 2
    th, tw = ceildiv(geom.oh, m), ceildiv(geom.ow, m)
    nt = geom.n * th * tw
    a2 = alpha * alpha
    return WinogradShapes(
        m, alpha, th, tw, nt,
        data=(geom.n, geom.c4, geom.h, geom.w, LANES),
        tile=(a2, geom.c4, nt, LANES),
        weight=(a2 * geom.o4, LANES * geom.c4, LANES),
        product=(a2, geom.o4, nt, LANES),
        out=(geom.n, geom.o4, geom.oh, geom.ow, LANES),
    )


def default_config(geom: ConvGeometry, m: int) -> ConvConfig:
    """The GEMM's register tile, shrunk on small problems like the direct conv's
    (:func:`primfuncs.conv.config.fallback_config`): channel blocks first, then tiles,
    until the grid has enough work items to fill a GPU."""
    s = winograd_shapes(geom, m)

    def items(ocb, tb):
        return ceildiv(geom.o4, ocb) * ceildiv(s.tiles, tb) * s.alpha * s.alpha

    ocb, tb = shrink_tile(items, MIN_WORK_ITEMS)
    return ConvConfig(oc_block=ocb, w_block=tb, work_group=(8, 4, 1))


def _entry(matrix, i, k, dtype):
    """``matrix[i][k]`` for loop variables ``i``, ``k`` of unrolled loops.

    A select over the nonzero entries: once the loops are unrolled the simplifier
    folds it to a constant, and a term with a zero coefficient drops out of its sum
    (checked in the generated OpenCL), so the transforms cost only their additions.
    """
    expr = T.FloatImm(dtype, 0.0)
    for a, row in enumerate(matrix):
        for b, value in enumerate(row):
            if value != 0:
                expr = T.Select(T.And(i == a, k == b), T.FloatImm(dtype, float(value)), expr)
    return expr


@T.macro
def constant_times(dst, mat, src, rows: int, inner: int, cols: int):
    """``dst = mat @ src`` per lane: ``dst[i * cols + j] = sum_k mat[i][k] * src[k * cols + j]``.

    ``mat`` is a constant matrix (nested lists), ``src``/``dst`` local ``(rows * cols, 4)``
    pixels holding row-major matrices; fully unrolled, so zero terms fold away.
    """
    for i in T.unroll(rows):
        for j in T.unroll(cols):
            for lane in T.unroll(4):
                dst[i * cols + j, lane] = T.FloatImm(dst.dtype, 0.0)
                for k in T.unroll(inner):
                    dst[i * cols + j, lane] = (
                        dst[i * cols + j, lane] + _entry(mat, i, k, dst.dtype) * src[k * cols + j, lane]
                    )


@T.macro
def times_constant_t(dst, src, mat, rows: int, inner: int, cols: int):
    """``dst = src @ mat^T`` per lane: ``dst[i * cols + j] = sum_k src[i * inner + k] * mat[j][k]``."""
    for i in T.unroll(rows):
        for j in T.unroll(cols):
            for lane in T.unroll(4):
                dst[i * cols + j, lane] = T.FloatImm(dst.dtype, 0.0)
                for k in T.unroll(inner):
                    dst[i * cols + j, lane] = (
                        dst[i * cols + j, lane] + src[i * inner + k, lane] * _entry(mat, j, k, dst.dtype)
                    )


def _scopes(scope, weight_scope, tile_scope):
    check_scope(scope)
    if weight_scope is None:
        weight_scope = TEXTURE_WEIGHT if scope == TEXTURE else BUFFER
    check_scope(weight_scope, (TEXTURE_WEIGHT, BUFFER))
    return scope, weight_scope, check_scope(tile_scope or scope)


def winograd_input_transform(geom: ConvGeometry, m: int, dtype="float32", scope=TEXTURE, tile_scope=None):
    """``V[e, cb, t] = (B^T d B)[e]``: one work item per (tile ``t``, input block ``cb``).

    ``d`` is the tile's alpha x alpha input patch (4 channels per pixel), zero where
    it lies outside the input: reads are clamped into the image and masked by a
    select, because every entry of ``d`` mixes into every entry of ``V``.
    """
    check_winograd(geom)
    check_dtype(dtype)
    scope, _, tile_scope = _scopes(scope, None, tile_scope)
    s = winograd_shapes(geom, m)
    alpha, th, tw, nt = s.alpha, s.tiles_h, s.tiles_w, s.tiles
    c4, h, w = geom.c4, geom.h, geom.w
    pt, pl = geom.padding[0], geom.padding[1]
    bt = winograd_matrices(m)[0].tolist()
    # Which sides can a patch leave the image on? (Static: only those get guards.)
    top, left = pt > 0, pl > 0
    bottom = (th - 1) * m - pt + alpha - 1 > h - 1
    right = (tw - 1) * m - pl + alpha - 1 > w - 1
    zero = T.FloatImm(dtype, 0.0)
    g = pixel_grid(1, c4, nt)

    # Tile t = (image, tile row, tile column) in row-major order. (Helpers, not let-bound
    # variables: a block's inferred read regions may not refer to variables bound inside it.)
    def image_of(t):
        return t // (th * tw)

    def patch_row(t):
        return (t // tw) % th * m - pt

    def patch_col(t):
        return t % tw * m - pl

    def row(r):
        return T.min(T.max(r, 0), h - 1) if (top or bottom) else r

    def col(x):
        return T.min(T.max(x, 0), w - 1) if (left or right) else x

    def inside(r, x):
        conds = [r >= 0] if top else []
        conds += [r < h] if bottom else []
        conds += [x >= 0] if left else []
        return all_of(conds + ([x < w] if right else []))

    @T.prim_func(s_tir=True)
    def func(data: T.handle, tiles: T.handle):
        T.func_attr({"global_symbol": f"winograd{m}x{m}_input_transform", "tirx.noalias": True})
        X = T.match_buffer(data, s.data, dtype, scope=scope)
        V = T.match_buffer(tiles, s.tile, dtype, scope=tile_scope)
        for by in T.thread_binding(g.by, thread="blockIdx.y"):
            for bx in T.thread_binding(g.bx, thread="blockIdx.x"):
                for ty in T.thread_binding(g.ty, thread="threadIdx.y"):
                    for tx in T.thread_binding(g.tx, thread="threadIdx.x"):
                        with T.sblock("input_transform"):
                            cb = T.axis.spatial(c4, by * g.ty + ty)
                            t = T.axis.spatial(nt, bx * g.tx + tx)
                            T.where(by * g.ty + ty < c4 and bx * g.tx + tx < nt)
                            d = T.sblock_alloc_buffer((alpha * alpha, 4), dtype, scope="local")
                            bd = T.sblock_alloc_buffer((alpha * alpha, 4), dtype, scope="local")
                            # Tile t's patch: image image_of(t), rows patch_row(t) + i, columns patch_col(t) + j.
                            for i in T.unroll(alpha):
                                for j in T.unroll(alpha):
                                    for lane in T.vectorized(4):
                                        d[i * alpha + j, lane] = X[
                                            image_of(t), cb, row(patch_row(t) + i), col(patch_col(t) + j), lane
                                        ]
                                    for lane in T.unroll(4):
                                        d[i * alpha + j, lane] = T.Select(
                                            inside(patch_row(t) + i, patch_col(t) + j), d[i * alpha + j, lane], zero
                                        )
                            # V = B^T d B: bd = B^T d, then d = bd B
                            constant_times(bd, bt, d, alpha, alpha, alpha)
                            times_constant_t(d, bd, bt, alpha, alpha, alpha)
                            # One store per position, each from its own row of d (see epilogue.store_output_pixel).
                            for e in T.unroll(alpha * alpha):
                                V[e, cb, t, T.Ramp(0, 1, 4)] = d[e, T.Ramp(0, 1, 4)]

    return func


def winograd_batched_gemm(
    geom: ConvGeometry, m: int, dtype="float32", config: ConvConfig | None = None, weight_scope=None, tile_scope=TEXTURE,
    acc_dtype: str | None = None,
):
    """``M[e, ob, t] = sum_c U[e, o, c] * V[e, c, t]`` for the alpha^2 positions ``e``.

    A work item owns ``config.oc_block`` output blocks x ``config.w_block`` adjacent
    tiles of one position. Its loop walks the input blocks; per block it reads
    ``w_block`` tile pixels of ``V`` and ``4 * oc_block`` weight pixels of ``U`` and does
    ``acc += v.s0*u0 + v.s1*u1 + v.s2*u2 + v.s3*u3``. NDRange: (tile groups,
    output block groups, positions) along OpenCL dims (0, 1, 2). An overhanging
    register tile reads clamped pixels and stores only its valid ones. ``acc_dtype`` as in
    :func:`primfuncs.conv.direct.conv2d_nchw4c` (the sums are converted to ``dtype`` when stored).
    """
    check_winograd(geom)
    check_dtype(dtype)
    acc_dtype = check_accumulator(dtype, acc_dtype)
    converts = acc_dtype != dtype
    tile_scope, weight_scope, _ = _scopes(tile_scope, weight_scope, None)
    if config is None:
        config = default_config(geom, m)
    if not isinstance(config, ConvConfig):
        raise TypeError(f"config must be a ConvConfig, got {type(config).__name__}")
    s = winograd_shapes(geom, m)
    a2, nt, c4, o4 = s.alpha * s.alpha, s.tiles, geom.c4, geom.o4
    ocb, tb = config.oc_block, config.w_block
    ot, tt = ceildiv(o4, ocb), ceildiv(nt, tb)
    gx = fit_work_group(tt, config.work_group[0])
    gy = fit_work_group(ot, config.work_group[1])
    gz = fit_work_group(a2, config.work_group[2])
    ob_overhang, t_overhang = o4 % ocb != 0, nt % tb != 0
    zero = T.FloatImm(acc_dtype, 0.0)

    def out_block(vo, ob):
        return T.min(vo * ocb + ob, o4 - 1) if ob_overhang else vo * ocb + ob

    def tile(vt, ti):
        return T.min(vt * tb + ti, nt - 1) if t_overhang else vt * tb + ti

    def store_ok(vo, ob, vt, ti):
        return all_of(([vo * ocb + ob < o4] if ob_overhang else []) + ([vt * tb + ti < nt] if t_overhang else []))

    @T.macro
    def store_products(M, acc, ve, vo, vt):
        for ob in T.unroll(ocb):
            for ti in T.unroll(tb):
                if store_ok(vo, ob, vt, ti):
                    M[ve, vo * ocb + ob, vt * tb + ti, T.Ramp(0, 1, 4)] = acc[ob * tb + ti, T.Ramp(0, 1, 4)]

    @T.prim_func(s_tir=True)
    def func(tiles: T.handle, weight: T.handle, products: T.handle):
        T.func_attr({"global_symbol": f"winograd{m}x{m}_batched_gemm", "tirx.noalias": True})
        V = T.match_buffer(tiles, s.tile, dtype, scope=tile_scope)
        U = T.match_buffer(weight, s.weight, dtype, scope=weight_scope)
        M = T.match_buffer(products, s.product, dtype, scope=tile_scope)
        for bz in T.thread_binding(ceildiv(a2, gz), thread="blockIdx.z"):
            for by in T.thread_binding(ceildiv(ot, gy), thread="blockIdx.y"):
                for bx in T.thread_binding(ceildiv(tt, gx), thread="blockIdx.x"):
                    for tz in T.thread_binding(gz, thread="threadIdx.z"):
                        for ty in T.thread_binding(gy, thread="threadIdx.y"):
                            for tx in T.thread_binding(gx, thread="threadIdx.x"):
                                with T.sblock("batched_gemm"):
                                    # Position ve, output blocks vo*ocb.., tiles vt*tb..
                                    ve = T.axis.spatial(a2, bz * gz + tz)
                                    vo = T.axis.spatial(ot, by * gy + ty)
                                    vt = T.axis.spatial(tt, bx * gx + tx)
                                    T.where(bz * gz + tz < a2 and by * gy + ty < ot and bx * gx + tx < tt)
                                    acc = T.sblock_alloc_buffer((ocb * tb, 4), acc_dtype, scope="local")
                                    xp = T.sblock_alloc_buffer((tb, 4), dtype, scope="local")
                                    wp = T.sblock_alloc_buffer((ocb, 4, 4), dtype, scope="local")
                                    for k in T.unroll(ocb * tb):
                                        for lane in T.unroll(4):
                                            acc[k, lane] = zero
                                    for cb in T.serial(c4):
                                        for ti in T.unroll(tb):
                                            for lane in T.vectorized(4):
                                                xp[ti, lane] = V[ve, cb, tile(vt, ti), lane]
                                        for ob in T.unroll(ocb):
                                            for j in T.unroll(4):
                                                for lane in T.vectorized(4):
                                                    wp[ob, j, lane] = U[ve * o4 + out_block(vo, ob), cb * 4 + j, lane]
                                        # acc += v.s0 * u0 + v.s1 * u1 + v.s2 * u2 + v.s3 * u3
                                        for ob in T.unroll(ocb):
                                            for ti in T.unroll(tb):
                                                for j in T.unroll(4):
                                                    for lane in T.unroll(4):
                                                        acc[ob * tb + ti, lane] = multiply_add(
                                                            acc[ob * tb + ti, lane], xp[ti, j], wp[ob, j, lane]
                                                        )
                                    if converts:  # the products are stored in dtype
                                        res = T.sblock_alloc_buffer((ocb * tb, 4), dtype, scope="local")
                                        convert_tile(res, acc)
                                        store_products(M, res, ve, vo, vt)
                                    else:
                                        store_products(M, acc, ve, vo, vt)

    return func


def winograd_output_transform(
    geom: ConvGeometry, m: int, epilogue: Epilogue = Epilogue(), dtype="float32", scope=TEXTURE, tile_scope=None,
    residual_scope=None,
):
    """``Y = act(A^T M A + bias + residual)``: one work item per (tile, output block).

    Takes ``M``, then ``Bias (O/4, 4)`` and ``Residual`` (in ``residual_scope``, default
    ``scope``) when ``epilogue`` asks for them, and writes ``Y`` in ``scope``; a border
    tile stores only its pixels inside the output.
    """
    check_winograd(geom)
    check_dtype(dtype)
    check_epilogue(epilogue)
    scope, _, tile_scope = _scopes(scope, None, tile_scope)
    _, scope, residual_scope = check_io_scopes(scope, scope, residual_scope)
    s = winograd_shapes(geom, m)
    alpha, th, tw, nt = s.alpha, s.tiles_h, s.tiles_w, s.tiles
    o4, oh, ow = geom.o4, geom.oh, geom.ow
    at = winograd_matrices(m)[2].tolist()
    g = pixel_grid(1, o4, nt)

    def image_of(t):
        return t // (th * tw)

    def out_row(t):
        return (t // tw) % th * m

    def out_col(t):
        return t % tw * m

    def store_ok(r, x):
        return all_of(([r < oh] if th * m > oh else []) + ([x < ow] if tw * m > ow else []))

    @T.prim_func(s_tir=True)
    def func(products: T.handle, bias: T.handle, residual: T.handle, out: T.handle):
        T.func_attr({"global_symbol": f"winograd{m}x{m}_output_transform", "tirx.noalias": True})
        M = T.match_buffer(products, s.product, dtype, scope=tile_scope)
        Bias = T.match_buffer(bias, epilogue.bias_shape(o4), dtype, scope=BUFFER)
        Residual = T.match_buffer(residual, epilogue.residual_shape(s.out), dtype, scope=residual_scope)
        Y = T.match_buffer(out, s.out, dtype, scope=scope)
        for by in T.thread_binding(g.by, thread="blockIdx.y"):
            for bx in T.thread_binding(g.bx, thread="blockIdx.x"):
                for ty in T.thread_binding(g.ty, thread="threadIdx.y"):
                    for tx in T.thread_binding(g.tx, thread="threadIdx.x"):
                        with T.sblock("output_transform"):
                            ob = T.axis.spatial(o4, by * g.ty + ty)
                            t = T.axis.spatial(nt, bx * g.tx + tx)
                            T.where(by * g.ty + ty < o4 and bx * g.tx + tx < nt)
                            mp = T.sblock_alloc_buffer((alpha * alpha, 4), dtype, scope="local")
                            am = T.sblock_alloc_buffer((m * alpha, 4), dtype, scope="local")
                            y = T.sblock_alloc_buffer((m * m, 4), dtype, scope="local")
                            tmp = T.sblock_alloc_buffer((4,), dtype, scope="local")
                            for e in T.unroll(alpha * alpha):
                                for lane in T.vectorized(4):
                                    mp[e, lane] = M[e, ob, t, lane]
                            # Y = A^T M A: am = A^T M, then y = am A
                            constant_times(am, at, mp, m, alpha, alpha)
                            times_constant_t(y, am, at, m, alpha, m)
                            for i in T.unroll(m):
                                for j in T.unroll(m):
                                    if store_ok(out_row(t) + i, out_col(t) + j):
                                        store_output_pixel(
                                            Y, y, i * m + j, tmp, epilogue, Bias, Residual,
                                            image_of(t), ob, out_row(t) + i, out_col(t) + j, geom.o,
                                        )

    return select_params(func, epilogue.params(["M"], "Y"))


@dataclass(frozen=True)
class WinogradKernels:
    """The chained kernels of one Winograd conv and the tensors between them.

    ``stages`` run in order: input transform (``X -> V``), batched GEMM
    (``V, U -> M``), output transform (``M[, Bias][, Residual] -> Y``); each
    stage's last parameter is its output. ``shapes`` gives every tensor's shape;
    ``tile_scope`` is where ``V`` and ``M`` live, ``weight_scope`` where ``U`` does.
    """

    geometry: ConvGeometry
    shapes: WinogradShapes
    stages: tuple
    scope: str
    weight_scope: str
    tile_scope: str
    epilogue: Epilogue

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(str(f.attrs["global_symbol"]) for f in self.stages)

    def module(self):
        """The stages as one IRModule (one OpenCL program, three kernels)."""
        import tvm

        return tvm.IRModule({name: f for name, f in zip(self.names, self.stages)})


def conv2d_winograd_nchw4c(
    data_shape,
    weight_shape,
    strides=1,
    padding=0,
    dilation=1,
    groups: int = 1,
    m: int = 2,
    epilogue: Epilogue = Epilogue(),
    prologue: Prologue = Prologue(),
    dtype: str = "float32",
    config: ConvConfig | None = None,
    scope: str = TEXTURE,
) -> WinogradKernels:
    """Winograd F(m x m, 3 x 3) conv2d ``Y = act(conv(X, W) + bias + residual)`` on NCHW4c.

    Shapes and attributes as :func:`primfuncs.conv.direct.conv2d_nchw4c` (``strides``,
    ``dilation`` and ``groups`` must be 1 and the kernel 3x3: ValueError otherwise).
    ``m`` is 2 or 4; ``config`` is the GEMM's register tile (``w_block`` = tiles per
    work item; None: :func:`default_config`). ``prologue.weight_scope`` (default: the weight
    texture for a texture ``scope``, else a buffer) holds ``U`` from
    :func:`winograd_weight_transform`; ``prologue.tile_scope`` (default ``scope``) holds the
    intermediates ``V`` and ``M``. ``X`` is read in ``scope``, ``Y`` written in ``epilogue.out_scope``
    (default ``scope``), ``Residual`` read in ``epilogue.residual_scope`` (default ``out_scope``), so a
    conv at a texture/buffer boundary needs no copy. ``prologue.acc_dtype``: the GEMM's accumulators
    (:func:`winograd_batched_gemm`; the transforms stay in ``dtype``). Returns the three stage PrimFuncs with the shapes.
    """
    check_prologue(prologue, "conv2d_winograd_nchw4c", WINOGRAD)
    check_epilogue(epilogue)
    if epilogue.out_layout != "NCHW4c":
        raise ValueError(f"epilogue.out_layout={epilogue.out_layout!r}: the Winograd conv writes a blocked Y only")
    weight_scope, tile_scope, acc_dtype = prologue.weight_scope, prologue.tile_scope, prologue.acc_dtype
    out_scope, residual_scope = epilogue.out_scope, epilogue.residual_scope
    geom = check_winograd(conv2d_geometry(data_shape, weight_shape, strides, padding, dilation, groups))
    m = check_tile(m)
    scope, weight_scope, tile_scope = _scopes(scope, weight_scope, tile_scope)
    _, out_scope, residual_scope = check_io_scopes(scope, out_scope, residual_scope)
    stages = (
        winograd_input_transform(geom, m, dtype, scope, tile_scope),
        winograd_batched_gemm(geom, m, dtype, config, weight_scope, tile_scope, acc_dtype),
        winograd_output_transform(geom, m, epilogue, dtype, out_scope, tile_scope, residual_scope),
    )
    return WinogradKernels(geom, winograd_shapes(geom, m), stages, scope, weight_scope, tile_scope, epilogue)
