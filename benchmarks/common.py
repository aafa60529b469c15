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
def nchw_to_nchw4c(x: np.ndarray) -> np.ndarray:
    """NCHW -> [N, C/4, H, W, 4], padded channels zero."""
    n, c, h, w = x.shape
    c4 = -(-c // 4)
    padded = np.zeros((n, c4 * 4, h, w), x.dtype)
    padded[:, :c] = x
    return np.ascontiguousarray(padded.reshape(n, c4, 4, h, w).transpose(0, 1, 3, 4, 2))


def nchw4c_to_nchw(y: np.ndarray, channels: int) -> np.ndarray:
    """[N, C/4, H, W, 4] -> NCHW with the first ``channels`` channels."""
    n, c4, h, w, _ = y.shape
    return np.ascontiguousarray(y.transpose(0, 1, 4, 2, 3).reshape(n, c4 * 4, h, w)[:, :channels])


def oihw_to_oihw4o(w: np.ndarray) -> np.ndarray:
    """OIHW -> OIHW4o [O/4, I, KH, KW, 4] (one pixel = 4 output channels), padded outputs zero."""
    o, i, kh, kw = w.shape
    o4 = -(-o // 4)
    padded = np.zeros((o4 * 4, i, kh, kw), w.dtype)
    padded[:o] = w
    return np.ascontiguousarray(padded.reshape(o4, 4, i, kh, kw).transpose(0, 2, 3, 4, 1))


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
