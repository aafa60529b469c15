"""Pieces shared by the kernel factories: pixel access macros and grid sizes.

Texture access follows the two patterns that TVM 0.27 lowers correctly
(docs/design.md): a load is a ``T.vectorized(4)`` loop into a ``local`` pixel (one
``read_imagef``), a store is one vector store from a ``local`` pixel with a
``T.Ramp`` index (one ``write_imagef``). Both work on buffers too
(``vload4``/``vstore4``), so every factory takes the scope as a parameter.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

from tvm import tirx
from tvm.script import tirx as T

from .lanes import LANES, blocked, ceildiv  # noqa: F401 (re-exported: the kernels import them from here)

TEXTURE = "global.texture"
TEXTURE_WEIGHT = "global.texture-weight"
BUFFER = "global"


def check_scope(scope: str, allowed=(TEXTURE, BUFFER)) -> str:
    if scope not in allowed:
        raise ValueError(f"scope must be one of {allowed}, got {scope!r}")
    return scope


def check_io_scopes(scope: str, out_scope: str | None = None, residual_scope: str | None = None) -> tuple[str, str, str]:
    """(input, output, residual) scopes of a kernel that may read in one scope and write in
    the other: ``out_scope`` defaults to ``scope``, ``residual_scope`` to ``out_scope``."""
    check_scope(scope)
    out_scope = check_scope(out_scope or scope)
    return scope, out_scope, check_scope(residual_scope or out_scope)


def dtype_bytes(dtype: str) -> int:
    """Bytes of one element of a kernel dtype (float16 or float32): local-memory budgets."""
    return 2 if dtype == "float16" else 4


def check_dtype(dtype: str) -> str:
    if dtype not in ("float32", "float16"):
        raise TypeError(f"dtype must be float32 or float16, got {dtype!r}")
    return dtype


def check_positive(**dims):
    for name, value in dims.items():
        if int(value) < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")


def nchw4c(shape) -> tuple[int, int, int, int, int]:
    """``shape`` as a tuple of ints, which must be NCHW4c ``(N, C4, H, W, 4)``; ValueError otherwise."""
    shape = tuple(int(d) for d in shape)
    if len(shape) != 5 or shape[4] != LANES:
        raise ValueError(f"shape must be NCHW4c (N, C4, H, W, 4), got {shape}")
    return shape


def check_channels(c4: int, channels: int, name: str = "channels") -> int:
    """``channels`` real channels held in ``c4`` blocks of 4 (only the last one padded)."""
    if not 4 * (c4 - 1) < channels <= 4 * c4:
        raise ValueError(f"{name}={channels} does not fill C4={c4} blocks of 4")
    return channels


def check_epsilon(epsilon: float) -> float:
    if not epsilon >= 0:  # NaN too
        raise ValueError(f"epsilon must be >= 0, got {epsilon}")
    return epsilon


def equal_slices(items: int, wanted: int) -> int:
    """The number of slices nearest ``wanted`` (at most ``items``) that cuts ``items`` into slices
    of ``ceil(items / slices)`` with none empty (the last may be shorter): how the split kernels
    for wide GPUs (group norm's pixels, attention's tokens) spread one sample over work groups."""
    per = ceildiv(items, max(1, min(int(wanted), items)))
    return ceildiv(items, per)


def check_slices(items: int, slices: int, what: str) -> int:
    """``slices`` when it is an :func:`equal_slices` count for ``items``, else ValueError."""
    if not (isinstance(slices, int) and 1 <= slices <= items and equal_slices(items, slices) == slices):
        raise ValueError(f"slices={slices!r} does not split {what} ({items}) into equal non-empty slices "
                         f"(equal_slices({items}, {slices}) = {equal_slices(items, max(1, int(slices)))})")
    return slices


@dataclass(frozen=True)
class PixelGrid:
    """A 3-D launch over (layers, rows, columns) with a (1, ty, tx) work group.

    Grid sizes are rounded up to whole groups; kernels guard with ``T.where``.
    """

    layers: int
    rows: int
    cols: int
    ty: int
    tx: int

    @property
    def by(self) -> int:
        return ceildiv(self.rows, self.ty)

    @property
    def bx(self) -> int:
        return ceildiv(self.cols, self.tx)


def pixel_grid(layers: int, rows: int, cols: int, max_threads: int = 64) -> PixelGrid:
    """Work-group shape for one work item per pixel: wide along columns (image
    rows are contiguous in the texture cache), then rows."""
    tx = 1
    while tx * 2 <= min(cols, max_threads, 16):
        tx *= 2
    ty = 1
    while ty * 2 <= rows and tx * ty * 2 <= max_threads:
        ty *= 2
    return PixelGrid(layers, rows, cols, ty, tx)


def pixel_launch():
    """A macro ``launch(grid, rows, cols, name, body)``: one work item per (layer, row, column) of
    ``grid`` (:func:`pixel_grid`), guarded to ``rows`` x ``cols``, each running
    ``body(vz, vh, vw)`` in a block named ``name``. A fresh macro per kernel: TVM suffixes the
    block names of a macro's second and later expansions (``pixel_1``, ...), and a kernel's
    text must not depend on what was built before it."""

    @T.macro
    def launch(grid, rows, cols, name, body):
        for z in T.thread_binding(grid.layers, thread="blockIdx.z"):
            for by in T.thread_binding(grid.by, thread="blockIdx.y"):
                for bx in T.thread_binding(grid.bx, thread="blockIdx.x"):
                    for ty in T.thread_binding(grid.ty, thread="threadIdx.y"):
                        for tx in T.thread_binding(grid.tx, thread="threadIdx.x"):
                            with T.sblock(name):
                                vz = T.axis.spatial(grid.layers, z)
                                vh = T.axis.spatial(rows, by * grid.ty + ty)
                                vw = T.axis.spatial(cols, bx * grid.tx + tx)
                                T.where(by * grid.ty + ty < rows and bx * grid.tx + tx < cols)
                                body(vz, vh, vw)

    return launch


@T.macro(hygienic=False)
def load_pixel(dst, src, n, c, h, w):
    """``dst[0:4] = src[n, c, h, w, 0:4]``, one texture read."""
    for lane in T.vectorized(4):
        dst[lane] = src[n, c, h, w, lane]


@T.macro(hygienic=False)
def store_pixel(dst, n, c, h, w, src):
    """``dst[n, c, h, w, 0:4] = src[0:4]``, one texture write (converted when ``src`` is a
    float32 accumulator of a half tensor; a Cast to the same dtype folds away)."""
    dst[n, c, h, w, T.Ramp(0, 1, 4)] = T.Cast(dst.dtype + "x4", src[T.Ramp(0, 1, 4)])


@T.macro(hygienic=False)
def load_channels(dst, px0, px1, src, n, offset, block, h, w, last_block):
    """``dst[lane]`` = channel ``offset + 4 * block + lane`` of ``src`` at ``(n, h, w)``: a range
    of channels that need not start on a pixel (a split's part, MobileViT-v2's keys and values
    after its one query channel). Reads pixel ``offset // 4 + block`` and, only when the int
    ``offset`` is not a multiple of 4 (a compile-time test), the next one (clamped to
    ``last_block``) into ``px0``, ``px1``. Lanes past the tensor's channels hold what the last
    pixel holds: mask them. A negative ``offset`` reads channels shifted back (the hierarchical
    depthwise conv's previous range): the first pixel is clamped to 0, and lanes before channel 0
    hold what pixel 0 holds: mask them too."""
    if offset < 0:
        load_pixel(px0, src, n, T.max(offset // 4 + block, 0), h, w)
    else:
        load_pixel(px0, src, n, offset // 4 + block, h, w)
    if offset % 4 != 0:
        load_pixel(px1, src, n, T.min(offset // 4 + block + 1, last_block), h, w)
    for lane in T.unroll(4):
        dst[lane] = T.Select(offset % 4 + lane < 4, px0[T.min(offset % 4 + lane, 3)], px1[T.max(offset % 4 + lane - 4, 0)])


def accumulator_dtype(dtype: str) -> str:
    """Accumulator dtype of reductions, average pooling and softmax over ``dtype`` values: half
    kernels accumulate in float32 (a half sum of k terms loses ~k u16: half has 11 bits)."""
    return "float32" if dtype == "float16" else dtype


def check_accumulator(dtype: str, acc_dtype: str | None) -> str:
    """A conv's accumulator dtype: ``dtype`` by default, or float32 for a float16 kernel (the
    strategy picks it per conv from its reduction length; no device policy here)."""
    acc_dtype = acc_dtype or dtype
    if acc_dtype not in (dtype, "float32"):
        raise TypeError(f"acc_dtype must be {dtype!r} or 'float32', got {acc_dtype!r}")
    return acc_dtype


def multiply_add(acc, x, w):
    """``acc + x * w`` of TIR expressions. A float32 ``acc`` over half ``x``, ``w`` adds the half
    product converted: as accurate as a float32 product once the result is rounded to half
    (docs/precision.md), and the multiply keeps half's rate."""
    acc_dtype = _dtype_of(acc)
    if acc_dtype == _dtype_of(x):
        return acc + x * w
    return acc + T.Cast(acc_dtype, x * w)


@T.macro
def convert_tile(dst, src):
    """``dst = src`` element by element, converted to ``dst``'s dtype (scalar casts: a half
    kernel's float32 accumulators before its epilogue; no vector conversion builtin)."""
    for i in T.unroll(dst.shape[0]):
        for lane in T.unroll(dst.shape[1]):
            dst[i, lane] = T.Cast(dst.dtype, src[i, lane])


def _dtype_of(expr) -> str:
    """A TIR expression's dtype (TVM 0.27's buffer loads, ``TensorLoad``, carry it as ``ty``)."""
    return str(expr.dtype) if hasattr(expr, "dtype") else str(expr.ty)


# -- NaN-propagating max/min (NumPy semantics) ------------------------------------------------
# OpenCL C's fmax/fmin (and max/min on floats, where NaN is undefined) return the non-NaN
# operand, and TVM lowers T.max/T.min to them, so a NaN would vanish in relu, clip, max pooling
# and reductions. These return NaN when either operand is NaN, like np.maximum/np.minimum, at
# the cost of one select (TVM writes it as ``condval`` if/else, which OpenCL compilers turn into
# a select: no branch). ``x != x`` is folded to false by TVM's simplifier, T.isnan is not.


def _pick(take_b, a, b):
    """``b`` where ``take_b`` or ``b`` is NaN, else ``a`` (so a NaN ``a`` is kept too)."""
    if not isinstance(b, tirx.FloatImm):  # a constant bound is never NaN: one comparison
        take_b = T.Or(take_b, T.isnan(b))
    return T.Select(take_b, b, a)


def maximum(a, b):
    """``np.maximum(a, b)`` of two TIR float expressions: NaN if either is NaN."""
    return _pick(a < b, a, b)


def minimum(a, b):
    """``np.minimum(a, b)`` of two TIR float expressions: NaN if either is NaN."""
    return _pick(b < a, a, b)


def clamp(x, lo=None, hi=None):
    """``np.clip(x, lo, hi)`` with constant bounds ``lo <= hi`` (TIR float immediates, or None
    for no bound): NaN stays NaN (both comparisons are false), +-Inf go to the bounds.
    ``x`` appears once per select (nesting ``maximum``/``minimum`` would repeat the inner one)."""
    y = x if hi is None else T.Select(hi < x, hi, x)
    return y if lo is None else T.Select(x < lo, lo, y)


def unravel(index, dims, mod=operator.mod, div=operator.floordiv) -> tuple:
    """Row-major indices into ``dims`` of flat ``index`` (a TIR or int expression; a dim of size 1
    indexes 0): a kernel indexing a plain tensor of any rank by a flat offset. ``mod``, ``div``:
    the division it takes (default floor; ``T.truncmod``, ``T.truncdiv`` for an index >= 0 TVM
    cannot prove so: ``gather._reshaped``)."""
    if not dims:
        return ()
    out = []
    for d in reversed(dims[1:]):
        out.append(0 if d == 1 else mod(index, d))
        index = index if d == 1 else div(index, d)
    return (0 if dims[0] == 1 else index, *reversed(out))


def whole(buf):
    """The region of all of ``buf`` (a block's declared reads or writes)."""
    return buf[tuple(slice(0, d) for d in buf.shape)]


def select_params(func, keep):
    """``func`` with only the buffer parameters named in ``keep`` (in their order).

    Lets one TVMScript body serve optional inputs (bias, residual): the factory
    writes every parameter, then drops the ones a configuration never reads.
    """
    import tvm  # local: keep module import light

    by_name = {p.name: p for p in func.params}
    missing = [k for k in keep if k not in by_name]
    if missing:
        raise ValueError(f"{missing} are not parameters of the function ({sorted(by_name)})")
    return tvm.tirx.PrimFunc([by_name[k] for k in keep], func.body, attrs=func.attrs)
