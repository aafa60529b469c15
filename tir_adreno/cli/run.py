"""``tir-adreno run``: compile a model (or load a saved one), run it, print a per-op profile, ``--check`` it."""

from __future__ import annotations

import json
import time

import numpy as np

from tir_adreno.cli.checks import UserError, is_saved_model, progress_printer, warn
from tir_adreno.cli.model import model_and_inputs, reference_for, seeded_inputs
from tir_adreno.cli.output import size, table
from tir_adreno.runtime.saved import write_whole
from tir_adreno.strategy.profile import get_profile

#: --check tolerance on outputs (relative to the largest reference magnitude).
CHECK_RTOL = {"float32": 1e-3, "float16_acc32": 1e-2, "float16": 2e-2}


def run(args) -> int:
    from tir_adreno.runtime import opencl as runtime
    from tir_adreno.runtime.bounds import BoundsError
    from tir_adreno.tools import workbench

    dev = runtime.get_device(args.device)
    edits = workbench.load_edits(args.kernels) if args.kernels else []  # bad files before compiling
    prims = {} if args.kernels else None
    reference = None
    if is_saved_model(args.model):  # a saved model: no TVM on this path
        compiled, inputs, label, reference = _load_saved(args, dev)
    else:
        compiled, inputs, label, reference = _compile(args, dev, prims)
    print(compiled.startup.line(), flush=True)
    try:
        edited = workbench.apply_edits(compiled, prims, edits, inputs) if edits else {}
        compiled.run(inputs)  # warm-up: first launches build per-work-group code on some drivers
        start = time.perf_counter()
        compiled.run(inputs)
        wall = time.perf_counter() - start
        # Outputs and per-op times from a profiled run (outputs poisoned first, events recorded).
        outputs = compiled.run(inputs, profile=True)
    except BoundsError as err:
        if not edits:
            raise  # one of our generated kernels: an internal error
        raise UserError(f"{err} (edited: {', '.join(str(e.path) for e in edits)})") from None
    profile, kernel_ms, mem = compiled.profile(), compiled.kernel_time_ms(), compiled.memory_bytes()
    _print_profile(compiled, profile, edited, wall, kernel_ms, mem)
    names = [f"output{i}" for i in range(len(outputs))]
    if args.outputs:  # exactly the name given (numpy.savez would add .npz to a name without it), replaced whole
        write_whole(args.outputs, lambda f: np.savez(f, **dict(zip(names, outputs))))
    report = {"model": label, "device": dev.name, "precision": compiled.precision, "kernel_ms": kernel_ms,
              "wall_ms": wall * 1e3, "launcher": compiled.launcher_kind, "memory": mem, "startup": compiled.startup.to_dict(), "profile": profile,
              "edited": edited}
    status = 0
    if reference is not None:
        status = _check(outputs, reference, inputs, report, CHECK_RTOL[compiled.precision])
    if args.json:
        write_whole(args.json, lambda f: f.write(json.dumps(report, indent=2).encode()))
    return status



def _load_saved(args, dev):
    """A saved model (no TVM), its inputs, its label and, with ``--check``, the reference that
    ``compile --check`` saved in it (its inputs replace the seeded ones)."""
    from tir_adreno.runtime.executor import load_model, load_reference

    label = args.model
    print(f"model: {label} (saved)\ndevice: {dev.name}", flush=True)
    compiled = load_model(args.model, dev)
    saved = load_reference(args.model) if args.check else None
    specs = [(name, compiled.plan.tensors[i].shape, compiled.plan.tensors[i].dtype) for name, i in compiled.plan.inputs]
    if not args.check:
        return compiled, _inputs(args.given_inputs, specs, args.inputs), label, None
    if saved is None:
        raise UserError(f"--check: {args.model} holds no reference outputs; compile it with `tir-adreno compile ... --check`")
    inputs, outputs = saved
    return compiled, _inputs(inputs, specs, f"{args.model}/reference.npz"), label, lambda _: outputs


def _compile(args, dev, prims):
    """The model compiled for ``dev``, its inputs, its label and the ``--check`` reference (None without)."""
    from tir_adreno.compiler import compile_model

    target = get_profile(args.target) if args.target else None
    model, specs = model_and_inputs(args)
    inputs = _inputs(args.given_inputs, specs, args.inputs)
    reference = None
    if args.check:
        reference = reference_for(model)
    label = args.model or f"built-in {args.builtin} (seeded random weights)"
    print(f"model: {label}\ndevice: {dev.name}", flush=True)
    start = time.perf_counter()
    compiled = compile_model(
        model, dev, target, args.records, input_shapes=args.input_shapes, progress=progress_printer(args),
        prims=prims, precision=args.precision or "float32", placement=args.placement, fuse=not args.no_fuse,
    )
    print(f"compiled in {time.perf_counter() - start:.1f} s", flush=True)
    return compiled, inputs, label, reference


def _print_profile(compiled, profile, edited, wall: float, kernel_ms: float, mem: dict) -> None:
    rows = []
    for i, p in enumerate(profile):
        config = f"{p['config']} ({p['source']})" if "config" in p else ""
        if i in edited:
            config = f"{config}  EDITED {edited[i][0]:.3f} -> {edited[i][1]:.3f} ms (generated -> edited, median of 3)".strip()
        rows.append({"#": i, "op": p["op"], "kernel": "ours" if p["ours"] else "upstream", "placement": p["placement"],
                     "time (ms)": p["time_ms"], "config (source)": config})
    print()
    print(table(rows, {"#": ">", "op": "<", "kernel": "<", "placement": "<", "time (ms)": ">.3f", "config (source)": "<"}))
    ours = sum(p["time_ms"] for p in profile if p["ours"])
    print(f"\nkernel time {kernel_ms:.2f} ms ({ours / max(kernel_ms, 1e-12):.0%} in tir-adreno kernels), wall {wall * 1e3:.1f} ms "
          f"({compiled.launcher_kind} launcher)")
    print(f"precision: {compiled.precision}; device memory: {size(mem['total'])} "
          f"({size(mem['weights'])} weights, {size(mem['intermediates'])} activations with the image pool)")


def _inputs(given, specs, path) -> dict[str, np.ndarray]:
    """The ``--inputs`` arrays checked against the model's inputs, or seeded random ones without a file."""
    from tir_adreno.runtime.executor import ModelInputError, check_inputs

    if given is None:
        return seeded_inputs(specs)
    try:
        return dict(zip([n for n, _, _ in specs], check_inputs(given, specs)))
    except ModelInputError as err:
        raise UserError(f"--inputs {path}: {err}") from None


def _check(outputs, reference, inputs, report, rtol: float) -> int:
    """Compare with the CPU reference; 0 when within ``rtol`` (:data:`CHECK_RTOL` of the precision), else 1."""
    from tir_adreno.reference import nearly_constant, relative_error

    print("checking against the CPU reference ...", flush=True)
    refs = reference(inputs)
    errors = [relative_error(o, r) for o, r in zip(outputs, refs)]
    report["check"] = {"relative_errors": errors, "rtol": rtol}
    constant = [f"output{i}" for i, r in enumerate(refs) if nearly_constant(r)]
    if constant:
        report["check"]["constant_outputs"] = constant
        warn(f"the reference {', '.join(constant)} is (nearly) constant, so --check compares almost nothing (constant weights?)")
    ok = len(refs) == len(outputs) and all(e <= rtol for e in errors)
    print(f"check {'passed' if ok else 'FAILED'}: relative error {max(errors, default=float('inf')):.2e} (tolerance {rtol:g})")
    return 0 if ok else 1
