"""Squeeze-excitation fusion (issue 21): launches and kernel time of ONNX models with the fusion
on and off, from one run (``compile_model(fuse=False)`` keeps an SE block's pool and two 1x1 convs
apart, and each depthwise conv apart from the 1x1 conv after it where the profile would fuse them).

    python benchmarks/se_launches.py --onnx efficientnet_b0.onnx mobilenetv3_small_100.onnx

Kernel time: the median over ``--repeat`` profiled runs (the two ways alternating) of the sum of
OpenCL event times; the outputs of the two ways are compared with each other.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import numpy as np

from common import add_device_argument, log, print_table, write_json
from tir_adreno import compile_model, runtime


def _measure(models: dict, repeat: int) -> dict:
    """Way -> (median kernel ms, outputs) of ``repeat`` profiled runs of each compiled model after a
    warm-up, the ways interleaved run by run (the load of a shared machine hits both alike)."""
    first = next(iter(models.values()))
    x = {n: np.random.default_rng(i).standard_normal(first.plan.tensors[t].shape).astype("float32") for i, (n, t) in enumerate(first.plan.inputs)}
    times, outputs = {way: [] for way in models}, {}
    for cm in models.values():
        cm.run(x)
    for _ in range(repeat):
        for way, cm in models.items():
            outputs[way] = cm.run(x, profile=True)
            times[way].append(cm.kernel_time_ms())
    return {way: (statistics.median(times[way]), outputs[way]) for way in models}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--onnx", type=Path, nargs="+", required=True, metavar="FILE", help="ONNX models, named by stem")
    parser.add_argument("--repeat", type=int, default=10)
    add_device_argument(parser)
    args = parser.parse_args()
    device = runtime.get_device(args.device)
    results, rows = {}, []
    for path in args.onnx:
        models = {}
        for way, fuse in (("fused", True), ("apart", False)):
            log(f"{path.stem}: compile {way}")
            models[way] = compile_model(str(path), device, fuse=fuse, progress=lambda _: None)
        measured = _measure(models, args.repeat)
        entry = {way: {"launches": len(cm.plan.calls), "kernel_ms": measured[way][0], "outputs": measured[way][1]}
                 for way, cm in models.items()}
        a, b = (np.asarray(entry[w]["outputs"][0], np.float64) for w in ("fused", "apart"))
        error = float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))
        results[path.stem] = {w: {k: v for k, v in e.items() if k != "outputs"} for w, e in entry.items()} | {"relative_difference": error}
        f, s = entry["fused"], entry["apart"]
        rows.append([path.stem, s["launches"], f["launches"], f"{s['kernel_ms']:.2f}", f"{f['kernel_ms']:.2f}", f"{error:.1e}"])
    print_table(["model", "launches apart", "launches fused", "kernel ms apart", "kernel ms fused", "rel. difference"], rows)
    log(f"wrote {write_json('se_launches', device.name, {'repeat': args.repeat, 'models': results})}")


if __name__ == "__main__":
    main()
