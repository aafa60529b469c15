"""Per-kernel-family time of saved models (``catalogue_e2e.py --build-only`` bundles) on this device:
the kernel families (a call's label without its numbering) that take the most time, summed over
their launches (OpenCL event times, each launch's median over runs).

    python3 benchmarks/device/op_times.py .device/catalogue mixer_s32_224 deit_tiny_patch16_224
    OP_TIMES_JSON=$OUT/op_times.json python3 benchmarks/device/op_times.py ...   # also every launch's median, as JSON
"""

import collections
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tir_adreno.runtime import opencl as runtime  # noqa: E402
from tir_adreno.runtime.executor import load_model  # noqa: E402
from zoo import random_inputs  # noqa: E402

RUNS, TOP = 7, 12


def launch_times(cm, x) -> list[dict]:
    """Each launch's op label and median OpenCL event time over ``RUNS`` runs."""
    per_run = []
    for _ in range(RUNS):
        cm.run(x, profile=True)
        per_run.append(cm.profile())
    return [{"op": row["op"], "ours": row["ours"], "time_ms": statistics.median(run[i]["time_ms"] for run in per_run)}
            for i, row in enumerate(per_run[0])]


def op_times(launches: list[dict]) -> dict:
    """{kernel family: [ms summed over its launches, launches]}."""
    table = collections.defaultdict(lambda: [0.0, 0])
    for row in launches:
        key = row["op"].rstrip("0123456789_") + ("" if row["ours"] else " (upstream)")
        table[key][0] += row["time_ms"]
        table[key][1] += 1
    return table


def main(folder: str, *names: str) -> None:
    device = runtime.get_device(None)
    saved = {}
    for name in names:
        cm = load_model(Path(folder) / name, device, random_weights=0)
        x = random_inputs(cm)
        cm.run(x)
        saved[name] = launch_times(cm, x)
        table = op_times(saved[name])
        total = sum(v[0] for v in table.values())
        print(f"== {name}: {total:.3f} ms in {sum(v[1] for v in table.values())} launches")
        for family, (ms, count) in sorted(table.items(), key=lambda kv: -kv[1][0])[:TOP]:
            print(f"  {ms:7.3f} ms {100 * ms / total:5.1f}% {count:4d}x  {family}")
    if os.environ.get("OP_TIMES_JSON"):
        Path(os.environ["OP_TIMES_JSON"]).write_text(json.dumps({"device": device.name, "models": saved}))


if __name__ == "__main__":
    main(*sys.argv[1:])
