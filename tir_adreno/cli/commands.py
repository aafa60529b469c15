"""``tir-adreno devices``, ``kernels``, ``dump``, ``kernel``, ``compile`` and ``serve`` (``run`` and ``tune`` have their own modules).

Each takes the parsed arguments after :func:`tir_adreno.cli.checks.check_arguments` and returns the exit code.
"""

from __future__ import annotations

import json

from tir_adreno.cli.checks import progress_printer, warn
from tir_adreno.cli.model import model_and_inputs
from tir_adreno.cli.output import table
from tir_adreno.strategy.profile import get_profile


def devices(args) -> int:
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


def kernels(args) -> int:
    from tir_adreno.runtime import opencl as runtime
    from tir_adreno.tools.tour import kernel_tour

    dev = runtime.get_device(args.device)
    print(f"device: {dev.name}", flush=True)
    rows = kernel_tour(dev, progress=lambda msg: print(msg, flush=True))
    print()
    print(table(rows, {"kernel": "<", "shape": "<", "placement": "<", "time_us": ">.1f", "check": ">"},
                {"time_us": "time (us)"}))
    failed = [r for r in rows if r["check"] != "ok"]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev.name, "kernels": rows}, f, indent=2)
    print(f"\n{len(rows) - len(failed)}/{len(rows)} kernels match NumPy on {dev.name}")
    return 1 if failed else 0


def compile(args) -> int:  # noqa: A001 (the command's name)
    from tir_adreno.cli import compile_cache
    from tir_adreno.runtime import saved
    from tir_adreno.strategy.profile import with_placement

    target = with_placement(get_profile(args.target), args.placement)
    header = f"model: {args.model or args.builtin}\ntarget: {target.name} ({target.kind}), activations in {target.activation_placement}s"
    key = None if args.no_cache else compile_cache.request_key(args)
    # every file into a new sibling folder that replaces the output folder at the end: whole or not at all
    with saved.replacing_folder(args.output, args.force) as staging:
        entry = compile_cache.lookup(key, staging) if key is not None else None
        if entry is not None:  # no TVM imported: the files of the same request compiled before
            print(f"{header}\n  from the compile cache (--no-cache compiles)", flush=True)
            for message in entry["warnings"]:
                warn(message)
            summary = entry["summary"]
        else:
            with compile_cache.Recorder() as warned:
                summary, files = _compile(args, target, header, staging)
            if key is not None:
                compile_cache.store(key, staging, files, summary, warned.messages)
    print(f"wrote {args.output}: {summary}")
    print(f"run it with: tir-adreno run {args.output}")
    return 0


def _compile(args, target, header: str, staging) -> tuple[str, list[str]]:
    """Compile the model as ``args`` ask and write its files into ``staging``: (the summary line,
    the names of the files written)."""
    from tir_adreno.compiler import compile_plan
    from tir_adreno.runtime import saved
    from tir_adreno.runtime.executor import model_doc
    from tir_adreno.strategy.profile import without_fusion

    model, specs = model_and_inputs(args)
    print(header, flush=True)
    plan, kernels, weights = compile_plan(
        model, without_fusion(target, args.no_fuse), args.records, progress=progress_printer(args),
        input_shapes=args.input_shapes, precision=args.precision,
    )
    reference = _reference(model, specs) if args.check else None
    files = saved.write_model_files(staging, model_doc(plan, kernels, target.name), weights, reference)
    if reference is not None:
        print(f"wrote the reference for `run {args.output} --check` ({saved.REFERENCE_FILE})")
    convs = [c for c in plan.calls if c.config is not None]
    tuned = sum(c.source == "records" for c in convs)
    return f"{len(plan.calls)} kernel calls, {len(convs)} conv kernels ({tuned} from records)", files


def _reference(model, specs) -> tuple[dict, list]:
    """``run``'s seeded inputs and the CPU reference's outputs for them, saved for ``run DIR --check``."""
    from tir_adreno.cli.model import reference_for, seeded_inputs

    inputs = seeded_inputs(specs)
    print("computing the CPU reference for `run --check` ...", flush=True)
    return inputs, reference_for(model)(inputs)


def dump(args) -> int:
    from tir_adreno.compiler import compile_model
    from tir_adreno.runtime import opencl as runtime
    from tir_adreno.tools import workbench

    model, _ = model_and_inputs(args)
    dev = runtime.get_device(args.device)
    prims: dict = {}
    compiled = compile_model(
        model, dev, records=args.records, input_shapes=args.input_shapes, precision=args.precision, placement=args.placement,
        progress=progress_printer(args), prims=prims,
    )
    files = workbench.dump(compiled, prims, args.output, args.model or f"--builtin {args.builtin}")
    print(f"wrote {len(files)} kernels and {workbench.MANIFEST} to {args.output} ({dev.name})")
    return 0


def kernel(args) -> int:
    from tir_adreno.tools import workbench

    return workbench.kernel_command(args.file, args.device, args.check, args.time, args.show)


def serve(args) -> int:
    from tir_adreno.tuning.serve import serve

    return serve(args.tracker, args.key, args.device, args.host, args.port, args.port_end, args.custom_addr)
