"""Whole models end to end: tir-adreno vs upstream TVM's generic OpenCL build, same executor.

For each model (built-in ResNet-50 and MobileNetV2, batch 1, 224, fp32, seeded
random weights; or ONNX files, e.g. torchvision's MobileNetV3-Large and
EfficientNet-B0 from benchmarks/zoo.py) it compiles ours (texture kernels), ours_nofuse and upstream
(LegalizeOps + dlight GPU schedules for target kind "opencl", buffers), runs
them through the same pyopencl executor and reports kernel time (sum of
OpenCL events, median over runs), wall time per run, and device memory with
and without the image pool. On an NVIDIA GPU with PyTorch it adds cuDNN fp32
(TF32 off), eager and CUDA graph.

    python benchmarks/models_e2e.py                       # build + run here
    python benchmarks/models_e2e.py --build-only DIR      # compile here (needs TVM)
    python benchmarks/models_e2e.py --from DIR            # run elsewhere (no TVM)
    python benchmarks/models_e2e.py --onnx-dir /tmp/tir-adreno-zoo --models mobilenet_v3_large,efficientnet_b0
    python benchmarks/models_e2e.py --onnx m.onnx ...      # model name: the file's stem

``--target PROFILE`` plans our kernels for that device profile (default: this device's,
or ``adreno`` with ``--build-only``: pass ``--target nvidia-h200`` to build for the H200).
``--records FILE`` (from ``tir-adreno tune``) adds a way "tuned": ours with the
records' per-layer choices, against "ours" with the profile's defaults.
"ours" places activations as the profile does (``activation_placement``: buffers for
``nvidia-h200``, textures for the others); ``--placement texture|buffer`` adds the way
"ours_<placement>", ours with every activation in that scope, so one run times both:

    python benchmarks/models_e2e.py --build-only DIR --target nvidia-h200 --placement texture
    python benchmarks/models_e2e.py --from DIR        # ours (buffers), upstream, ours_texture
"ours_nofuse" is ours with ``compile_model(fuse=False)``: each depthwise conv apart from the
1x1 conv after it (the profile fuses them where a launch costs more than the recompute),
so one run times fused vs unfused ("fuse gain" = nofuse / ours kernel time). ``--direct`` adds
"ours_direct", ours with the profile's ``tiled_min_groups`` at 0: every conv on the direct kernel
("tiled_gain" = ours_direct / ours kernel time).
``--carry-weights-mb N`` saves weights (``--build-only``) only for models up to N MiB;
the others run with seeded random weights, for timing only (``"random_weights": true``).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from common import add_device_argument, add_split_arguments, add_target_argument, fmt, log, print_table, target_profile, wall_ms, write_json

MODELS = ("resnet50", "mobilenet_v2")
WAYS = ("ours", "upstream", "ours_nofuse", "tuned", "ours_texture", "ours_buffer", "ours_direct")  # "tuned" with --records, "ours_P" with --placement P
PLACEMENT_WAYS = WAYS[4:6]
#: Weights above this size are not saved for --from (the device tool carries 64 MiB);
#: such a model is then run there with seeded random weights, for timing only.
CARRY_WEIGHTS_MB = 24


def _build(names, ways, directory: Path | None, device, profile, records, onnx_paths, carry_mb):
    """Compile every (model, way) for ``profile``: with ``directory`` (--build-only) saved there
    without a device (weights only up to ``carry_mb`` MiB); else loaded on ``device``. Returns
    {(name, way): CompiledModel, or the reason upstream's build failed}. ``onnx_paths``: {name:
    ONNX file} next to the built-ins."""
    from tir_adreno.frontend import models

    compiled = {}
    for name in names:
        mod = onnx_paths[name] if name in onnx_paths else models.get_model(name)
        for way in ways:
            log(f"compile {name} ({way}) ...")
            start = time.perf_counter()
            placement = way.split("_", 1)[1] if way in PLACEMENT_WAYS else None
            # ours_direct: no conv on the tiled kernel (the profile's rule for it off)
            way_profile = dataclasses.replace(profile, tiled_min_groups=0) if way == "ours_direct" else profile
            way_records, ours, fuse = records if way == "tuned" else None, way != "upstream", way != "ours_nofuse"
            try:
                _compile_way(compiled, name, way, mod, directory, device, way_profile, way_records, ours, fuse, placement, carry_mb)
            except Exception as err:  # noqa: BLE001 (upstream's own build failing is a result: TVM defects 12/13)
                if ours:
                    raise
                reason = f"{type(err).__name__}: {str(err).strip().splitlines()[-1] if str(err).strip() else ''}"[:300]
                log(f"  upstream failed: {reason}")
                compiled[name, way] = reason
                if directory is not None:
                    directory.mkdir(parents=True, exist_ok=True)
                    (directory / f"{name}-{way}{FAILED_SUFFIX}").write_text(reason)
            log(f"  {time.perf_counter() - start:.1f} s")
    return compiled


#: Marks a way that did not compile (its reason inside), so --from reports it.
FAILED_SUFFIX = ".failed"


def _compile_way(compiled, name, way, mod, directory, device, way_profile, way_records, ours, fuse, placement, carry_mb):
    """One (model, way): loaded on ``device`` into ``compiled``, or (``directory``) saved there."""
    from tir_adreno.compiler import compile_model, compile_plan
    from tir_adreno.runtime.executor import save_model
    from tir_adreno.strategy.profile import without_fusion

    if directory is None:
        compiled[name, way] = compile_model(mod, device, way_profile, way_records, ours=ours,
                                            progress=lambda msg: log(f"  {msg}"), fuse=fuse, placement=placement)
        return
    # no device needed: the plan is built for the target and saved
    plan, kernels, weights = compile_plan(mod, without_fusion(way_profile, not fuse), way_records, ours=ours,
                                          progress=lambda msg: log(f"  {msg}"), placement=placement)
    weights_mb = plan.memory_bytes()["weights"] / 2**20
    save_model(directory / f"{name}-{way}", plan, kernels, weights if weights_mb <= carry_mb else None, way_profile.name)


def _load(names, ways, directory: Path, device):
    from tir_adreno.runtime.executor import load_model

    compiled = {}
    for name in names:
        for way in ways:
            path = directory / f"{name}-{way}"
            failed = directory / f"{name}-{way}{FAILED_SUFFIX}"
            if failed.exists():
                compiled[name, way] = failed.read_text()
                continue
            has_weights = (path / "weights.npz").exists()
            log(f"load {path.name}{'' if has_weights else ' (random weights: timing only)'} ...")
            compiled[name, way] = load_model(path, device, random_weights=None if has_weights else 0)
    return compiled


def _inputs(cm) -> dict:
    """Seeded random inputs of compiled model ``cm``, by name."""
    return {n: np.random.default_rng(i).standard_normal(cm.plan.tensors[t].shape).astype("float32") for i, (n, t) in enumerate(cm.plan.inputs)}


def _measure(cm, repeat: int):
    """(kernel ms, wall ms, host {"bound", "unbound": launch us, "io_ms"}, outputs): kernel time = sum of OpenCL events of a
    profiled run; wall = one fast run (upload, launches, download, one wait; the input already in
    pinned memory, as graph_wall_ms has it: ``common.wall_ms``); launch =
    host time per kernel enqueue the way the fast run does it (args bound at load,
    ``cm.launcher_kind``, queue without profiling; also the unbound path, set per launch
    with events on the profiling queue, as before). Medians over ``repeat``; outputs from
    a profiled run (poisoned first); io_ms: the fast run's uploads and downloads alone."""
    x = _inputs(cm)
    cm.run(x)  # warm-up: drivers finish compiling on first launch
    walls = [wall_ms(cm, x) for _ in range(repeat)]
    kernel_ms = []
    for _ in range(repeat):
        outputs = cm.run(x, profile=True)
        kernel_ms.append(cm.kernel_time_ms())
    host = {"bound": cm.launch_time_us(repeat), "unbound": cm.launch_time_us(repeat, bound=False),
            "io_ms": cm.io_time_ms(x, repeat)}
    return statistics.median(kernel_ms), statistics.median(walls), host, outputs


def _cudnn(name: str, repeat: int, torchscript_dir: Path | None = None, rival=None):
    """cuDNN fp32 (TF32 off) eager and CUDA-graph ms, or None without torch + CUDA or a PyTorch
    model of ``name`` (a built-in, or a TorchScript export in ``torchscript_dir``). ``rival`` (a
    callable: one run of ours, its wall ms) is timed in interleaved blocks with the graph's wall
    time (``ours_wall_paired_ms``): a drift of the machine (clocks, the host) hits both alike."""
    from torch_baselines import cuda_available, graph_timings, versions

    if not cuda_available():
        return None
    from torch_models import build_torch_model

    model = build_torch_model(name, torchscript_dir, "cuda")
    if model is None:
        return None
    timings = graph_timings(model.eval(), (1, 3, 224, 224), repeat, rival)
    timings.pop("output")
    return {**timings, **versions()}


#: Where --build-only puts the TorchScript exports it carries.
TORCHSCRIPT_FOLDER = "torchscript"


def _carry_torchscript(names, src: Path | None, directory: Path) -> None:
    """Copy ``src/<name>.pt.xz`` of the models into ``directory/torchscript`` (for --from)."""
    if src is None:
        return
    (directory / TORCHSCRIPT_FOLDER).mkdir(parents=True, exist_ok=True)
    for name in names:
        path = src / f"{name}.pt.xz"
        if path.exists():
            (directory / TORCHSCRIPT_FOLDER / path.name).write_bytes(path.read_bytes())


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_device_argument(parser)
    add_target_argument(parser)
    parser.add_argument("--records", metavar="FILE", help="tuning records: adds the way 'tuned'")
    parser.add_argument("--placement", choices=("texture", "buffer"), nargs="+", default=[],
                        help="adds the way 'ours_<placement>' per value: ours with every activation in that scope")
    parser.add_argument("--direct", action="store_true",
                        help="adds the way 'ours_direct': ours with every conv on the direct kernel (no tiled kernel)")
    parser.add_argument("--models", default=None, help=f"comma-separated (default: {','.join(MODELS)}, "
                        "or the --onnx files); built-ins or ONNX model names (--onnx-dir DIR/<name>.onnx)")
    parser.add_argument("--onnx", type=Path, nargs="+", default=[], metavar="FILE", help="ONNX models, named by stem")
    parser.add_argument("--onnx-dir", type=Path, default=None, help="folder of <name>.onnx for --models")
    parser.add_argument("--carry-weights-mb", type=float, default=CARRY_WEIGHTS_MB,
                        help="--build-only saves weights up to this size; larger models are timing-only")
    parser.add_argument("--torchscript-dir", type=Path, default=None,
                        help="DIR/<name>.pt.xz (torch_models.py --timm) for the cuDNN baseline of ONNX models; "
                        "--build-only copies them into its folder, --from finds them there")
    parser.add_argument("--ways", default=None,
                        help="comma-separated subset of the ways to build (default: ours, upstream, ours_nofuse and the added ones)")
    parser.add_argument("--repeat", type=int, default=10)
    add_split_arguments(parser, "models", dest="from_dir")
    args = parser.parse_args()
    onnx_paths = {p.stem: p for p in args.onnx}
    saved = sorted({p.name.removesuffix(FAILED_SUFFIX).rsplit("-", 1)[0] for p in args.from_dir.iterdir() if "-" in p.name}) if args.from_dir and args.from_dir.is_dir() else []
    names = [n for n in (args.models or ",".join(saved or onnx_paths or MODELS)).split(",") if n]
    if args.onnx_dir:
        onnx_paths.update({n: args.onnx_dir / f"{n}.onnx" for n in names if (args.onnx_dir / f"{n}.onnx").exists()})
    missing = [p for p in onnx_paths.values() if not p.exists()]
    if missing:
        parser.error(f"--onnx: no such file {missing[0]}")
    known = set(MODELS) | set(onnx_paths) | set(saved)
    unknown = set(names) - known
    if unknown:
        parser.error(f"unknown models {sorted(unknown)}; choose from {MODELS} or give --onnx / --onnx-dir")

    from tir_adreno.runtime import opencl as runtime
    from tir_adreno.runtime.texture import is_texture_scope

    device = runtime.get_device(args.device)
    ways = WAYS[:4] if args.records else WAYS[:3]
    ways += tuple(f"ours_{p}" for p in dict.fromkeys(args.placement))
    ways += ("ours_direct",) if args.direct else ()
    if args.ways:
        ways = tuple(w for w in ways if w in args.ways.split(","))
    if args.from_dir:
        ways = tuple(w for w in WAYS if any((args.from_dir / f"{names[0]}-{w}{s}").exists() for s in ("", FAILED_SUFFIX)))
        compiled = _load(names, ways, args.from_dir, device)
    else:
        profile = target_profile(args, build_only=bool(args.build_only))
        compiled = _build(names, ways, args.build_only, device, profile, args.records, onnx_paths, args.carry_weights_mb)
        if args.build_only:
            _carry_torchscript(names, args.torchscript_dir, args.build_only)
            log(f"saved to {args.build_only} (planned for {profile.name})")
            return

    rows, results = [], []
    for name in names:
        entry = {"model": name}
        outputs = {}
        for way in ways:
            cm = compiled[name, way]
            if isinstance(cm, str):  # upstream's build failed: its reason
                entry[way] = {"failed": cm}
                continue
            log(f"run {name} ({way}) ...")
            kernel_ms, wall, host, outputs[way] = _measure(cm, args.repeat)
            pooled, unpooled = cm.plan.memory_bytes(pool=True), cm.plan.memory_bytes(pool=False)
            entry[way] = {
                "kernel_ms": kernel_ms,
                "wall_ms": wall,
                "launch_us": host["bound"],
                "launch_us_unbound": host["unbound"],
                "launcher": cm.launcher_kind,
                "io_ms": host["io_ms"],
                "launches": cm.launch_count,
                "memory_pool": pooled,
                "memory_no_pool": unpooled,
                "calls": len(cm.plan.calls),
                "texture_activations": sum(is_texture_scope(t.scope) for t in cm.plan.tensors if t.kind == "temp"),
                # per kernel call of the last profiled run (fused vs unfused layer by layer)
                "profile": [{k: r.get(k) for k in ("op", "config", "time_ms")} for r in cm.profile()],
                "random_weights": args.from_dir is not None and not (args.from_dir / f"{name}-{way}" / "weights.npz").exists(),
            }
        measured = [w for w in ways if "failed" not in entry[w]]
        if "upstream" in measured and not any(entry[w]["random_weights"] for w in measured):
            ref = outputs["upstream"][0].astype(np.float64)
            entry["max_rel_diff"] = float(np.max(np.abs(outputs["ours"][0] - ref)) / np.max(np.abs(ref)))
            for way in measured[2:]:  # tuned, ours_<placement>: checked against upstream too
                entry[f"max_rel_diff_{way}"] = float(np.max(np.abs(outputs[way][0] - ref)) / np.max(np.abs(ref)))
        nvidia = device.cl_device.vendor.lower().startswith("nvidia")
        torchscript_dir = args.torchscript_dir or (args.from_dir / TORCHSCRIPT_FOLDER if args.from_dir else None)
        try:
            ours = compiled.get((name, "ours"))
            rival = None if ours is None or isinstance(ours, str) else functools.partial(wall_ms, ours, _inputs(ours))
            entry["cudnn"] = _cudnn(name, args.repeat, torchscript_dir, rival) if nvidia else None
        except Exception as err:  # noqa: BLE001 (a TorchScript export this torch cannot run: say so, go on)
            entry["cudnn"] = {"error": f"{type(err).__name__}: {str(err).strip().splitlines()[-1]}"[:300]}
            log(f"  cuDNN baseline failed: {entry['cudnn']['error']}")
        results.append(entry)
        o, u = entry["ours"], entry["upstream"] if "upstream" in measured else None
        c, t, nf = entry["cudnn"], entry.get("tuned"), entry.get("ours_nofuse")
        alts = [w for w in ways if w in PLACEMENT_WAYS or w == "ours_direct"]
        if "ours_direct" in entry:
            entry["tiled_gain"] = entry["ours_direct"]["kernel_ms"] / o["kernel_ms"]
        if t:
            entry["tuned_vs_ours"] = o["kernel_ms"] / t["kernel_ms"]
        if nf:
            entry["fuse_gain"] = nf["kernel_ms"] / o["kernel_ms"]
        rows.append(
            [
                name,
                fmt(o["kernel_ms"]),
                fmt(u["kernel_ms"]) if u else "failed",
                fmt(u["kernel_ms"] / o["kernel_ms"], ".2f") + "x" if u else "-",
                fmt(o["wall_ms"]),
                fmt(u["wall_ms"]) if u else "-",
                fmt(o["wall_ms"] / o["kernel_ms"], ".2f"),
                fmt(o["launch_us"], ".1f") + " / " + fmt(o["launch_us_unbound"], ".1f") + f" ({o['launcher']})",
                fmt(c.get("eager_ms")) if c else "-",
                fmt(c.get("graph_ms")) if c else "-",
                fmt(c.get("graph_wall_ms")) if c else "-",
                f"{fmt(c['ours_wall_paired_ms'])} ({fmt(c['ours_wall_paired_ms'] / c['graph_wall_ms'], '.2f')}x)" if c and "ours_wall_paired_ms" in c else "-",
                fmt(o["memory_pool"]["intermediates"] / 2**20, ".1f"),
                fmt(o["memory_no_pool"]["intermediates"] / 2**20, ".1f"),
                fmt(entry.get("max_rel_diff"), ".1e"),
                fmt(t["kernel_ms"]) if t else "-",
                fmt(entry.get("tuned_vs_ours"), ".2f") + "x" if t else "-",
                f"{fmt(nf['kernel_ms'])} / {fmt(nf['wall_ms'])} ({nf['launches']} vs {o['launches']} launches)" if nf else "-",
                fmt(entry.get("fuse_gain"), ".2f") + "x" if nf else "-",
                ", ".join(f"{w[5:]} {fmt(entry[w]['kernel_ms'])} / {fmt(entry[w]['wall_ms'])}" for w in alts) or "-",
            ]
        )
    path = write_json("models_e2e", device.name, {"repeat": args.repeat, "results": results}, args.results_dir)
    print_table(
        ["model", "ours ms", "upstream ms", "speedup", "ours wall", "upstr wall", "wall/kernel", "launch us fast / unbound (launcher)", "cuDNN eager", "cuDNN graph", "graph wall", "ours wall paired (vs graph wall)", "act MiB pool", "act MiB no pool", "ours vs upstr",
         "tuned ms", "tuned gain", "nofuse ms kernel / wall", "fuse gain", "--placement / --direct kernel / wall ms"],
        rows,
        title=f"end to end on {device.name}: kernel time = sum of OpenCL events, wall = one run's host time "
        f"(launch us: host time per kernel enqueue, fast run's launcher vs set per launch), medians of {args.repeat} (JSON: {path})",
    )


if __name__ == "__main__":
    sys.exit(main())
