"""Pooling and reduction schedules: a work item or a work group per output, per device and layer.

:func:`pool_schedule` gives a pooling layer's factory keywords from its tuned
:class:`PoolChoice` or the "auto" rule (:func:`group_threshold`).
"""

from __future__ import annotations

from dataclasses import dataclass

from primfuncs import excite as _excite
from primfuncs import pool2d as _pool2d

from tir_adreno.strategy.profile import DeviceProfile


def group_threshold(profile: DeviceProfile) -> int | None:
    """Pooling/reduction "auto" strategy: group a window from this many taps on GPUs
    (``primfuncs.pool2d.GROUP_THRESHOLD``, measured on the H200), never on CPU OpenCL,
    where a work group runs on one core and grouping never wins."""
    return None if profile.kind == "cpu" else _pool2d.GROUP_THRESHOLD


#: Devices with more compute units than this keep squeeze-excitation apart: its one work group
#: per sample leaves a wide GPU idle. Measured on the H200 (132 units, float16_acc32, median of
#: 21, benchmarks/results/se_launches-nvidia-h200.json): EfficientNet-B0 1.02 -> 1.35 ms and
#: MobileNetV3-Small 0.56 -> 0.65 ms fused. PoCL (2 units): equal. Adreno (4-12 units): fused.
EXCITATION_MAX_COMPUTE_UNITS = 16


def excitation_schedule(profile: DeviceProfile, macs: int) -> dict | None:
    """Factory keywords of a squeeze-excitation kernel (``primfuncs.excite``: its pool and its two
    1x1 convs of ``macs`` multiply-adds run in one work group per sample), or None to keep them
    apart: with kernel fusion off (``launch_cost_macs`` 0, ``compile_model(fuse=False)``), or when
    the convs are bigger than a launch is worth (a classifier head's 1x1 convs belong on the whole
    device), or on a GPU wider than :data:`EXCITATION_MAX_COMPUTE_UNITS`. 64 work items on CPU
    OpenCL, where a work group runs on one core; 256 on GPUs, so the pool of an early 112 x 112
    block still has many loads in flight."""
    if not 0 < macs <= profile.launch_cost_macs or profile.compute_units > EXCITATION_MAX_COMPUTE_UNITS:
        return None
    return dict(threads=_excite.THREADS if profile.kind == "cpu" else 4 * _excite.THREADS)


#: Pooling / reduction schedules: "auto" (by :func:`group_threshold`), a work item or a work group per output.
POOL_STRATEGIES = ("auto", "thread", "group")


@dataclass(frozen=True)
class PoolChoice:
    """What tuning records for a pooling layer: its schedule (:data:`POOL_STRATEGIES`)."""

    strategy: str = "auto"

    def __post_init__(self):
        if self.strategy not in POOL_STRATEGIES:
            raise ValueError(f"strategy must be one of {POOL_STRATEGIES}, got {self.strategy!r}")

    @property
    def name(self) -> str:
        return self.strategy

    def to_dict(self) -> dict:
        return {"strategy": self.strategy}

    @classmethod
    def from_dict(cls, d: dict) -> "PoolChoice":
        return cls(d["strategy"])


def pool_schedule(key: str, profile: DeviceProfile, records=None, choice: PoolChoice | None = None) -> dict:
    """Factory keywords (``strategy``, ``group_threshold``) of the pooling layer ``key``
    (``records.pool_key``): ``choice``, else the records' choice, else "auto" for ``profile``."""
    if choice is None and records is not None:
        choice = records.lookup_pool(key)
    return dict(strategy=(choice or PoolChoice()).strategy, group_threshold=group_threshold(profile))
