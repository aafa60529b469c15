"""The GEMM kernel's config and precision per device (device policy, like ``strategy.defaults``
for the convs): :func:`gemm_config` picks the kernel (register-tiled, local-memory tiled:
:func:`tiled_gemm_config`, or split-reduction: :func:`split_gemm_config`), its tile and work
group of ``primfuncs.gemm.gemm`` for a geometry on a :class:`DeviceProfile`, :func:`gemm_kwargs`
the factory's keywords for a precision.

The tiled kernel (``GemmConfig(tiled=True)``) follows the tiled conv's rule (``defaults.tiled_default``):
on profiles with big-GPU local memory (``DeviceProfile.tiled_min_groups > 0``: nvidia-h200), a
product takes the first of :data:`TILED_GEMM_CONFIGS` (each reading its next step ahead:
:data:`PREFETCH`) that launches at least :data:`GEMM_FILL` of that many work groups; one that none fills takes the split kernel (``K >= SPLIT_MIN_K``) or the smallest tiled
config, and so does one whose reduction is long for its outputs (:data:`SPLIT_MAX_OUTPUTS_PER_K`);
other profiles the register kernel. Measured by ``benchmarks/gemm_configs.py`` on an H100 (15
catalogue shapes): the rule's tiled kernel took 0.33-0.67x the register kernel's time on 14, and
the register kernel won only PVT-v2's first fc1 (1.14x, a 4 x 2 tile no longer in the list).

The tiles follow the direct conv's per-class rules (docs/kernels.md "GEMM"), not yet a GEMM
sweep: "mobile" (Adreno) 4 rows x 1 pixel (16 accumulators, the tile the conv kernels were
written for) in 8 x 8 work groups; "cpu" (PoCL) 4 x 2 (a CPU runs few work groups at a time:
bigger tiles cut reads per FMA); "gpu" (H200) 4 x 1, shrunk row-wise until the grid has
:data:`GPU_MIN_WORK_ITEMS` items, in work groups of up to 8 x 16. Every class's work group is
cut to the grid (no idle items on a narrow product).
"""

from __future__ import annotations

import math

from primfuncs._common import LANES, ceildiv
from primfuncs.gemm import MAX_WORK_GROUP, GemmConfig, GemmGeometry, gemm_grid
from primfuncs.gemm_tiled import tiled_work_groups

from tir_adreno.strategy.precision import conv_accumulator_dtype, kernel_dtype
from tir_adreno.strategy.profile import DeviceProfile

#: (rows, pixels, ty, tx) per device class.
CLASS_TILES = {"mobile": (4, 1, 8, 8), "cpu": (4, 2, 4, 8), "gpu": (4, 1, 8, 16)}
#: Work items a "gpu" grid is given by shrinking the tile (H200: 132 SMs; the conv rule's 32768 / 4:
#: a GEMM item's K loop has no texture round trip per step).
GPU_MIN_WORK_ITEMS = 8192
#: The tiled kernel's configs, (rows, pixels, ty, tx, k_chunk), biggest work-group tile first: 8 x 16
#: items of 4 x 1 outputs (a 32-row x 64-column tile) staging 4 x 4 reduction indices a step, then
#: 16 x 8 items of 2 x 1 (32 x 32), then 8 x 8 items of 2 x 1 staging 4 x 8 (16 x 32), then 8 x 8
#: items of 1 x 1 staging 4 x 16 (the tiled conv's 64-item groups) for the products none of those
#: fills (LeViT's Q Kᵀ over 16 tokens). A product takes the first that launches ``tiled_min_groups``
#: work groups (the tiled conv's rule), its ``k_chunk`` cut to the reduction (:func:`_chunk_for`).
#: Chosen by ``benchmarks/gemm_configs.py --explore`` on an H100 (25 catalogue shapes, 2056 kernels,
#: ``gemm_configs-explore-nvidia-h100-80gb-hbm3.json``) over every ordering of 2-4 of 14 configs (the
#: best single ones and the old list's): on the 18 products whose config it changes it took 0.91x
#: the old list's time (16 x 16 items of 2 x 1, then of 1 x 1, then 8 x 8 of 1 x 1) in geomean;
#: 0.74-0.88x on eight (MambaOut's stage-2 fc2 and stage-3/4 fc1, PVT-v2's stage-4 and MLP-Mixer's
#: channel fc1, DeiT's fc1 and proj, gMLP's fc1), 0.91-0.99x on seven, 1.06x on three (DeiT's
#: attention x V, MLP-Mixer's token fc1, PVT-v2's stage-1 fc1: the run's spread between neighbouring
#: configs). In stop 58's H200 sweep (``gemm_configs-mambaout-explore-nvidia-h200.json``) the same
#: picks took 0.79-0.95x the old ones' time on MambaOut's five changed products. The 4 x 1 tile in
#: 8 x 16 items covers the old 2 x 1 in 16 x 16's work-group tile with half the items, each with
#: twice the accumulators.
TILED_GEMM_CONFIGS = ((4, 1, 8, 16, 4), (2, 1, 16, 8, 4), (2, 1, 8, 8, 8), (1, 1, 8, 8, 16))
#: Every tiled config reads its next step ahead (``GemmConfig.prefetch``): swept on an H100
#: (``gemm_configs-prefetch-nvidia-h100-80gb-hbm3.json``, 12 catalogue shapes, each config with and
#: without) the best prefetched config took 0.75-1.00x the best one without on every shape.
PREFETCH = True
#: A product takes a tiled config that launches this fraction of ``tiled_min_groups`` work groups
#: (the conv's fill rule, 96 on the H200): in the same sweep the 2 x 1 tile at 84 groups beat the
#: 1 x 1 at 156 on DeiT's fc1 (12.4 vs 15.7 us), gMLP's fc1 (9.8 vs 12.2) and Q Kᵀ (8.2 vs 11.0);
#: at 63-64 groups it lost (DeiT's qkv 12.6 vs 10.8, MLP-Mixer's channel fc1 23.9 vs 20.0).
GEMM_FILL = 0.8
#: A product no tiled config fills the GPU with (``tiled_min_groups``): the register kernel walks
#: all of K per item with a few thousand items (H100, op_times: LeViT's stage-3 fc2, 16 x 768 x
#: 384, 128 us; PiT's last fc2, 50 x 1024 x 256, 146 us; CoaT's Kᵀ V over 3137 tokens, 280 us; heads
#: 1 x 1152 x 1000, 177 us). From this K the reduction is split across the work group
#: (``primfuncs.gemm_split``); below it the smallest tiled config (0.43-0.81x the register
#: kernel on LeViT's 49- and 16-token products, gemm_configs on the H100).
SPLIT_MIN_K = 256
#: A product with at most this many outputs per reduction index (``batch M N <= SPLIT_MAX_OUTPUTS_PER_K
#: K``) and ``K >= SPLIT_MIN_K`` takes the split kernel even where a tiled config fills the GPU:
#: its tiles walk a long K each with few of them in flight (H200, gemm_configs: DeiT's fc2, 197 x
#: 768 x 192, split 18.2 us vs tiled 22.3; MLP-Mixer's channel fc2, 49 x 2048 x 512, 27.7 vs 41.6;
#: but its channel fc1, 49 x 512 x 2048, 196 outputs per index, 31.3 vs 20.8 tiled).
SPLIT_MAX_OUTPUTS_PER_K = 128
#: Items splitting K at most (their partials summed by one item per column), and the fewest
#: blocks of 4 reduction indices each adds.
MAX_SPLIT, MIN_SPLIT_BLOCKS = 64, 4


def _covering(extent: int, most: int) -> int:
    """The smallest power of two >= ``extent``, at most ``most``."""
    size = 1
    while size < min(extent, most):
        size *= 2
    return size


def fit_work_group(geom: GemmGeometry, rows: int, cols: int, ty: int, tx: int) -> GemmConfig:
    grid = gemm_grid(geom, GemmConfig(rows, cols, 1, 1))
    return GemmConfig(rows, cols, _covering(grid.rows, ty), _covering(grid.cols, tx))


def _chunk_for(geom: GemmGeometry, k_chunk: int) -> int:
    """``k_chunk`` halved until one step stages no more than the reduction (``4 k_chunk <= K``; at
    least one block): indices past K only stage zeros (LeViT's Q Kᵀ, K = 16: 4 blocks 6.0 us, 2
    blocks 6.5 us, on the H100; MLP-Mixer's token fc1, K = 49: 8 blocks 6.9 us, 4 blocks 7.5 us)."""
    while k_chunk > 1 and 4 * k_chunk > geom.k:
        k_chunk //= 2
    return k_chunk


def fitted_tiled_configs(geom: GemmGeometry) -> list[GemmConfig]:
    """Each of :data:`TILED_GEMM_CONFIGS` for ``geom``: its work group cut to the product, its
    ``k_chunk`` to the reduction (:func:`_chunk_for`)."""
    configs = []
    for rows, cols, ty, tx, k_chunk in TILED_GEMM_CONFIGS:
        fit = fit_work_group(geom, rows, cols, ty, tx)
        configs.append(GemmConfig(rows, cols, fit.ty, fit.tx, tiled=True, k_chunk=_chunk_for(geom, k_chunk), prefetch=PREFETCH))
    return configs


def gemm_min_groups(profile: DeviceProfile) -> int:
    """Work groups a tiled GEMM config must launch on ``profile``: :data:`GEMM_FILL` of its
    ``tiled_min_groups`` (0: no tiled GEMM)."""
    return math.ceil(GEMM_FILL * profile.tiled_min_groups)


def tiled_gemm_config(geom: GemmGeometry, profile: DeviceProfile) -> GemmConfig | None:
    """The first of :func:`fitted_tiled_configs` that launches at least :func:`gemm_min_groups`
    work groups for ``geom``, or None (0: never; or a product too small to fill the GPU with
    staged tiles: :func:`gemm_config` decides)."""
    if profile.tiled_min_groups <= 0:
        return None
    return next((c for c in fitted_tiled_configs(geom) if tiled_work_groups(geom, c) >= gemm_min_groups(profile)), None)


def split_gemm_config(geom: GemmGeometry) -> GemmConfig:
    """The split kernel's config for ``geom``: up to 8 pixels a work group (its columns), as many
    items splitting K as the work group then holds (at most :data:`MAX_SPLIT`, each item at least
    :data:`MIN_SPLIT_BLOCKS` blocks of 4 reduction indices), 2 rows a tile from 16 rows on (half
    the reads of B for as many items as a classifier head's 1 x 1)."""
    tx = _covering(gemm_grid(geom, GemmConfig(1, 1, 1, 1)).cols, 8)
    split = 1
    while split * 2 <= min(MAX_SPLIT, MAX_WORK_GROUP // tx) and split * 2 * MIN_SPLIT_BLOCKS <= ceildiv(geom.k, LANES):
        split *= 2
    return GemmConfig(2 if geom.m >= 16 else 1, 1, 1, tx, split_k=split)


def _long_reduction(geom: GemmGeometry) -> bool:
    """Whether ``geom``'s reduction is long for its outputs (:data:`SPLIT_MAX_OUTPUTS_PER_K`)."""
    return geom.k >= SPLIT_MIN_K and geom.batch * geom.m * geom.n <= SPLIT_MAX_OUTPUTS_PER_K * geom.k


def gemm_config(geom: GemmGeometry, profile: DeviceProfile) -> GemmConfig:
    """The config GEMM ``geom`` gets on ``profile``: :func:`tiled_gemm_config`'s where it gives
    one and the reduction is not long for the outputs (:func:`_long_reduction`); on the profiles
    that have it, any other product takes the split kernel (:func:`split_gemm_config`) from
    ``K >= SPLIT_MIN_K``, else the smallest tiled config; elsewhere the register kernel's
    (:data:`CLASS_TILES`)."""
    tiled = tiled_gemm_config(geom, profile)
    if tiled is not None and not _long_reduction(geom):
        return tiled
    if profile.tiled_min_groups > 0:
        return split_gemm_config(geom) if geom.k >= SPLIT_MIN_K else fitted_tiled_configs(geom)[-1]
    rows, cols, ty, tx = CLASS_TILES[profile.kind]
    if profile.kind == "gpu":
        while rows > 1 and _items(geom, rows, cols) < GPU_MIN_WORK_ITEMS:
            rows //= 2
    config = fit_work_group(geom, rows, cols, ty, tx)
    if config.ty * config.tx > profile.max_work_group_size:
        config = GemmConfig(rows, cols, 1, _covering(gemm_grid(geom, config).cols, profile.max_work_group_size))
    return config


def producer_gemm_config(geom: GemmGeometry, ops: int, profile: DeviceProfile) -> GemmConfig | None:
    """The config of GEMM ``geom`` computing its A from an elementwise chain of ``ops`` ops as it
    reads it (``gemm(a_producer=)``), or None where no config should (the chain then runs as its
    own kernel): the product's own config (:func:`gemm_config`) where the chain evaluated again for
    each further read of an A element (:func:`a_reads`: once per column tile) costs at most a
    launch, ``(reads - 1) M K ops <= launch_cost_macs`` (the fused depthwise conv's recompute
    rule); else the tiled config where one fills the GPU and passes the same test. The second
    takes a long reduction off the split kernel, which reads A once per item of a column (48-72
    times for MambaOut's second Linears), for the fold: MambaOut-Femto's nine stage-3 second
    Linears (196 x 512 x 192) with their gates, H100 op_times, split + gate 273 us -> tiled with
    the gate folded 207 us; PVT-v2's four a tie. Where the split kernel's fold passes (gMLP's 30,
    LeViT's 2: few column tiles) it keeps the split kernel, which ran them 1-3 us faster than
    tiled (``results/gemm_producer_tiled-nvidia-h100-80gb-hbm3.json``)."""
    for config in (gemm_config(geom, profile), tiled_gemm_config(geom, profile)):
        if config is not None and (a_reads(geom, config) - 1) * geom.batch * geom.m * geom.k * ops <= profile.launch_cost_macs:
            return config
    return None


def a_reads(geom: GemmGeometry, config: GemmConfig) -> int:
    """How many times ``config``'s kernel reads each element of A: once per column tile, a work
    group's (the tiled kernel stages A once per group) or an item's (the register and split
    kernels read A's rows for their own columns)."""
    per_tile = config.tx * config.cols if config.tiled else config.cols
    return ceildiv(ceildiv(geom.n, LANES), per_tile)


def _items(geom: GemmGeometry, rows: int, cols: int) -> int:
    grid = gemm_grid(geom, GemmConfig(rows, cols, 1, 1))
    return grid.layers * grid.rows * grid.cols


def patch_as_gemm(profile: DeviceProfile) -> bool:
    """Whether a patchify conv between plain tensors runs as a GEMM (``passes.patch_gemm``): on the
    profiles whose GEMM has the tiled and split kernels for its long reduction (the direct conv
    walks all of ``C kh kw`` per item: PVT-v2-b0's first spatial-reduction conv, K = 2048 for 49 x
    32 outputs, 153 us on the H100; MLP-Mixer's stem, K = 3072, 284 us)."""
    return profile.tiled_min_groups > 0


def gemm_kwargs(geom: GemmGeometry, precision: str, profile: DeviceProfile, config: GemmConfig | None = None) -> dict:
    """The keywords of ``primfuncs.gemm.gemm`` for ``geom`` at ``precision`` on ``profile``: its
    config (``config``, else :func:`gemm_config`'s), and for "float16" the dtype and float32
    accumulators when K is long (the convs' rule, ``strategy.precision.conv_accumulator_dtype``).
    float32 and float16_acc32 name no dtype (the same float32 kernel; half buffers are the build's)."""
    kwargs = {"config": config or gemm_config(geom, profile)}
    if kernel_dtype(precision) == "float16":
        kwargs.update(dtype="float16", acc_dtype=conv_accumulator_dtype(precision, geom.k))
    return kwargs
