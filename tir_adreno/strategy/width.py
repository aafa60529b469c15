"""Device width: whether a device has so many compute units that a per-sample statistic (an
excitation's pool, a group norm, attention's sums, a classifier head) must spread over many work
groups, as one work group per sample would leave most of it idle."""

from __future__ import annotations

from tir_adreno.strategy.profile import DeviceProfile


#: Devices with more compute units than this run group norm (and the attention statistics) split
#: over many work groups (:func:`is_wide`): a kernel with one work group per (sample, group)
#: keeps one unit busy and leaves the rest idle there. PoCL (2 units) and Adreno (4-12) keep the
#: one kernel (one launch).
ONE_GROUP_MAX_COMPUTE_UNITS = 16


def is_wide(profile: DeviceProfile) -> bool:
    """Whether ``profile`` has more compute units than :data:`ONE_GROUP_MAX_COMPUTE_UNITS`: its
    per-sample statistics must spread over many work groups."""
    return profile.compute_units > ONE_GROUP_MAX_COMPUTE_UNITS


#: Work groups the split kernels (group norm, attention statistics) aim at per compute unit: a
#: few resident per unit hide their loads' latency.
WIDE_GROUPS_PER_UNIT = 4
