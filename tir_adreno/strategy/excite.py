"""Squeeze-excitation schedules (``primfuncs.excite``): the excitation kernel and its split form,
the depthwise conv with its excitation, the pool with its 1x1 conv (``pooled_pointwise``) and a
wide GPU's classifier-head GEMV."""

from __future__ import annotations

from primfuncs import excite as _excite
from primfuncs._common import ceildiv, equal_slices

from tir_adreno.strategy.profile import DeviceProfile
from tir_adreno.strategy.width import is_wide


#: Work items of a squeeze-excitation work group per device class: 64 on CPU OpenCL, where a work
#: group runs on one core; 256 on mobile GPUs; the whole work group on a wide GPU, where the
#: kernel's one work group per sample runs on one of many compute units and the pool of an early
#: 112 x 112 block needs every load in flight it can get (the H200: see docs/coverage.md).
EXCITATION_THREADS = {"cpu": _excite.THREADS, "mobile": 4 * _excite.THREADS, "gpu": 16 * _excite.THREADS}


def _threads(profile: DeviceProfile) -> int:
    return min(EXCITATION_THREADS[profile.kind], profile.max_work_group_size)


def _fits(profile: DeviceProfile, channels: int, pixels: int, rows: int, threads: int) -> bool:
    """Whether such a work group's shared memory (``primfuncs.excite.shared_bytes``) fits the device's."""
    return _excite.shared_bytes(-(-channels // 4), pixels, rows, threads) <= profile.local_memory_bytes


def excitation_schedule(profile: DeviceProfile, macs: int, channels: int, pixels: int, hidden: int,
                        out_channels: int | None = None) -> dict | None:
    """Factory keywords of a squeeze-excitation kernel (``primfuncs.excite``: the pool of
    ``channels`` x ``pixels`` and the two 1x1 convs of ``macs`` multiply-adds, ``hidden`` units,
    ``out_channels`` outputs, default ``channels``), or None to keep them apart: with kernel fusion
    off (``launch_cost_macs`` 0, ``compile_model(fuse=False)``), when the convs are bigger than a
    launch is worth (a classifier head's 1x1 convs belong on the whole device), or when its shared
    memory does not fit the device's. :data:`EXCITATION_THREADS` work items: ``excitation``, one
    work group per sample; on a wide GPU (:func:`is_wide`) ``excitation_split``'s keywords
    (``channel_blocks``, ``pixel_slices``, ``loads``: :func:`excitation_split_schedule`) where it splits."""
    threads = _threads(profile)
    if not 0 < macs <= profile.launch_cost_macs or not _fits(profile, channels, pixels, hidden, threads):
        return None
    return dict(threads=threads) | excitation_split_schedule(profile, channels, pixels, hidden, out_channels or channels)


#: Pixels (of four channels) a work group of the split excitation pools, about: on the H200 (132
#: compute units) an SE block of EfficientNet-B0 then spreads over 17 (672 channels of 7 x 7) to
#: 216 (144 channels of 56 x 56) work groups.
#: None: never split (the one-work-group kernel everywhere).
EXCITATION_SPLIT_PIXELS: int | None = 512
#: Work items of a split excitation's work group (over its pool of about
#: :data:`EXCITATION_SPLIT_PIXELS` pixels; the last one's over the partial sums and the gate's
#: output blocks). Measured on the H200 (``benchmarks/excite_split.py``): EfficientNet-B0's 16
#: excitations 0.214 ms with 1024, 0.230 ms with 256.
EXCITATION_SPLIT_THREADS = 1024


def excitation_split_schedule(profile: DeviceProfile, channels: int, pixels: int, hidden: int, out_channels: int) -> dict:
    """On a wide GPU (:func:`is_wide`), where the one work group per sample of ``excitation``
    keeps one compute unit busy (25 us for EfficientNet-B0's 1152 channels of 7 x 7 on the H200,
    the pool and the two small matrix-vector products latency bound), the keywords of
    ``primfuncs.excite.excitation_split`` (one launch still): ``threads``
    (:data:`EXCITATION_SPLIT_THREADS`), ``channel_blocks`` and ``pixel_slices`` per work group, so
    that each pools about :data:`EXCITATION_SPLIT_PIXELS` pixels of four channels; {} (the one
    work group) on other devices, when that makes one work group, or when its shared memory does
    not fit the device's."""
    if not is_wide(profile) or EXCITATION_SPLIT_PIXELS is None:
        return {}
    found = _split_schedule(profile, channels, pixels, hidden, out_channels, EXCITATION_SPLIT_PIXELS, EXCITATION_SPLIT_THREADS)
    return found if found and _excite.split_slices(ceildiv(channels, 4), pixels, found["channel_blocks"], found["pixel_slices"]) > 1 else {}


def _split_schedule(profile: DeviceProfile, channels: int, pixels: int, hidden: int, out_channels: int, group_pixels: int,
                    threads: int) -> dict | None:
    """``threads`` (at most the device's work group), ``channel_blocks`` and ``pixel_slices`` of a
    split excitation whose work groups each pool about ``group_pixels`` pixels of four channels,
    and its ``loads`` in flight per item (``primfuncs.excite.SPLIT_LOADS``, passed so that the
    kernel's key says it); None when its shared memory does not fit the device's."""
    c4, o4 = ceildiv(channels, 4), ceildiv(out_channels, 4)
    threads = min(threads, profile.max_work_group_size)
    # a map of at least that many pixels: slices of it per channel block; else channel blocks of it all
    blocks = max(1, min(c4, group_pixels // pixels))
    slices = equal_slices(pixels, round(pixels / group_pixels)) if blocks == 1 else 1
    if _excite.split_shared_bytes(c4, pixels, hidden, o4, blocks, slices, threads) > profile.local_memory_bytes:
        return None
    return dict(threads=threads, channel_blocks=blocks, pixel_slices=slices, loads=_excite.SPLIT_LOADS)


#: Output pixels (of four channels) a work group of the fused depthwise conv and excitation
#: (``primfuncs.excite.depthwise_excitation``) computes and pools, about: one per work item
#: (:data:`DEPTHWISE_EXCITATION_THREADS`), so that every item computes a depthwise pixel. 512
#: pixels and 1024 items measured best of 128/128, 256/256 and 512/1024 on the H200 for
#: MobileNetV3-Small, EfficientNet-B0 and MixNet-S in one run (``benchmarks/dw_excite.py``:
#: kernel 3-14% less than 256/256, 26-28% less than 128/128). None: never fused (the depthwise
#: conv, then ``excitation_split``: two launches).
DEPTHWISE_EXCITATION_PIXELS: int | None = 512
#: Work items of a work group of the fused depthwise conv and excitation.
DEPTHWISE_EXCITATION_THREADS = 1024
#: Work groups per sample the fused kernel spreads a small map over at least, about (fewer pixels
#: per work group than :data:`DEPTHWISE_EXCITATION_PIXELS` where that gives fewer: 15 work groups
#: for 576 channels of 7 x 7 on a 132-unit H200); None: the pixel target alone. Off: 32 or 64
#: moved the fused kernels by -4% to +1% on the H200 (``benchmarks/excite_tail.py``, one run), the
#: model kernel times within 1% (kept as that script's ways).
DEPTHWISE_EXCITATION_MIN_GROUPS: int | None = None


def depthwise_excitation_schedule(profile: DeviceProfile, macs: int, channels: int, pixels: int, hidden: int,
                                  out_channels: int | None = None) -> dict | None:
    """Factory keywords (``threads``, ``channel_blocks``, ``pixel_slices``, ``loads``) of
    ``primfuncs.excite.depthwise_excitation``, the depthwise conv whose output of ``channels`` x
    ``pixels`` an SE block pools and its excitation (two 1x1 convs of ``macs`` multiply-adds,
    ``hidden`` units, ``out_channels`` outputs, default ``channels``) as one launch, or None to keep
    them two launches: on a wide GPU (:func:`is_wide`: on the H200 a launch costs 7.7-11 us of host
    time, more than either kernel), with fusion on and the convs worth fusing (as
    :func:`excitation_schedule`), the work groups' shared memory within the device's. CPU OpenCL
    and mobile GPUs keep their plans (the depthwise kernel, then ``excitation``): one work group
    per sample there pools the map, which would leave the depthwise conv one work group."""
    if not is_wide(profile) or DEPTHWISE_EXCITATION_PIXELS is None or not 0 < macs <= profile.launch_cost_macs:
        return None
    group_pixels = DEPTHWISE_EXCITATION_PIXELS
    if DEPTHWISE_EXCITATION_MIN_GROUPS:  # a small map: fewer pixels per work group, more work groups
        group_pixels = max(1, min(group_pixels, ceildiv(channels, 4) * pixels // DEPTHWISE_EXCITATION_MIN_GROUPS))
    return _split_schedule(profile, channels, pixels, hidden, out_channels or channels, group_pixels, DEPTHWISE_EXCITATION_THREADS)


def pooled_conv_schedule(profile: DeviceProfile, channels: int, pixels: int, out_channels: int) -> dict | None:
    """Factory keywords of ``primfuncs.excite.pooled_pointwise`` (a global average pool and the 1x1
    conv of ``channels`` -> ``out_channels`` that is its only user, as one kernel), or None to keep
    them apart. Its work groups each pool the whole map: one per compute unit on CPU and mobile
    devices, one per four on a wide GPU (a group's rows of the conv then about match its share of
    the pool), at most one per output block. Taken when fusion is on, that repeated pooling
    (groups x map) costs less than a launch (``launch_cost_macs``: a classifier head's 7 x 7 map)
    and the work group's shared memory fits the device's."""
    blocks = -(-out_channels // 4)
    groups = max(1, min(blocks, profile.compute_units // 4 if profile.kind == "gpu" else profile.compute_units))
    threads = _threads(profile)
    if not 0 < groups * channels * pixels <= profile.launch_cost_macs:
        return None
    if not _fits(profile, channels, pixels, 4 * -(-blocks // groups), threads):
        return None
    return dict(threads=threads, groups=groups)


#: Output blocks (of four channels) per work group of a wide GPU's classifier-head GEMV
#: (``pooled_pointwise`` on a ``[N, C, 1, 1]`` vector or a small map): about one work group per
#: compute unit for a 1000-class head (250 blocks: 125 groups on the H200's 132 units).
#: None: heads keep the plans before (the tiled conv on the vector, the pool apart).
HEAD_GEMV_BLOCKS: int | None = 2
#: Work items of such a work group: ``4 x HEAD_GEMV_BLOCKS`` rows x ``primfuncs.excite.MAX_SPLIT``
#: items per row, every item busy in the matrix-vector product.
HEAD_GEMV_THREADS = 256
#: Float4 weight loads each item has in flight (``pooled_pointwise``'s ``unroll``).
HEAD_GEMV_UNROLL = 4
#: Most adds (channels x pixels) of the map a wide GPU's head GEMV pools itself (the pool's launch
#: saved, every work group summing the whole map); a bigger map's mean runs apart (``mean_hw``), the
#: GEMV on its vector; None: always apart. On the H200 (``benchmarks/head_gemv.py``, one run) the
#: fused pool and GEMV took 9.3 us on MobileViT-v2's 256 x 8 x 8 map (16 K adds; ~11 apart) but
#: 13.5-21.6 us on FastViT's, EfficientViT's, EfficientNet's and MixNet's (38-75 K adds), where
#: ``mean_hw`` (3.8-6.7 us) and the GEMV on the vector (5.6-7.6 us) took 10-14 us.
HEAD_GEMV_POOL_ADDS: int | None = 32768


def head_gemv_schedule(profile: DeviceProfile, channels: int, pixels: int, out_channels: int) -> dict | None:
    """Factory keywords (``threads``, ``groups``, ``unroll``) of ``primfuncs.excite.pooled_pointwise``
    as a wide GPU's (:func:`is_wide`) classifier-head GEMV: a 1x1 conv of ``channels`` ->
    ``out_channels`` on a vector (``pixels`` 1) or on the mean of a map of ``pixels`` pixels; None
    elsewhere (CPU OpenCL, mobile GPUs: their plans stay), with fusion off (``launch_cost_macs``
    0), or when the work group's shared memory does not fit the device's. :data:`HEAD_GEMV_BLOCKS`
    output blocks per work group; pooling a map, each work group sums all of it, so it is taken
    only for a map of at most :data:`HEAD_GEMV_POOL_ADDS` and when ``groups x channels x pixels`` adds cost at most
    ``launch_cost_macs`` (the repeated pool costs less than a launch: the rule
    ``pooled_conv_schedule`` applies), with more blocks per group down to one group per compute
    unit; past that, None (the pool runs apart, then the GEMV on its vector)."""
    if not is_wide(profile) or HEAD_GEMV_BLOCKS is None or profile.launch_cost_macs <= 0:
        return None
    if pixels > 1 and (HEAD_GEMV_POOL_ADDS is None or channels * pixels > HEAD_GEMV_POOL_ADDS):
        return None
    o4 = ceildiv(out_channels, 4)
    groups = ceildiv(o4, HEAD_GEMV_BLOCKS)
    if pixels > 1:  # fewer groups (more blocks each) while the repeated pooling costs more than a launch
        fewer = min(groups, profile.launch_cost_macs // (channels * pixels))
        if fewer < min(profile.compute_units, groups):
            return None
        groups = ceildiv(o4, ceildiv(o4, fewer))  # no group without blocks
    threads = min(HEAD_GEMV_THREADS, profile.max_work_group_size)
    if not _fits(profile, channels, pixels, 4 * ceildiv(o4, groups), threads):
        return None
    return dict(threads=threads, groups=groups, unroll=HEAD_GEMV_UNROLL)
