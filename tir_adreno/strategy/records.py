"""Tuning records: per conv layer the measured winner (algorithm, config, placement), per pool its schedule.

A records file is JSON written atomically with an integrity header
(``tir_adreno.runtime.cache``). It holds the device it was measured on (profile name
and driver, :attr:`DeviceProfile.key`), the hash of the kernel library's sources (every
module of the ``primfuncs`` package, :func:`kernels_version`),
the precision and per layer the winner with every candidate's time. ``tune``
writes it; compilation only reads it (:meth:`Records.lookup`). A file for
another device, other kernels or another precision is ignored with one warning
line: its choices would not be what was measured.
"""

from __future__ import annotations

import datetime
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import primfuncs

from tir_adreno.runtime import cache
from tir_adreno.strategy.profile import DeviceProfile
from tir_adreno.strategy.conv import ConvChoice, default_choice
from tir_adreno.strategy.pool import PoolChoice

FORMAT = 2


class RecordsWarning(UserWarning):
    """A records file was ignored (other device, other kernels, unreadable)."""


def kernel_sources() -> dict[str, Path]:
    """Every module of the ``primfuncs`` package, subpackages included, keyed by its path inside
    the package, in a fixed order (``cache.package_files``)."""
    return cache.package_files(primfuncs)


def kernels_version() -> str:
    """Hash of the kernel library (:func:`kernel_sources`, names and contents): choices measured
    on other kernels are stale."""
    return cache.files_key("tuning-kernels", kernel_sources())[:16]


def conv2d_key(geom, precision: str = "float32") -> str:
    """The record key of a conv: its logical shape, attributes and precision."""
    pt, pl, pb, pr = geom.padding
    return (
        f"conv2d n{geom.n} c{geom.c} h{geom.h} w{geom.w} o{geom.o} k{geom.kh}x{geom.kw} "
        f"s{geom.strides[0]}x{geom.strides[1]} p{pt},{pl},{pb},{pr} d{geom.dilation[0]}x{geom.dilation[1]} "
        f"g{geom.groups} {precision}"
    )


def pool_key(op: str, nchw, attrs: dict) -> str:
    """The record key of a pooling layer: op, input shape and the factory's attributes."""
    text = " ".join(f"{k}={v}" for k, v in sorted(attrs.items()))
    return f"pool2d {op} n{nchw[0]} c{nchw[1]} h{nchw[2]} w{nchw[3]} {text}"


def _device_matches(recorded: dict, profile: DeviceProfile) -> bool:
    # A named profile (no driver) accepts records of that device under any driver.
    return recorded.get("name") == profile.name and (not profile.driver or recorded.get("driver") == profile.driver)


@dataclass
class Records:
    """The layers of one records file that apply to ``profile`` (empty when the file does not)."""

    profile: DeviceProfile
    precision: str = "float32"
    layers: dict = field(default_factory=dict)
    path: Path | None = None
    #: Whole-model timing of ``tune`` (``tune.in_context``): seconds per variant and the one kept.
    context: dict = field(default_factory=dict)

    def lookup(self, geom, precision: str) -> ConvChoice | None:
        """The recorded choice of conv ``geom`` (None without one); a null choice (:meth:`replaced`)
        is the profile's default for it, as ``tune`` found fastest in the model."""
        entry = self.layers.get(conv2d_key(geom, precision))
        if entry is None:
            return None
        return default_choice(geom, self.profile) if entry["choice"] is None else ConvChoice.from_dict(entry["choice"])

    def lookup_pool(self, key: str) -> PoolChoice | None:
        entry = self.layers.get(key)
        return None if entry is None else PoolChoice.from_dict(entry["choice"])

    def __contains__(self, key: str) -> bool:
        return key in self.layers

    def add(self, key: str, choice: "ConvChoice | PoolChoice", times_s: dict[str, float], default_s: float | None = None):
        self.layers[key] = {
            "choice": choice.to_dict(),
            "name": choice.name,
            "times_s": {k: (None if v is None else float(v)) for k, v in times_s.items()},
            "default_s": default_s,
            "measured": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        }

    def replaced(self, conv=None, pool=None) -> "Records":
        """A copy whose conv choices are ``conv(choice)`` and pool choices ``pool(choice)`` (a
        function None: kept); a conv choice None is the profile's default for that conv (recorded
        as null, so ``tune`` skips the layer). A changed entry keeps its per-layer winner as
        ``layer_winner``."""
        layers = {}
        for key, entry in self.layers.items():
            kind, fn = (ConvChoice, conv) if key.startswith("conv2d ") else (PoolChoice, pool)
            entry = dict(entry)
            old = None if entry["choice"] is None else kind.from_dict(entry["choice"])
            new = old if fn is None else fn(old)
            if new != old:
                entry.setdefault("layer_winner", entry["name"])
                entry.update(choice=None if new is None else new.to_dict(), name="default" if new is None else new.name)
            layers[key] = entry
        return Records(self.profile, self.precision, layers, self.path, dict(self.context))

    def save(self, path=None) -> Path:
        path = Path(path or self.path)
        doc = {
            "format": FORMAT,
            "device": {"name": self.profile.name, "driver": self.profile.driver, "kind": self.profile.kind},
            "kernels": kernels_version(),
            "precision": self.precision,
            "layers": self.layers,
            "context": self.context,
        }
        cache.write(path, json.dumps(doc, indent=1, sort_keys=True).encode())
        self.path = path
        return path


def digest(recs: Records) -> str:
    """A short hash of the choices in ``recs`` (whole-model timings measured elsewhere are tied to it)."""
    choices = {key: entry["choice"] for key, entry in recs.layers.items()}
    return cache.key("records", json.dumps(choices, sort_keys=True).encode())[:16]


def load(path, profile: DeviceProfile, precision: str = "float32", warn: bool = True) -> Records:
    """The records at ``path`` for ``profile``; empty (with one warning) when the file is
    unreadable or was measured on another device, other kernels or another precision.
    A missing file is empty without a warning (``tune`` starts one)."""
    path = Path(path)
    empty = Records(profile, precision, {}, path)
    if not path.exists():
        return empty
    payload = cache.read(path)
    reason = None
    try:
        doc = json.loads(payload.decode()) if payload is not None else None
        ok = isinstance(doc, dict) and doc.get("format") == FORMAT and isinstance(doc.get("layers"), dict)
    except (ValueError, UnicodeDecodeError):
        ok = False
    if not ok:
        reason = "not a tir-adreno records file (corrupt, truncated or another format)"
    elif not _device_matches(doc["device"], profile):
        reason = f"measured on {doc['device'].get('name')} ({doc['device'].get('driver')}), not {profile.key}"
    elif doc.get("kernels") != kernels_version():
        reason = "measured on other kernel sources"
    elif doc.get("precision") != precision:
        reason = f"measured in {doc.get('precision')}, not {precision}"
    if reason is not None:
        if warn:
            warnings.warn(f"{path}: records ignored: {reason}", RecordsWarning, stacklevel=2)
        return empty
    return Records(profile, precision, dict(doc["layers"]), path, dict(doc.get("context") or {}))


def open_records(records, profile: DeviceProfile, precision: str = "float32") -> Records | None:
    """What compilation takes as ``records=``: None, a ``Records`` or the path of a records file,
    which must exist (FileNotFoundError); one for another device is ignored with a warning."""
    if records is None or isinstance(records, Records):
        return records
    if not Path(records).is_file():
        raise FileNotFoundError(f"{records}: no such records file (write one with `tir-adreno tune`)")
    return load(records, profile, precision)
