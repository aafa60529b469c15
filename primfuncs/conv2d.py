"""Direct 2-D convolution on NCHW4c tensors: dense, grouped and depthwise.

Input ``[N, C/4, H, W, 4]`` (an activation texture or a buffer), weights
``[O/4, C/groups, KH, KW, 4]`` (OIHW4o: one pixel = 4 output channels of one
input channel and tap), output ``[N, O/4, OH, OW, 4]``. Channels that do not
fill a block are zero (the layout kernels pad them).

Schedule (docs/design.md, the practice of MNN / TFLite GPU): a work item owns a
register tile of ``oc_block`` output channel blocks x ``w_block`` adjacent
output columns of one output row. It walks the input channel blocks and the
kernel window; per step it reads ``w_block`` input pixels and ``4 * oc_block``
weight pixels and does ``acc += x.s0*w0 + x.s1*w1 + x.s2*w2 + x.s3*w3``. The
NDRange is (column tiles x N, OH, O/4 / oc_block) along OpenCL dims (0, 1, 2):
neighbouring work items read neighbouring pixels. A tile that overhangs the
output (OW or O/4 not a multiple of the tile) is computed whole from clamped
reads and only its valid pixels are stored.

``ConvConfig.split_k`` > 1 also splits a tile's input channel blocks over that
many work items of one work group; each sums its slice, the partial tiles meet
in local memory and the first slice adds them up and stores (big GPUs, whose
late layers otherwise have too few work items with too long loops).

Three accumulation bodies share that skeleton:

- blocked: every output block lies in one group and each group's input
  channels start at a block boundary (``groups == 1``, or ``C/groups`` and
  ``O/groups`` multiples of 4): the loop walks input blocks, 4 lanes each (the
  last block of ``groups == 1`` only its valid lanes);
- general grouped: any other ``groups``: each output lane finds its own group
  and input channel (one weight pixel serves the 4 lanes, the input lane is
  picked from its pixel);
- depthwise (``groups == C``, ``O = C * multiplier``): :func:`depthwise_conv2d_nchw4c`.

A 1x1 conv may take a depthwise conv as its prologue (:func:`depthwise_pointwise_nchw4c`,
MobileNet's block tail in one launch): the blocked body then computes each input pixel it
would read, the depthwise output of that channel block with its epilogue, in registers.

Padding reads are guarded explicitly (an out-of-range texture read is
undefined on OpenCL 1.2 devices and array layers are clamped, never zeroed):
every read is at a coordinate clamped into the image, and a select puts 0
where the tap lies in the padding (branch-free, faster on PoCL than a
conditional read). Guards that no stored output needs are left out at build
time, so a 1x1 stride-1 unpadded conv has none: that is the 1x1 fast path (a
separate 1x1 kernel, its channel loop unrolled by 2, measured no faster).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

from tvm.script import tirx as T

from ._common import (
    BUFFER,
    LANES,
    TEXTURE,
    TEXTURE_WEIGHT,
    blocked,
    ceildiv,
    check_dtype,
    check_io_scopes,
    check_scope,
    select_params,
)
from .epilogue import Epilogue, apply_epilogue, store_output_pixel


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
    neighbouring pixels (coalesced on buffers); what upstream's buffer kernels do.
    ``tiled`` (dense convs, ``groups == 1``): the local-memory tiled implicit GEMM of
    :mod:`primfuncs.conv2d_tiled`: a work group of ``work_group[0] x work_group[1]`` items
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


#: Device classes :func:`default_config` knows (``tir_adreno.strategy.profile.DeviceProfile.kind``).
DEVICE_KINDS = ("mobile", "gpu", "cpu")


def default_config(geom: "ConvGeometry", depthwise: bool = False, kind: str = "mobile", profile: str | None = None,
                   prologue: bool = False, tiled_min_groups: int = 0) -> ConvConfig:
    """The tile a conv gets unless told otherwise, per device class (:data:`DEVICE_KINDS`).

    ``kind`` is the device profile's class (``tir_adreno.strategy.profile``), ``profile`` its name
    (depthwise convs: a :data:`DEPTHWISE_DEFAULTS` entry of that name wins). Measured
    with benchmarks/conv_configs.py (results in benchmarks/results/conv_configs-*.json):

    - "mobile" (Adreno class; the rule the kernels were written for): a 4 x 4
      tile, shrunk (channel blocks first) until the grid has
      ``_MIN_WORK_ITEMS`` work items; work group (8, 4, 1).
    - "cpu" (PoCL): the 4 x 4 tile, never shrunk (a CPU runs a few work groups
      at a time; bigger tiles cut reads per FMA); the work-group shape is
      within noise.
    - "gpu" (H200, 132 SMs): under the mobile rule a late ResNet-50 layer has
      1-2 thousand work items, each walking 128-512 channel blocks one texture
      round trip after another: ~1 TFLOP/s. Here a 2 x 4 tile (windows > 1x1)
      or 2 x 2 (1x1), then ``split_k`` doubled (up to 32, each slice keeping
      >= 2 channel blocks) until ``_GPU_WORK_ITEMS`` items; when even that
      falls short, 1 x 4 (twice the channel tiles). Work groups of ~256 items
      (fewer for a large tile x split: the partial sums must fit 32 KiB of
      local memory). Convs that cannot split (C < 8, per-lane groups) shrink
      the 4 x 4 tile until ``_GPU_WORK_ITEMS / 2`` items. Measured on all 53
      ResNet-50 / MobileNetV2 layers: 1.1-8.5x the mobile rule on each
      non-depthwise one (ResNet-50's convs 6.9 -> 1.5 ms), within ~15% of the
      best swept config.

    Dense convs: the tiled kernel where :func:`tiled_default` gives one for ``tiled_min_groups``
    (the profile's). Depthwise convs: :data:`DEPTHWISE_DEFAULTS`. ``prologue`` (a 1x1 conv computing a depthwise
    conv as its input, :func:`depthwise_pointwise_nchw4c`), "gpu": 4 output blocks per item
    (4 x 2, else 4 x 1), so fewer tiles recompute the depthwise conv; split_k fills the GPU.
    """
    if kind not in DEVICE_KINDS:
        raise ValueError(f"kind must be one of {DEVICE_KINDS}, got {kind!r}")
    if depthwise:
        return _depthwise_default(geom, depthwise_default(geom, kind, profile))
    tiled = None if prologue else tiled_default(geom, tiled_min_groups)
    if tiled is not None:
        return tiled

    def items(ocb, wb):
        return ceildiv(geom.o4, ocb) * geom.oh * geom.n * ceildiv(geom.ow, wb)

    def extents(ocb, wb):
        return geom.n * ceildiv(geom.ow, wb), geom.oh, ceildiv(geom.o4, ocb)

    def shrunk(target):
        ocb, wb = 4, 4
        while ocb > 1 and items(ocb, wb) < target:
            ocb //= 2
        while wb > 1 and items(ocb, wb) < target:
            wb //= 2
        return ocb, wb

    if kind == "cpu":
        return ConvConfig(oc_block=4, w_block=4, work_group=(8, 4, 1))
    if kind == "mobile":
        ocb, wb = shrunk(_MIN_WORK_ITEMS)
        return ConvConfig(oc_block=ocb, w_block=wb, work_group=(8, 4, 1))
    # "gpu"
    blocks = (geom.cg if geom.groups > 1 else geom.c) // LANES
    aligned = geom.groups == 1 or (geom.cg % LANES == 0 and geom.og % LANES == 0)
    if not aligned or blocks < 2:
        ocb, wb = shrunk(_GPU_WORK_ITEMS // 2)
        return ConvConfig(ocb, wb, fill_work_group(extents(ocb, wb), 64, max_x=16))
    max_split = min(_MAX_SPLIT, blocks // 2)
    best = None
    tiles = ((4, 2), (4, 1)) if prologue else ((2, 4) if geom.kh * geom.kw > 1 else (2, 2), (1, 4))
    for ocb, wb in tiles:
        split = 1
        while items(ocb, wb) * split < _GPU_WORK_ITEMS and split * 2 <= max_split:
            split *= 2
        if best is None or items(ocb, wb) * split > best[0]:
            best = (items(ocb, wb) * split, ocb, wb, split)
        if items(ocb, wb) * split >= _GPU_WORK_ITEMS:
            break
    _, ocb, wb, split = best
    per_slice = min(64, 256 // split, _MAX_LOCAL_BYTES // (LANES * 4 * ocb * wb * split))
    return ConvConfig(ocb, wb, fill_work_group(extents(ocb, wb), per_slice, max_x=16, max_z=64 // split), split)


#: Depthwise defaults per device class or device profile name (data; a profile's name wins
#: over its class, so one device gets its own entry without touching its class). Depthwise
#: convs share no input pixel across channel blocks, so a tile is one channel block.
#: Keys: ``w_block``; ``work_group`` fixed, or ``threads``: a 2-D work group of that many
#: items filled along the output columns, then rows (:func:`fill_work_group`), or with
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

#: Configs of the local-memory tiled kernel (``ConvConfig.tiled``) a conv gets by default
#: (:func:`tiled_default`): (oc_block, w_block, work group, k_chunk, split_k). 1x1 convs take the
#: first of :data:`TILED_CONFIGS` that launches enough work groups (smaller tiles, more K slices
#: for the small maps), stem convs (one input channel block: K is the taps) :data:`TILED_STEM`.
#: From ``benchmarks/conv_configs.py --grid tiled`` on ResNet-50's 23 layers on the H200
#: (benchmarks/results/conv_configs_tiled_buffer-nvidia-h200.json, 27 tiled configs): within 20%
#: of the best tiled config on each 1x1 layer, and 1.3-2.0x the direct kernel where it ran before.
TILED_CONFIGS = ((2, 2, (16, 4, 1), 4, 4), (1, 2, (16, 4, 1), 4, 4), (1, 1, (16, 2, 1), 4, 8))
TILED_STEM = (1, 4, (16, 8, 1), 4, 1)


def tiled_default(geom: "ConvGeometry", min_groups: int) -> "ConvConfig | None":
    """The tiled config of dense conv ``geom`` that launches at least ``min_groups`` work groups
    (``DeviceProfile.tiled_min_groups``; 0: never), or None (the direct kernel). Only 1x1 convs
    and stem convs qualify: on ResNet-50's 3x3 convs the tiled kernel won only on the 56x56 maps
    (3% and 10%) and lost by up to 3.6x on the smaller ones."""
    stem = geom.c4 == 1 and geom.kh * geom.kw > 1
    if min_groups <= 0 or geom.groups != 1 or not (geom.kh * geom.kw == 1 or stem):
        return None
    for ocb, wb, work_group, k_chunk, split in (TILED_STEM,) if stem else TILED_CONFIGS:
        groups = geom.n * ceildiv(geom.oh * geom.ow, work_group[0] * wb) * ceildiv(geom.o4, work_group[1] * ocb)
        if groups >= min_groups:
            return ConvConfig(ocb, wb, work_group, split, tiled=True, k_chunk=k_chunk)
    return None


#: Layer classes a :data:`DEPTHWISE_DEFAULTS` entry may override keys for (``classes``).
DEPTHWISE_CLASSES = {
    "stride2": lambda g: max(g.strides) > 1,
    "small": lambda g: g.oh * g.ow <= 14 * 14,  # MobileNet's last stages: launch-bound
}

_DEPTHWISE_KEYS = {"w_block", "work_group", "threads", "register_window", "flat", "placement", "classes"}


def depthwise_default(geom: "ConvGeometry", kind: str, profile: str | None = None) -> dict:
    """The :data:`DEPTHWISE_DEFAULTS` entry of depthwise conv ``geom`` on device class ``kind``
    (or profile ``profile`` when the table has it), its layer classes' overrides applied."""
    key = profile if profile in DEPTHWISE_DEFAULTS else kind
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


def _depthwise_default(geom: "ConvGeometry", entry: dict) -> ConvConfig:
    """One :func:`depthwise_default` entry as the ConvConfig of conv ``geom``."""
    wb, flat = entry["w_block"], entry.get("flat", False)
    if flat:
        work_group = (entry["threads"], 1, 1)
    elif "threads" in entry:
        work_group = fill_work_group((geom.n * ceildiv(geom.ow, wb), geom.oh, 1), entry["threads"], max_x=32)
    else:
        work_group = entry["work_group"]
    return ConvConfig(1, wb, work_group, register_window=entry["register_window"] and geom.o == geom.c, flat=flat)


#: Work items below which :func:`default_config` shrinks the register tile ("mobile").
_MIN_WORK_ITEMS = 1024
#: Work items x split_k that fill a big GPU ("gpu"; H200: 132 SMs x ~256).
_GPU_WORK_ITEMS = 32768
#: Largest split_k :func:`default_config` picks.
_MAX_SPLIT = 32
#: Local memory a kernel may use: the OpenCL minimum for GPUs (NVIDIA gives 48 KiB, Adreno 32 KiB).
_MAX_LOCAL_BYTES = 32 * 1024
#: Kernel windows up to this many taps are fully unrolled (3x3: +30% on PoCL buffers).
_UNROLL_TAPS = 9


def _ints(value, name, what):
    """``value`` (an int or a sequence of ints) as a tuple of Python ints."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return (int(value),)
    try:
        items = tuple(value)
    except TypeError:
        items = None
    if items is None or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in items):
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return tuple(int(v) for v in items)


def _pair(value, name):
    value = _ints(value, name, "an int or a pair of ints")
    if len(value) not in (1, 2):
        raise ValueError(f"{name} must be an int or a pair of ints, got {value!r}")
    return value * 2 if len(value) == 1 else value


def _padding(padding):
    """int, (pad_h, pad_w) or (top, left, bottom, right) -> (top, left, bottom, right)."""
    what = "an int, a pair or (top, left, bottom, right)"
    padding = _ints(padding, "padding", what)
    if len(padding) not in (1, 2, 4):
        raise ValueError(f"padding must be {what}, got {padding!r}")
    padding = padding * (4 // len(padding))
    if min(padding) < 0:
        raise ValueError(f"padding must be >= 0, got {padding}")
    return padding


@dataclass(frozen=True)
class ConvGeometry:
    """A conv2d's logical sizes (NCHW / OIHW), validated, with its output size."""

    n: int
    c: int
    h: int
    w: int
    o: int
    kh: int
    kw: int
    strides: tuple[int, int]
    padding: tuple[int, int, int, int]  # top, left, bottom, right
    dilation: tuple[int, int]
    groups: int

    @property
    def oh(self) -> int:
        pt, _, pb, _ = self.padding
        return (self.h + pt + pb - self.dilation[0] * (self.kh - 1) - 1) // self.strides[0] + 1

    @property
    def ow(self) -> int:
        _, pl, _, pr = self.padding
        return (self.w + pl + pr - self.dilation[1] * (self.kw - 1) - 1) // self.strides[1] + 1

    @property
    def c4(self) -> int:
        return blocked(self.c)

    @property
    def o4(self) -> int:
        return blocked(self.o)

    @property
    def cg(self) -> int:
        """Input channels per group."""
        return self.c // self.groups

    @property
    def og(self) -> int:
        """Output channels per group."""
        return self.o // self.groups

    @property
    def is_depthwise(self) -> bool:
        """One input channel per group (``groups == C > 1``); O = C x multiplier."""
        return self.groups > 1 and self.groups == self.c

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.o, self.oh, self.ow)

    @property
    def flops(self) -> int:
        """Multiply-adds x 2 of the logical conv (padding channels not counted)."""
        return 2 * self.n * self.o * self.oh * self.ow * self.cg * self.kh * self.kw


def conv2d_geometry(
    data_shape, weight_shape, strides=1, padding=0, dilation=1, groups=1, names=("data_shape", "weight_shape")
) -> ConvGeometry:
    """Validate a conv2d's NCHW data / OIHW weight shapes and attributes.

    Raises ValueError naming the culprit; ``names`` are what the caller calls
    the data and weight (``ops.conv2d`` passes ``("x", "w")``).
    """
    dname, wname = names
    data_shape = tuple(int(d) for d in data_shape)
    weight_shape = tuple(int(d) for d in weight_shape)
    if len(data_shape) != 4:
        raise ValueError(f"{dname} must be NCHW (4-d), got {data_shape}")
    if len(weight_shape) != 4:
        raise ValueError(f"{wname} must be OIHW (4-d), got {weight_shape}")
    n, c, h, w = data_shape
    o, i, kh, kw = weight_shape
    if min(data_shape) < 1 or min(weight_shape) < 1:
        raise ValueError(f"empty axis: {dname} {data_shape}, {wname} {weight_shape}")
    stride, dilation = _pair(strides, "strides"), _pair(dilation, "dilation")
    if min(stride) < 1 or min(dilation) < 1:
        raise ValueError(f"strides and dilation must be >= 1, got strides {stride}, dilation {dilation}")
    if not isinstance(groups, numbers.Integral) or isinstance(groups, bool) or groups < 1:
        raise ValueError(f"groups must be a positive int, got {groups!r}")
    if c % groups or o % groups:
        raise ValueError(
            f"groups={groups} must divide the input channels ({dname} C={c}) and output channels ({wname} O={o})"
        )
    if i != c // groups:
        raise ValueError(
            f"{wname} {weight_shape} has {i} input channels per group; {dname} has C={c} in "
            f"groups={groups}, so it needs C/groups = {c // groups}"
        )
    geom = ConvGeometry(n, c, h, w, o, kh, kw, stride, _padding(padding), dilation, int(groups))
    if geom.oh < 1 or geom.ow < 1:
        raise ValueError(
            f"empty output: {dname} {h}x{w} with padding {geom.padding} is smaller than the "
            f"dilated kernel {dilation[0] * (kh - 1) + 1}x{dilation[1] * (kw - 1) + 1}"
        )
    return geom


def _work_group(extent: int, want: int) -> int:
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


def all_of(conds):
    """Conjunction of TIR conditions; ``True`` for none (the simplifier drops it)."""
    out = None
    for cond in conds:
        out = cond if out is None else T.And(out, cond)
    return T.bool(True) if out is None else out


class ConvWindow:
    """Where the taps of a tile of ``wb`` output columns read a conv's input, and which of
    those reads need guards: zeroing only where a stored output reads padding; clamps also
    where an overhanging tile column reads past W. ``span``: input columns under a tile's
    columns and the window's width (``register_window``)."""

    def __init__(self, geom: ConvGeometry, wt: int, wb: int):
        self.h, self.w, self.kh, self.kw = geom.h, geom.w, geom.kh, geom.kw
        (self.sh, self.sw), (self.dh, self.dw) = geom.strides, geom.dilation
        self.pt, self.pl, _, _ = geom.padding
        self.zero_top, self.zero_left = self.pt > 0, self.pl > 0
        self.zero_bottom = (geom.oh - 1) * self.sh - self.pt + (self.kh - 1) * self.dh > self.h - 1
        self.zero_right = (geom.ow - 1) * self.sw - self.pl + (self.kw - 1) * self.dw > self.w - 1
        self.clamp_right = (wt * wb - 1) * self.sw - self.pl + (self.kw - 1) * self.dw > self.w - 1
        self.span = (wb - 1) * self.sw + (self.kw - 1) * self.dw + 1

    def inside(self, ih, iw):
        conds = []
        if self.zero_top:
            conds.append(ih >= 0)
        if self.zero_bottom:
            conds.append(ih < self.h)
        if self.zero_left:
            conds.append(iw >= 0)
        if self.zero_right:
            conds.append(iw < self.w)
        return all_of(conds)

    def clamp_row(self, ih):
        if self.zero_top:
            ih = T.max(ih, 0)
        if self.zero_bottom:
            ih = T.min(ih, self.h - 1)
        return ih

    def clamp_col(self, iw):
        if self.zero_left:
            iw = T.max(iw, 0)
        if self.zero_right or self.clamp_right:
            iw = T.min(iw, self.w - 1)
        return iw

    def raw_row(self, r, k):
        return r * self.sh - self.pt + k * self.dh

    def raw_col(self, x, k):
        return x * self.sw - self.pl + k * self.dw


def check_conv_args(epilogue, dtype, config, scope, weight_scope, out_scope, residual_scope):
    """The checks every direct-conv factory makes; returns (scope, weight_scope, out_scope,
    residual_scope) with the defaults filled in (weights: the weight texture next to a texture X)."""
    if not isinstance(epilogue, Epilogue):
        raise TypeError(f"epilogue must be an Epilogue, got {type(epilogue).__name__}")
    if not isinstance(config, ConvConfig):
        raise TypeError(f"config must be a ConvConfig, got {type(config).__name__}")
    check_dtype(dtype)
    scope, out_scope, residual_scope = check_io_scopes(scope, out_scope, residual_scope)
    if weight_scope is None:
        weight_scope = TEXTURE_WEIGHT if scope == TEXTURE else BUFFER
    check_scope(weight_scope, (TEXTURE_WEIGHT, BUFFER))
    return scope, weight_scope, out_scope, residual_scope


def _direct_conv(geom: ConvGeometry, mode: str, epilogue, dtype, config, scope, weight_scope, name, prologue=None,
                 out_scope=None, residual_scope=None):
    """The shared skeleton: tiling, guards, accumulation body ``mode``, epilogue and stores.
    ``prologue`` (:class:`DepthwisePrologue`, a 1x1 conv only): X is the depthwise conv's input."""
    if config is None:
        config = default_config(geom, depthwise=mode == "depthwise")
    scope, weight_scope, out_scope, residual_scope = check_conv_args(
        epilogue, dtype, config, scope, weight_scope, out_scope, residual_scope)

    n, c, h, w, o = geom.n, geom.c, geom.h, geom.w, geom.o
    kh, kw, cg, og = geom.kh, geom.kw, geom.cg, geom.og
    (sh, sw), (dh, dw) = geom.strides, geom.dilation
    pt, pl, _, _ = geom.padding
    oh, ow, c4, o4 = geom.oh, geom.ow, geom.c4, geom.o4

    ocb, wb = config.oc_block, config.w_block
    uses_lanes = mode == "grouped" or (mode == "depthwise" and o != c)
    if mode == "blocked" and geom.groups > 1:
        # A tile must not straddle two groups: it shares its input pixels.
        ocb = max(d for d in range(1, ocb + 1) if (og // LANES) % d == 0)
    ot, wt = ceildiv(o4, ocb), ceildiv(ow, wb)
    cols = n * wt
    gx = _work_group(cols, config.work_group[0])
    gy = _work_group(oh, config.work_group[1])
    gz = _work_group(ot, config.work_group[2])
    blocks_per_group = cg // LANES if geom.groups > 1 else c // LANES
    split = config.split_k
    if split > 1 and mode != "blocked":
        raise ValueError(
            f"config.split_k={split} splits the input channel blocks of a dense (or block-aligned grouped) "
            f"conv; this conv takes the {mode} path (use split_k=1)"
        )
    # Like the work group: no more slices than channel blocks (a C < 4 conv has none).
    split = max(1, min(split, blocks_per_group))
    partial_bytes = split * ocb * wb * LANES * gz * gy * gx * (2 if dtype == "float16" else 4)
    if split > 1 and partial_bytes > _MAX_LOCAL_BYTES:
        raise ValueError(
            f"config {config} needs {partial_bytes} bytes of local memory for the split_k partial sums, "
            f"more than {_MAX_LOCAL_BYTES} (every OpenCL GPU has that much); use a smaller tile, work group or split_k"
        )

    win = ConvWindow(prologue.geometry if prologue else geom, wt, wb)
    x_shape = (n, c4, win.h, win.w, 4)
    dw_taps = win.kh * win.kw if prologue else 1
    fused = prologue is not None
    dw_shape = (c4, 1, win.kh, win.kw, 4)
    ob_overhang = o4 % ocb != 0
    ow_overhang = ow % wb != 0
    # The per-lane body (general groups, depthwise x M) is a fallback: keep its code small.
    unroll_window = kh * kw <= _UNROLL_TAPS and not uses_lanes
    window = T.unroll if unroll_window else T.serial
    zero = T.Cast(dtype, 0)

    def out_block(t, ob):
        """Output channel block of tile ``t``'s ``ob``-th block, clamped for reads."""
        return T.min(t * ocb + ob, o4 - 1) if ob_overhang else t * ocb + ob

    def store_ok(t, ob, x):
        conds = []
        if ob_overhang:
            conds.append(t * ocb + ob < o4)
        if ow_overhang:
            conds.append(x < ow)
        return all_of(conds)

    def out_channel(t, ob, lane):
        """Logical output channel of a lane, clamped to a real one (padding lanes have zero weights)."""
        return T.min((t * ocb + ob) * LANES + lane, o - 1)

    def in_channel(t, ob, lane, ci):
        """Input channel that output lane ``lane`` of block ``ob`` reads at its group's ``ci``-th channel."""
        if mode == "depthwise":
            return out_channel(t, ob, lane) // multiplier
        return out_channel(t, ob, lane) // og * cg + ci

    def first_block(t):
        """First input block of tile ``t``'s group (a tile lies in one group)."""
        return (t * ocb * LANES) // og * blocks_per_group if geom.groups > 1 else 0

    tail = 0 if geom.groups > 1 else c % LANES
    multiplier = o // c if mode == "depthwise" else 0
    register_window = config.register_window
    if register_window and multiplier != 1:
        what = f"multiplier {multiplier}" if multiplier else f"the {mode} path"
        raise ValueError(
            f"config.register_window=True is for depthwise convs with multiplier 1; this conv has {what} "
            f"(use register_window=False)"
        )
    # Do the 4 lanes of an output block read input channels of one input block?
    # Depthwise: when the multiplier divides 4 or 4 divides it; grouped: when a
    # block lies in one group (then they all read one channel).
    one_block = (LANES % multiplier == 0 or multiplier % LANES == 0) if multiplier else og % LANES == 0
    span = win.span if register_window or fused else 1  # input pixels a depthwise row reads

    # Hygienic macros: they see this factory's helpers; the kernel's buffers and
    # loop variables come in as arguments.
    @T.macro
    def load_pixel(X, xp, i, nn, cb, ih, iw):
        """``xp[i]`` = pixel ``(ih, iw)`` of input block ``cb``, 0 in the padding."""
        # Read at the clamped coordinate, then zero outside: branch-free. The select is
        # per lane: a vectorized T.Select on a scalar condition miscompiles (TVM 0.27).
        for lane in T.vectorized(4):
            xp[i, lane] = X[nn, cb, win.clamp_row(ih), win.clamp_col(iw), lane]
        for lane in T.unroll(4):
            xp[i, lane] = T.Select(win.inside(ih, iw), xp[i, lane], zero)

    @T.macro
    def load_input(X, xp, wi, nn, cb, r, x, k_h, k_w):
        """``xp[wi]`` = input pixel of block ``cb`` read by output ``(r, x)`` at tap ``(k_h, k_w)``."""
        load_pixel(X, xp, wi, nn, cb, win.raw_row(r, k_h), win.raw_col(x, k_w))

    @T.macro
    def accumulate_depthwise_registers(X, W, xs, wr, acc, nn, r, x0, t, blocks, block_of):
        """Multiplier 1, ``register_window``: of the ``blocks`` channel blocks ``block_of(t, ob)``,
        the window's weights once, then per kernel row the ``span`` input pixels under the
        tile's columns once; column ``wi`` at tap ``k_w`` reads span pixel ``wi * sw + k_w * dw``
        (the depthwise window ``win``: this conv's, or its depthwise prologue's)."""
        for ob in T.unroll(blocks):
            for k_h in T.unroll(win.kh):
                for k_w in T.unroll(win.kw):
                    for lane in T.vectorized(4):
                        wr[ob, k_h * win.kw + k_w, lane] = W[block_of(t, ob), 0, k_h, k_w, lane]
        for k_h in T.unroll(win.kh):
            for ob in T.unroll(blocks):
                for j in T.unroll(win.span):
                    load_pixel(X, xs, j, nn, block_of(t, ob), win.raw_row(r, k_h), x0 * win.sw - win.pl + j)
                for k_w in T.unroll(win.kw):
                    for wi in T.unroll(wb):
                        for lane in T.unroll(4):
                            acc[ob * wb + wi, lane] = acc[ob * wb + wi, lane] + (
                                xs[wi * win.sw + k_w * win.dw, lane] * wr[ob, k_h * win.kw + k_w, lane]
                            )

    def own_block(t, ob):
        """The depthwise prologue's one block: the 1x1 conv's input block ``t`` itself."""
        return t

    @T.macro
    def depthwise_prologue(X, W_dw, Bias_dw, xs, wd, xp, tmp, nn, cin, r, x0):
        """``xp[wi]`` = the 1x1 conv's input pixel of block ``cin`` at ``(r, x0 + wi)``: the
        depthwise conv of X with its epilogue, computed in registers (never stored)."""
        for wi in T.unroll(wb):
            for lane in T.unroll(4):
                xp[wi, lane] = zero
        accumulate_depthwise_registers(X, W_dw, xs, wd, xp, nn, r, x0, cin, 1, own_block)
        for wi in T.unroll(wb):
            apply_epilogue(xp, wi, tmp, prologue.epilogue, Bias_dw, Bias_dw, nn, cin, r, x0 + wi)

    @T.macro
    def accumulate_blocked(X, W, xp, wp, acc, nn, r, x0, t, cin, cb, lanes, W_dw, Bias_dw, xs, wd, tmp):
        """Input block ``cin`` (the ``cb``-th of its group), its first ``lanes`` channels, into the
        tile. With a depthwise ``prologue`` (a 1x1 conv) the input pixels are computed from X."""
        for k_h in window(kh):
            for k_w in window(kw):
                if not fused:
                    for wi in T.unroll(wb):
                        load_input(X, xp, wi, nn, cin, r, x0 + wi, k_h, k_w)
                else:
                    depthwise_prologue(X, W_dw, Bias_dw, xs, wd, xp, tmp, nn, cin, r, x0)
                for ob in T.unroll(ocb):
                    for j in T.unroll(lanes):
                        for lane in T.vectorized(4):
                            wp[ob, j, lane] = W[out_block(t, ob), cb * 4 + j, k_h, k_w, lane]
                # acc += x.s0 * w0 + x.s1 * w1 + x.s2 * w2 + x.s3 * w3
                for ob in T.unroll(ocb):
                    for wi in T.unroll(wb):
                        for j in T.unroll(lanes):
                            for lane in T.unroll(4):
                                acc[ob * wb + wi, lane] = acc[ob * wb + wi, lane] + xp[wi, j] * wp[ob, j, lane]

    @T.macro
    def accumulate_lanes(X, W, xp, wp, acc, nn, r, x0, t):
        """Each output lane reads its own input channel :func:`in_channel` (grouped, depthwise x M).

        One weight pixel serves the 4 lanes; the input value is picked from the pixel
        holding the lane's channel (one pixel for all lanes when ``one_block``).
        """
        for ci in T.serial(cg):
            for k_h in window(kh):
                for k_w in window(kw):
                    for ob in T.unroll(ocb):
                        for lane in T.vectorized(4):
                            wp[ob, 0, lane] = W[out_block(t, ob), ci, k_h, k_w, lane]
                        if one_block:
                            for wi in T.unroll(wb):
                                load_input(X, xp, wi, nn, in_channel(t, ob, 0, ci) // 4, r, x0 + wi, k_h, k_w)
                            for wi in T.unroll(wb):
                                for lane in T.unroll(4):
                                    acc[ob * wb + wi, lane] = acc[ob * wb + wi, lane] + (
                                        xp[wi, in_channel(t, ob, lane, ci) % 4] * wp[ob, 0, lane]
                                    )
                        else:
                            for lane in T.unroll(4):
                                for wi in T.unroll(wb):
                                    load_input(X, xp, wi, nn, in_channel(t, ob, lane, ci) // 4, r, x0 + wi, k_h, k_w)
                                    acc[ob * wb + wi, lane] = acc[ob * wb + wi, lane] + (
                                        xp[wi, in_channel(t, ob, lane, ci) % 4] * wp[ob, 0, lane]
                                    )

    @T.macro
    def accumulate_depthwise(X, W, xp, wp, acc, nn, r, x0, t):
        """Multiplier 1: output block ``b`` reads input block ``b``, lane by lane."""
        for k_h in window(kh):
            for k_w in window(kw):
                for ob in T.unroll(ocb):
                    for lane in T.vectorized(4):
                        wp[ob, 0, lane] = W[out_block(t, ob), 0, k_h, k_w, lane]
                    for wi in T.unroll(wb):
                        load_input(X, xp, wi, nn, out_block(t, ob), r, x0 + wi, k_h, k_w)
                    for wi in T.unroll(wb):
                        for lane in T.unroll(4):
                            acc[ob * wb + wi, lane] = acc[ob * wb + wi, lane] + xp[wi, lane] * wp[ob, 0, lane]

    @T.macro
    def store_tile(Y, Bias, Residual, acc, tmp, nn, r, x0, t):
        """Epilogue and store of the tile's pixels that lie inside the output."""
        for ob in T.unroll(ocb):
            for wi in T.unroll(wb):
                if store_ok(t, ob, x0 + wi):
                    store_output_pixel(
                        Y, acc, ob * wb + wi, tmp, epilogue, Bias, Residual, nn, t * ocb + ob, r, x0 + wi, o
                    )

    @T.macro
    def conv_tile(X, W_dw, Bias_dw, W, Bias, Residual, Y, t, r, i, valid):
        """The tile of channel tile ``t``, output row ``r`` and column tile ``i`` (image ``i // wt``)."""
        with T.sblock("conv2d"):
            # Tile: channel blocks vt*ocb.., output row voh, columns vwt*wb.. of image nn.
            vt = T.axis.spatial(ot, t)
            voh = T.axis.spatial(oh, r)
            nn = T.axis.spatial(n, i // wt)
            vwt = T.axis.spatial(wt, i % wt)
            T.where(valid)
            acc = T.sblock_alloc_buffer((ocb * wb, 4), dtype, scope="local")
            xp = T.sblock_alloc_buffer((wb, 4), dtype, scope="local")
            wp = T.sblock_alloc_buffer((ocb, 4, 4), dtype, scope="local")
            tmp = T.sblock_alloc_buffer((4,), dtype, scope="local")
            xs = T.sblock_alloc_buffer((span, 4), dtype, scope="local")
            wr = T.sblock_alloc_buffer((ocb, kh * kw if register_window else 1, 4), dtype, scope="local")
            wd = T.sblock_alloc_buffer((1, dw_taps, 4), dtype, scope="local")
            for ob in T.unroll(ocb):
                for wi in T.unroll(wb):
                    for lane in T.unroll(4):
                        acc[ob * wb + wi, lane] = zero
            if mode == "blocked":
                for cb in T.serial(blocks_per_group):
                    accumulate_blocked(
                        X, W, xp, wp, acc, nn, voh, vwt * wb, vt, first_block(vt) + cb, cb, 4, W_dw, Bias_dw, xs, wd, tmp
                    )
                if tail > 0:  # groups == 1, C % 4 channels in the last block
                    accumulate_blocked(
                        X, W, xp, wp, acc, nn, voh, vwt * wb, vt, blocks_per_group, blocks_per_group, tail,
                        W_dw, Bias_dw, xs, wd, tmp,
                    )
            elif register_window:
                accumulate_depthwise_registers(X, W, xs, wr, acc, nn, voh, vwt * wb, vt, ocb, out_block)
            elif mode == "depthwise" and multiplier == 1:
                accumulate_depthwise(X, W, xp, wp, acc, nn, voh, vwt * wb, vt)
            else:
                accumulate_lanes(X, W, xp, wp, acc, nn, voh, vwt * wb, vt)
            store_tile(Y, Bias, Residual, acc, tmp, nn, voh, vwt * wb, vt)

    # config.flat: item k of the 1-D grid owns tile (image, channel tile, row, column tile)
    # in output memory order, k = ((nn * ot + t) * oh + r) * wt + column tile.
    tiles = n * ot * oh * wt
    gf = _work_group(tiles, config.work_group[0])

    def plain_kernel():
        @T.prim_func(s_tir=True)
        def func(
            data: T.handle, dw_weight: T.handle, dw_bias: T.handle, weight: T.handle, bias: T.handle,
            residual: T.handle, out: T.handle,
        ):
            T.func_attr({"global_symbol": name, "tirx.noalias": True})
            X = T.match_buffer(data, x_shape, dtype, scope=scope)
            W_dw = T.match_buffer(dw_weight, dw_shape, dtype, scope=weight_scope)
            Bias_dw = T.match_buffer(dw_bias, (c4, 4), dtype, scope=BUFFER)
            W = T.match_buffer(weight, (o4, cg, kh, kw, 4), dtype, scope=weight_scope)
            Bias = T.match_buffer(bias, (o4, 4), dtype, scope=BUFFER)
            Residual = T.match_buffer(residual, (n, o4, oh, ow, 4), dtype, scope=residual_scope)
            Y = T.match_buffer(out, (n, o4, oh, ow, 4), dtype, scope=out_scope)
            if config.flat:
                for bx in T.thread_binding(ceildiv(tiles, gf), thread="blockIdx.x"):
                    for tx in T.thread_binding(gf, thread="threadIdx.x"):
                        conv_tile(
                            X, W_dw, Bias_dw, W, Bias, Residual, Y, (bx * gf + tx) // (oh * wt) % ot, (bx * gf + tx) // wt % oh,
                            (bx * gf + tx) // (ot * oh * wt) * wt + (bx * gf + tx) % wt, bx * gf + tx < tiles,
                        )
            else:
                for bz in T.thread_binding(ceildiv(ot, gz), thread="blockIdx.z"):
                    for by in T.thread_binding(ceildiv(oh, gy), thread="blockIdx.y"):
                        for bx in T.thread_binding(ceildiv(cols, gx), thread="blockIdx.x"):
                            for tz in T.thread_binding(gz, thread="threadIdx.z"):
                                for ty in T.thread_binding(gy, thread="threadIdx.y"):
                                    for tx in T.thread_binding(gx, thread="threadIdx.x"):
                                        conv_tile(
                                            X, W_dw, Bias_dw, W, Bias, Residual, Y, bz * gz + tz, by * gy + ty, bx * gx + tx,
                                            bz * gz + tz < ot and by * gy + ty < oh and bx * gx + tx < cols,
                                        )

        return func

    # split_k: the work group's z dim holds gz channel tiles x ``split`` slices of the
    # input channel blocks (slice k walks blocks k, k + split, ...). Each item writes its
    # partial tile to local memory (item index fastest: conflict-free); after the barrier
    # the slice-0 item of each tile sums the slices, applies the epilogue and stores.
    items = gz * gy * gx
    rounds = ceildiv(blocks_per_group, split)
    uneven = blocks_per_group % split != 0

    @T.macro
    def accumulate_slice(X, W, xp, wp, acc, nn, r, x0, t, k, W_dw, Bias_dw, xs, wd, tmp):
        for i in T.serial(rounds):
            if uneven:
                if i * split + k < blocks_per_group:
                    accumulate_blocked(X, W, xp, wp, acc, nn, r, x0, t, first_block(t) + i * split + k, i * split + k, 4, W_dw, Bias_dw, xs, wd, tmp)
            else:
                accumulate_blocked(X, W, xp, wp, acc, nn, r, x0, t, first_block(t) + i * split + k, i * split + k, 4, W_dw, Bias_dw, xs, wd, tmp)
        if tail > 0:
            if k == split - 1:
                accumulate_blocked(X, W, xp, wp, acc, nn, r, x0, t, blocks_per_group, blocks_per_group, tail, W_dw, Bias_dw, xs, wd, tmp)

    def split_kernel():
        @T.prim_func(s_tir=True)
        def func_split(
            data: T.handle, dw_weight: T.handle, dw_bias: T.handle, weight: T.handle, bias: T.handle,
            residual: T.handle, out: T.handle,
        ):
            T.func_attr({"global_symbol": name, "tirx.noalias": True})
            X = T.match_buffer(data, x_shape, dtype, scope=scope)
            W_dw = T.match_buffer(dw_weight, dw_shape, dtype, scope=weight_scope)
            Bias_dw = T.match_buffer(dw_bias, (c4, 4), dtype, scope=BUFFER)
            W = T.match_buffer(weight, (o4, cg, kh, kw, 4), dtype, scope=weight_scope)
            Bias = T.match_buffer(bias, (o4, 4), dtype, scope=BUFFER)
            Residual = T.match_buffer(residual, (n, o4, oh, ow, 4), dtype, scope=residual_scope)
            Y = T.match_buffer(out, (n, o4, oh, ow, 4), dtype, scope=out_scope)
            for bz in T.thread_binding(ceildiv(ot, gz), thread="blockIdx.z"):
                for by in T.thread_binding(ceildiv(oh, gy), thread="blockIdx.y"):
                    for bx in T.thread_binding(ceildiv(cols, gx), thread="blockIdx.x"):
                        with T.sblock("conv2d"):
                            partial = T.sblock_alloc_buffer((split, ocb * wb, 4, items), dtype, scope="shared")
                            # 1. slice tk // gz of tile (channel tile bz*gz + tk%gz, row, column tile)
                            for tk in T.thread_binding(gz * split, thread="threadIdx.z"):
                                for ty in T.thread_binding(gy, thread="threadIdx.y"):
                                    for tx in T.thread_binding(gx, thread="threadIdx.x"):
                                        with T.sblock("partial_sums"):
                                            acc = T.sblock_alloc_buffer((ocb * wb, 4), dtype, scope="local")
                                            xp = T.sblock_alloc_buffer((wb, 4), dtype, scope="local")
                                            wp = T.sblock_alloc_buffer((ocb, 4, 4), dtype, scope="local")
                                            xs = T.sblock_alloc_buffer((span, 4), dtype, scope="local")
                                            wd = T.sblock_alloc_buffer((1, dw_taps, 4), dtype, scope="local")
                                            tmp = T.sblock_alloc_buffer((4,), dtype, scope="local")
                                            for i in T.unroll(ocb * wb):
                                                for lane in T.unroll(4):
                                                    acc[i, lane] = zero
                                            if bz * gz + tk % gz < ot and by * gy + ty < oh and bx * gx + tx < cols:
                                                accumulate_slice(
                                                    X, W, xp, wp, acc, (bx * gx + tx) // wt, by * gy + ty,
                                                    (bx * gx + tx) % wt * wb, bz * gz + tk % gz, tk // gz,
                                                    W_dw, Bias_dw, xs, wd, tmp,
                                                )
                                            for i in T.unroll(ocb * wb):
                                                for lane in T.unroll(4):
                                                    partial[tk // gz, i, lane, ((tk % gz) * gy + ty) * gx + tx] = acc[i, lane]
                            # 2. slice 0 sums the slices and stores the tile
                            for tk in T.thread_binding(gz * split, thread="threadIdx.z"):
                                for ty in T.thread_binding(gy, thread="threadIdx.y"):
                                    for tx in T.thread_binding(gx, thread="threadIdx.x"):
                                        with T.sblock("reduce_store"):
                                            if tk < gz and bz * gz + tk < ot and by * gy + ty < oh and bx * gx + tx < cols:
                                                acc = T.sblock_alloc_buffer((ocb * wb, 4), dtype, scope="local")
                                                tmp = T.sblock_alloc_buffer((4,), dtype, scope="local")
                                                for i in T.unroll(ocb * wb):
                                                    for lane in T.unroll(4):
                                                        acc[i, lane] = partial[0, i, lane, (tk * gy + ty) * gx + tx]
                                                for k in T.serial(1, split):  # rolled: the sum is cheap, unrolled it bloats the code
                                                    for i in T.unroll(ocb * wb):
                                                        for lane in T.unroll(4):
                                                            acc[i, lane] = acc[i, lane] + partial[k, i, lane, (tk * gy + ty) * gx + tx]
                                                store_tile(
                                                    Y, Bias, Residual, acc, tmp, (bx * gx + tx) // wt, by * gy + ty,
                                                    (bx * gx + tx) % wt * wb, bz * gz + tk,
                                                )

        return func_split

    # Parse only the kernel this config uses (TVMScript parsing is the factory's main cost).
    kernel = split_kernel() if split > 1 else plain_kernel()
    inputs = ["X", "W"] if prologue is None else ["X", "W_dw", *["Bias_dw"] * prologue.epilogue.bias, "W"]
    return select_params(kernel, epilogue.params(inputs, "Y"))


def conv2d_nchw4c(
    data_shape,
    weight_shape,
    strides=1,
    padding=0,
    dilation=1,
    groups: int = 1,
    epilogue: Epilogue = Epilogue(),
    dtype: str = "float32",
    config: ConvConfig | None = None,
    scope: str = TEXTURE,
    weight_scope: str | None = None,
    out_scope: str | None = None,
    residual_scope: str | None = None,
):
    """Direct conv2d ``Y = act(conv(X, W) + bias + residual)`` on NCHW4c, any groups.

    ``data_shape`` (N, C, H, W) and ``weight_shape`` (O, C/groups, KH, KW) are the
    logical shapes; the kernel takes ``X [N, C/4, H, W, 4]`` in ``scope``,
    ``W [O/4, C/groups, KH, KW, 4]`` in ``weight_scope`` (default: the weight
    texture for a texture ``scope``, else a buffer), then ``Bias (O/4, 4)`` and
    ``Residual [N, O/4, OH, OW, 4]`` (in ``residual_scope``, default ``out_scope``) when
    ``epilogue`` asks for them, and writes ``Y [N, O/4, OH, OW, 4]`` in ``out_scope``
    (default ``scope``): a conv at a texture/buffer boundary needs no copy kernel. ``padding`` is an int, (pad_h, pad_w) or
    (top, left, bottom, right). ``config`` None: :func:`default_config` of the
    "mobile" class (``tir_adreno.strategy.conv`` passes each device's). For ``groups == C`` prefer :func:`depthwise_conv2d_nchw4c`.
    """
    geom = conv2d_geometry(data_shape, weight_shape, strides, padding, dilation, groups)
    if config is not None and config.tiled:
        if geom.groups != 1:
            raise ValueError(f"config.tiled=True is for dense convs (groups=1), got groups={geom.groups}")
        from .conv2d_tiled import conv2d_tiled_nchw4c  # it builds on this module's helpers

        return conv2d_tiled_nchw4c(data_shape, weight_shape, strides, padding, dilation, epilogue, dtype, config, scope,
                                   weight_scope, out_scope, residual_scope)
    aligned = geom.cg % LANES == 0 and geom.og % LANES == 0
    mode = "blocked" if geom.groups == 1 or aligned else "grouped"
    return _direct_conv(geom, mode, epilogue, dtype, config, scope, weight_scope, "conv2d_nchw4c", out_scope=out_scope,
                        residual_scope=residual_scope)


def depthwise_conv2d_nchw4c(
    data_shape,
    weight_shape,
    strides=1,
    padding=0,
    dilation=1,
    epilogue: Epilogue = Epilogue(),
    dtype: str = "float32",
    config: ConvConfig | None = None,
    scope: str = TEXTURE,
    weight_scope: str | None = None,
    out_scope: str | None = None,
    residual_scope: str | None = None,
):
    """Depthwise conv2d (``groups == C``), weight ``(C * multiplier, 1, KH, KW)``.

    Output channel ``o`` reads input channel ``o // multiplier``. With multiplier 1
    a work item multiplies input and weight pixels lane by lane; otherwise each
    output lane picks its input channel from the pixel holding it. Tensors and
    epilogue and ``config`` as in :func:`conv2d_nchw4c`.
    """
    data_shape = tuple(int(d) for d in data_shape)
    if len(data_shape) != 4:
        raise ValueError(f"data_shape must be NCHW (4-d), got {data_shape}")
    geom = conv2d_geometry(data_shape, weight_shape, strides, padding, dilation, groups=data_shape[1])
    return _direct_conv(
        geom, "depthwise", epilogue, dtype, config, scope, weight_scope, "depthwise_conv2d_nchw4c", out_scope=out_scope,
        residual_scope=residual_scope,
    )


@dataclass(frozen=True)
class DepthwisePrologue:
    """A depthwise conv (multiplier 1) with its epilogue (bias, activation), computed in a 1x1
    conv's registers as that conv's input pixels: the intermediate tensor never exists."""

    geometry: ConvGeometry
    epilogue: Epilogue = Epilogue()


def depthwise_pointwise_geometry(data_shape, dw_weight_shape, pw_weight_shape, strides=1, padding=0, dilation=1):
    """(depthwise geometry, 1x1 conv geometry) of a fusable pair, validated: depthwise weights
    ``(C, 1, KH, KW)`` (multiplier 1), 1x1 weights ``(O, C, 1, 1)``; ValueError naming the culprit."""
    data_shape = tuple(int(d) for d in data_shape)
    if len(data_shape) != 4:
        raise ValueError(f"data_shape must be NCHW (4-d), got {data_shape}")
    dw = conv2d_geometry(data_shape, dw_weight_shape, strides, padding, dilation, groups=data_shape[1],
                         names=("data_shape", "dw_weight_shape"))
    if dw.o != dw.c:
        raise ValueError(f"dw_weight_shape {tuple(dw_weight_shape)} must have O = C = {dw.c} (depthwise multiplier 1)")
    pw_weight_shape = tuple(int(d) for d in pw_weight_shape)
    if len(pw_weight_shape) != 4 or pw_weight_shape[2:] != (1, 1):
        raise ValueError(f"pw_weight_shape must be (O, {dw.c}, 1, 1) (a 1x1 conv), got {pw_weight_shape}")
    pw = conv2d_geometry(dw.out_shape, pw_weight_shape, names=("depthwise output", "pw_weight_shape"))
    return dw, pw


def depthwise_pointwise_nchw4c(data_shape, dw_weight_shape, pw_weight_shape, strides=1, padding=0, dilation=1,
                               dw_epilogue: Epilogue = Epilogue(), epilogue: Epilogue = Epilogue(), dtype: str = "float32",
                               config: ConvConfig | None = None, scope: str = TEXTURE, weight_scope: str | None = None,
                               out_scope: str | None = None, residual_scope: str | None = None):
    """Depthwise conv then 1x1 conv in one kernel: ``Y = act(conv1x1(act_dw(dwconv(X) + Bias_dw),
    W) + Bias + Residual)`` (MobileNet's inverted-residual tail).

    The 1x1 conv's tile (``config``: ``oc_block`` output blocks x ``w_block`` columns, work
    group, ``split_k``) walks the middle channel blocks; for each it computes the depthwise
    output of its ``w_block`` pixels in registers (window weights once, each input row's pixels
    once) and multiplies them in. Each of the O/4 / ``oc_block`` tiles of a pixel recomputes
    the depthwise conv: the price of one launch and one activation round trip less.

    Kernel parameters: ``X [N, C/4, H, W, 4]``, ``W_dw [C/4, 1, KH, KW, 4]``, ``Bias_dw (C/4, 4)``
    when ``dw_epilogue.bias``, ``W [O/4, C, 1, 1, 4]``, then ``epilogue``'s Bias / Residual, ``Y``.
    ``strides``/``padding``/``dilation`` are the depthwise conv's (the 1x1 has none). ``X`` is
    read in ``scope``, ``Y`` written in ``out_scope`` and ``Residual`` read in ``residual_scope``
    (defaults as in :func:`conv2d_nchw4c`).
    """
    if not isinstance(dw_epilogue, Epilogue) or dw_epilogue.residual:
        raise ValueError(f"dw_epilogue must be an Epilogue without residual, got {dw_epilogue!r}")
    dw, pw = depthwise_pointwise_geometry(data_shape, dw_weight_shape, pw_weight_shape, strides, padding, dilation)
    return _direct_conv(pw, "blocked", epilogue, dtype, config, scope, weight_scope, "depthwise_pointwise_nchw4c",
                        DepthwisePrologue(dw, dw_epilogue), out_scope=out_scope, residual_scope=residual_scope)
