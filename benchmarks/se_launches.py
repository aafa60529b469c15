"""Squeeze-excitation fusion (issue 21): launches and kernel time of ONNX models with the fusion
on and off, from one run. "fused" is everything the profile fuses: an SE block's pool and two 1x1
convs in one ``excitation`` kernel, its gate multiply read by the projection conv after it, a
depthwise conv computed in the 1x1 conv after it. "apart" is no fusion at all
(``compile_model(fuse=False)``: ``launch_cost_macs`` 0, each of those its own launch).

    python benchmarks/se_launches.py --onnx efficientnet_b0.onnx mobilenetv3_small_100.onnx
    python benchmarks/se_launches.py --onnx ... --target nvidia-h200 --build-only DIR   # here (TVM)
    python benchmarks/se_launches.py --from DIR                                       # on the GPU, no TVM

``--se-threads 256 ...`` adds a fused way per work-group size of the excitation kernels
(``fused-t256``: ``strategy.excite.EXCITATION_THREADS`` of the profile's class set to it while
compiling), ``--launch-cost 650000 ...`` one per ``launch_cost_macs`` of the profile
(``fused-cost650000``: what fuses where a launch is worth that many multiply-adds), to compare them
in the same run. ``--from DIR`` runs every saved way of each model (``<stem>-<way>``; a model
saved by other code, e.g. ``<stem>-before``, is measured alongside).

Kernel time: the median over ``--repeat`` profiled runs (the ways alternating) of the sum of
OpenCL event times; wall time: the median over as many unprofiled runs (``run``: uploads, every
launch, downloads, waited for; the input already in pinned memory: ``common.wall_ms``), alternating too. The outputs of each way are compared with apart's.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import statistics
from pathlib import Path

import numpy as np

from common import add_device_argument, log, print_table, wall_ms, write_json
from tir_adreno import compile_model, load_model, runtime
from tir_adreno.runtime.executor import save_model
from tir_adreno.strategy.profile import DeviceProfile, get_profile, without_fusion


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
    """Way -> (median kernel ms, median wall ms, outputs, kernel family -> (launches, median ms),
    median ms of each call in plan order) of ``repeat`` profiled and ``repeat`` unprofiled runs of
    each compiled model after a warm-up, the ways interleaved run by run (the load of a shared
    machine hits all alike) and their order rotated each round: on PoCL the same kernels read
    5-20% slower in one position of a round than in another, so a fixed order biases the ways."""
    first = next(iter(models.values()))
    x = {n: np.random.default_rng(i).standard_normal(first.plan.tensors[t].shape).astype("float32") for i, (n, t) in enumerate(first.plan.inputs)}
    times, walls, outputs, classes, calls = ({way: [] for way in models} for _ in range(5))
    for cm in models.values():
        cm.run(x)
    ways = list(models)
    for r in range(repeat):
        order = ways[r % len(ways):] + ways[:r % len(ways)]
        for way in order:
            cm = models[way]
            outputs[way] = cm.run(x, profile=True)
            times[way].append(cm.kernel_time_ms())
            classes[way].append(_by_class(cm))
            calls[way].append([row["time_ms"] for row in cm.profile()])
        for way in order:
            walls[way].append(wall_ms(models[way], x))
    result = {}
    for way, cm in models.items():
        counts: dict[str, int] = {}
        for c in cm.plan.calls:
            counts[_kernel_class(c.label)] = counts.get(_kernel_class(c.label), 0) + 1
        families = {k: (counts[k], statistics.median(run[k] for run in classes[way])) for k in counts}
        per_call = [statistics.median(run[i] for run in calls[way]) for i in range(len(cm.plan.calls))]
        result[way] = (statistics.median(times[way]), statistics.median(walls[way]), outputs[way], families, per_call)
    return result


WAYS = (("fused", True), ("apart", False))


def _ways(args) -> list[tuple[str, bool, int | None, int | None]]:
    """(way, fuse, excitation work items, launch_cost_macs; None: the profile's) of each way to measure."""
    return ([(way, fuse, None, None) for way, fuse in WAYS] + [(f"fused-t{t}", True, t, None) for t in args.se_threads]
            + [(f"fused-cost{c}", True, None, c) for c in args.launch_cost])


def _profile(profile, fuse: bool, launch_cost: int | None):
    """``profile`` without fusion (``fuse`` False) or with ``launch_cost`` as its launch_cost_macs."""
    profile = without_fusion(profile, not fuse)
    return profile if launch_cost is None else dataclasses.replace(profile, launch_cost_macs=launch_cost)


@contextlib.contextmanager
def _excitation_threads(profile, threads: int | None):
    """The excitation kernels of ``profile``'s class get ``threads`` work items while compiling."""
    from tir_adreno.strategy import excite as pool

    saved = dict(pool.EXCITATION_THREADS)
    if threads is not None:
        pool.EXCITATION_THREADS[profile.kind] = threads
    try:
        yield
    finally:
        pool.EXCITATION_THREADS.update(saved)


def _build(args, target: str) -> None:
    """Compile (no device needed) each model each way for ``target`` and save them as ``out/<stem>-<way>``."""
    from tir_adreno.compiler import compile_plan  # TVM: only when building

    precision, out = args.precision, args.build_only
    for path in args.onnx:
        for way, fuse, threads, launch_cost in _ways(args):
            log(f"{path.stem}: compile {way} for {target} ({precision})")
            profile = _profile(get_profile(target), fuse, launch_cost)
            with _excitation_threads(profile, threads):
                plan, kernels, weights = compile_plan(str(path), profile, progress=lambda _: None, precision=precision)
            save_model(out / f"{path.stem}-{way}", plan, kernels, weights, profile.name)


def _models(args, device) -> dict[str, dict]:
    """Model name -> way -> compiled model: compiled here, or loaded from ``--from`` (no TVM)."""
    if args.source:
        saved = [p.name for p in args.source.iterdir() if p.is_dir()]
        stems = sorted({name.rsplit("-apart", 1)[0] for name in saved if name.endswith("-apart")})
        return {s: {name[len(s) + 1:]: load_model(args.source / name, device) for name in sorted(saved) if name.startswith(f"{s}-")}
                for s in stems}
    out = {}
    for p in args.onnx:
        out[p.stem] = {}
        for way, fuse, threads, launch_cost in _ways(args):
            profile = _profile(DeviceProfile.from_device(device), fuse, launch_cost)
            with _excitation_threads(profile, threads):
                out[p.stem][way] = compile_model(str(p), device, profile=profile, precision=args.precision, progress=lambda _: None)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--onnx", type=Path, nargs="+", default=[], metavar="FILE", help="ONNX models, named by stem")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--precision", default="float32")
    parser.add_argument("--target", default=None, help="device profile of --build-only (e.g. nvidia-h200)")
    parser.add_argument("--build-only", type=Path, default=None, metavar="DIR", help="compile and save both ways into DIR")
    parser.add_argument("--from", dest="source", type=Path, default=None, metavar="DIR", help="run the models saved by --build-only")
    parser.add_argument("--se-threads", type=int, nargs="*", default=[], metavar="N", help="also fused with N-item excitation work groups")
    parser.add_argument("--launch-cost", type=int, nargs="*", default=[], metavar="MACS", help="also fused with this launch_cost_macs")
    parser.add_argument("--results-dir", type=Path, default=None, metavar="DIR", help="write the JSON here (default benchmarks/results)")
    add_device_argument(parser)
    args = parser.parse_args()
    if args.build_only:
        return _build(args, args.target or "adreno")
    if not (args.onnx or args.source):
        parser.error("give --onnx FILE... or --from DIR")
    device = runtime.get_device(args.device)
    results, rows, families = {}, [], []
    for stem, models in _models(args, device).items():
        models = {"apart": models["apart"], **{w: m for w, m in models.items() if w != "apart"}}
        measured = _measure(models, args.repeat)
        entry = {way: {"launches": len(cm.plan.calls), "kernel_ms": measured[way][0], "wall_ms": measured[way][1], "outputs": measured[way][2],
                       "kernels": {k: {"launches": n, "ms": ms} for k, (n, ms) in sorted(measured[way][3].items())}}
                 for way, cm in models.items()}
        b = np.asarray(entry["apart"]["outputs"][0], np.float64)
        results[stem] = {}
        for way, e in entry.items():
            a = np.asarray(e["outputs"][0], np.float64)
            error = float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))
            results[stem][way] = {k: v for k, v in e.items() if k != "outputs"} | {"relative_difference": error}
            rows.append([f"{stem} {way}", e["launches"], f"{e['kernel_ms']:.3f}", f"{e['wall_ms']:.3f}", f"{error:.1e}"])
        ways = list(entry)
        for k in sorted(set().union(*(e["kernels"] for e in entry.values()))):  # what each kernel family launches and costs
            cells = [(entry[w]["kernels"][k]["launches"], entry[w]["kernels"][k]["ms"]) if k in entry[w]["kernels"] else (0, 0.0) for w in ways]
            families.append([f"{stem} {k}", *(f"{n} / {ms:.3f}" for n, ms in cells)])
    print_table(["model way", "launches", "kernel ms", "wall ms", "rel. difference vs apart"], rows)
    print_table(["model kernel family", *(f"{w}: launches / ms" for w in ways)], families)
    payload = {"repeat": args.repeat, "precision": next(iter(models.values())).precision, "models": results}
    log(f"wrote {write_json('se_launches', device.name, payload, args.results_dir)}")


if __name__ == "__main__":
    main()
