"""Precision "float16" (half math) proven on a device: every kernel family, then whole models.

(a) Every kernel family's float16 kernels (``float16_kernels.py``) against float64 references
    with the fp16 bound of tests/kernels/test_fp16.py, u16 in the accumulation term.
(b) float32 vs float16_acc32 vs float16 end to end (built-in MobileNetV2 and ResNet-50, seeded
    weights; ONNX models with ``--onnx NAME=PATH``, e.g. EfficientNet-B0 conditioned by
    ``calibrate_onnx.py``): kernel time (median OpenCL event time of profiled runs), wall time
    per run, weights + intermediates MiB, relative error (max |diff| / max |ref|) against the
    float32 build on the same (half) weights and against float32 with the full weights.
``--diagnose MODEL`` (with ``--from``) compares the float16 build with the float32 one call by call.

The device needs half arithmetic, natively or through the half prelude
(``tir_adreno.runtime.half_compat``; ``opencl.half_mode`` says which).

    python benchmarks/float16.py --build-only DIR --target nvidia-h200   # here (TVM)
    python benchmarks/float16.py --from DIR                              # there (numpy + pyopencl)

Writes ``benchmarks/results/float16-<device>.json``; the table comes last on stdout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from common import add_device_argument, add_split_arguments, add_target_argument, fmt, log, print_table, target_profile, write_json

import float16_kernels as kernels  # after common, which puts this checkout first on sys.path

NAME = "float16"
PRECISIONS = ("float32", "float16_acc32", "float16")
#: Built-in models (seeded weights conditioned like a trained net's) and ONNX files (``--onnx NAME=PATH``).
MODELS = ("mobilenet_v2", "resnet50")
#: The issue's error targets per precision (max |diff| / max |ref|).
TARGETS = {"float16_acc32": 1e-2, "float16": 2e-2}


# -- build (TVM) ------------------------------------------------------------------------------------


def build(out: Path, profile, models: dict, image_size: int, kernel_cases: bool = True) -> None:
    """The kernel cases, then each model in every precision, saved without weights: the weights
    of the float16 build go once into ``<model>/weights16.npz`` (in the order of the plan's
    constants, the same in every build: checked) and every build runs them, so the device tool
    carries half the bytes and the builds differ only in precision. ``reference.npz`` holds the
    input and the float32 build's output on this machine's device with the full float32 weights
    (the float16 error against it includes the rounding of the weights to half)."""
    if kernel_cases:
        cases = kernels.build_cases("float16", profile)
        kernels.save_cases(cases, out / "kernels")
        log(f"built {len(cases)} float16 kernel cases")
    from tir_adreno.compiler import compile_plan
    from tir_adreno.frontend import models as builtin
    from tir_adreno.runtime import opencl as runtime
    from tir_adreno.runtime.executor import CompiledModel, save_model

    done = {}
    for name, source in models.items():
        model = builtin.get_model(name, image_size=image_size) if source is None else source
        plans = {}
        for precision in PRECISIONS:
            log(f"compile {name} ({precision}) ...")
            plans[precision] = compile_plan(model, profile, precision=precision, progress=lambda _: None)
            save_model(out / "models" / name / precision, plans[precision][0], plans[precision][1], None, profile.name)
        consts = {p: const_shapes(plan) for p, (plan, _, _) in plans.items()}
        if len({tuple(c) for c in consts.values()}) != 1:
            raise RuntimeError(f"{name}: the builds' constants differ in order or shape; cannot share weights")
        plan16, _, w16 = plans["float16"]
        np.savez(out / "models" / name / "weights16.npz", *[w16[i] for i, t in enumerate(plan16.tensors) if t.kind == "const"])
        plan32, kernels32, w32 = plans["float32"]
        cm = CompiledModel(plan32, kernels32, w32, runtime.get_device())
        x = model_input(plan32)
        np.savez(out / "models" / name / "reference.npz", x=next(iter(x.values())), y=cm.run(x)[0])
        done[name] = "ok"
    (out / "models.json").write_text(json.dumps({"image_size": image_size, "models": list(models), "built": done}))


def const_shapes(plan) -> list:
    return [tuple(t.shape) for t in plan.tensors if t.kind == "const"]


def model_input(plan) -> dict:
    (name, t), = plan.inputs
    return {name: np.random.default_rng(0).standard_normal(plan.tensors[t].shape).astype("float32")}


# -- run (numpy + pyopencl) -------------------------------------------------------------------------


def probe(device) -> dict:
    from tir_adreno.runtime import opencl as runtime

    d = device.cl_device
    return {"device": device.name, "driver": d.driver_version, "opencl_c": d.opencl_c_version,
            "cl_khr_fp16": "cl_khr_fp16" in d.extensions, "half_images": runtime.half_images(device),
            "half_mode": runtime.half_mode(device)}


def run_kernels(src: Path, device) -> list:
    rows = []
    for name, case in kernels.load_cases(src / "kernels").items():
        try:
            r = kernels.run_case(case, device)
        except Exception as err:  # noqa: BLE001 (a failing case is reported with its build log, not fatal)
            lines = str(err).strip().splitlines()
            r = {"ok": False, "error": f"{type(err).__name__}: " + "\n".join(lines[:40])}
        rows.append({"case": name, **r})
        log(f"{name}: {r.get('ok')} ratio {fmt(r.get('bound_ratio'), '.3g')} {r.get('error', '')[:2000]}")
    return rows


def load_build(directory: Path, weights16: list, device, pool: bool = True):
    """A saved build (no weights) with the shared half weights, each in its tensor's storage dtype."""
    from tir_adreno.runtime import cache
    from tir_adreno.runtime.bundle import KernelModule
    from tir_adreno.runtime.executor import CompiledModel, Plan

    doc = json.loads(cache.read(directory / "model.json").decode())
    plan = Plan.from_dict(doc["plan"])
    kernels_ = {k: KernelModule.from_dict(v) for k, v in doc["kernels"].items()}
    const = [i for i, t in enumerate(plan.tensors) if t.kind == "const"]
    weights = {i: w.astype(plan.tensors[i].storage_dtype) for i, w in zip(const, weights16)}
    return CompiledModel(plan, kernels_, weights, device, pool)


def diagnose(src: Path, name: str, device, precision: str = "float16") -> list:
    """Where ``precision`` departs from float32 in model ``name``: both builds without the memory
    pool (every intermediate kept), run on the same input, each call's output compared (the
    builds' plans match call by call: same constants, same kernels in another dtype)."""
    folder = src / "models" / name
    with np.load(folder / "weights16.npz") as npz:
        w16 = [npz[f"arr_{i}"] for i in range(len(npz.files))]
    with np.load(folder / "reference.npz") as npz:
        x = npz["x"]
    builds = {p: load_build(folder / p, w16, device, pool=False) for p in ("float32", precision)}
    for cm in builds.values():
        cm.run({cm.plan.inputs[0][0]: x})
    ref, half = builds["float32"], builds[precision]
    rows = []
    for i, (a, b) in enumerate(zip(ref.plan.calls, half.plan.calls)):
        out = a.args[-1]
        y32, y16 = ref._tensors[out].numpy().astype(np.float64), half._tensors[out].numpy().astype(np.float64)
        scale = float(np.abs(y32).max())
        err = float(np.abs(y16 - y32).max() / scale) if scale > 0 else float(np.abs(y16).max())
        rows.append({"call": i, "label": a.label, "max_abs": scale, "relative_error": err,
                     "finite": bool(np.all(np.isfinite(y16))), "max_abs_half": float(np.abs(y16).max())})
    print_table(["#", "call", "max |fp32|", "max |half|", "rel. error", "finite"],
                [[r["call"], r["label"][:60], fmt(r["max_abs"], ".3g"), fmt(r["max_abs_half"], ".3g"),
                  fmt(r["relative_error"], ".2e"), r["finite"]] for r in rows], title=f"{name}: {precision} vs float32 per call")
    return rows


def run_models(src: Path, device, repeat: int) -> list:
    from tir_adreno.reference import relative_error

    meta = json.loads((src / "models.json").read_text())
    rows = []
    for name in meta["models"]:
        folder = src / "models" / name
        with np.load(folder / "weights16.npz") as npz:
            w16 = [npz[f"arr_{i}"] for i in range(len(npz.files))]
        with np.load(folder / "reference.npz") as npz:
            x, y32_full = npz["x"], npz["y"]
        outputs = {}
        for precision in PRECISIONS:
            row = {"model": name, "precision": precision}
            rows.append(row)
            try:
                cm = load_build(folder / precision, w16, device)
                row.update(_run_model(cm, x, repeat, outputs, precision))
            except Exception as err:  # noqa: BLE001 (a failed build is reported, not fatal)
                row["error"] = f"{type(err).__name__}: {str(err).strip().splitlines()[0][:300]}"
            if precision in outputs:
                row["relative_error_vs_float32_weights"] = relative_error(outputs[precision], y32_full)
            if precision != "float32" and "float32" in outputs and precision in outputs:
                row["relative_error"] = relative_error(outputs[precision], outputs["float32"])
                row["target"] = TARGETS[precision]
            log(f"{name} {precision}: {row}")
    return rows


def _run_model(cm, x, repeat: int, outputs: dict, precision: str) -> dict:
    (name, _), = cm.plan.inputs
    inputs = {name: x}
    cm.run(inputs)  # warm-up
    kernel, wall = [], []
    for _ in range(repeat):
        outputs[precision] = cm.run(inputs, profile=True)[0]
        kernel.append(cm.kernel_time_ms())
        start = time.perf_counter()
        cm.run(inputs)
        wall.append((time.perf_counter() - start) * 1e3)
    mem = cm.memory_bytes()
    return {"kernel_ms": statistics.median(kernel), "wall_ms": statistics.median(wall),
            "weights_mib": mem["weights"] / 2**20, "intermediates_mib": mem["intermediates"] / 2**20,
            "finite": bool(np.all(np.isfinite(outputs[precision])))}


def report(kernel_rows, model_rows) -> dict:
    print_table(["case", "ok", "err / bound", "rel. error", "kernel us"],
                [[r["case"], r["ok"], fmt(r.get("bound_ratio"), ".3g"), fmt(r.get("relative_error"), ".2e"),
                  fmt(r.get("kernel_us"), ".1f")] for r in kernel_rows], title="(a) float16 kernels vs float64 (fp16 bound, u16)")
    print_table(["model", "precision", "kernel ms", "wall ms", "weights MiB", "interm. MiB", "err vs fp32 build",
                 "err vs fp32 weights", "note"],
                [[r["model"], r["precision"], fmt(r.get("kernel_ms")), fmt(r.get("wall_ms")), fmt(r.get("weights_mib"), ".1f"),
                  fmt(r.get("intermediates_mib"), ".1f"), fmt(r.get("relative_error"), ".2e"),
                  fmt(r.get("relative_error_vs_float32_weights"), ".2e"), r.get("error", "")[:60]]
                 for r in model_rows], title="(b) end to end: error vs the float32 build (same half weights) and vs float32 weights")
    return {"kernels_ok": sum(bool(r["ok"]) for r in kernel_rows), "kernels": len(kernel_rows),
            "models_within_target": [f"{r['model']}/{r['precision']}" for r in model_rows
                                     if r.get("relative_error") is not None and r["relative_error"] <= r["target"]]}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_device_argument(parser)
    add_target_argument(parser)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated built-in models ('' for none)")
    parser.add_argument("--onnx", action="append", default=[], metavar="NAME=PATH", help="an ONNX model too (repeatable)")
    parser.add_argument("--no-kernels", action="store_true", help="build no kernel cases (models only)")
    parser.add_argument("--diagnose", metavar="MODEL", help="with --from: compare MODEL's float16 build with its float32 "
                        "build call by call (where an error comes from), write float16-diagnose-<device>.json")
    parser.add_argument("--repeat", type=int, default=10)
    add_split_arguments(parser, "kernel cases and models", dest="from_dir")
    args = parser.parse_args()
    if args.build_only is not None:
        models = {n: None for n in args.models.split(",") if n}
        models.update(dict(item.split("=", 1) for item in args.onnx))
        build(args.build_only, target_profile(args, build_only=True), models, args.image_size, not args.no_kernels)
        print(f"built into {args.build_only}; run: python benchmarks/float16.py --from {args.build_only}")
        return
    if args.from_dir is None:
        parser.error("give --build-only DIR (here, with TVM) or --from DIR (on the device)")
    from tir_adreno.runtime import opencl as runtime

    device = runtime.get_device(args.device)
    if args.diagnose:
        rows = diagnose(args.from_dir, args.diagnose, device)
        print(f"wrote {write_json(NAME + '-diagnose', device.name, {'model': args.diagnose, 'calls': rows}, args.results_dir)}")
        return
    start = time.perf_counter()
    info = probe(device)
    log(f"probe: {info}")
    kernel_rows = run_kernels(args.from_dir, device) if (args.from_dir / "kernels").exists() else []
    model_rows = run_models(args.from_dir, device, args.repeat) if (args.from_dir / "models.json").exists() else []
    summary = report(kernel_rows, model_rows)
    payload = {"probe": info, "kernels": kernel_rows, "models": model_rows, "summary": summary,
               "run_s": time.perf_counter() - start}
    print(f"wrote {write_json(NAME, device.name, payload, args.results_dir)}")


if __name__ == "__main__":
    main()
