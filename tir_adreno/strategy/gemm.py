"""The GEMM kernel's config and precision per device (device policy, like ``strategy.defaults``
for the convs): :func:`gemm_config` picks the register tile and work group of
``primfuncs.gemm.gemm`` for a geometry on a :class:`DeviceProfile`, :func:`gemm_kwargs` the
factory's keywords for a precision.

The tiles follow the direct conv's per-class rules (docs/kernels.md "GEMM"), not yet a GEMM
sweep: "mobile" (Adreno) 4 rows x 1 pixel (16 accumulators, the tile the conv kernels were
written for) in 8 x 8 work groups; "cpu" (PoCL) 4 x 2 (a CPU runs few work groups at a time:
bigger tiles cut reads per FMA); "gpu" (H200) 4 x 1, shrunk row-wise until the grid has
:data:`GPU_MIN_WORK_ITEMS` items, in work groups of up to 8 x 16. Every class's work group is
cut to the grid (no idle items on a narrow product).
"""

from __future__ import annotations

from primfuncs.gemm import GemmConfig, GemmGeometry, gemm_grid

from tir_adreno.strategy.precision import conv_accumulator_dtype, kernel_dtype
from tir_adreno.strategy.profile import DeviceProfile

#: (rows, pixels, ty, tx) per device class.
CLASS_TILES = {"mobile": (4, 1, 8, 8), "cpu": (4, 2, 4, 8), "gpu": (4, 1, 8, 16)}
#: Work items a "gpu" grid is given by shrinking the tile (H200: 132 SMs; the conv rule's 32768 / 4:
#: a GEMM item's K loop has no texture round trip per step).
GPU_MIN_WORK_ITEMS = 8192


def _covering(extent: int, most: int) -> int:
    """The smallest power of two >= ``extent``, at most ``most``."""
    size = 1
    while size < min(extent, most):
        size *= 2
    return size


def _fit_work_group(geom: GemmGeometry, rows: int, cols: int, ty: int, tx: int) -> GemmConfig:
    grid = gemm_grid(geom, GemmConfig(rows, cols, 1, 1))
    return GemmConfig(rows, cols, _covering(grid.rows, ty), _covering(grid.cols, tx))


def gemm_config(geom: GemmGeometry, profile: DeviceProfile) -> GemmConfig:
    """The config GEMM ``geom`` gets on ``profile`` (:data:`CLASS_TILES`)."""
    rows, cols, ty, tx = CLASS_TILES[profile.kind]
    if profile.kind == "gpu":
        while rows > 1 and _items(geom, rows, cols) < GPU_MIN_WORK_ITEMS:
            rows //= 2
    config = _fit_work_group(geom, rows, cols, ty, tx)
    if config.ty * config.tx > profile.max_work_group_size:
        config = GemmConfig(rows, cols, 1, _covering(gemm_grid(geom, config).cols, profile.max_work_group_size))
    return config


def _items(geom: GemmGeometry, rows: int, cols: int) -> int:
    grid = gemm_grid(geom, GemmConfig(rows, cols, 1, 1))
    return grid.layers * grid.rows * grid.cols


def gemm_kwargs(geom: GemmGeometry, precision: str, profile: DeviceProfile) -> dict:
    """The keywords of ``primfuncs.gemm.gemm`` for ``geom`` at ``precision`` on ``profile``: its
    config, and for "float16" the dtype and float32 accumulators when K is long (the convs' rule,
    ``strategy.precision.conv_accumulator_dtype``). float32 and float16_acc32 name no dtype (the
    same float32 kernel; half buffers are the build's)."""
    kwargs = {"config": gemm_config(geom, profile)}
    if kernel_dtype(precision) == "float16":
        kwargs.update(dtype="float16", acc_dtype=conv_accumulator_dtype(precision, geom.k))
    return kwargs
