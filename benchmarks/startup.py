"""Start-up time: how fast a saved model becomes ready, cold and warm, each in a fresh process.

Per model it saves the model (``--build-only DIR``, needs TVM; built-in resnet50 and
mobilenet_v2, and ONNX files given with ``--onnx NAME=PATH``, e.g. a torchvision
EfficientNet-B0 export), then (``--from DIR``, no TVM; without either flag both, in a
temporary folder) starts fresh processes that import the runtime and ``load_model`` it:

- cold: an empty kernel cache (tir-adreno's binaries and PoCL's own cache, both in a new
  folder): every OpenCL program is built from source;
- warm: ``--repeat`` more processes on the cache the cold one filled.

Each process reports ``CompiledModel.startup`` (import, device, programs from source or from
binaries with counts, weights read / verify / upload, binding; :mod:`tir_adreno.runtime.startup`)
and the wall time of its first run and its kernel time (profiled runs). Medians over the warm processes; JSON in
``benchmarks/results/startup-<device>.json``, a plot next to it, a table last.

    python benchmarks/startup.py --models mobilenet_v2 --repeat 5
    python benchmarks/startup.py --build-only OUT --target nvidia-h200 --onnx efficientnet_b0=/tmp/effnet.onnx
    python benchmarks/startup.py --from OUT --device NVIDIA
    python benchmarks/startup.py --from OUT --compare-pocl-ir   # PoCL: binaries without IR vs whole
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from common import (ROOT, add_device_argument, add_split_arguments, add_target_argument, fmt, log, print_table, target_profile,
                    write_json)

BUILTIN = ("resnet50", "mobilenet_v2")
#: What one fresh process runs: import, load, one run; its report as the last line of JSON.
CHILD = textwrap.dedent(
    """
    import json, sys, time
    start = time.perf_counter()
    from tir_adreno.runtime.executor import load_model
    imported = time.perf_counter()
    import numpy as np
    model = load_model(sys.argv[1], sys.argv[2] or None, random_weights=0)
    loaded = time.perf_counter()
    rng = np.random.default_rng(0)
    inputs = {name: rng.standard_normal(model.plan.tensors[i].shape).astype(model.plan.tensors[i].dtype)
              for name, i in model.plan.inputs}
    model.run(inputs)
    ran = time.perf_counter()
    kernel_ms = []
    for _ in range(int(sys.argv[3])):  # steady state: the kernels' event times of profiled runs
        model.run(inputs, profile=True)
        kernel_ms.append(model.kernel_time_ms())
    print(json.dumps({"device": model.device.name, "startup": model.startup.to_dict(),
                      "import_wall_ms": (imported - start) * 1e3, "load_wall_ms": (loaded - imported) * 1e3,
                      "first_run_ms": (ran - loaded) * 1e3,
                      "kernel_ms": sorted(kernel_ms)[len(kernel_ms) // 2] if kernel_ms else None}))
    """
)
#: Phases of the plot and the table, in order (StartupReport field names).
PHASES = ("read_ms", "verify_ms", "device_ms", "programs_ms", "upload_ms", "bind_ms", "other_ms")


def build(out: Path, target, onnx: dict[str, Path], models) -> None:
    """Compile every model for device profile ``target`` and save it into ``out/<model>`` (needs TVM)."""
    from tir_adreno.compiler import compile_plan
    from tir_adreno.frontend import models as builtin
    from tir_adreno.runtime.executor import save_model

    for name in models:
        log(f"compiling {name} for {target.name} ...")
        model = onnx_model(onnx[name]) if name in onnx else getattr(builtin, name)()
        plan, kernels, weights = compile_plan(model, target, None, progress=lambda _: None)
        save_model(out / name, plan, kernels, weights, target.name)


def onnx_model(path: Path):
    import onnx

    return onnx.load(str(path))


#: PoCL binaries cached without their IR (the default) and whole ($TIR_ADRENO_POCL_KEEP_IR=1):
#: ``--compare-pocl-ir`` measures both, alternating.
POCL_FORMS = {"no IR": {"TIR_ADRENO_POCL_KEEP_IR": "0"}, "whole": {"TIR_ADRENO_POCL_KEEP_IR": "1"}}


def start(folder: Path, cache_dir: Path, device: str | None, env: dict, kernel_runs: int) -> dict:
    """One fresh process that loads ``folder`` with kernel caches in ``cache_dir``: its report."""
    env = {**os.environ, **env, "TIR_ADRENO_CACHE_DIR": str(cache_dir), "POCL_CACHE_DIR": str(cache_dir / "pocl")}
    res = subprocess.run([sys.executable, "-c", CHILD, str(folder), device or "", str(kernel_runs)], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    if res.returncode:
        raise RuntimeError(f"loading {folder} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def measure(folder: Path, device: str | None, repeat: int, forms: dict, kernel_runs: int) -> dict:
    """Per form (name -> environment), a cold start (empty caches) and ``repeat`` warm starts of
    the saved model ``folder``, the forms' warm starts alternating (same load on a shared host)."""
    with tempfile.TemporaryDirectory(prefix="tir-adreno-startup-") as tmp:
        caches = {form: Path(tmp) / f"cache{i}" for i, form in enumerate(forms)}
        cold = {form: start(folder, caches[form], device, env, kernel_runs) for form, env in forms.items()}
        warm = {form: [] for form in forms}
        for _ in range(repeat):
            for form, env in forms.items():
                warm[form].append(start(folder, caches[form], device, env, kernel_runs))
    return {form: {"cold": cold[form], "warm": warm[form], "warm_median": median_report(warm[form])} for form in forms}


def median_report(runs: list[dict]) -> dict:
    """Per field, the median over ``runs`` (startup phases and the wall times)."""
    flat = [{**r["startup"], **{k: r.get(k) for k in ("import_wall_ms", "load_wall_ms", "first_run_ms", "kernel_ms")}}
            for r in runs]
    numbers = [k for k, v in flat[0].items() if isinstance(v, (int, float))]
    out = {k: statistics.median(f[k] for f in flat) for k in numbers}
    out["programs"] = {k: statistics.median(r["startup"]["programs"][k] for r in runs) for k in runs[0]["startup"]["programs"]}
    return out


def plot(doc: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    for ax, kind, title in zip(axes, ("cold", "warm_median"), ("cold (empty caches)", "warm (median)")):
        labels = [r["model"] + (f"\n{r['form']}" if "form" in r else "") for r in doc["results"]]
        reports = [r[kind] if kind == "warm_median" else r[kind]["startup"] for r in doc["results"]]
        bottom = [0.0] * len(reports)
        for phase in ("import_ms",) + PHASES:
            ys = [s[phase] for s in reports]
            ax.bar(labels, ys, bottom=bottom, label=phase.removesuffix("_ms"))
            bottom = [b + y for b, y in zip(bottom, ys)]
        ax.set_title(title)
        ax.tick_params(axis="x", labelsize=8, rotation=30)
        ax.set_ylabel("ms to a loaded model (stacked phases)")
    axes[1].legend(fontsize=8)
    fig.suptitle(f"start-up in a fresh process on {doc['device']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def table(results: list[dict]) -> None:
    rows = []
    for r in results:
        label = r["model"] if r.get("form") in (None, "no IR") else f"{r['model']} ({r['form']})"
        for kind, s in (("cold", r["cold"]["startup"]), ("warm", r["warm_median"])):
            p, whole = s["programs"], r["cold"] if kind == "cold" else s
            ready = p["from_source_ms"] if kind == "cold" else p["from_binary_ms"]
            rows.append([label, kind, fmt(s["import_ms"], ".0f"), fmt(s["total_ms"], ".0f"),
                         f"{fmt(s['programs_ms'], '.0f')} ({p['from_source']:.0f} src / {p['from_binary']:.0f} bin)",
                         fmt(ready, ".1f"), fmt(s["read_ms"], ".0f"), fmt(s["verify_ms"], ".0f"), fmt(s["upload_ms"], ".0f"),
                         fmt(s["bind_ms"], ".0f"), fmt(s["other_ms"], ".0f"), fmt(whole["first_run_ms"], ".0f"),
                         fmt(whole.get("kernel_ms"), ".1f")])
    print_table(["model", "start", "import", "load_model", "programs waited (from)", "program built", "read", "verify",
                 "upload", "bind", "other", "1st run", "kernel ms"], rows,
                title="start-up, ms (warm: median of fresh processes; program built: the build's own time)")


def main(argv) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_device_argument(parser)
    add_target_argument(parser)
    add_split_arguments(parser, what="models", dest="src")
    parser.add_argument("--models", default=",".join(BUILTIN), help="comma-separated (default: %(default)s)")
    parser.add_argument("--onnx", action="append", default=[], metavar="NAME=PATH", help="an ONNX model to include as NAME")
    parser.add_argument("--repeat", type=int, default=5, help="warm fresh processes per model (default 5)")
    parser.add_argument("--kernel-runs", type=int, default=3, help="profiled runs per process for its kernel time (default 3)")
    parser.add_argument("--compare-pocl-ir", action="store_true",
                        help="PoCL: binaries cached without IR (default) and whole ($TIR_ADRENO_POCL_KEEP_IR=1), alternating")
    args = parser.parse_args(argv)
    onnx = {name: Path(path) for name, path in (item.split("=", 1) for item in args.onnx)}
    models = [m for m in args.models.split(",") if m] + [m for m in onnx if m not in args.models.split(",")]
    if args.build_only:
        build(args.build_only, target_profile(args, build_only=True), onnx, models)
        log(f"saved {len(models)} models in {args.build_only}; time them with --from {args.build_only}")
        return 0
    with tempfile.TemporaryDirectory(prefix="tir-adreno-startup-models-") as tmp:
        src = args.src or Path(tmp)
        if args.src is None:
            build(src, target_profile(args), onnx, models)
        else:
            models = [m for m in models if (src / m / "model.json").exists()] or sorted(p.parent.name for p in src.glob("*/model.json"))
        results = []
        forms = POCL_FORMS if args.compare_pocl_ir else {"default": {}}
        for name in models:
            log(f"{name}: cold start, then {args.repeat} warm ones ({', '.join(forms)}) ...")
            for form, result in measure(src / name, args.device, args.repeat, forms, args.kernel_runs).items():
                results.append({"model": name, **({"form": form} if args.compare_pocl_ir else {}), **result})
    device = results[0]["cold"]["device"]
    doc = {"repeat": args.repeat, "results": results}
    path = write_json("startup", device, doc, args.results_dir)
    plot({**doc, "device": device}, path.with_suffix(".png"))
    log(f"wrote {path} and {path.with_suffix('.png').name}")
    table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
