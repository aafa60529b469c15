"""The torchvision model zoo as exported, on our kernels, checked against onnxruntime.

For each model (batch 1, 3x224x224, random weights with BatchNorm statistics
re-drawn, exported with ``torch.onnx.export(dynamo=False, opset_version=17)``)
it compiles with ``compile_model`` on the default device, runs it, compares with
onnxruntime and prints one row: result, relative error, share of kernel time in
our kernels (``primfuncs/``), layout transforms, the op types left upstream,
compile time and kernel time. Results are merged by model into
``benchmarks/results/zoo-<device>.json``, so models can run one at a time.

    python benchmarks/zoo.py --models mobilenet_v2,resnet18   # exports with torch (imported lazily)
    python benchmarks/zoo.py --onnx-dir DIR                   # every DIR/*.onnx, no torch needed
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

from common import add_device_argument, fmt, log, print_table, results_path, write_json

MODELS = (
    "resnet18", "mobilenet_v2", "mobilenet_v3_small", "mobilenet_v3_large", "shufflenet_v2_x1_0",
    "efficientnet_b0", "lraspp_mobilenet_v3_large", "densenet121", "convnext_tiny", "vgg11",
)
#: Kernels that only move an activation between NCHW/NHWC and NCHW4c.
LAYOUT_TRANSFORMS = ("nchw_to_nchw4c", "nhwc_to_nchw4c", "nchw4c_to_nchw", "nchw4c_to_nhwc")
RTOL = 1e-3


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


def run_model(path: Path, device, seed: int = 0) -> dict:
    import onnx

    from tir_adreno import compile_model
    from tir_adreno.reference import reference_outputs, relative_error

    model = onnx.load(str(path))
    start = time.perf_counter()
    compiled = compile_model(model, device=device, progress=lambda _: None)
    compile_s = time.perf_counter() - start
    shapes = [(compiled.plan.tensors[i].shape, compiled.plan.tensors[i].dtype) for _, i in compiled.plan.inputs]
    rng = np.random.default_rng(seed)
    inputs = {name: rng.standard_normal(shape).astype(dtype) for name, (shape, dtype) in zip(compiled.input_names, shapes)}
    compiled.run(inputs)  # warm-up
    outputs = compiled.run(inputs, profile=True)
    profile = compiled.profile()
    refs = reference_outputs(model, inputs)
    error = max(relative_error(o, r) for o, r in zip(outputs, refs))
    total = compiled.kernel_time_ms()
    ours = sum(p["time_ms"] for p in profile if p["ours"])
    upstream = collections.Counter(upstream_op(p["op"]) for p in profile if not p["ours"])
    upstream_ms = collections.Counter()
    for p in profile:
        if not p["ours"]:
            upstream_ms[upstream_op(p["op"])] += p["time_ms"]
    return {
        "ok": bool(error <= RTOL),
        "relative_error": error,
        "ours_share": ours / max(total, 1e-12),
        "layout_transforms": sum(p["op"].startswith(LAYOUT_TRANSFORMS) for p in profile),
        "kernels": len(profile),
        "upstream_kernels": dict(upstream),
        "upstream_ms": dict(upstream_ms),
        "compile_s": compile_s,
        "kernel_ms": total,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_device_argument(parser)
    parser.add_argument("--models", default=",".join(MODELS), help="torchvision model names (exported with torch)")
    parser.add_argument("--onnx-dir", type=Path, default=None, help="run every *.onnx here instead of exporting")
    parser.add_argument("--export-dir", type=Path, default=Path("/tmp/tir-adreno-zoo"), help="where exports are kept")
    parser.add_argument("--results-dir", type=Path, default=None, help="default: benchmarks/results")
    args = parser.parse_args()

    from tir_adreno import runtime

    device = runtime.get_device(args.device)
    if args.onnx_dir:
        paths = {p.stem: p for p in sorted(args.onnx_dir.glob("*.onnx"))}
        if not paths:
            parser.error(f"--onnx-dir {args.onnx_dir}: no *.onnx files")
    else:
        paths = {}
        for name in (n for n in args.models.split(",") if n):
            path = args.export_dir / f"{name}.onnx"
            if not path.exists():
                log(f"export {name} ...")
                export(name, path)
            paths[name] = path

    # Merge into earlier results, so a model can be (re)run alone.
    previous = results_path("zoo", device.name, args.results_dir)
    results = json.loads(previous.read_text())["results"] if previous.exists() else {}
    for name, path in paths.items():
        log(f"run {name} ...")
        try:
            results[name] = run_model(path, device)
        except Exception as err:  # noqa: BLE001 (a failing model is a row of the table)
            results[name] = {"ok": False, "failure": f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:200]}
        write_json("zoo", device.name, {"rtol": RTOL, "results": results}, args.results_dir)

    rows = []
    for name, r in results.items():
        if "failure" in r:
            rows.append([name, "FAIL", "-", "-", "-", "-", "-", "-", r["failure"]])
            continue
        top = sorted(r["upstream_ms"].items(), key=lambda kv: -kv[1])[:4]
        rows.append([
            name, "ok" if r["ok"] else "WRONG", fmt(r["relative_error"], ".1e"), fmt(100 * r["ours_share"], ".1f") + "%",
            r["layout_transforms"], r["kernels"], fmt(r["compile_s"], ".0f"), fmt(r["kernel_ms"], ".1f"),
            ", ".join(f"{op} x{r['upstream_kernels'][op]}" for op, _ in top) or "-",
        ])
    print_table(
        ["model", "result", "error", "ours", "layout tr.", "kernels", "compile s", "kernel ms", "upstream (by time)"],
        rows, title=f"torchvision zoo on {device.name} (batch 1, 224; vs onnxruntime, rtol {RTOL})",
    )
    return 0 if all(r.get("ok") for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
