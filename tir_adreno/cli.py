"""``tir-adreno`` command line: ``devices`` and ``run`` (the main job)."""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def _devices(args) -> int:
    from . import runtime

    rows = runtime.list_devices()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no OpenCL devices found")
        return 1
    default = runtime.get_device()
    for r in rows:
        mark = "*" if f"{r['platform']}: {r['device']}" == default.name else " "
        images = (
            f"images {r['image2d_max_width']} x {r['image2d_max_height']} x {r['image_max_array_size']} layers"
            if r["image_support"]
            else "no image support (buffers only)"
        )
        print(f"{mark} {r['platform']}: {r['device']} [{r['type']}] {r['version']}; {images}; fp16 {'yes' if r['fp16'] else 'no'}")
    print("* = default device (override with --device or TIR_ADRENO_DEVICE)")
    return 0


def _kernels(args) -> int:
    from . import runtime
    from .tour import kernel_tour

    dev = runtime.get_device(args.device)
    print(f"device: {dev.name}", flush=True)
    rows = kernel_tour(dev, progress=lambda msg: print(msg, flush=True))
    print()
    print(f"{'kernel':<22} {'shape':<22} {'placement':<22} {'time (us)':>10} {'check':>8}")
    for r in rows:
        print(f"{r['kernel']:<22} {r['shape']:<22} {r['placement']:<22} {r['time_us']:>10.1f} {r['check']:>8}")
    failed = [r for r in rows if r["check"] != "ok"]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev.name, "kernels": rows}, f, indent=2)
    print(f"\n{len(rows) - len(failed)}/{len(rows)} kernels match NumPy on {dev.name}")
    return 1 if failed else 0


#: --check tolerance on outputs (relative to the largest reference magnitude).
CHECK_RTOL = 1e-3


def _load_inputs(path, names, shapes):
    if path is None:
        rng = np.random.default_rng(0)
        return {n: rng.standard_normal(s).astype(d) for n, (s, d) in zip(names, shapes)}
    try:
        with np.load(path) as npz:
            return {k: npz[k] for k in npz.files}
    except (OSError, ValueError) as err:
        raise UserError(f"{path}: cannot read inputs ({err})") from None


def _run(args) -> int:
    from . import models, runtime
    from .compiler import ModelError, compile_model
    from .executor import ModelInputError

    dev = runtime.get_device(args.device)
    model = args.model if args.model else models.get_model(args.builtin)
    label = args.model or f"built-in {args.builtin} (seeded random weights)"
    print(f"model: {label}\ndevice: {dev.name}", flush=True)
    start = time.perf_counter()
    try:
        compiled = compile_model(model, dev, progress=lambda msg: print(f"  {msg}", flush=True))
    except ModelError as err:
        raise UserError(str(err)) from None
    print(f"compiled in {time.perf_counter() - start:.1f} s", flush=True)
    shapes = [(compiled.plan.tensors[i].shape, compiled.plan.tensors[i].dtype) for _, i in compiled.plan.inputs]
    inputs = _load_inputs(args.inputs, compiled.input_names, shapes)
    try:
        compiled.run(inputs)  # warm-up: first launches build per-work-group code on some drivers
        start = time.perf_counter()
        compiled.run(inputs)
        wall = time.perf_counter() - start
        # Outputs and per-op times from a profiled run (outputs poisoned first, events recorded).
        outputs = compiled.run(inputs, profile=True)
    except ModelInputError as err:
        raise UserError(str(err)) from None
    profile = compiled.profile()
    print(f"\n{'#':>3}  {'op':<28} {'kernel':<10} {'placement':<9} {'time (ms)':>10}")
    for i, p in enumerate(profile):
        print(f"{i:>3}  {p['op']:<28} {'ours' if p['ours'] else 'upstream':<10} {p['placement']:<9} {p['time_ms']:>10.3f}")
    kernel_ms = compiled.kernel_time_ms()
    ours = sum(p["time_ms"] for p in profile if p["ours"])
    print(f"\nkernel time {kernel_ms:.2f} ms ({ours / max(kernel_ms, 1e-12):.0%} in tir-adreno kernels), wall {wall * 1e3:.1f} ms")
    mem = compiled.memory_bytes()
    print(f"device memory: {mem['total'] / 2**20:.1f} MiB ({mem['intermediates'] / 2**20:.1f} MiB activations with the image pool)")
    names = [f"output{i}" for i in range(len(outputs))]
    if args.outputs:
        np.savez(args.outputs, **dict(zip(names, outputs)))
    report = {"model": label, "device": dev.name, "kernel_ms": kernel_ms, "wall_ms": wall * 1e3, "memory": mem, "profile": profile}
    status = 0
    if args.check:
        from .reference import reference_outputs, relative_error

        print("checking against the CPU reference ...", flush=True)
        refs = reference_outputs(model if not args.model else args.model, inputs)
        errors = [relative_error(o, r) for o, r in zip(outputs, refs)]
        report["check"] = {"relative_errors": errors, "rtol": CHECK_RTOL}
        ok = len(refs) == len(outputs) and all(e <= CHECK_RTOL for e in errors)
        print(f"check {'passed' if ok else 'FAILED'}: relative error {max(errors):.2e} (tolerance {CHECK_RTOL:g})")
        status = 0 if ok else 1
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return status


class UserError(Exception):
    """A mistake in what the user asked for: one line, exit code 2."""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="tir-adreno", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("devices", help="list OpenCL devices, image support and texture limits")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(fn=_devices)
    p = sub.add_parser("run", help="compile a model onto texture kernels, run it, print a per-op profile")
    p.add_argument("model", nargs="?", help="ONNX model file (default: a built-in model)")
    p.add_argument("--builtin", default="resnet18", choices=["resnet18", "resnet50", "mobilenet_v2"], help="built-in model when no file is given")
    p.add_argument("--device", help="substring of the OpenCL platform or device name")
    p.add_argument("--inputs", metavar="NPZ", help="inputs keyed by model input name (default: seeded random)")
    p.add_argument("--outputs", metavar="NPZ", help="write the outputs, keyed output0, output1, ...")
    p.add_argument("--json", metavar="PATH", help="write the report (profile, times, memory, check) as JSON")
    p.add_argument("--check", action="store_true", help=f"compare with a CPU reference; exit 1 beyond {1e-3:g} relative error")
    p.set_defaults(fn=_run)
    p = sub.add_parser("kernels", help="build and run every kernel family on one shape, check against NumPy, time")
    p.add_argument("--device", help="substring of the OpenCL platform or device name")
    p.add_argument("--json", metavar="PATH", help="write the per-kernel report as JSON")
    p.set_defaults(fn=_kernels)
    args = parser.parse_args(argv)
    from .runtime import DeviceNotFoundError

    try:
        return args.fn(args)
    except (DeviceNotFoundError, UserError) as err:
        print(f"tir-adreno: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
