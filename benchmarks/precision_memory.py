"""Device memory of whole models in float32 vs "float16_acc32", per device profile.

Compiles (no device needed: ``compile_plan``) the built-in ResNet-50 and MobileNetV2
(``--builtins``) and torchvision exports (``--onnx-models``, default EfficientNet-B0:
``--onnx-dir DIR/<name>.onnx``, made by ``benchmarks/zoo.py``; left out when absent) at 224
for each profile (adreno, nvidia-h200, pocl) in each precision and reports the bytes the plan allocates
(``Plan.memory_bytes``: weights, pooled intermediates, inputs/outputs) and the ratio of
weights + intermediates to the float32 build. Under float16_acc32 every tensor of our
kernels is half (RGBA half images, half buffers read with ``vload_half``); what stays
float32 is counted too: the model's inputs and outputs and the tensors upstream kernels
read or write. ``--run`` also runs each build here (PoCL) on one seeded input and reports
the float16_acc32 output's relative error against the float32 build's.

    python benchmarks/precision_memory.py --onnx-dir /tmp/zoo            # memory only
    python benchmarks/precision_memory.py --onnx-dir /tmp/zoo --run      # and the error here
    python benchmarks/precision_memory.py --builtins "" --onnx-models mobilenet_v2,resnet50 --onnx-dir /tmp/zoo --run

Merges its rows by (model, profile) into ``benchmarks/results/precision_memory-<device>.json``
(the device of ``--run``, else ``profiles``: memory needs none); exports are named
``<name> (torchvision)``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from common import fmt, log, print_table, results_path, write_json

NAME = "precision_memory"
PRECISIONS = ("float32", "float16_acc32")
PROFILES = ("adreno", "nvidia-h200", "pocl")
BUILTINS = ("mobilenet_v2", "resnet50")
ONNX_MODELS = ("efficientnet_b0",)
MIB = 2.0**20


def load_models(builtins, onnx_names, onnx_dir: Path | None) -> dict:
    """label -> model: built-in Relax modules, then ONNX paths (exports missing from ``onnx_dir`` are skipped)."""
    from tir_adreno.frontend import models

    out = {name: models.get_model(name, image_size=224) for name in builtins}
    for name in onnx_names:
        if onnx_dir is not None and (onnx_dir / f"{name}.onnx").exists():
            out[f"{name} (torchvision)"] = str(onnx_dir / f"{name}.onnx")
        else:
            log(f"skip {name}: no {name}.onnx in --onnx-dir (benchmarks/zoo.py exports it)")
    return out


def _names(text: str) -> list[str]:
    return [n for n in text.split(",") if n]


def float32_tensors(plan) -> dict:
    """Tensors that stay float32 under float16_acc32, by reason (count, MiB)."""
    upstream = {a for c in plan.calls if not c.ours for a in c.args}
    kinds = {"io": lambda i, t: t.kind in ("input", "output"), "upstream": lambda i, t: i in upstream and t.kind not in ("input", "output")}
    return {k: {"count": sum(1 for i, t in enumerate(plan.tensors) if f(i, t) and t.storage is None),
                "mib": sum(t.nbytes for i, t in enumerate(plan.tensors) if f(i, t) and t.storage is None) / MIB}
            for k, f in kinds.items()}


def measure(name, model, profile_name: str, run: bool) -> dict:
    from tir_adreno.compiler import compile_plan
    from tir_adreno.runtime.executor import CompiledModel
    from tir_adreno.strategy.profile import get_profile

    profile = get_profile(profile_name)
    entry = {"model": name, "profile": profile_name}
    outputs = {}
    for precision in PRECISIONS:
        start = time.perf_counter()
        plan, kernels, weights = compile_plan(model, profile, progress=lambda _: None, precision=precision)
        memory = {k: v / MIB for k, v in plan.memory_bytes().items()}
        row = {"compile_s": time.perf_counter() - start, "mib": memory, "calls": len(plan.calls)}
        if precision != "float32":
            row["float32_tensors"] = float32_tensors(plan)
            row["half_tensors"] = sum(1 for t in plan.tensors if t.storage == "float16")
        if run:
            compiled = CompiledModel(plan, kernels, weights)
            shape = plan.tensors[plan.inputs[0][1]].shape
            x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
            outputs[precision] = compiled.run({plan.inputs[0][0]: x})[0]
        entry[precision] = row
        log(f"{name} {profile_name} {precision}: weights {memory['weights']:.1f} MiB, intermediates {memory['intermediates']:.1f} MiB")
    f32, f16 = entry["float32"]["mib"], entry["float16_acc32"]["mib"]
    entry["ratio"] = (f16["weights"] + f16["intermediates"]) / (f32["weights"] + f32["intermediates"])
    if run:
        from tir_adreno.reference import relative_error

        entry["relative_error"] = relative_error(outputs["float16_acc32"], outputs["float32"])
    return entry


def merged(name: str, device: str, entries: list) -> list:
    """``entries`` over the rows of the same (model, profile) already in the results file."""
    path = results_path(name, device)
    old = json.loads(path.read_text())["entries"] if path.exists() else []
    new = {(e["model"], e["profile"]): e for e in entries}
    return [e for e in old if (e["model"], e["profile"]) not in new] + entries


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builtins", default=",".join(BUILTINS), help="comma-separated built-in models (may be empty)")
    parser.add_argument("--onnx-models", default=",".join(ONNX_MODELS), help="comma-separated <name>.onnx in --onnx-dir")
    parser.add_argument("--profiles", default=",".join(PROFILES))
    parser.add_argument("--onnx-dir", type=Path, default=None, help="folder of <name>.onnx (benchmarks/zoo.py exports)")
    parser.add_argument("--run", action="store_true", help="also run every build here and report the float16_acc32 error")
    args = parser.parse_args(argv)
    models = load_models(_names(args.builtins), _names(args.onnx_models), args.onnx_dir)
    entries = [measure(name, model, profile, args.run) for profile in args.profiles.split(",") for name, model in models.items()]
    rows = [[e["model"], e["profile"], fmt(e["float32"]["mib"]["weights"], ".1f"), fmt(e["float16_acc32"]["mib"]["weights"], ".1f"),
             fmt(e["float32"]["mib"]["intermediates"], ".1f"), fmt(e["float16_acc32"]["mib"]["intermediates"], ".1f"),
             fmt(e["ratio"], ".3f"), fmt(e.get("relative_error"), ".1e")] for e in entries]
    print_table(["model", "profile", "weights f32", "weights f16", "interm. f32", "interm. f16", "ratio", "error"], rows,
                title="MiB; ratio: (weights + intermediates) float16_acc32 / float32; error: float16_acc32 vs float32 here")
    if args.run:
        from tir_adreno.runtime import opencl

        device = opencl.get_device().name
    else:
        device = "profiles"
    log(f"wrote {write_json(NAME, device, {'image_size': 224, 'entries': merged(NAME, device, entries)})}")


if __name__ == "__main__":
    main()
