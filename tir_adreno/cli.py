"""``tir-adreno`` command line: ``devices``, ``run`` (the main job), ``compile``, ``tune``, ``kernels``, ``serve``."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

import numpy as np


def _devices(args) -> int:
    from tir_adreno.runtime import opencl as runtime

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
        yes = lambda flag: "yes" if r[flag] else "no"  # noqa: E731
        print(f"{mark} {r['platform']}: {r['device']} [{r['type']}] {r['version']}; {images}; "
              f"cl_khr_fp16 {yes('fp16')}; half images {yes('half_images')}; half math {yes('half_math')}")
    print("* = default device (override with --device or TIR_ADRENO_DEVICE)")
    print("precisions: float16_acc32 needs half images, float16 half math (a probe kernel decides)")
    return 0


def _kernels(args) -> int:
    from tir_adreno.runtime import opencl as runtime
    from tir_adreno.tools.tour import kernel_tour

    check_environment()
    check_writable(args.json, "--json")
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
CHECK_RTOL = {"float32": 1e-3, "float16_acc32": 1e-2}

#: How a missing input shape is asked for on the command line.
INPUT_SHAPE_HINT = "--input-shape {name}={dims}"

EXIT_CODES = """exit codes:
  0  ok
  1  --check failed (outputs differ from the CPU reference)
  2  user error: one line on stderr naming the culprit, no traceback
     (reported before compiling whenever it can be known)
  other  an internal error (a bug: please report it with the traceback)"""


def check_environment() -> None:
    """Settings read from the environment, validated before any work."""
    from tir_adreno.runtime import bounds, launcher, opencl as runtime

    try:
        bounds.enabled()
        launcher.requested()
        runtime.pinned_requested()
    except ValueError as err:
        raise UserError(str(err)) from None


def check_writable(path: str | None, flag: str) -> None:
    """``flag``'s file can be created: its folder exists and is writable, the path is no folder."""
    if path is None:
        return
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise UserError(f"{flag} {path}: is a folder, expected a file name")
    if not os.path.isdir(folder):
        raise UserError(f"{flag} {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise UserError(f"{flag} {path}: folder {folder} is not writable")


def check_creatable_folder(path: str, flag: str) -> None:
    """``flag``'s folder exists or can be made: no file in the way, the nearest existing parent writable."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise UserError(f"{flag} {path}: is a file, expected a folder")
    parent = os.path.abspath(path)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise UserError(f"{flag} {path}: {parent} is a file, so the folder cannot be made")
    if not os.access(parent, os.W_OK):
        raise UserError(f"{flag} {path}: folder {parent} is not writable")


def parse_input_shapes(specs: list[str] | None) -> dict[str, tuple[int, ...]]:
    """``["NAME=D0,D1,..."]`` -> {NAME: (D0, D1, ...)}."""
    shapes = {}
    for spec in specs or []:
        name, _, dims = spec.rpartition("=")
        try:
            shape = tuple(int(d) for d in dims.split(","))
        except ValueError:
            shape = ()
        if not name or not shape or min(shape) < 1:
            raise UserError(f"--input-shape {spec!r}: expected NAME=D0,D1,... with positive integer dims")
        if name in shapes:
            raise UserError(f"--input-shape: {name!r} given twice")
        shapes[name] = shape
    return shapes


def read_inputs(path: str | None) -> dict[str, np.ndarray] | None:
    """The arrays of an ``--inputs`` .npz file (read before compiling), or None without one."""
    if path is None:
        return None
    try:
        loaded = np.load(path, allow_pickle=False)
    except OSError as err:
        raise UserError(f"--inputs {path}: cannot read inputs ({err.strerror or err})") from None
    except ValueError:
        loaded = None
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise UserError(f"--inputs {path}: not a NumPy .npz archive (write one with numpy.savez(path, name=array))")
    with loaded as npz:
        return {k: npz[k] for k in npz.files}


def model_inputs(model, input_shapes) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, shape, dtype) of each model input, known right after import (before lowering)."""
    import tvm

    if isinstance(model, tvm.IRModule):
        return [(p.name, tuple(int(d) for d in p.ty.shape.values), str(p.ty.dtype)) for p in model["main"].params]
    from onnx.helper import tensor_dtype_to_np_dtype

    from tir_adreno.frontend.onnx_import import data_inputs, input_shapes_of

    try:
        shapes = input_shapes_of(model, input_shapes, INPUT_SHAPE_HINT)
    except ValueError as err:
        raise UserError(str(err).replace("input_shapes names", "--input-shape names")) from None
    dtypes = {i.name: np.dtype(tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)).name for i in data_inputs(model)}
    return [(name, shape, dtypes[name]) for name, shape in shapes.items()]


def warn(message: str) -> None:
    print(f"tir-adreno: warning: {message}", file=sys.stderr, flush=True)


def _profile(name):
    """The named device profile, or a user error listing the known ones."""
    from tir_adreno.strategy.profile import get_profile

    try:
        return get_profile(name)
    except ValueError as err:
        raise UserError(str(err)) from None


def _with_placement(profile, placement):
    """``profile`` with the ``--placement`` default of activations (None: the profile's own)."""
    from tir_adreno.strategy.profile import with_placement

    return with_placement(profile, placement)


def _check_records(path):
    """A missing records file is reported before compiling."""
    from pathlib import Path

    if path is not None and not Path(path).is_file():
        raise UserError(f"{path}: no such records file (write one with `tir-adreno tune`)")


def _saved_model(path) -> bool:
    from pathlib import Path

    return path is not None and Path(path).is_dir()


def _run(args) -> int:
    from tir_adreno.runtime import opencl as runtime
    from tir_adreno.tools import workbench
    from tir_adreno.runtime.bounds import BoundsError
    from tir_adreno.runtime.executor import ModelInputError

    check_environment()
    check_writable(args.outputs, "--outputs")
    check_writable(args.json, "--json")
    input_shapes = parse_input_shapes(args.input_shape)
    given = read_inputs(args.inputs)
    dev = runtime.get_device(args.device)
    edits = workbench.load_edits(args.kernels) if args.kernels else []  # bad files before compiling
    prims = {} if args.kernels else None
    reference = None
    if _saved_model(args.model):  # a saved model: no TVM on this path
        from tir_adreno.runtime.executor import load_model

        for flag in ("records", "target", "check", "input_shape", "kernels", "precision", "placement"):
            if getattr(args, flag):
                raise UserError(f"--{flag.replace('_', '-')} needs a model file; {args.model} is compiled already")
        label = args.model
        print(f"model: {label} (saved)\ndevice: {dev.name}", flush=True)
        try:
            compiled = load_model(args.model, dev)
        except ValueError as err:  # not a saved model, or planned for larger images
            raise UserError(str(err)) from None
        specs = [(name, compiled.plan.tensors[i].shape, compiled.plan.tensors[i].dtype) for name, i in compiled.plan.inputs]
        inputs = _inputs(given, specs, args.inputs)
    else:
        from tir_adreno.compiler import ModelError, compile_model
        from tir_adreno.runtime.executor import TargetMismatchError
        from tir_adreno.strategy.conv import PrecisionError

        target = _profile(args.target) if args.target else None
        _check_records(args.records)
        model, specs = _model_and_inputs(args, input_shapes)
        inputs = _inputs(given, specs, args.inputs)
        if args.check:
            from tir_adreno.reference import ReferenceUnavailable, reference_runner

            try:
                reference = reference_runner(model)
            except ReferenceUnavailable as err:
                raise UserError(f"--check: {err}") from None
        label = args.model or f"built-in {args.builtin} (seeded random weights)"
        print(f"model: {label}\ndevice: {dev.name}", flush=True)
        start = time.perf_counter()
        try:
            compiled = compile_model(
                model, dev, target, args.records, input_shapes=input_shapes, progress=lambda msg: print(f"  {msg}", flush=True), prims=prims,
                precision=args.precision or "float32", placement=args.placement, fuse=not args.no_fuse,
            )
        except (ModelError, FileNotFoundError, TargetMismatchError, PrecisionError) as err:
            raise UserError(str(err)) from None
        print(f"compiled in {time.perf_counter() - start:.1f} s", flush=True)
    try:
        edited = workbench.apply_edits(compiled, prims, edits, inputs) if edits else {}
        compiled.run(inputs)  # warm-up: first launches build per-work-group code on some drivers
        start = time.perf_counter()
        compiled.run(inputs)
        wall = time.perf_counter() - start
        # Outputs and per-op times from a profiled run (outputs poisoned first, events recorded).
        outputs = compiled.run(inputs, profile=True)
    except ModelInputError as err:
        raise UserError(str(err)) from None
    except BoundsError as err:
        if not edits:
            raise  # one of our generated kernels: an internal error
        raise UserError(f"{err} (edited: {', '.join(str(e.path) for e in edits)})") from None
    profile = compiled.profile()
    print(f"\n{'#':>3}  {'op':<28} {'kernel':<10} {'placement':<9} {'time (ms)':>10}  config (source)")
    for i, p in enumerate(profile):
        config = f"  {p['config']} ({p['source']})" if "config" in p else ""
        if i in edited:
            config += f"  EDITED {edited[i][0]:.3f} -> {edited[i][1]:.3f} ms (generated -> edited, median of 3)"
        print(f"{i:>3}  {p['op']:<28} {'ours' if p['ours'] else 'upstream':<10} {p['placement']:<9} {p['time_ms']:>10.3f}{config}")
    kernel_ms = compiled.kernel_time_ms()
    ours = sum(p["time_ms"] for p in profile if p["ours"])
    print(f"\nkernel time {kernel_ms:.2f} ms ({ours / max(kernel_ms, 1e-12):.0%} in tir-adreno kernels), wall {wall * 1e3:.1f} ms "
          f"({compiled.launcher_kind} launcher)")
    mem = compiled.memory_bytes()
    print(f"precision: {compiled.precision}; device memory: {mem['total'] / 2**20:.1f} MiB "
          f"({mem['weights'] / 2**20:.1f} MiB weights, {mem['intermediates'] / 2**20:.1f} MiB activations with the image pool)")
    names = [f"output{i}" for i in range(len(outputs))]
    if args.outputs:
        np.savez(args.outputs, **dict(zip(names, outputs)))
    report = {"model": label, "device": dev.name, "precision": compiled.precision, "kernel_ms": kernel_ms, "wall_ms": wall * 1e3,
              "launcher": compiled.launcher_kind,
              "memory": mem, "profile": profile, "edited": edited}
    status = 0
    if reference is not None:
        status = _check(outputs, reference, inputs, report, CHECK_RTOL[compiled.precision])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return status


def _model_and_inputs(args, input_shapes):
    """The model (an ONNX file loaded, or a built-in) and its inputs' (name, shape, dtype), before any compile."""
    from tir_adreno.frontend import models
    from tir_adreno.compiler import ModelError, load_onnx

    try:
        model = load_onnx(args.model) if args.model else models.get_model(args.builtin)
    except ModelError as err:
        raise UserError(str(err)) from None
    if input_shapes and not args.model:
        raise UserError("--input-shape applies to ONNX models; the built-in models have fixed shapes")
    return model, model_inputs(model, input_shapes)


def _inputs(given, specs, path) -> dict[str, np.ndarray]:
    """The ``--inputs`` arrays checked against the model's inputs, or seeded random ones without a file."""
    from tir_adreno.runtime.executor import ModelInputError, check_inputs

    if given is None:
        rng = np.random.default_rng(0)
        return {n: rng.standard_normal(shape).astype(dtype) for n, shape, dtype in specs}
    try:
        return dict(zip([n for n, _, _ in specs], check_inputs(given, specs)))
    except ModelInputError as err:
        raise UserError(f"--inputs {path}: {err}") from None


def _check(outputs, reference, inputs, report, rtol: float) -> int:
    """Compare with the CPU reference; 0 when within ``rtol`` (:data:`CHECK_RTOL` of the precision), else 1."""
    from tir_adreno.reference import ReferenceUnavailable, nearly_constant, relative_error

    print("checking against the CPU reference ...", flush=True)
    try:
        refs = reference(inputs)
    except ReferenceUnavailable as err:
        raise UserError(f"--check: {err}") from None
    errors = [relative_error(o, r) for o, r in zip(outputs, refs)]
    report["check"] = {"relative_errors": errors, "rtol": rtol}
    constant = [f"output{i}" for i, r in enumerate(refs) if nearly_constant(r)]
    if constant:
        report["check"]["constant_outputs"] = constant
        warn(f"the reference {', '.join(constant)} is (nearly) constant, so --check compares almost nothing (constant weights?)")
    ok = len(refs) == len(outputs) and all(e <= rtol for e in errors)
    print(f"check {'passed' if ok else 'FAILED'}: relative error {max(errors, default=float('inf')):.2e} (tolerance {rtol:g})")
    return 0 if ok else 1


def _compile(args) -> int:
    from tir_adreno.compiler import ModelError, compile_plan
    from tir_adreno.strategy.profile import without_fusion
    from tir_adreno.runtime.executor import save_model
    from tir_adreno.strategy.conv import PrecisionError

    check_environment()
    check_creatable_folder(args.output, "--output")
    target = _with_placement(_profile(args.target), args.placement)
    _check_records(args.records)
    input_shapes = parse_input_shapes(args.input_shape)
    model, _ = _model_and_inputs(args, input_shapes)
    print(f"model: {args.model or args.builtin}\ntarget: {target.name} ({target.kind}), activations in {target.activation_placement}s", flush=True)
    try:
        plan, kernels, weights = compile_plan(
            model, without_fusion(target, args.no_fuse), args.records, progress=lambda msg: print(f"  {msg}", flush=True), input_shapes=input_shapes,
            precision=args.precision,
        )
    except (ModelError, FileNotFoundError, PrecisionError) as err:
        raise UserError(str(err)) from None
    save_model(args.output, plan, kernels, weights, target.name)
    convs = [c for c in plan.calls if c.config is not None]
    tuned = sum(c.source == "records" for c in convs)
    print(f"wrote {args.output}: {len(plan.calls)} kernel calls, {len(convs)} conv kernels ({tuned} from records)")
    print(f"run it with: tir-adreno run {args.output}")
    return 0


def _dump(args) -> int:
    from tir_adreno.runtime import opencl as runtime
    from tir_adreno.tools import workbench
    from tir_adreno.compiler import ModelError, compile_model
    from tir_adreno.strategy.conv import PrecisionError

    if _saved_model(args.model):
        raise UserError(f"{args.model}: a saved model holds OpenCL C, not TVMScript; dump the ONNX file or --builtin model it was compiled from")
    _check_records(args.records)
    input_shapes = parse_input_shapes(args.input_shape)
    model, _ = _model_and_inputs(args, input_shapes)
    dev = runtime.get_device(args.device)
    prims: dict = {}
    try:
        compiled = compile_model(
            model, dev, records=args.records, input_shapes=input_shapes, precision=args.precision, placement=args.placement,
            progress=lambda msg: print(f"  {msg}", flush=True), prims=prims,
        )
    except (ModelError, FileNotFoundError, PrecisionError) as err:
        raise UserError(str(err)) from None
    files = workbench.dump(compiled, prims, args.output, args.model or f"--builtin {args.builtin}")
    print(f"wrote {len(files)} kernels and {workbench.MANIFEST} to {args.output} ({dev.name})")
    return 0


def _kernel(args) -> int:
    from tir_adreno.tools import workbench

    return workbench.kernel_command(args.file, args.device, args.check, args.time, args.show)


def _tune(args) -> int:
    from pathlib import Path

    from tir_adreno.tuning import measure

    if args.measure:  # the TVM-free side of --export: numpy + pyopencl only

        if args.model:
            raise UserError("--measure DIR takes no model (the candidates are in DIR)")
        try:
            if (Path(args.measure) / measure.JOBS_FILE).exists() or not measure.has_context(args.measure):
                measure.measure_directory(args.measure, args.device, progress=lambda r: print(r, flush=True))
            measure.measure_context(args.measure, args.device, progress=lambda line: print(line, flush=True))
        except ValueError as err:
            raise UserError(str(err)) from None
        print(f"results written to {args.measure}; bring the folder back and run tune MODEL --export {args.measure} again")
        return 0
    if args.model is None and args.builtin is None:
        raise UserError("tune needs a model (a file or --builtin NAME)")
    from tir_adreno.frontend import models
    from tir_adreno.tuning import tune
    from tir_adreno.compiler import ModelError
    from tir_adreno.strategy.profile import DeviceProfile
    from tir_adreno.strategy.conv import PrecisionError

    if args.export:
        target = _profile(args.target or "adreno")
        measurer = tune.ExportMeasurer(args.export)
    elif args.rpc_tracker:
        if not args.target:
            raise UserError("--rpc-tracker needs --target PROFILE (the runners' device)")
        target = _profile(args.target)
        try:
            measurer = measure.RPCMeasurer(args.rpc_tracker, args.rpc_key)
        except measure.TrackerError as err:
            raise UserError(str(err)) from None
    else:
        if args.target:
            raise UserError("--target is for --export / --rpc-tracker; a local tune uses --device")
        target = DeviceProfile.from_device(args.device)
        measurer = tune.LocalMeasurer(args.device)
    target = _with_placement(target, args.placement)
    suffix = "" if args.precision == "float32" else f"-{args.precision}"
    records = Path(args.records or f"records-{target.name}{suffix}.json")
    model = args.model if args.model else models.get_model(args.builtin)
    print(f"model: {args.model or args.builtin}\ndevice profile: {target.key}; precision: {args.precision}; "
          f"activations in {target.activation_placement}s", flush=True)
    try:
        results = tune.tune(model, target, records, measurer, args.budget_s, progress=lambda m: print(m, flush=True),
                            precision=args.precision)
    except (ModelError, PrecisionError) as err:
        raise UserError(str(err)) from None
    if args.export:
        count = measurer.finish()
        if count:
            print(f"exported {count} candidates to {args.export}: run `tir-adreno tune --measure {args.export}` "
                  "on the device, then this command again")
            return 0
    print()
    print(tune.table(results))
    png = tune.plot(results, records.with_suffix(".png"))
    print(f"\nrecords: {records}" + (f"; plot: {png}" if png else ""))
    flag = "" if args.precision == "float32" else f" --precision {args.precision}"
    flag += f" --placement {args.placement}" if args.placement else ""
    print(f"compile with: tir-adreno compile MODEL -o DIR --target {target.name} --records {records}{flag}")
    return 0


def _serve(args) -> int:
    from tir_adreno.tuning.serve import serve

    try:
        return serve(args.tracker, args.key, args.device, args.host, args.port, args.port_end, args.custom_addr)
    except ValueError as err:
        raise UserError(str(err)) from None


#: Built-in models (``tir_adreno.frontend.models.MODELS``; spelled out here so the CLI parses without TVM).
BUILTIN_MODELS = ("resnet18", "resnet50", "mobilenet_v2")
DEVICE_HELP = "substring of the OpenCL platform or device name"


def _add_model(p, builtin_default="resnet18"):
    """MODEL (ONNX file or saved model dir) or ``--builtin NAME``."""
    default = f"default: built-in {builtin_default}" if builtin_default else "or --builtin"
    p.add_argument("model", nargs="?", help=f"ONNX model file ({default})")
    p.add_argument("--builtin", default=builtin_default, choices=BUILTIN_MODELS, help="a built-in model (seeded random weights)")


def _add_placement(parser) -> None:
    from tir_adreno.strategy.profile import PLACEMENTS  # numpy only: the CLI still parses without TVM

    parser.add_argument("--placement", choices=PLACEMENTS,
                        help="default scope of activations (default: the device profile's; nvidia-h200: buffer, others: texture)")


def _add_no_fuse(parser) -> None:
    parser.add_argument("--no-fuse", action="store_true",
                        help="keep each depthwise conv apart from the 1x1 conv after it (fused where the device profile says so)")


def _add_input_shape(parser) -> None:
    parser.add_argument(
        "--input-shape", action="append", metavar="NAME=D0,D1,...",
        help="shape of an ONNX input with symbolic dims, e.g. input=4,3,224,224 (repeatable)",
    )


#: ``--precision`` choices ("float16", half math: refused with exit 2 where the probe fails;
#: whole models compile in "float32" or "float16_acc32").
MODEL_PRECISIONS = ("float32", "float16_acc32", "float16")
PRECISION_HELP = "float32, float16_acc32 (half textures, float math) or float16 (half math, where the device runs it)"


class UserError(Exception):
    """A mistake in what the user asked for: one line, exit code 2."""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="tir-adreno", description=__doc__, epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("devices", help="list OpenCL devices, image support and texture limits")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(fn=_devices)
    p = sub.add_parser(
        "run", help="compile a model onto texture kernels, run it, print a per-op profile",
        epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_model(p)
    p.add_argument("--device", help=DEVICE_HELP)
    p.add_argument("--inputs", metavar="NPZ", help="inputs keyed by model input name (default: seeded random)")
    p.add_argument("--outputs", metavar="NPZ", help="write the outputs, keyed output0, output1, ...")
    p.add_argument("--json", metavar="PATH", help="write the report (profile, times, memory, check) as JSON")
    _add_input_shape(p)
    p.add_argument("--check", action="store_true", help="compare with a CPU reference; exit 1 beyond 1e-3 relative error "
                   "(1e-2 in float16_acc32)")
    p.add_argument("--records", metavar="FILE", help="tuning records from `tir-adreno tune` (conv algorithm, config, placement)")
    p.add_argument("--target", metavar="PROFILE", help="plan the kernels for this device profile (adreno, nvidia-h200, pocl)")
    p.add_argument("--precision", choices=MODEL_PRECISIONS, help=PRECISION_HELP + " (default float32)")
    p.add_argument("--kernels", metavar="DIR", help="use the kernel files of `tir-adreno dump` that were edited")
    _add_placement(p)
    _add_no_fuse(p)
    p.set_defaults(fn=_run)
    p = sub.add_parser("dump", help="write every kernel of a model as an editable TVMScript file + manifest.json")
    _add_model(p)
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="directory to write")
    p.add_argument("--device", help=DEVICE_HELP)
    p.add_argument("--records", metavar="FILE", help="tuning records from `tir-adreno tune`: dump the kernels the tuned model runs")
    p.add_argument("--precision", default="float32", choices=MODEL_PRECISIONS,
                   help=PRECISION_HELP + "; run the edited files with the same --precision")
    _add_input_shape(p)
    _add_placement(p)
    p.set_defaults(fn=_dump)
    p = sub.add_parser("kernel", help="build one dumped kernel file; show, check against NumPy, time")
    p.add_argument("file", help="a kernel file written by `tir-adreno dump`")
    p.add_argument("--device", help=DEVICE_HELP)
    p.add_argument("--check", action="store_true", help="compare with the float64 NumPy reference of its op; exit 1 beyond tolerance")
    p.add_argument("--time", action="store_true", help="median kernel time (OpenCL events)")
    p.add_argument("--show", metavar="WHAT", help="print tir, lowered (after the Adreno TIR pipeline) or opencl")
    p.set_defaults(fn=_kernel)
    p = sub.add_parser("compile", help="compile a model for a device profile into a saved model (no device needed)")
    _add_model(p)
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="where to write the saved model")
    p.add_argument("--target", default="adreno", metavar="PROFILE", help="device profile: adreno (default), nvidia-h200, pocl")
    p.add_argument("--records", metavar="FILE", help="tuning records for that device")
    _add_input_shape(p)
    p.add_argument("--precision", default="float32", choices=MODEL_PRECISIONS, help=PRECISION_HELP)
    _add_placement(p)
    _add_no_fuse(p)
    p.set_defaults(fn=_compile)
    p = sub.add_parser("tune", help="measure conv candidates per layer on a device and write tuning records")
    _add_model(p, builtin_default=None)
    p.add_argument("--device", help=DEVICE_HELP)
    p.add_argument("--records", metavar="FILE", help="records file to write / resume (default records-<profile>.json)")
    p.add_argument("--budget-s", type=float, default=None, help="start no new layer after this many seconds")
    p.add_argument("--target", metavar="PROFILE", help="device profile of the remote device (--export, --rpc-tracker)")
    way = p.add_mutually_exclusive_group()
    way.add_argument("--export", metavar="DIR", help="build the candidates into DIR for `tune --measure DIR` elsewhere; "
                     "run again once DIR holds the results to write the records")
    way.add_argument("--measure", metavar="DIR", help="time the candidates in DIR on this machine (no TVM needed)")
    way.add_argument("--rpc-tracker", metavar="HOST:PORT", help="measure on the runners registered with this TVM RPC tracker")
    p.add_argument("--rpc-key", default="tir-adreno", help="runner key at the tracker (default tir-adreno)")
    p.add_argument("--precision", default="float32", choices=MODEL_PRECISIONS, help=PRECISION_HELP + "; records are per precision")
    _add_placement(p)
    p.set_defaults(fn=_tune)
    p = sub.add_parser(
        "kernels",
        help="every kernel family (conv direct/grouped/depthwise, Winograd 2x2/4x4, pools in both strategies, "
        "reductions, softmax, concat, layout, elementwise) on a small shape, checked against float64 NumPy, timed",
    )
    p.add_argument("--device", help=DEVICE_HELP)
    p.add_argument("--json", metavar="PATH", help="write the per-kernel report as JSON")
    p.set_defaults(fn=_kernels)
    p = sub.add_parser("serve", help="register a measurement runner for `tune --rpc-tracker` with a TVM RPC tracker")
    p.add_argument("--tracker", required=True, metavar="HOST:PORT", help="tracker started by `python -m tvm.exec.rpc_tracker`")
    p.add_argument("--key", required=True, help="device key clients request (e.g. adreno-740)")
    p.add_argument("--device", help=DEVICE_HELP)
    p.add_argument("--host", default="0.0.0.0", help="address the runner listens on (default 0.0.0.0)")
    p.add_argument("--port", type=int, default=9090, help="first port to try (default 9090)")
    p.add_argument("--port-end", type=int, help="end of the port range (default max(9199, port + 100))")
    p.add_argument("--custom-addr", help="address reported to the tracker (default: as the tracker sees this host)")
    p.set_defaults(fn=_serve)
    args = parser.parse_args(argv)
    from tir_adreno.tuning.measure import TrackerError
    from tir_adreno.runtime.opencl import DeviceNotFoundError
    from tir_adreno.tools.workbench import WorkbenchError

    with warnings.catch_warnings():
        # A warning (records of another device, an unusable cache folder) is one line, not a source excerpt.
        warnings.showwarning = lambda message, *_args, **_kw: warn(str(message))
        try:
            return args.fn(args)
        except (DeviceNotFoundError, TrackerError, UserError, WorkbenchError) as err:
            print(f"tir-adreno: error: {err}", file=sys.stderr)
            return 2


if __name__ == "__main__":
    sys.exit(main())
