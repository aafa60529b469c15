"""Squeeze-excitation fusion (issue 21): launches and kernel time of ONNX models with the fusion
on and off, from one run. "fused" is everything the profile fuses: an SE block's pool and two 1x1
convs in one ``excitation`` kernel, its gate multiply read by the projection conv after it, a
depthwise conv computed in the 1x1 conv after it. "apart" is no fusion at all
(``compile_model(fuse=False)``: ``launch_cost_macs`` 0, each of those its own launch).

    python benchmarks/se_launches.py --onnx efficientnet_b0.onnx mobilenetv3_small_100.onnx
    python benchmarks/se_launches.py --onnx ... --target nvidia-h200 --build-only DIR   # here (TVM)
    python benchmarks/se_launches.py --from DIR                                       # on the GPU, no TVM

Kernel time: the median over ``--repeat`` profiled runs (the two ways alternating) of the sum of
OpenCL event times; the outputs of the two ways are compared with each other.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import numpy as np

from common import add_device_argument, log, print_table, write_json
from tir_adreno import compile_model, load_model, runtime
from tir_adreno.runtime.executor import save_model
from tir_adreno.strategy.profile import get_profile, without_fusion


def _kernel_class(label: str) -> str:
    """A call's kernel family: its label without the numbering of distinct kernels (``conv2d_nchw4c12``)."""
    return label.rstrip("0123456789")


def _by_class(cm) -> dict[str, float]:
    """Kernel family -> the summed event ms of the last profiled run of ``cm``."""
    out: dict[str, float] = {}
    for row in cm.profile():
        out[_kernel_class(row["op"])] = out.get(_kernel_class(row["op"]), 0.0) + row["time_ms"]
    return out


def _measure(models: dict, repeat: int) -> dict:
    """Way -> (median kernel ms, outputs, kernel family -> (launches, median ms)) of ``repeat``
    profiled runs of each compiled model after a warm-up, the ways interleaved run by run (the
    load of a shared machine hits both alike)."""
    first = next(iter(models.values()))
    x = {n: np.random.default_rng(i).standard_normal(first.plan.tensors[t].shape).astype("float32") for i, (n, t) in enumerate(first.plan.inputs)}
    times, outputs, classes = {way: [] for way in models}, {}, {way: [] for way in models}
    for cm in models.values():
        cm.run(x)
    for _ in range(repeat):
        for way, cm in models.items():
            outputs[way] = cm.run(x, profile=True)
            times[way].append(cm.kernel_time_ms())
            classes[way].append(_by_class(cm))
    result = {}
    for way, cm in models.items():
        counts: dict[str, int] = {}
        for c in cm.plan.calls:
            counts[_kernel_class(c.label)] = counts.get(_kernel_class(c.label), 0) + 1
        families = {k: (counts[k], statistics.median(run[k] for run in classes[way])) for k in counts}
        result[way] = (statistics.median(times[way]), outputs[way], families)
    return result


WAYS = (("fused", True), ("apart", False))


def _build(paths, target: str, precision: str, out: Path) -> None:
    """Compile (no device needed) each model both ways for ``target`` and save them as ``out/<stem>-<way>``."""
    from tir_adreno.compiler import compile_plan  # TVM: only when building

    for path in paths:
        for way, fuse in WAYS:
            log(f"{path.stem}: compile {way} for {target} ({precision})")
            profile = without_fusion(get_profile(target), not fuse)
            plan, kernels, weights = compile_plan(str(path), profile, progress=lambda _: None, precision=precision)
            save_model(out / f"{path.stem}-{way}", plan, kernels, weights, profile.name)


def _models(args, device) -> dict[str, dict]:
    """Model name -> way -> compiled model: compiled here, or loaded from ``--from`` (no TVM)."""
    if args.source:
        stems = sorted({p.name.rsplit("-", 1)[0] for p in args.source.iterdir() if p.is_dir()})
        return {s: {way: load_model(args.source / f"{s}-{way}", device) for way, _ in WAYS} for s in stems}
    return {p.stem: {way: compile_model(str(p), device, fuse=fuse, precision=args.precision, progress=lambda _: None)
                     for way, fuse in WAYS} for p in args.onnx}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--onnx", type=Path, nargs="+", default=[], metavar="FILE", help="ONNX models, named by stem")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--precision", default="float32")
    parser.add_argument("--target", default=None, help="device profile of --build-only (e.g. nvidia-h200)")
    parser.add_argument("--build-only", type=Path, default=None, metavar="DIR", help="compile and save both ways into DIR")
    parser.add_argument("--from", dest="source", type=Path, default=None, metavar="DIR", help="run the models saved by --build-only")
    add_device_argument(parser)
    args = parser.parse_args()
    if args.build_only:
        return _build(args.onnx, args.target or "adreno", args.precision, args.build_only)
    if not (args.onnx or args.source):
        parser.error("give --onnx FILE... or --from DIR")
    device = runtime.get_device(args.device)
    results, rows, families = {}, [], []
    for stem, models in _models(args, device).items():
        measured = _measure(models, args.repeat)
        entry = {way: {"launches": len(cm.plan.calls), "kernel_ms": measured[way][0], "outputs": measured[way][1],
                       "kernels": {k: {"launches": n, "ms": ms} for k, (n, ms) in sorted(measured[way][2].items())}}
                 for way, cm in models.items()}
        a, b = (np.asarray(entry[w]["outputs"][0], np.float64) for w in ("fused", "apart"))
        error = float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))
        results[stem] = {w: {k: v for k, v in e.items() if k != "outputs"} for w, e in entry.items()} | {"relative_difference": error}
        f, s = entry["fused"], entry["apart"]
        rows.append([stem, s["launches"], f["launches"], f"{s['kernel_ms']:.2f}", f"{f['kernel_ms']:.2f}", f"{error:.1e}"])
        for k in sorted(set(s["kernels"]) | set(f["kernels"])):  # what each kernel family launches and costs
            cells = [(e["kernels"][k]["launches"], e["kernels"][k]["ms"]) if k in e["kernels"] else (0, 0.0) for e in (s, f)]
            families.append([f"{stem} {k}", cells[0][0], cells[1][0], f"{cells[0][1]:.2f}", f"{cells[1][1]:.2f}"])
    print_table(["model", "launches apart", "launches fused", "kernel ms apart", "kernel ms fused", "rel. difference"], rows)
    print_table(["model kernel family", "launches apart", "launches fused", "median ms apart", "median ms fused"], families)
    payload = {"repeat": args.repeat, "precision": next(iter(models.values())).precision, "models": results}
    log(f"wrote {write_json('se_launches', device.name, payload)}")


if __name__ == "__main__":
    main()
