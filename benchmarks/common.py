"""Helpers shared by the benchmark scripts: device option, timing, tables, JSON.

Importable without TVM (the run-only halves of benchmarks execute on machines
that have only numpy + pyopencl).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

if str(ROOT) not in sys.path:  # scripts run as `python benchmarks/x.py`
    sys.path.insert(0, str(ROOT))


def add_device_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device",
        default=None,
        help="OpenCL device: substring of platform or device name (default: $TIR_ADRENO_DEVICE, "
        "else the first GPU, else the CPU)",
    )


def add_target_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target", default=None,
        help="device profile the kernels are built for (adreno, nvidia-h200, pocl; default: the local "
        "device's profile, or adreno with --build-only)",
    )


def add_split_arguments(parser: argparse.ArgumentParser, what: str = "kernels", dest: str = "src") -> None:
    """``--build-only DIR`` (compile ``what`` into DIR, needs TVM) or ``--from DIR`` (run them,
    no TVM; stored as ``dest``), and ``--results-dir``: the split every script offers."""
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--build-only", metavar="DIR", type=Path, help=f"compile the {what} into DIR and stop (needs TVM)")
    mode.add_argument("--from", dest=dest, metavar="DIR", type=Path, help=f"run the {what} saved by --build-only (no TVM)")
    parser.add_argument("--results-dir", type=Path, default=None, help="default: benchmarks/results")


def target_profile(args, build_only: bool = False):
    """The ``tir_adreno.strategy.profile`` profile of ``--target`` (see :func:`add_target_argument`)."""
    from tir_adreno.strategy.profile import DeviceProfile, get_profile

    if args.target:
        return get_profile(args.target)
    return get_profile("adreno") if build_only else DeviceProfile.from_device(args.device)


def device_slug(name: str) -> str:
    """A file-name-safe short form of a device name: 'NVIDIA CUDA: NVIDIA H200' -> 'nvidia-h200'."""
    name = name.split(":", 1)[-1]  # drop the platform
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug[:48] or "device"


def results_path(name: str, device_name: str, results_dir: Path | None = None) -> Path:
    return Path(results_dir or RESULTS) / f"{name}-{device_slug(device_name)}.json"


def write_json(name: str, device_name: str, payload: dict, results_dir: Path | None = None) -> Path:
    """Write ``payload`` (plus host/time metadata) to ``benchmarks/results/<name>-<device>.json``."""
    path = results_path(name, device_name, results_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "benchmark": name,
        "device": device_name,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "python": platform.python_version(),
    }
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({**meta, **payload}, indent=1, default=_jsonable) + "\n")
    os.replace(tmp, path)
    return path


def _jsonable(value):
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (set, tuple)):
        return list(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def median_time(run, input_sets, warmup: int = 2, min_repeat: int = 5, max_repeat: int = 50, budget_s: float = 0.5):
    """Median of ``run(inputs)`` (seconds, e.g. OpenCL event time), inputs rotated.

    ``run`` is called ``warmup`` times, then over ``input_sets`` in turn until
    it ran ``max_repeat`` times, or at least ``min_repeat`` times and for
    ``budget_s`` of wall time: slow kernels (a CPU OpenCL) get few runs, fast
    ones many. Returns ``(median_seconds, samples)``.
    """
    if not input_sets:
        raise ValueError("input_sets must hold at least one set of inputs")
    for i in range(warmup):
        run(input_sets[i % len(input_sets)])
    samples = []
    start = time.perf_counter()
    while len(samples) < max_repeat:
        samples.append(float(run(input_sets[len(samples) % len(input_sets)])))
        if len(samples) >= min_repeat and time.perf_counter() - start >= budget_s:
            break
    return statistics.median(samples), samples


# Host-side NumPy layouts (what the layout kernels do on the device), for run-only paths.
# Host-side blocked layouts: the library's own (TVM-free), under the names the benchmarks use.
from tir_adreno.strategy.packing import pack_nchw4c as nchw_to_nchw4c  # noqa: E402
from tir_adreno.strategy.packing import pack_oihw4o as oihw_to_oihw4o  # noqa: E402
from tir_adreno.strategy.packing import unpack_nchw4c as nchw4c_to_nchw  # noqa: E402,F401


def wall_ms(cm, inputs: dict) -> float:
    """Host ms of one fast run of compiled model ``cm`` with ``inputs`` already in its pinned
    staging (``get_input``), as PyTorch's graph_wall_ms has its input in pinned memory; the
    ordinary path where the model is not pinned."""
    if cm.pinned:
        for name, x in inputs.items():
            staged = cm.get_input(name)
            if staged is not x:
                np.copyto(staged, x)
        inputs = {name: cm.get_input(name) for name in inputs}
    start = time.perf_counter()
    cm.run(inputs)
    return (time.perf_counter() - start) * 1e3


def geomean(values) -> float | None:
    values = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def weighted_geomean(pairs) -> float | None:
    """Geometric mean of values with integer weights: ``pairs`` = [(value, weight)]."""
    pairs = [(v, w) for v, w in pairs if v is not None and v > 0 and math.isfinite(v) and w > 0]
    if not pairs:
        return None
    return math.exp(sum(w * math.log(v) for v, w in pairs) / sum(w for _, w in pairs))


def fmt(value, spec: str = ".2f", missing: str = "-") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return missing
    return format(value, spec)


def print_table(headers, rows, file=None, title: str | None = None) -> None:
    """A plain aligned table: first column left-aligned, the rest right-aligned."""
    file = file or sys.stdout
    rows = [[str(c) for c in r] for r in rows]
    widths = [max([len(str(h))] + [len(r[i]) for r in rows if i < len(r)]) for i, h in enumerate(headers)]

    def line(cells):
        return "  ".join(
            (c.ljust(w) if i == 0 else c.rjust(w)) for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    if title:
        print(title, file=file)
    print(line([str(h) for h in headers]), file=file)
    print("  ".join("-" * w for w in widths), file=file)
    for r in rows:
        print(line(r), file=file)
    file.flush()


def log(*args) -> None:
    """Progress messages go to stderr, so the table is the last thing on stdout."""
    print(*args, file=sys.stderr, flush=True)


def source_revision() -> str | None:
    """The commit of this checkout (``git rev-parse --short=7``), with ``+dirty`` where a tracked file
    differs from it, or None outside a git checkout: what a ``--build-only`` folder was built from,
    so the results measured from it say which plans they are."""
    def git(*args):
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=30, check=True).stdout.strip()

    try:
        commit = git("rev-parse", "--short=7", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+dirty" if dirty else "")


# ---------------------------------------------------------------------------------------------
# --build-only / --from: a directory of kernel bundles plus a cases file describing them
CASES_FILE = "cases.json"
CASES_FORMAT = 1


def write_cases(out_dir: Path, meta: dict) -> None:
    """Save the cases file of a ``--build-only`` directory (``meta`` gets the format stamp)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / CASES_FILE).write_text(json.dumps({"format": CASES_FORMAT, **meta}, indent=1) + "\n")


def read_cases(src: Path) -> dict:
    """The cases file of a ``--build-only`` directory; ValueError on another format."""
    meta = json.loads((src / CASES_FILE).read_text())
    if meta.get("format") != CASES_FORMAT:
        raise ValueError(f"{src / CASES_FILE}: format {meta.get('format')} != {CASES_FORMAT}")
    return meta


def load_bundles(src: Path, entries, key, make=lambda entry, module: module) -> dict:
    """``{key(entry): make(entry, KernelModule)}`` for each entry with a saved ``bundle``;
    an entry whose bundle does not load gets an ``error`` instead (shown, never dropped)."""
    from tir_adreno.runtime.bundle import KernelModule

    loaded = {}
    for entry in entries:
        if "bundle" in entry:
            try:
                loaded[key(entry)] = make(entry, KernelModule.load(src / entry["bundle"]))
            except ValueError as err:
                entry["error"] = f"load: {err}"
    return loaded
