"""Issue 35 on the H200: every catalogue model and the last wave's eight, ours against PyTorch.

Per model: ours (kernel time = sum of OpenCL events, wall = one fast run, medians; launches,
share, layout transforms), and PyTorch fp32 (TF32 off) two ways: the timm model eager (built
there with the export's weights, ``torch_models.timm_eager``) and the TorchScript trace exported
with the ONNX file (``<name>.pt.xz``, whose fuser merges elementwise ops). For each: eager ms and
the CUDA graph captured from it, its replay ms and its wall measured as ours is (input in, replay,
output out, one wait), timed in interleaved blocks with ours' wall (``torch_baselines``). The ratio is ours' paired
wall over the faster graph's wall. Each model runs in a subprocess of its own, so a device-side
assert that breaks one model's CUDA context is recorded for that model only (and a baseline that
failed is retried alone in a fresh process). Results merge by model into
``catalogue_e2e-<device>.json`` (skipped when there, unless ``--force``).

    python benchmarks/catalogue_e2e.py --build-only DIR --target nvidia-h200 --onnx-dir /work/catalogue --onnx-dir /work/exports
    python benchmarks/catalogue_e2e.py --from DIR --repeat 20          # there: no TVM; torch, timm
    python benchmarks/catalogue_e2e.py --from DIR --part 1/2           # half of the models (a second call: 2/2)
    python benchmarks/catalogue_e2e.py --from DIR --stop-after 420     # as many as fit a call; again to resume

Before timing, ``--prebuild N`` loads every model once, N processes at a time, so the driver's
compile of each model's OpenCL program (seconds on NVIDIA) is done and cached in parallel.
``--build-only`` saves each model timing-only (no weights: seeded random weights there) with its
``.pt.xz`` (found beside the ONNX file) under ``DIR/torchscript``, and says the folder's size
(the device tool carries 64 MiB with the tree); each model's ``source`` (``common.source_revision``:
the commit its plans were built from) goes into the build index and from there into its results.
``--part K/N`` takes every N-th model from the K-th, at build time (a folder per part) or at run
time (a call per part).
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from catalogue import BY_NAME, CATALOGUE, LAST_WAVE, coverage_stats
from common import (add_device_argument, add_split_arguments, add_target_argument, fmt, geomean, log, print_table, results_path,
                    source_revision, target_profile, write_json)
from torch_baselines import BLOCK_RUNS

#: PyTorch baselines: the timm model eager, and its TorchScript trace (``<name>.pt.xz``).
BASELINES = ("eager", "trace")
TORCHSCRIPT_FOLDER = "torchscript"
BUILD_INDEX = "catalogue_e2e-build.json"
#: Seconds one model's process may take (load, ours, both baselines) before it is recorded as failed.
MODEL_TIMEOUT_S = 240


def _part(names: list[str], part: str | None) -> list[str]:
    if not part:
        return names
    k, n = (int(v) for v in part.split("/"))
    return names[k - 1 :: n]


def _folder_mib(directory: Path) -> float:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file()) / 2**20


def build(onnx_paths: dict, directory: Path, profile, force: bool) -> None:
    """Each model compiled for ``profile`` and saved without weights under ``directory/<name>``,
    its TorchScript export beside it; a failure is kept in the index (a row there)."""
    import onnx

    from tir_adreno.compiler import compile_plan
    from tir_adreno.runtime.executor import save_model

    index_path = directory / BUILD_INDEX
    index = json.loads(index_path.read_text())["models"] if index_path.exists() else {}
    source = source_revision()  # the plans' code, carried into each model's results
    (directory / TORCHSCRIPT_FOLDER).mkdir(parents=True, exist_ok=True)
    for i, (name, path) in enumerate(onnx_paths.items(), 1):
        if name in index and (directory / name).exists() and not force:
            continue
        log(f"[{i}/{len(onnx_paths)}] compile {name} for {profile.name} ...")
        start = time.perf_counter()
        try:
            plan, kernels, _ = compile_plan(onnx.load(str(path)), profile, progress=lambda _: None)
            save_model(directory / name, plan, kernels, None, profile.name)
            index[name] = {"compile_s": time.perf_counter() - start}
        except Exception as err:  # noqa: BLE001 (a model that does not compile is a row of the table)
            index[name] = {"failure": _failure(err)}
        index[name]["source"] = source
        log(f"  {index[name]}")
        traced = path.with_name(f"{name}.pt.xz")
        if traced.exists():
            shutil.copyfile(traced, directory / TORCHSCRIPT_FOLDER / traced.name)
        index_path.write_text(json.dumps({"target": profile.name, "models": index}, indent=1) + "\n")
    log(f"saved to {directory}: {_folder_mib(directory):.1f} MiB (the device tool carries 64 MiB, the tree and "
        ".device/wheels included)")


def measure_one(name: str, from_dir: Path, device_name, repeat: int, baselines, block_runs: int) -> dict:
    """One model, in its own process: ours, then each PyTorch baseline of ``baselines``."""
    from common import wall_ms
    from tir_adreno.runtime import opencl as runtime
    from tir_adreno.runtime.executor import load_model
    from zoo import random_inputs

    cm = load_model(from_dir / name, runtime.get_device(device_name), random_weights=0)
    if not baselines and repeat == 0:  # --prebuild: the program built and cached, nothing timed
        return {}
    x = random_inputs(cm)
    cm.run(x)  # warm-up: drivers finish compiling on first launch
    walls = [wall_ms(cm, x) for _ in range(repeat)]
    kernels = []
    for _ in range(repeat):
        cm.run(x, profile=True)
        kernels.append(cm.kernel_time_ms())
    stats = coverage_stats(cm)
    entry = {"ours": {"kernel_ms": statistics.median(kernels), "wall_ms": statistics.median(walls), "launches": stats["launches"],
                      "ours_share": stats["ours_share"], "layout_transforms": stats["layout_transforms"]}}
    shape = cm.plan.tensors[cm.plan.inputs[0][1]].shape
    rival = functools.partial(wall_ms, cm, x)
    entry.update(_torch_baselines(name, from_dir / TORCHSCRIPT_FOLDER, shape, repeat, rival, baselines, block_runs))
    return entry


def _torch_baselines(name, torchscript_dir: Path, shape, repeat: int, rival, baselines, block_runs: int) -> dict:
    from torch_baselines import cuda_available

    if not cuda_available():
        return {"torch_unavailable": True, **{way: {"error": "no PyTorch with CUDA here"} for way in baselines}}
    import numpy as np

    from tir_adreno.reference import relative_error
    from torch_baselines import graph_timings, versions
    from torch_models import build_torch_model, timm_eager

    entry, outputs = {"versions": versions()}, {}
    for way in baselines:
        try:
            model = timm_eager(name, "cuda") if way == "eager" else build_torch_model(name, torchscript_dir, "cuda")
            if model is None:
                entry[way] = {"error": "timm here does not know it" if way == "eager" else f"no {name}.pt.xz", "missing": True}
                continue
            timings = graph_timings(model, shape, repeat, rival, block_runs=block_runs)
            outputs[way] = timings.pop("output").numpy()
            entry[way] = timings
        except Exception as err:  # noqa: BLE001 (recorded for this baseline; the parent retries it alone)
            entry[way] = {"error": _failure(err)}
    if len(outputs) == 2:  # the same weights both ways: a check that the trace is this timm's model
        entry["eager_vs_trace"] = relative_error(outputs["eager"], outputs["trace"].astype(np.float64))
    return entry


def run_model(name: str, args) -> dict:
    """``name`` measured in a subprocess; each baseline that failed retried alone in a fresh one."""
    entry = _child(name, args, BASELINES)
    for way in BASELINES:
        failed = entry.get(way, {})
        if "error" in failed and not failed.get("missing") and "ours" in entry and not entry.get("torch_unavailable"):
            retry = _child(name, args, (way,))
            if way in retry and "error" not in retry[way]:
                entry[way] = {**retry[way], "retried_alone": True, "first_error": entry[way]["error"]}
    return entry


def _child(name: str, args, baselines) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--from", str(args.from_dir), "--one", name,
               "--baselines", ",".join(baselines), "--repeat", str(args.repeat), "--block-runs", str(args.block_runs),
               "--result-file", str(out)]
        cmd += ["--device", args.device] if args.device else []
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.model_timeout)
        except subprocess.TimeoutExpired:
            return {"failure": f"timed out after {args.model_timeout} s"}
        if proc.returncode != 0 or not out.exists():
            lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
            return {"failure": f"exit {proc.returncode}: {lines[-1] if lines else ''}"[:300]}
        return json.loads(out.read_text())


def prebuild(names, args) -> None:
    """Each model loaded once, ``args.prebuild`` processes at a time, so its OpenCL program is
    built (the driver's compile, seconds per model) and cached before anything is timed."""
    import concurrent.futures

    def load(name):
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [sys.executable, str(Path(__file__).resolve()), "--from", str(args.from_dir), "--one", name, "--baselines", "",
                   "--repeat", "0", "--result-file", str(Path(tmp) / "result.json")] + (["--device", args.device] if args.device else [])
            try:
                return subprocess.run(cmd, capture_output=True, timeout=args.model_timeout).returncode
            except subprocess.TimeoutExpired:
                return "timeout"

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(args.prebuild) as pool:
        codes = dict(zip(names, pool.map(load, names)))
    failed = {n: c for n, c in codes.items() if c != 0}
    log(f"programs of {len(names)} models built in {time.perf_counter() - start:.0f} s ({args.prebuild} at a time)"
        + (f"; failed: {failed}" if failed else ""))


def summarize(entry: dict) -> dict:
    """The faster graph (by wall) and ours' paired wall over it."""
    graphs = {w: entry[w] for w in BASELINES if "graph_wall_ms" in entry.get(w, {})}
    if not graphs:
        return {}
    best = min(graphs, key=lambda w: graphs[w]["graph_wall_ms"])
    return {"faster_graph": best, "ratio": graphs[best]["ours_wall_paired_ms"] / graphs[best]["graph_wall_ms"]}


def _failure(err: Exception) -> str:
    return f"{type(err).__name__}: {str(err).strip().splitlines()[-1] if str(err).strip() else ''}"[:300]


def _row(name: str, r: dict) -> list:
    family = BY_NAME[name].family if name in BY_NAME else "-"
    if "failure" in r:
        return [name, family, "FAIL", "-", "-", "-", "-", "-", "-", r["failure"][:80]]
    o = r["ours"]

    def way(w):
        t = r.get(w, {})
        return "-" if "error" in t or not t else f"{fmt(t['eager_ms'])} | {fmt(t['graph_ms'])} / {fmt(t['graph_wall_ms'])}"

    errors = "; ".join(f"{w}: {r[w]['error'][:60]}" for w in BASELINES if "error" in r.get(w, {}))
    ratio = f"{fmt(r['ratio'], '.2f')}x ({r['faster_graph']})" if "ratio" in r else "-"
    return [name, family, f"{fmt(o['kernel_ms'])} / {fmt(o['wall_ms'])}", o["launches"], fmt(100 * o["ours_share"], ".0f") + "%",
            o["layout_transforms"], way("eager"), way("trace"), ratio, errors or "-"]


def report(results: dict, path: Path, device_name: str) -> None:
    order = [m.name for m in (*CATALOGUE, *LAST_WAVE)]
    names = sorted(results, key=lambda n: order.index(n) if n in order else len(order))
    print_table(["model", "family", "ours kernel / wall", "launches", "ours", "transforms", "eager: eager | graph / wall",
                 "trace: eager | graph / wall", "ours paired / faster graph wall", "errors"],
                [_row(n, results[n]) for n in names],
                title=f"issue 35 catalogue and the last wave on {device_name}, ms, fp32 (TF32 off), PyTorch's graph captured "
                f"from the eager timm model and from its TorchScript trace (JSON: {path})")
    ratios = [results[n]["ratio"] for n in names if "ratio" in results[n]]
    print(f"ours paired wall / the faster graph's wall: geomean {fmt(geomean(ratios), '.2f')}x over {len(ratios)} models, "
          f"at or under it for {sum(r <= 1.0 for r in ratios)}")


def _arguments():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_device_argument(parser)
    add_target_argument(parser)
    add_split_arguments(parser, "models", dest="from_dir")
    parser.add_argument("--onnx-dir", type=Path, action="append", default=[], help="folder of <name>.onnx and <name>.pt.xz (repeatable)")
    parser.add_argument("--models", default=None, help="comma-separated (default: the catalogue and the last wave's eight found)")
    parser.add_argument("--part", default=None, metavar="K/N", help="every N-th model from the K-th (two calls cover all with 1/2, 2/2)")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--block-runs", type=int, default=BLOCK_RUNS, metavar="N",
                        help=f"runs of ours and of a graph per interleaved block of the paired walls (default {BLOCK_RUNS})")
    parser.add_argument("--force", action="store_true", help="build or run models already done again")
    parser.add_argument("--model-timeout", type=int, default=MODEL_TIMEOUT_S, help="seconds per model's process")
    parser.add_argument("--prebuild", type=int, default=8, metavar="N",
                        help="build and cache the models' OpenCL programs first, N processes at a time (0: not)")
    parser.add_argument("--stop-after", type=float, default=None, metavar="S",
                        help="start no model after S seconds (a call with a time limit ends cleanly; the next resumes)")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # the per-model subprocess
    parser.add_argument("--baselines", default=",".join(BASELINES), help=argparse.SUPPRESS)
    parser.add_argument("--result-file", type=Path, default=None, help=argparse.SUPPRESS)
    return parser


def main(argv=None) -> int:
    parser = _arguments()
    args = parser.parse_args(argv)
    if args.part and not (len(args.part.split("/")) == 2 and all(v.isdigit() for v in args.part.split("/"))
                          and 1 <= int(args.part.split("/")[0]) <= int(args.part.split("/")[1])):
        parser.error(f"--part {args.part}: give K/N with 1 <= K <= N")
    if args.one:
        entry = measure_one(args.one, args.from_dir, args.device, args.repeat, [b for b in args.baselines.split(",") if b],
                            args.block_runs)
        args.result_file.write_text(json.dumps(entry, default=float))
        return 0
    order = [m.name for m in (*CATALOGUE, *LAST_WAVE)]
    if args.build_only:
        found = {p.stem: p for d in args.onnx_dir for p in sorted(d.glob("*.onnx"))}
        names = args.models.split(",") if args.models else [n for n in order if n in found]
        if not names or any(n not in found for n in names):
            parser.error(f"--onnx-dir: no <name>.onnx for {[n for n in names if n not in found] or 'any model'}")
        build({n: found[n] for n in _part(names, args.part)}, args.build_only, target_profile(args, build_only=True), args.force)
        return 0
    if not args.from_dir or not (args.from_dir / BUILD_INDEX).exists():
        parser.error("give --build-only DIR (here) or --from DIR (a folder it wrote)")
    built = json.loads((args.from_dir / BUILD_INDEX).read_text())["models"]
    names = _part(args.models.split(",") if args.models else sorted(built, key=lambda n: order.index(n) if n in order else len(order)), args.part)
    from tir_adreno.runtime import opencl as runtime

    device_name = runtime.get_device(args.device).name
    path = results_path("catalogue_e2e", device_name, args.results_dir)
    results = json.loads(path.read_text())["results"] if path.exists() else {}
    todo = [n for n in names if args.force or n not in results]
    log(f"{len(todo)} of {len(names)} models to run ({len(names) - len(todo)} already in {path})")
    began = time.perf_counter()
    if args.prebuild and todo:
        prebuild([n for n in todo if "failure" not in built.get(n, {"failure": ""})], args)
    for i, name in enumerate(todo, 1):
        if args.stop_after is not None and time.perf_counter() - began > args.stop_after:
            log(f"--stop-after {args.stop_after:g} s: {len(todo) - i + 1} models left for the next call")
            break
        log(f"[{i}/{len(todo)}] {name} ...")
        start = time.perf_counter()
        saved = built.get(name, {"failure": "not in the --from folder"})
        entry = dict(saved) if "failure" in saved else run_model(name, args)
        if "source" in saved:  # the plans' commit, from the build index
            entry["source"] = saved["source"]
        results[name] = {**entry, **summarize(entry)}
        log(f"  {time.perf_counter() - start:.0f} s: {results[name].get('failure') or fmt(results[name].get('ratio'), '.2f') + 'x'}")
        path = write_json("catalogue_e2e", device_name, {"repeat": args.repeat, "block_runs": args.block_runs, "results": results},
                          args.results_dir)
    report(results, path, device_name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
