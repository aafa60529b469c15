"""The config of a conv kernel (:class:`ConvConfig`: register tile, work group, split_k, kernel
variant), the argument checks every conv factory makes and the work-group helpers.

Which config a device gets is device policy: ``tir_adreno.strategy.defaults``. A factory
called without one uses :func:`fallback_config`, the tile the kernels were written for.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._common import BUFFER, TEXTURE, TEXTURE_WEIGHT, ceildiv, check_dtype, check_io_scopes, check_scope
from ..epilogue import check_epilogue

#: Local memory a kernel may use: the OpenCL minimum for GPUs (NVIDIA gives 48 KiB, Adreno 32 KiB).
MAX_LOCAL_BYTES = 32 * 1024
#: Work items below which :func:`fallback_config` shrinks the register tile.
MIN_WORK_ITEMS = 1024


@dataclass(frozen=True)
class ConvConfig:
    """Register tile and work-group shape of the direct conv kernels.

    ``oc_block`` output channel blocks (of 4) x ``w_block`` output columns per
    work item; ``work_group`` = work items along (column tiles x N, output rows,
    channel-block tiles), OpenCL dims (0, 1, 2). Each work-group extent is
    shrunk to the grid when the grid is smaller. ``split_k`` > 1 (dense and
    block-aligned grouped convs only) splits a tile's input channel blocks over
    that many work items of one work group (OpenCL dim 2 holds
    ``work_group[2] * split_k`` items), summed through local memory: more work
    items and shorter serial loops for deep, small layers on big GPUs.
    ``register_window`` (depthwise convs with multiplier 1 only) reads the
    window's KH x KW weight pixels into registers once, then per kernel row the
    input pixels the tile's columns span once, and reuses them across taps and
    columns (w_block 2, 3x3: 4 input reads per row instead of 6).
    ``flat`` (any conv but split_k > 1) launches a 1-D NDRange, one work item per
    tile in output memory order (image, channel tile, row, column tile), in work
    groups of ``work_group[0]`` items (``work_group`` must be ``(g, 1, 1)``): no
    idle items on small or odd-sized maps, and neighbouring items read and write
    neighbouring pixels (coalesced on buffers); what upstream's buffer kernels do. Reading a
    channels-last (NHWC) input, the order is (image, row, column tile, channel tile): there
    neighbouring channels are the neighbouring addresses.
    ``tiled`` (dense convs, ``groups == 1``): the local-memory tiled implicit GEMM of
    :mod:`primfuncs.conv.tiled`: a work group of ``work_group[0] x work_group[1]`` items
    (``work_group[2]`` 1) owns ``work_group[0] * w_block`` output pixels (of the flattened
    rows and columns) x ``work_group[1] * oc_block`` channel blocks and stages ``k_chunk``
    (input channel block, tap) pairs of the input and the weights in local memory per step;
    ``split_k`` > 1 runs that many K slices side by side (OpenCL dim 2), summed in local memory.
    """

    oc_block: int = 4
    w_block: int = 4
    work_group: tuple[int, int, int] = (8, 4, 1)
    split_k: int = 1
    register_window: bool = False
    flat: bool = False
    tiled: bool = False
    k_chunk: int = 4

    def __post_init__(self):
        for name in ("oc_block", "w_block"):
            value = getattr(self, name)
            if not (isinstance(value, int) and 1 <= value <= 4):
                raise ValueError(f"ConvConfig.{name} must be an int in 1..4, got {value!r}")
        wg = self.work_group
        if not (isinstance(wg, tuple) and len(wg) == 3 and all(isinstance(t, int) and t >= 1 for t in wg)):
            raise ValueError(f"ConvConfig.work_group must be 3 positive ints, got {wg!r}")
        if not (isinstance(self.split_k, int) and 1 <= self.split_k <= 64):
            raise ValueError(f"ConvConfig.split_k must be an int in 1..64, got {self.split_k!r}")
        if not isinstance(self.register_window, bool):
            raise ValueError(f"ConvConfig.register_window must be a bool, got {self.register_window!r}")
        if not isinstance(self.flat, bool):
            raise ValueError(f"ConvConfig.flat must be a bool, got {self.flat!r}")
        if self.flat and (wg[1:] != (1, 1) or self.split_k != 1):
            raise ValueError(f"ConvConfig.flat launches a 1-D grid: work_group must be (g, 1, 1) and split_k 1, "
                             f"got work_group {wg}, split_k {self.split_k}")
        if not isinstance(self.tiled, bool):
            raise ValueError(f"ConvConfig.tiled must be a bool, got {self.tiled!r}")
        if not (isinstance(self.k_chunk, int) and 1 <= self.k_chunk <= 16):
            raise ValueError(f"ConvConfig.k_chunk must be an int in 1..16, got {self.k_chunk!r}")
        if self.tiled and (wg[2] != 1 or self.flat or self.register_window):
            raise ValueError(f"ConvConfig.tiled takes a (gx, gy, 1) work group and no flat or register_window, "
                             f"got {self}")
        if wg[0] * wg[1] * wg[2] * self.split_k > 256:
            what = f"work_group {wg}" + (f" x split_k {self.split_k}" if self.split_k > 1 else "")
            raise ValueError(f"ConvConfig.{what} has more than 256 work items")



def fit_work_group(extent: int, want: int) -> int:
    """``want`` halved until it fits ``extent`` (no idle work items on small grids)."""
    while want > 1 and want > extent:
        want //= 2
    return want


def _balanced(extent: int, cap: int) -> int:
    """The largest share of ``extent`` in equal pieces of at most ``cap`` (fewest idle work items)."""
    cap = max(1, min(cap, extent))
    return ceildiv(extent, ceildiv(extent, cap))


def fill_work_group(extents, threads: int, max_x: int = 32, max_z: int = 64) -> tuple[int, int, int]:
    """A work group of at most ``threads`` items over the grid ``extents`` (x, y, z),
    filled along x first (neighbouring columns share texture cache lines), then y,
    then z, each extent split evenly (``max_z``: NVIDIA allows 64 along z)."""
    ex, ey, ez = extents
    gx = _balanced(ex, min(max_x, threads))
    gy = _balanced(ey, threads // gx)
    gz = _balanced(ez, min(max_z, threads // (gx * gy)))
    return gx, gy, gz




def direct_work_items(geom, oc_block: int, w_block: int) -> int:
    """Work items of the direct kernel's grid (without split_k) for an ``oc_block`` x ``w_block`` tile."""
    return ceildiv(geom.o4, oc_block) * geom.oh * geom.n * ceildiv(geom.ow, w_block)


def direct_extents(geom, oc_block: int, w_block: int) -> tuple[int, int, int]:
    """The direct kernel's grid extents (columns, rows, channel tiles; without split_k) for an
    ``oc_block`` x ``w_block`` tile: what ``fill_work_group`` shapes a work group over."""
    return geom.n * ceildiv(geom.ow, w_block), geom.oh, ceildiv(geom.o4, oc_block)


def shrink_tile(items, min_items: int) -> tuple[int, int]:
    """The 4 x 4 register tile (oc_block, w_block), halved (channel blocks first) while the grid
    has fewer than ``min_items`` work items (``items(oc_block, w_block)``)."""
    ocb, wb = 4, 4
    while ocb > 1 and items(ocb, wb) < min_items:
        ocb //= 2
    while wb > 1 and items(ocb, wb) < min_items:
        wb //= 2
    return ocb, wb


def fallback_config(geom, depthwise: bool = False) -> ConvConfig:
    """The config a direct-conv factory uses when given none: the rule the kernels were written
    for (an Adreno-class GPU): a 4 x 4 tile shrunk (channel blocks first) until the grid has
    :data:`MIN_WORK_ITEMS` work items, one channel block x 4 columns for depthwise convs (no
    input pixel is shared across their channel blocks); work group (8, 4, 1)."""
    if depthwise:
        return ConvConfig(1, 4, (8, 4, 1))
    ocb, wb = shrink_tile(lambda ocb, wb: direct_work_items(geom, ocb, wb), MIN_WORK_ITEMS)
    return ConvConfig(ocb, wb, (8, 4, 1))


def check_conv_args(epilogue, dtype, config, scope, weight_scope, out_scope, residual_scope):
    """The checks the direct and tiled conv factories make; returns (scope, weight_scope, out_scope,
    residual_scope) with the defaults filled in (weights: the weight texture next to a texture X).
    The tiled factory refuses a second activation itself (``check_epilogue``)."""
    check_epilogue(epilogue, reads_second=True, plain_residual=True)
    if not isinstance(config, ConvConfig):
        raise TypeError(f"config must be a ConvConfig, got {type(config).__name__}")
    check_dtype(dtype)
    scope, out_scope, residual_scope = check_io_scopes(scope, out_scope, residual_scope)
    if epilogue.out_layout != "NCHW4c" and out_scope != BUFFER:
        raise ValueError(f"epilogue.out_layout={epilogue.out_layout!r} writes Y to a buffer (out_scope 'global'), got {out_scope!r}")
    if epilogue.residual_layout != "NCHW4c" and residual_scope != BUFFER:
        raise ValueError(f"epilogue.residual_layout={epilogue.residual_layout!r} reads a plain buffer (residual_scope "
                         f"'global'), got {residual_scope!r}")
    if weight_scope is None:
        weight_scope = TEXTURE_WEIGHT if scope == TEXTURE else BUFFER
    check_scope(weight_scope, (TEXTURE_WEIGHT, BUFFER))
    return scope, weight_scope, out_scope, residual_scope

