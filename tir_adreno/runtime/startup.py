"""Where start-up time goes: the phases of making a model ready to run.

A :class:`StartupReport` is filled by :class:`~tir_adreno.runtime.executor.CompiledModel`
(programs, weight upload, binding) and by :func:`~tir_adreno.runtime.executor.load_model`
(reading the saved files, verifying their checksums). ``import_ms`` is what importing the
runtime cost this process (measured once, by :func:`mark_imported`).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass, field

#: perf_counter when the runtime package began importing (set by tir_adreno.runtime.__init__).
_import_started: float | None = None
_import_ms: float | None = None


def mark_import_started() -> None:
    global _import_started
    if _import_started is None:
        _import_started = time.perf_counter()


def mark_imported() -> None:
    """The runtime (executor and everything under it) is imported: remember what it cost."""
    global _import_ms
    if _import_ms is None and _import_started is not None:
        _import_ms = (time.perf_counter() - _import_started) * 1e3


def import_ms() -> float:
    """Milliseconds this process spent importing the runtime (numpy and pyopencl included)."""
    return _import_ms or 0.0


@dataclass
class ProgramCounts:
    """OpenCL programs a model needed: built from source, loaded from a cached binary, or
    already built in this process; with the milliseconds the first two took."""

    from_source: int = 0
    from_binary: int = 0
    in_process: int = 0
    from_source_ms: float = 0.0
    from_binary_ms: float = 0.0

    def add(self, how: str, ms: float = 0.0) -> None:
        if how == "source":
            self.from_source += 1
            self.from_source_ms += ms
        elif how == "binary":
            self.from_binary += 1
            self.from_binary_ms += ms
        else:
            self.in_process += 1


@dataclass
class StartupReport:
    """Milliseconds per phase of one model's start-up (``total_ms``: the whole of
    ``load_model`` or of the :class:`CompiledModel` constructor; ``other_ms``: what no phase
    covers). ``import_ms`` is per process and outside ``total_ms``."""

    import_ms: float = 0.0
    read_ms: float = 0.0  # model.json and weights.npz read from disk and decoded
    verify_ms: float = 0.0  # their checksums
    device_ms: float = 0.0  # the OpenCL device (context, queues) on first use
    programs_ms: float = 0.0
    upload_ms: float = 0.0  # weights to the device
    bind_ms: float = 0.0  # activations allocated, kernel arguments set, launcher made
    total_ms: float = 0.0
    programs: ProgramCounts = field(default_factory=ProgramCounts)
    weight_bytes: int = 0

    PHASES = ("read_ms", "verify_ms", "device_ms", "programs_ms", "upload_ms", "bind_ms")

    @property
    def other_ms(self) -> float:
        return max(0.0, self.total_ms - sum(getattr(self, p) for p in self.PHASES))

    @contextlib.contextmanager
    def phase(self, name: str):
        """Add the time of the ``with`` body to phase ``name`` (one of :attr:`PHASES`)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            setattr(self, name, getattr(self, name) + (time.perf_counter() - start) * 1e3)

    def to_dict(self) -> dict:
        return {**asdict(self), "other_ms": self.other_ms}

    def line(self) -> str:
        """One line for the ``run`` command."""
        p = self.programs
        return (f"startup {self.total_ms:.0f} ms (+ import {self.import_ms:.0f} ms): programs {self.programs_ms:.0f} ms "
                f"({p.from_binary} from binaries, {p.from_source} from source, {p.in_process} reused), "
                f"weights read {self.read_ms:.0f} + verify {self.verify_ms:.0f} + upload {self.upload_ms:.0f} ms, "
                f"device {self.device_ms:.0f} ms, binding {self.bind_ms:.0f} ms")
