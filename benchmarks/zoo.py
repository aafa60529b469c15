"""The torchvision model zoo as exported, on our kernels, checked against onnxruntime.

For each model (batch 1, 3x224x224, random weights with BatchNorm statistics
re-drawn, exported with ``torch.onnx.export(dynamo=False, opset_version=17)``)
it compiles with ``compile_model`` on the default device, runs it, compares with
onnxruntime and prints one row: result, relative error, share of kernel time in
our kernels (``primfuncs/``), layout transforms, the op types left upstream,
compile time and kernel time. Results are merged by model into
``benchmarks/results/zoo-<device>.json``, so models can run one at a time.

    python benchmarks/zoo.py --models mobilenet_v2,resnet18   # exports with torch (imported lazily)
    python benchmarks/zoo.py --onnx-dir DIR                   # DIR/<model>.onnx, no torch needed
    python benchmarks/zoo.py --onnx-dir DIR --build-only OUT --target nvidia-h200   # compile, save timing-only
    python benchmarks/zoo.py --from OUT --device NVIDIA       # time there (no TVM, random weights)

``--from`` records per model kernel time (median of profiled runs), wall time of a
fast run, share in our kernels, layout transforms, calls and launches; weights are
seeded random (``"random_weights": true``), so the numeric check is the local run's.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from common import (add_device_argument, add_split_arguments, add_target_argument, fmt, log, print_table, results_path,
                    source_revision, target_profile, write_json)

MODELS = (
    "resnet18", "mobilenet_v2", "mobilenet_v3_small", "mobilenet_v3_large", "shufflenet_v2_x1_0",
    "efficientnet_b0", "lraspp_mobilenet_v3_large", "densenet121", "convnext_tiny", "vgg11",
)
#: Kernels that only move an activation between NCHW/NHWC and NCHW4c.
LAYOUT_TRANSFORMS = ("nchw_to_nchw4c", "nhwc_to_nchw4c", "nchw4c_to_nchw", "nchw4c_to_nhwc")
RTOL = 1e-3
#: What a ``--from`` run (random weights) can and cannot say.
TIMING_ONLY_NOTE = (
    "timing only: saved without weights (--build-only) and run with seeded random weights; "
    "the numeric check against onnxruntime is the PoCL run's (benchmarks/results/zoo-pthread-skylake-avx512-amd-epyc.json)"
)


def export(name: str, path: Path, seed: int = 0) -> Path:
    """``torchvision.models.<name>`` with random weights as ONNX (opset 17, TorchScript exporter)."""
    import torch
    import torchvision

    torch.manual_seed(seed)
    if name.startswith(("lraspp", "deeplab", "fcn")):
        net = getattr(torchvision.models.segmentation, name)(weights=None, weights_backbone=None)
    else:
        net = getattr(torchvision.models, name)(weights=None)
    for m in net.modules():  # fresh statistics, so BatchNorm is no identity
        if isinstance(m, torch.nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0.0, 0.1)

    class Tensors(torch.nn.Module):  # segmentation models return {"out": ...}
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            y = self.inner(x)
            return y["out"] if isinstance(y, dict) else y

    path.parent.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(Tensors(net).eval(), torch.randn(1, 3, 224, 224), str(path), dynamo=False, opset_version=17, input_names=["input"])
    return path


def upstream_op(label: str) -> str:
    """An upstream kernel's op type from its PrimFunc name (``fused_matmul3_add2`` -> ``matmul_add``)."""
    return re.sub(r"\d+(?=_|$)", "", label).removeprefix("fused_") or label


def compile_onnx(path: Path, device):
    """(CompiledModel, ONNX model, compile seconds) of one exported model."""
    import onnx

    from tir_adreno import compile_model

    model = onnx.load(str(path))
    start = time.perf_counter()
    compiled = compile_model(model, device=device, progress=lambda _: None)
    return compiled, model, time.perf_counter() - start


def random_inputs(compiled, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    shapes = [(compiled.plan.tensors[i].shape, compiled.plan.tensors[i].dtype) for _, i in compiled.plan.inputs]
    return {name: rng.standard_normal(shape).astype(dtype) for name, (shape, dtype) in zip(compiled.input_names, shapes)}


def profile_stats(compiled) -> dict:
    """Share in our kernels, layout transforms, kernels and upstream op types of the last profiled run."""
    profile = compiled.profile()
    total = compiled.kernel_time_ms()
    ours = sum(p["time_ms"] for p in profile if p["ours"])
    upstream = collections.Counter(upstream_op(p["op"]) for p in profile if not p["ours"])
    upstream_ms = collections.Counter()
    for p in profile:
        if not p["ours"]:
            upstream_ms[upstream_op(p["op"])] += p["time_ms"]
    return {
        "ours_share": ours / max(total, 1e-12),
        "layout_transforms": sum(p["op"].startswith(LAYOUT_TRANSFORMS) for p in profile),
        "kernels": len(profile),
        "upstream_kernels": dict(upstream),
        "upstream_ms": dict(upstream_ms),
        "kernel_ms": total,
    }


def run_model(path: Path, device, seed: int = 0) -> dict:
    from tir_adreno.reference import reference_outputs, relative_error

    compiled, model, compile_s = compile_onnx(path, device)
    inputs = random_inputs(compiled, seed)
    compiled.run(inputs)  # warm-up
    outputs = compiled.run(inputs, profile=True)
    refs = reference_outputs(model, inputs)
    error = max(relative_error(o, r) for o, r in zip(outputs, refs))
    return {"ok": bool(error <= RTOL), "relative_error": error, **profile_stats(compiled), "compile_s": compile_s}


def build_models(paths: dict, directory: Path, profile) -> None:
    """Compile each model for ``profile`` and save it timing-only (no weights) under ``directory/<name>``;
    nothing is loaded here (the plan may exceed this device's image limits)."""
    import onnx

    from tir_adreno.compiler import compile_plan
    from tir_adreno.runtime.executor import save_model

    index = directory / "zoo-build.json"  # merged, so models can be built one at a time
    built = json.loads(index.read_text())["models"] if index.exists() else {}
    source = source_revision()  # the plans' code, carried into each model's --from results
    for name, path in paths.items():
        log(f"compile {name} for {profile.name} ...")
        start = time.perf_counter()
        try:
            plan, kernels, _ = compile_plan(onnx.load(str(path)), profile, progress=lambda _: None)
        except Exception as err:  # noqa: BLE001 (a failing model is a row of the table)
            built[name] = {"failure": _failure(err)}
            log(f"  {built[name]['failure']}")
        else:
            save_model(directory / name, plan, kernels, None, profile.name)
            built[name] = {"compile_s": time.perf_counter() - start}
            log(f"  {built[name]['compile_s']:.0f} s")
        built[name]["source"] = source
        index.write_text(json.dumps({"target": profile.name, "models": built}, indent=1) + "\n")


def time_saved_model(path: Path, device, repeat: int, seed: int = 0) -> dict:
    """Kernel time (median of profiled runs), wall time of a fast run and the profile of a model
    saved by ``--build-only``, with seeded random weights: timing only, no TVM."""
    from tir_adreno.runtime.executor import load_model

    compiled = load_model(path, device, random_weights=seed)
    inputs = random_inputs(compiled, seed)
    compiled.run(inputs)  # warm-up: drivers finish compiling on first launch
    walls, kernels = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        compiled.run(inputs)
        walls.append((time.perf_counter() - start) * 1e3)
    for _ in range(repeat):
        compiled.run(inputs, profile=True)
        kernels.append(compiled.kernel_time_ms())
    stats = profile_stats(compiled)  # of the last profiled run; kernel_ms is the median of all
    return {**stats, "kernel_ms": statistics.median(kernels), "wall_ms": statistics.median(walls),
            "calls": len(compiled.plan.calls), "launches": compiled.launch_count, "random_weights": True}


def _failure(err: Exception) -> str:
    return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:200]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_device_argument(parser)
    add_target_argument(parser)
    parser.add_argument("--models", default=",".join(MODELS), help="torchvision model names (exported with torch)")
    parser.add_argument("--onnx-dir", type=Path, default=None, help="take DIR/<model>.onnx instead of exporting")
    parser.add_argument("--export-dir", type=Path, default=Path("/tmp/tir-adreno-zoo"), help="where exports are kept")
    parser.add_argument("--repeat", type=int, default=10, help="timed runs per model with --from (medians)")
    add_split_arguments(parser, "models (timing only, no weights)", dest="from_dir")
    args = parser.parse_args()

    from tir_adreno.runtime import opencl as runtime

    device = runtime.get_device(args.device)
    names = [n for n in args.models.split(",") if n]
    if args.from_dir:
        built = json.loads((args.from_dir / "zoo-build.json").read_text())
        paths = {n: args.from_dir / n for n in names if n in built["models"]}
    elif args.onnx_dir:
        paths = {n: args.onnx_dir / f"{n}.onnx" for n in names if (args.onnx_dir / f"{n}.onnx").exists()}
        if not paths:
            parser.error(f"--onnx-dir {args.onnx_dir}: none of {names} as <model>.onnx")
    else:
        paths = {}
        for name in names:
            path = args.export_dir / f"{name}.onnx"
            if not path.exists():
                log(f"export {name} ...")
                export(name, path)
            paths[name] = path
    if args.build_only:
        profile = target_profile(args, build_only=True)
        build_models(paths, args.build_only, profile)
        log(f"saved to {args.build_only} (planned for {profile.name})")
        return 0

    # Merge into earlier results, so a model can be (re)run alone.
    previous = results_path("zoo", device.name, args.results_dir)
    results = json.loads(previous.read_text())["results"] if previous.exists() else {}
    payload = {"rtol": RTOL}
    if args.from_dir:
        payload = {"target": built["target"], "repeat": args.repeat, "note": TIMING_ONLY_NOTE}
    for name, path in paths.items():
        log(f"run {name} ...")
        try:
            if args.from_dir and "failure" in built["models"][name]:
                results[name] = {"ok": False, **built["models"][name]}
            elif args.from_dir:
                results[name] = {**built["models"][name], **time_saved_model(path, device, args.repeat)}
            else:
                results[name] = run_model(path, device)
        except Exception as err:  # noqa: BLE001 (a failing model is a row of the table)
            results[name] = {"ok": False, "failure": _failure(err)}
        write_json("zoo", device.name, {**payload, "results": results}, args.results_dir)

    rows = []
    for name, r in results.items():
        if "failure" in r:
            rows.append([name, "FAIL", "-", "-", "-", "-", "-", "-", r["failure"]])
            continue
        top = sorted(r["upstream_ms"].items(), key=lambda kv: -kv[1])[:4]
        rows.append([
            name, "timed" if r.get("random_weights") else "ok" if r["ok"] else "WRONG", fmt(r.get("relative_error"), ".1e"), fmt(100 * r["ours_share"], ".1f") + "%",
            r["layout_transforms"], r["kernels"], fmt(r["compile_s"], ".0f"), fmt(r["kernel_ms"], ".1f"),
            ", ".join(f"{op} x{r['upstream_kernels'][op]}" for op, _ in top) or "-",
        ])
    print_table(
        ["model", "result", "error", "ours", "layout tr.", "kernels", "compile s", "kernel ms", "upstream (by time)"],
        rows, title=f"torchvision zoo on {device.name} (batch 1, 224; "
        + (f"built for {payload['target']}, {TIMING_ONLY_NOTE})" if args.from_dir else f"vs onnxruntime, rtol {RTOL})"),
    )
    if args.from_dir:
        print("wall ms (one fast run): " + ", ".join(f"{n} {fmt(r.get('wall_ms'))}" for n, r in results.items()))
        return 0 if not any("failure" in r for r in results.values()) else 1
    return 0 if all(r.get("ok") for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
