"""Norm schedules: GRN's scale (``primfuncs.grn``), group norm in one kernel or split over work
groups, layer norm over the channels in one work item or one work group per pixel
(``primfuncs.layernorm``), and the work groups of the row kernels on plain tensors (``primfuncs.rows``)."""

from __future__ import annotations

from primfuncs import layernorm as _layernorm
from primfuncs._common import ceildiv, equal_slices

from tir_adreno.strategy.profile import DeviceProfile
from tir_adreno.strategy.width import WIDE_GROUPS_PER_UNIT, is_wide


#: Most work items of ``grn_scale``'s work group per sample.
GRN_THREADS = 256


def grn_threads(profile: DeviceProfile, blocks: int) -> int:
    """Work items of the GRN scale kernel's one work group per sample (``primfuncs.grn``,
    ``threads``) over ``blocks`` channel blocks: a power of two covering them, at most
    :data:`GRN_THREADS` and the device's work group. Measured on PoCL (one sample, C = 160 to 1280):
    2-10 us against 19 us to 1.2 ms for one work item per block walking all blocks (C^2 / 4 square
    roots), so every device class takes it."""
    threads = 1
    while threads < min(blocks, GRN_THREADS, profile.max_work_group_size):
        threads *= 2
    return min(threads, profile.max_work_group_size)


def group_norm_schedule(profile: DeviceProfile, shape5, groups: int) -> dict | None:
    """How a group norm of NCHW4c ``shape5`` in ``groups`` groups runs: None for the one kernel
    with one work group per (sample, group) (``primfuncs.layernorm.group_norm``: one launch, right
    for CPU OpenCL and phone GPUs), else on a wide GPU (:func:`is_wide`) the split form's keywords
    (``group_norm_partials`` then ``group_norm_apply``): ``slices`` per (sample, group) making
    about :data:`WIDE_GROUPS_PER_UNIT` work groups per compute unit in all, each slice at
    least one pixel per work item. A group of at most one work group's pixels stays one kernel."""
    if not is_wide(profile):
        return None
    pixels = _layernorm.group_norm_pixels(shape5, groups)
    per_group = ceildiv(WIDE_GROUPS_PER_UNIT * profile.compute_units, int(shape5[0]) * groups)
    slices = equal_slices(pixels, min(per_group, ceildiv(pixels, _layernorm.GROUP_NORM_THREADS)))
    return dict(slices=slices) if slices > 1 else None


#: Channel blocks from which a wide GPU normalizes a layer norm's pixels with a work group each
#: (``primfuncs.layernorm.layer_norm_channels_wide``): the one kernel's item walks a pixel's
#: ``C/4`` blocks three times in series (~0.2 us a block on the H200), below this few enough
#: that its launch costs about what the spread form's would.
LAYER_NORM_WIDE_MIN_BLOCKS = 16
#: One-kernel work items (pixels) per compute unit below which a wide GPU is left mostly idle by
#: the layer norm's one kernel (its items then run their serial walks side by side, not in waves).
LAYER_NORM_WIDE_MAX_PIXELS_PER_UNIT = 64


def layer_norm_schedule(profile: DeviceProfile, shape5) -> dict | None:
    """How the layer norm over the channels of NCHW4c ``shape5`` runs: None for the one kernel
    (``primfuncs.layernorm.layer_norm_channels``: one work item per pixel walking all of its
    channel blocks; CPU OpenCL and phone GPUs, and large maps), else on a wide GPU
    (:func:`is_wide`) with at least :data:`LAYER_NORM_WIDE_MIN_BLOCKS` channel blocks and fewer
    pixels than :data:`LAYER_NORM_WIDE_MAX_PIXELS_PER_UNIT` per compute unit, the spread form's
    keywords (``layer_norm_channels_wide``: a work group per pixel, ``threads`` items over its
    channel blocks)."""
    n, c4, h, w = (int(d) for d in shape5[:4])
    if not is_wide(profile) or c4 < LAYER_NORM_WIDE_MIN_BLOCKS or n * h * w >= LAYER_NORM_WIDE_MAX_PIXELS_PER_UNIT * profile.compute_units:
        return None
    return dict(threads=_layernorm.layer_norm_threads(c4))


#: Most work items per row of the row kernels (``primfuncs.rows``: softmax, norms and reductions
#: of plain tensors): a token row of 64-768 elements takes 1-12 rounds per item; more items only
#: add levels to the work group's combine.
ROW_MAX_THREADS = 64


def row_threads(profile: DeviceProfile, length: int) -> int:
    """Work items of a row kernel's work group (``primfuncs.rows``, ``threads``) over rows of
    ``length`` elements: the power of two covering them, at most :data:`ROW_MAX_THREADS` and the
    device's work group (one row per work group whatever the device: the rows of a model's tokens
    outnumber the compute units on every device we plan for)."""
    threads = 1
    while threads < min(int(length), ROW_MAX_THREADS, profile.max_work_group_size):
        threads *= 2
    return threads
