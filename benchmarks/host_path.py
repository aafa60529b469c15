"""The host launch path: how much host time each way of enqueuing a model's kernels costs.

For saved models (``--from DIR``, made by ``models_e2e.py --build-only DIR``; runs without
TVM), built-in models compiled here (``--builtin NAME``, needs TVM) and a synthetic chain
of N tiny buffer kernels (``--chain N``, no TVM), it runs the fast path
(``CompiledModel.run(profile=False)``) these ways:

- ``pyopencl+profiling``: pyopencl's enqueue (an Event per launch) on the profiling queue
  (what ``run`` did before this script existed);
- ``pyopencl+plain``: the same on a queue without profiling;
- ``ctypes+profiling``: ``clEnqueueNDRangeKernel`` through ctypes, no event, profiling queue
  (with the two above: what the event and what the profiling queue cost, apart);
- ``ctypes+plain``: the same on the plain queue;
- ``ctypes+plain+pinned``: the same with inputs and outputs staged in pinned host memory
  (``CompiledModel.use_pinned``; the default). The four above copy from and to ordinary
  numpy memory, as ``run`` did before.

and reports per way: host us per launch (enqueue only), wall ms per run (upload, launches,
download, one wait), kernel ms (sum of OpenCL events of a profiled run: the same kernels
every way), io ms (the way's uploads and downloads alone, no kernels: wall's floor besides
launches and kernels) and wall/kernel, medians of ``--repeat`` runs in ``--rounds`` interleaved rounds.
Every way's outputs must equal the profiled run's bit for bit (exit 1 otherwise).

    python benchmarks/host_path.py                                   # the chain only
    python benchmarks/host_path.py --from DIR --models mobilenet_v2,resnet50
    python benchmarks/host_path.py --builtin resnet18 --image-size 32
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from common import add_device_argument, fmt, log, print_table, write_json

#: (name, launcher kind, queue, pinned staging).
VARIANTS = (
    ("pyopencl+profiling", "pyopencl", "profiling", False),
    ("pyopencl+plain", "pyopencl", "plain", False),
    ("ctypes+profiling", "ctypes", "profiling", False),
    ("ctypes+plain", "ctypes", "plain", False),
    ("ctypes+plain+pinned", "ctypes", "plain", True),
)
CHAIN_SIZE = 256  # floats per tensor of the chain: tiny kernels, host time dominates
CHAIN_KERNEL = """
__kernel void chain_step(__global const float* restrict x, __global float* restrict y) {
  const int i = get_global_id(0);
  y[i] = x[i] * 0.5f + 1.0f;
}
"""


def chain_model(n: int, device, size: int = CHAIN_SIZE):
    """A CompiledModel of ``n`` dependent launches of one tiny buffer kernel, y = x * 0.5 + 1
    (the pool keeps two intermediates): the host path with next to no device work."""
    from tir_adreno.runtime.bundle import FunctionPlan, KernelArg, KernelModule, Launch, TensorSpec
    from tir_adreno.runtime.executor import Call, CompiledModel, Plan, TensorInfo

    kinds = ["input"] + ["temp"] * (n - 1) + ["output"]
    tensors = [TensorInfo((size,), "float32", "global", kind, f"x{i}") for i, kind in enumerate(kinds)]
    spec = lambda name: TensorSpec(name, (size,), "float32", "global")  # noqa: E731
    launch = Launch("chain_step", (KernelArg("tensor", 0), KernelArg("tensor", 1)), (size,), (min(64, size),))
    module = KernelModule(CHAIN_KERNEL, {"chain_step": FunctionPlan("chain_step", (spec("x"), spec("y")), (launch,))})
    calls = [Call("chain", "chain_step", (i, i + 1), f"step{i}", True) for i in range(n)]
    plan = Plan(tensors, calls, [("x", 0)], [n])
    return CompiledModel(plan, {"chain": module}, {}, device)


def chain_reference(x: np.ndarray, n: int) -> np.ndarray:
    """The chain's output, step by step in float32 (the kernel's arithmetic: exact products by 0.5)."""
    y = x.astype(np.float32)
    for _ in range(n):
        y = y * np.float32(0.5) + np.float32(1.0)
    return y


def _inputs(cm, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(cm.plan.tensors[t].shape).astype(cm.plan.tensors[t].dtype) for n, t in cm.plan.inputs}


def measure(cm, repeat: int, rounds: int) -> dict:
    """Per variant: host us per launch, wall ms per run, io ms, outputs equal to the profiled
    run's; plus the profiled kernel ms. Variants take turns for ``rounds`` rounds of ``repeat`` runs."""
    x = _inputs(cm)
    cm.run(x)  # warm-up: drivers finish compiling on first launch
    kernel_ms = []
    for _ in range(repeat):
        profiled = cm.run(x, profile=True)
        kernel_ms.append(cm.kernel_time_ms())
    samples = {name: {"launch_us": [], "wall_ms": [], "io_ms": []} for name, *_ in VARIANTS}
    match = {name: True for name, *_ in VARIANTS}
    kinds = {}
    for _ in range(rounds):
        for name, kind, queue, pinned in VARIANTS:
            cm.use_launcher(kind, queue)
            cm.use_pinned(pinned)
            kinds[name] = (cm.launcher_kind, cm.pinned)
            outputs = cm.run(x)
            match[name] &= all(np.array_equal(a, b, equal_nan=True) for a, b in zip(outputs, profiled))
            for _ in range(repeat):
                start = time.perf_counter()
                cm.run(x)
                samples[name]["wall_ms"].append((time.perf_counter() - start) * 1e3)
            samples[name]["launch_us"].append(cm.launch_time_us(repeat))
            samples[name]["io_ms"].append(cm.io_time_ms(x, repeat))
    cm.use_launcher()  # back to the defaults ($TIR_ADRENO_LAUNCHER, $TIR_ADRENO_PINNED)
    cm.use_pinned()
    io_ms = cm.io_time_ms(x, repeat)
    kernel = statistics.median(kernel_ms)
    variants = {}
    for name, _, queue, _ in VARIANTS:
        wall = statistics.median(samples[name]["wall_ms"])
        variants[name] = {
            "launcher": kinds[name][0], "queue": queue, "pinned": kinds[name][1],
            "launch_us": statistics.median(samples[name]["launch_us"]),
            "wall_ms": wall, "io_ms": statistics.median(samples[name]["io_ms"]),
            "wall_over_kernel": wall / kernel if kernel > 0 else None,
            "outputs_match": match[name],
        }
    return {"kernel_ms": kernel, "io_ms": io_ms, "launches": cm.launch_count, "calls": len(cm.plan.calls), "variants": variants,
            "outputs": profiled}


def _models(args, device) -> dict:
    """{name: CompiledModel} of --from and --builtin."""
    compiled = {}
    if args.from_dir:
        from tir_adreno.runtime.executor import load_model

        dirs = sorted(args.from_dir.glob(f"*-{args.way}"))
        wanted = [n for n in (args.models or "").split(",") if n] or [d.name[: -len(args.way) - 1] for d in dirs]
        for name in wanted:
            path = args.from_dir / f"{name}-{args.way}"
            if not (path / "model.json").exists():
                raise SystemExit(f"--from {args.from_dir}: no saved model {path.name} (models_e2e.py --build-only makes them)")
            random_weights = not (path / "weights.npz").exists()
            log(f"load {path.name}{' (random weights: timing only)' if random_weights else ''} ...")
            compiled[name] = load_model(path, device, random_weights=0 if random_weights else None)
    for name in args.builtin:
        from tir_adreno.frontend import models
        from tir_adreno.compiler import compile_model

        log(f"compile {name} at {args.image_size}x{args.image_size} ...")
        compiled[name] = compile_model(models.get_model(name, image_size=args.image_size), device, progress=lambda _: None)
    return compiled


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_device_argument(parser)
    parser.add_argument("--from", dest="from_dir", type=Path, metavar="DIR",
                        help="saved models (models_e2e.py --build-only DIR): DIR/<model>-<way>")
    parser.add_argument("--models", default=None, help="comma-separated names in --from DIR (default: all)")
    parser.add_argument("--way", default="ours", help="which saved way of --from (default: ours)")
    parser.add_argument("--builtin", default=[], type=lambda s: [n for n in s.split(",") if n],
                        help="built-in models to compile here (needs TVM), comma-separated")
    parser.add_argument("--image-size", type=int, default=224, help="--builtin image size (default 224)")
    parser.add_argument("--chain", type=int, default=64, help="launches of the synthetic chain (0: none)")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--results-dir", type=Path, default=None, help="default: benchmarks/results")
    args = parser.parse_args(argv)
    if args.chain < 0 or args.repeat < 1 or args.rounds < 1:
        parser.error("--chain must be >= 0, --repeat and --rounds >= 1")
    if args.from_dir and not args.from_dir.is_dir():
        parser.error(f"--from {args.from_dir}: no such folder")

    from tir_adreno.runtime import launcher, opencl as runtime

    device = runtime.get_device(args.device)
    compiled = _models(args, device)
    if args.chain:
        compiled[f"chain{args.chain}"] = chain_model(args.chain, device)
    results, rows, ok = [], [], True
    for name, cm in compiled.items():
        log(f"run {name} ({cm.launch_count} launches) ...")
        entry = {"model": name, **measure(cm, args.repeat, args.rounds)}
        outputs = entry.pop("outputs")
        if name.startswith("chain"):  # the profiled run itself against the float32 steps
            entry["chain_correct"] = bool(np.array_equal(outputs[0], chain_reference(_inputs(cm)["x"], args.chain)))
            ok &= entry["chain_correct"]
        results.append(entry)
        for variant, v in entry["variants"].items():
            ok &= v["outputs_match"]
            refused = " (refused: ordinary memory)" if v["pinned"] != variant.endswith("+pinned") else ""
            rows.append([name, variant + refused, str(entry["launches"]), fmt(v["launch_us"], ".2f"), fmt(v["wall_ms"], ".3f"),
                         fmt(entry["kernel_ms"], ".3f"), fmt(v["io_ms"], ".3f"), fmt(v["wall_over_kernel"], ".2f"),
                         "yes" if v["outputs_match"] and entry.get("chain_correct", True) else "NO"])
    lib = launcher.library()
    path = write_json("host_path", device.name, {
        "repeat": args.repeat, "rounds": args.rounds,
        "opencl_library": lib[1], "results": results}, args.results_dir)
    print_table(
        ["model", "way", "launches", "host us/launch", "wall ms", "kernel ms", "io ms", "wall/kernel", "outputs ok"], rows,
        title=f"host launch path on {device.name}: medians of {args.repeat} x {args.rounds} runs; kernel ms = "
        f"sum of OpenCL events of a profiled run; io ms = the way's uploads + downloads alone; +pinned: "
        f"through pinned host memory, the others through ordinary numpy memory (JSON: {path})",
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
