"""Pooling and reduction schedules: a work item or a work group per output, per device and layer.

:func:`pool_schedule` gives a pooling layer's factory keywords from its tuned
:class:`PoolChoice` or the "auto" rule (:func:`group_threshold`). The other kernels' schedules live
beside the kernels they serve: ``strategy.excite``, ``strategy.norm``, ``strategy.attention``
(device width: ``strategy.width``).
"""

from __future__ import annotations

from dataclasses import dataclass

from primfuncs import pool2d as _pool2d

from tir_adreno.strategy.profile import DeviceProfile


def group_threshold(profile: DeviceProfile) -> int | None:
    """Pooling/reduction "auto" strategy: group a window from this many taps on GPUs
    (``primfuncs.pool2d.GROUP_THRESHOLD``, measured on the H200), never on CPU OpenCL,
    where a work group runs on one core and grouping never wins."""
    return None if profile.kind == "cpu" else _pool2d.GROUP_THRESHOLD


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
