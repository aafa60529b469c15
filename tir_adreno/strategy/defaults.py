"""The config a conv gets on a device unless records or the caller say otherwise (device policy;
TFLite GPU's selectors, dlight's ``get_configs(target)``).

:func:`default_config` is the one entry: a conv geometry and a
:class:`~tir_adreno.strategy.profile.DeviceProfile` in, a ``primfuncs.conv.ConvConfig`` out.
The tables below are selected by the profile's properties: its device class (``kind``:
:data:`DIRECT_DEFAULTS`; :data:`DEPTHWISE_DEFAULTS`, where a profile's own name may have an
entry), ``tiled_min_groups`` (:func:`tiled_default`). The kernels (``primfuncs/``) take configs
only; a factory called without one uses ``primfuncs.conv.config.fallback_config``.
"""

from __future__ import annotations

import dataclasses

from primfuncs.conv.config import (
    MAX_LOCAL_BYTES,
    ConvConfig,
    direct_extents,
    direct_work_items,
    fallback_config,
    fill_work_group,
    shrink_tile,
)
from primfuncs.conv.geometry import ConvGeometry
from primfuncs.conv.tiled import tiled_local_bytes
from primfuncs.lanes import LANES, ceildiv

from tir_adreno.strategy.profile import PROFILES, DeviceProfile

#: Work items x split_k that fill a big GPU ("gpu"; H200: 132 SMs x ~256).
GPU_WORK_ITEMS = 32768
#: Largest split_k the "gpu" rule picks.
MAX_SPLIT = 32


def default_config(geom: ConvGeometry, profile: DeviceProfile, prologue: bool = False) -> ConvConfig:
    """The config conv ``geom`` gets on ``profile``: depthwise convs :data:`DEPTHWISE_DEFAULTS`,
    dense convs the tiled kernel where :func:`tiled_default` gives one, else the direct kernel's
    rule of the profile's class (:data:`DIRECT_DEFAULTS`). ``prologue``: a 1x1 conv computing a
    depthwise conv as its input (``primfuncs.conv.depthwise_pointwise_nchw4c``; never tiled)."""
    if geom.is_depthwise:
        return depthwise_config(geom, depthwise_entry(geom, profile))
    tiled = None if prologue else tiled_default(geom, profile)
    if tiled is not None:
        return tiled
    return DIRECT_DEFAULTS[profile.kind](geom, prologue)


def kind_profile(kind: str) -> DeviceProfile:
    """A profile of device class ``kind`` with nothing of its own (no named depthwise entry, no
    tiled kernel): what the class's rules alone give (benchmarks and tests compare classes)."""
    return dataclasses.replace(PROFILES["pocl"], name=f"{kind}-class", kind=kind, tiled_min_groups=0)


# -- direct kernel, per device class ---------------------------------------------------------
# Measured with benchmarks/conv_configs.py (results in benchmarks/results/conv_configs-*.json).


def mobile_default(geom: ConvGeometry, prologue: bool = False) -> ConvConfig:
    """"mobile" (Adreno class): the rule the kernels were written for, their own fallback: a 4 x 4
    tile, shrunk (channel blocks first) until the grid has ``MIN_WORK_ITEMS`` work items; work
    group (8, 4, 1)."""
    return fallback_config(geom)


def cpu_default(geom: ConvGeometry, prologue: bool = False) -> ConvConfig:
    """"cpu" (PoCL): the 4 x 4 tile, never shrunk (a CPU runs a few work groups at a time; bigger
    tiles cut reads per FMA); the work-group shape is within noise."""
    return ConvConfig(oc_block=4, w_block=4, work_group=(8, 4, 1))


def gpu_default(geom: ConvGeometry, prologue: bool = False) -> ConvConfig:
    """"gpu" (H200, 132 SMs): under the mobile rule a late ResNet-50 layer has 1-2 thousand work
    items, each walking 128-512 channel blocks one texture round trip after another: ~1 TFLOP/s.
    Here a 2 x 4 tile (windows > 1x1) or 2 x 2 (1x1), then ``split_k`` doubled (up to
    :data:`MAX_SPLIT`, each slice keeping >= 2 channel blocks) until :data:`GPU_WORK_ITEMS`
    items; when even that falls short, 1 x 4 (twice the channel tiles). Work groups of ~256 items
    (fewer for a large tile x split: the partial sums must fit 32 KiB of local memory). Convs
    that cannot split (C < 8, per-lane groups) shrink the 4 x 4 tile until ``GPU_WORK_ITEMS / 2``
    items. Measured on all 53 ResNet-50 / MobileNetV2 layers: 1.1-8.5x the mobile rule on each
    non-depthwise one (ResNet-50's convs 6.9 -> 1.5 ms), within ~15% of the best swept config.
    ``prologue``: a 4 x 1 tile (4 output blocks per item, so fewer tiles recompute the depthwise
    conv) and ``split_k`` up to one channel block a slice. From ``conv_configs.py --grid fused`` on
    the 25 fused layers of the issue-21 models' H200 plans (benchmarks/results/
    conv_configs_fused-nvidia-h200.json): 377 us over their launches against 408 us for the rule
    before (4 x 2 tried first, each slice >= 2 blocks; the 4 x 2 tile lost on all MobileViT-v2's
    layers, two-block slices on EfficientViT's grouped ones by up to 1.5x); the best configs: 359 us."""

    def items(ocb, wb):
        return direct_work_items(geom, ocb, wb)

    blocks = (geom.cg if geom.groups > 1 else geom.c) // LANES
    aligned = geom.groups == 1 or (geom.cg % LANES == 0 and geom.og % LANES == 0)
    if not aligned or blocks < 2:
        ocb, wb = shrink_tile(items, GPU_WORK_ITEMS // 2)
        return ConvConfig(ocb, wb, fill_work_group(direct_extents(geom, ocb, wb), 64, max_x=16))
    max_split = min(MAX_SPLIT, blocks if prologue else blocks // 2)
    best = None
    tiles = ((4, 1),) if prologue else ((2, 4) if geom.kh * geom.kw > 1 else (2, 2), (1, 4))
    for ocb, wb in tiles:
        split = 1
        while items(ocb, wb) * split < GPU_WORK_ITEMS and split * 2 <= max_split:
            split *= 2
        if best is None or items(ocb, wb) * split > best[0]:
            best = (items(ocb, wb) * split, ocb, wb, split)
        if items(ocb, wb) * split >= GPU_WORK_ITEMS:
            break
    _, ocb, wb, split = best
    return split_config(geom, ocb, wb, split)


def split_items(oc_block: int, w_block: int, split: int) -> int:
    """Work items per K slice of the "gpu" rule's ``split_k`` configs: ~256 in all, at most 64 a
    slice, the partial sums (``split`` x items x tile x 16 bytes) within local memory."""
    return min(64, 256 // split, MAX_LOCAL_BYTES // (LANES * 4 * oc_block * w_block * split))


def split_config(geom: ConvGeometry, oc_block: int, w_block: int, split: int, items: int | None = None) -> ConvConfig:
    """The direct kernel's ``split_k`` config of tile ``oc_block`` x ``w_block``: ``items`` per
    slice (default :func:`split_items`) in a work group filled along x (at most 16), z <= 64 / split."""
    items = split_items(oc_block, w_block, split) if items is None else items
    wg = fill_work_group(direct_extents(geom, oc_block, w_block), items, max_x=16, max_z=64 // split)
    return ConvConfig(oc_block, w_block, wg, split)


#: The direct kernel's default rule per device class (``DeviceProfile.kind``).
DIRECT_DEFAULTS = {"mobile": mobile_default, "cpu": cpu_default, "gpu": gpu_default}


# -- depthwise convs ---------------------------------------------------------------------------

#: Depthwise defaults per device class or device profile name (data; a profile's name wins
#: over its class, so one device gets its own entry without touching its class). Depthwise
#: convs share no input pixel across channel blocks, so a tile is one channel block.
#: Keys: ``w_block``; ``work_group`` fixed, or ``threads``: a 2-D work group of that many
#: items filled along the output columns, then rows (``fill_work_group``), or with
#: ``flat`` a 1-D group of that many items (``ConvConfig.flat``); ``register_window`` where
#: the conv allows it (multiplier 1); ``placement`` (optional; absent: the device
#: profile's ``activation_placement``): "texture" or "buffer", where the strategy (``tir_adreno.strategy.conv``)
#: puts the layer's tensors unless records say otherwise;
#: ``classes``: {layer class of :data:`DEPTHWISE_CLASSES`: keys overridden for that class},
#: applied in that order. "mobile" / "cpu": 4 columns per item, group (8, 4, 1) (on the
#: H200 every such config of the first sweep was within ~10% of the ~13 us texture-kernel
#: floor). "gpu": 2 columns per item, window in registers, 128-item groups.
#: "nvidia-h200" (buffers there, the profile's placement): 1 column per item, window in
#: registers, the 1-D grid in 64-item groups: within 5% of the best of 38 swept configs on
#: each of MobileNetV2's 10 depthwise layers (benchmarks/results/depthwise-nvidia-h200.json).
DEPTHWISE_DEFAULTS = {
    "mobile": {"w_block": 4, "work_group": (8, 4, 1), "register_window": False},
    "cpu": {"w_block": 4, "work_group": (8, 4, 1), "register_window": False},
    "gpu": {"w_block": 2, "threads": 128, "register_window": True},
    "nvidia-h200": {"w_block": 1, "threads": 64, "flat": True, "register_window": True},
}

#: Layer classes a :data:`DEPTHWISE_DEFAULTS` entry may override keys for (``classes``).
DEPTHWISE_CLASSES = {
    "stride2": lambda g: max(g.strides) > 1,
    "small": lambda g: g.oh * g.ow <= 14 * 14,  # MobileNet's last stages: launch-bound
}

_DEPTHWISE_KEYS = {"w_block", "work_group", "threads", "register_window", "flat", "placement", "classes"}


def depthwise_entry(geom: ConvGeometry, profile: DeviceProfile) -> dict:
    """The :data:`DEPTHWISE_DEFAULTS` entry of depthwise conv ``geom`` on ``profile`` (its name's
    entry when the table has one, else its class's), its layer classes' overrides applied."""
    key = profile.name if profile.name in DEPTHWISE_DEFAULTS else profile.kind
    entry = dict(DEPTHWISE_DEFAULTS[key])
    for name, overrides in entry.pop("classes", {}).items():
        if name not in DEPTHWISE_CLASSES:
            raise ValueError(f"DEPTHWISE_DEFAULTS[{key!r}]: unknown layer class {name!r}; known: {list(DEPTHWISE_CLASSES)}")
        if DEPTHWISE_CLASSES[name](geom):
            entry.update(overrides)
    unknown = set(entry) - _DEPTHWISE_KEYS
    if unknown or entry.get("placement", "texture") not in ("texture", "buffer"):
        raise ValueError(f"DEPTHWISE_DEFAULTS[{key!r}]: unknown keys {sorted(unknown)} or placement "
                         f"{entry.get('placement')!r} (want 'texture' or 'buffer')")
    return entry


def depthwise_config(geom: ConvGeometry, entry: dict) -> ConvConfig:
    """One :func:`depthwise_entry` as the ConvConfig of conv ``geom``."""
    wb, flat = entry["w_block"], entry.get("flat", False)
    if flat:
        work_group = (entry["threads"], 1, 1)
    elif "threads" in entry:
        work_group = fill_work_group((geom.n * ceildiv(geom.ow, wb), geom.oh, 1), entry["threads"], max_x=32)
    else:
        work_group = entry["work_group"]
    return ConvConfig(1, wb, work_group, register_window=entry["register_window"] and geom.o == geom.c, flat=flat)


# -- the local-memory tiled kernel -------------------------------------------------------------

#: Configs of the local-memory tiled kernel (``ConvConfig.tiled``) a conv gets by default
#: (:func:`tiled_default`): (oc_block, w_block, work group, k_chunk, split_k). 1x1 convs take the
#: first of :data:`TILED_CONFIGS` that launches enough work groups (smaller tiles, more K slices
#: for the small maps), stem convs (one input channel block: K is the taps) :data:`TILED_STEM` or
#: :data:`TILED_STEM_WIDE`.
#: From ``benchmarks/conv_configs.py --grid tiled`` on ResNet-50's 23 layers on the H200
#: (benchmarks/results/conv_configs_tiled_buffer-nvidia-h200.json, 27 tiled configs): within 20%
#: of the best tiled config on each 1x1 layer, and 1.3-2.0x the direct kernel where it ran before.
TILED_CONFIGS = ((2, 2, (16, 4, 1), 4, 4), (1, 2, (16, 4, 1), 4, 4), (1, 1, (16, 2, 1), 4, 8))
#: A stem's of fewer than :data:`WIDE_STEM_BLOCKS` output channel blocks: two output blocks by one
#: pixel per item, 64-item rows, all taps in one K step where they fit (k_chunk None:
#: :func:`stem_k_chunk`). From ``conv_configs.py --grid stem`` on the eight issue-21 models' stems
#: on the H200 (benchmarks/results/conv_configs_stem-nvidia-h200.json: 8-48 output channels, 3x3/2
#: and 4x4/4): within 8% of each stem's best of 16-66 configs, 62.6 us over the eight against 80.6
#: for :data:`TILED_STEM_WIDE`, whose eight rows of output blocks were mostly empty on 2-4 blocks.
TILED_STEM = (2, 1, (64, 1, 1), None, 1)
#: A stem's of at least :data:`WIDE_STEM_BLOCKS` output blocks (ResNet's 7x7/2 to 64 channels):
#: 1 x 4 tiles, 16 x 8 items (the stem config before :data:`TILED_STEM`), the taps in the fewest K
#: steps. On ResNet-50's stem (conv_configs_stem-torchvision-nvidia-h200.json) :data:`TILED_STEM`
#: took 33.2 us, this one 25.2 us (49 taps: k_chunk 13), the best of 69 configs 23.3 us.
TILED_STEM_WIDE = (1, 4, (16, 8, 1), None, 1)
WIDE_STEM_BLOCKS = 16
#: Whether patchify convs (kernel = stride, no padding, no dilation: ConvNeXt's and EdgeNeXt's 2x2
#: stride-2 downsamples) run tiled like 1x1 convs: their taps never overlap, so the implicit GEMM
#: reads each input pixel once, as a 1x1 conv's does (``benchmarks/patchify_tiled.py``).
TILED_PATCHIFY = True
#: Strided convs (:func:`is_strided`: 3x3/2 downsamples past the stem) run tiled
#: (:func:`strided_entry`) unless their output has at most this many pixels (7x7) and
#: their reduction (input channels x taps) at least :data:`STRIDED_DIRECT_MIN_K`. From
#: ``benchmarks/conv_configs.py --grid strided`` over the 47 strided convs of the catalogue and
#: ResNet-18/50 on the H100 (benchmarks/results/conv_configs_strided-nvidia-h100-80gb-hbm3.json):
#: 1700 us planned direct -> 1019 us, the best of ~17 configs per layer 980 us. The direct kernel
#: kept ResNet's and GC ViT's 7x7 outputs of 256 and 512 channels (tiled 1.2-1.3x slower) and
#: MambaOut's of 192 (1.6x); at 160 (PVT-v2) the two tie, at 96-112 tiled took 0.55x.
STRIDED_DIRECT_MAX_PIXELS = 64
STRIDED_DIRECT_MIN_K = 160 * 9


def is_patchify(geom: ConvGeometry) -> bool:
    """Whether ``geom``'s taps tile its input without overlap or padding (kernel = stride > 1)."""
    return ((geom.kh, geom.kw) == geom.strides and geom.kh * geom.kw > 1 and geom.dilation == (1, 1)
            and not any(geom.padding))


def is_strided(geom: ConvGeometry) -> bool:
    """Whether dense conv ``geom`` is a strided downsample past the stem: more than one input
    channel block, a window, a stride > 1, taps that overlap (not :func:`is_patchify`)."""
    return geom.c4 > 1 and geom.kh * geom.kw > 1 and max(geom.strides) > 1 and not is_patchify(geom)


def strided_runs_direct(geom: ConvGeometry) -> bool:
    """Whether strided conv ``geom`` keeps the direct kernel: a long reduction
    (:data:`STRIDED_DIRECT_MIN_K`) into a small map (:data:`STRIDED_DIRECT_MAX_PIXELS`), where the
    tiled kernel's few work groups each walk a long K."""
    return geom.oh * geom.ow <= STRIDED_DIRECT_MAX_PIXELS and geom.c * geom.kh * geom.kw >= STRIDED_DIRECT_MIN_K


def tiled_work_groups(geom: ConvGeometry, oc_block: int, w_block: int, work_group) -> int:
    """Work groups (without split_k) the tiled kernel launches for conv ``geom``: a group of
    ``gx x gy`` items owns ``gx * w_block`` output pixels x ``gy * oc_block`` channel blocks."""
    gx, gy, _ = work_group
    return geom.n * ceildiv(geom.oh * geom.ow, gx * w_block) * ceildiv(geom.o4, gy * oc_block)


def tiled_default(geom: ConvGeometry, profile: DeviceProfile) -> ConvConfig | None:
    """The tiled config of dense conv ``geom`` that launches at least ``profile.tiled_min_groups``
    work groups (0: never), or None (the direct kernel). Only 1x1 convs, stem convs, patchify
    convs (:data:`TILED_PATCHIFY`) and strided convs (:func:`is_strided`, :func:`strided_entry`,
    bar :func:`strided_runs_direct`) qualify: on ResNet-50's stride-1 3x3 convs the tiled kernel
    won only on the 56x56 maps (3% and 10%) and lost by up to 3.6x on the smaller ones."""
    min_groups = profile.tiled_min_groups
    stem = geom.c4 == 1 and geom.kh * geom.kw > 1
    pointwise = geom.kh * geom.kw == 1 or (TILED_PATCHIFY and is_patchify(geom))
    if min_groups <= 0 or geom.groups != 1:
        return None
    if is_strided(geom):
        return None if strided_runs_direct(geom) else tiled_config(geom, strided_entry(geom, min_groups))
    if not (pointwise or stem):
        return None
    for entry in ((TILED_STEM_WIDE if geom.o4 >= WIDE_STEM_BLOCKS else TILED_STEM),) if stem else TILED_CONFIGS:
        if tiled_work_groups(geom, *entry[:3]) >= min_groups:
            return tiled_config(geom, entry)
    return None


def strided_entry(geom: ConvGeometry, min_groups: int):
    """The :data:`TILED_CONFIGS` entry of strided conv ``geom``: the first's 2 x 2 tiles where they
    launch ``min_groups`` work groups, else the last's 1 x 1 tiles in 8 K slices, below
    ``min_groups`` too (EfficientFormer-V2's last downsample, 88 groups: 0.57x the direct kernel's
    time). The middle entry, the 1x1 convs' pick between them, lost to the last or tied on all 11
    strided layers it would have taken, by up to 1.5x."""
    first = TILED_CONFIGS[0]
    return first if tiled_work_groups(geom, *first[:3]) >= min_groups else TILED_CONFIGS[-1]


def tiled_config(geom: ConvGeometry, entry) -> ConvConfig:
    """The tiled ConvConfig of a :data:`TILED_CONFIGS` / :data:`TILED_STEM` entry for conv ``geom``."""
    ocb, wb, work_group, k_chunk, split = entry
    return ConvConfig(ocb, wb, work_group, split, tiled=True, k_chunk=k_chunk or stem_k_chunk(geom, ocb, wb, work_group))


def stem_k_chunk(geom: ConvGeometry, oc_block: int, w_block: int, work_group) -> int:
    """The tiled kernel's ``k_chunk`` for conv ``geom``: the fewest K steps (K = input channel
    blocks x taps) whose chunks fit local memory (float32 tiles, at most 16 K-blocks a chunk),
    the K-blocks split evenly over them (a 3x3 stem: one step of 9)."""
    fits = [kc for kc in range(1, 17)
            if tiled_local_bytes(ConvConfig(oc_block, w_block, work_group, tiled=True, k_chunk=kc)) <= MAX_LOCAL_BYTES]
    k_blocks = geom.c4 * geom.kh * geom.kw
    return ceildiv(k_blocks, ceildiv(k_blocks, max(fits)))
