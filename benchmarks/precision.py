"""fp32 vs "float16_acc32" (RGBA half images, float32 kernels): time and device memory.

Per conv layer of ResNet-50 and MobileNetV2 (``layers.py``; the strategy's default
plan, direct conv, textures) and end to end for the built-in ResNet-50 and
MobileNetV2 (seeded random weights), in each precision. Times are OpenCL event
medians; memory is the bytes allocated on the device (``memory_bytes()``; per layer
the images of input, weights and output). End to end it also reports the
float16_acc32 output's relative error against the float32 run on the same device.
"float16" (half math) is left out: whole models compile in float32 / float16_acc32.

    python benchmarks/precision.py --image-size 112          # build + run here
    python benchmarks/precision.py --build-only DIR --target nvidia-h200   # with TVM
    python benchmarks/precision.py --from DIR                # numpy + pyopencl only

``--image-size`` scales every layer's H and W (and the models' input) from 224.
Writes ``benchmarks/results/precision-<device>.json`` and a plot next to it.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

import layers as layer_lists
from common import (add_device_argument, add_split_arguments, add_target_argument, fmt, geomean, load_bundles, log,
                    print_table, read_cases, results_path, target_profile, write_cases, write_json)

NAME = "precision"
PRECISIONS = ("float32", "float16_acc32")
MODELS = ("resnet50", "mobilenet_v2")


def scaled(layer: layer_lists.ConvLayer, image_size: int) -> layer_lists.ConvLayer:
    n, c, h, w = layer.data_shape
    return replace(layer, data_shape=(n, c, max(1, h * image_size // 224), max(1, w * image_size // 224)))


def texture_bytes(specs) -> int:
    """Bytes of the images among ``specs`` (``bundle.TensorSpec``s), as allocated (half under float16_acc32)."""
    from tir_adreno.runtime.executor import TensorInfo
    from tir_adreno.runtime.texture import is_texture_scope

    return sum(TensorInfo(s.shape, s.dtype, s.scope, "t", storage=s.storage).nbytes for s in specs if is_texture_scope(s.scope))


# -- per conv layer ---------------------------------------------------------------------------------


def build_layers(layers, profile, out_dir: Path | None) -> tuple[list, dict]:
    """(case entries, key -> ConvProgram) of every layer in each precision (needs TVM)."""
    from primfuncs.conv import conv2d_geometry
    from primfuncs.epilogue import Epilogue
    from tir_adreno.strategy import conv as strategy
    from tir_adreno.tuning import programs as tuning

    entries, programs = [], {}
    for layer in layers:
        geom = conv2d_geometry(layer.data_shape, layer.weight_shape, layer.strides, layer.padding, layer.dilation, layer.groups)
        for precision in PRECISIONS:
            key = f"{layer.key}|{precision}"
            entry = {"key": key, "layer": layer.key, "count": layer.count, "shape": list(layer.data_shape),
                     "weight": list(layer.weight_shape), "precision": precision}
            try:
                program = tuning.build_program(strategy.conv2d_plan(geom, Epilogue(), precision, profile))
            except (ValueError, RuntimeError) as err:
                entry["error"] = f"build: {str(err).splitlines()[0][:200]}"
                entries.append(entry)
                continue
            entry["stages"] = list(program.stages)
            entry["algorithm"] = program.algorithm
            if out_dir is not None:
                entry["bundle"] = f"bundles/{len(entries)}.json"
                (out_dir / "bundles").mkdir(parents=True, exist_ok=True)
                program.module.save(out_dir / entry["bundle"])
            programs[key] = program
            entries.append(entry)
    return entries, programs


def run_layers(entries, programs, device) -> None:
    from tir_adreno.tuning import programs as tuning

    for entry in entries:
        program = programs.get(entry["key"])
        if program is None:
            continue
        try:
            entry["ms"] = tuning.measure_program(program, device) * 1e3
            entry["texture_bytes"] = texture_bytes(program.specs.values())
        except Exception as err:  # noqa: BLE001 (a failed layer is reported, not fatal)
            entry["error"] = f"run: {type(err).__name__}: {str(err).splitlines()[0][:200]}"
        log(f"{entry['key']}: {fmt(entry.get('ms'), '.3f')} ms {entry.get('error', '')}")


# -- end to end -------------------------------------------------------------------------------------


def build_models(names, image_size, device, profile, out_dir: Path | None) -> dict:
    from tir_adreno.frontend import models
    from tir_adreno.compiler import compile_model, compile_plan
    from tir_adreno.runtime.executor import save_model

    compiled = {}
    for name in names:
        mod = models.get_model(name, image_size=image_size)
        for precision in PRECISIONS:
            log(f"compile {name} ({precision}) ...")
            if out_dir is None:
                compiled[name, precision] = compile_model(mod, device, profile, precision=precision, progress=lambda _: None)
            else:
                plan, kernels, weights = compile_plan(mod, profile, precision=precision, progress=lambda _: None)
                save_model(out_dir / "models" / f"{name}-{precision}", plan, kernels, weights, profile.name)
    return compiled


def load_models(names, src: Path, device) -> dict:
    from tir_adreno.runtime.executor import load_model

    def load(path):  # a model saved without weights (too large to carry) runs on seeded random ones: timing only
        return load_model(path, device, random_weights=None if (path / "weights.npz").exists() else 0)

    return {(name, p): load(src / "models" / f"{name}-{p}") for name in names for p in PRECISIONS}


def run_models(compiled, names, repeat: int) -> list:
    from tir_adreno.reference import relative_error

    rows = []
    for name in names:
        outputs = {}
        for precision in PRECISIONS:
            cm = compiled[name, precision]
            x = {n: np.random.default_rng(i).standard_normal(cm.plan.tensors[t].shape).astype("float32")
                 for i, (n, t) in enumerate(cm.plan.inputs)}
            cm.run(x)  # warm-up
            times = []
            for _ in range(repeat):
                outputs[precision] = cm.run(x, profile=True)
                times.append(cm.kernel_time_ms())
            mem = cm.memory_bytes()
            rows.append({"model": name, "precision": precision, "kernel_ms": statistics.median(times), "memory": mem,
                         "texture_bytes": texture_bytes(t.spec(str(i)) for i, t in enumerate(cm.plan.tensors))})
            log(f"{name} {precision}: {rows[-1]['kernel_ms']:.2f} ms, {mem['total'] / 2**20:.1f} MiB")
        err = relative_error(outputs["float16_acc32"][0], outputs["float32"][0])
        rows[-1]["relative_error_vs_float32"] = err
    return rows


# -- report -----------------------------------------------------------------------------------------


def summarize(entries, model_rows) -> dict:
    by_layer: dict = {}
    for e in entries:
        if "ms" in e:
            by_layer.setdefault(e["layer"], {})[e["precision"]] = e
    pairs = [(v["float32"], v["float16_acc32"]) for v in by_layer.values() if len(v) == 2]
    rows = [[a["layer"], a["algorithm"], fmt(a["ms"], ".3f"), fmt(b["ms"], ".3f"), fmt(a["ms"] / b["ms"], ".2f"),
             fmt(a["texture_bytes"] / 2**20, ".2f"), fmt(b["texture_bytes"] / 2**20, ".2f")] for a, b in pairs]
    print_table(["layer", "algorithm", "fp32 ms", "fp16_acc32 ms", "speed-up", "fp32 MiB", "fp16 MiB"], rows,
                title="per conv layer (textures: input, weights, output)")
    model_table = []
    for r in model_rows:
        model_table.append([r["model"], r["precision"], fmt(r["kernel_ms"], ".2f"), fmt(r["memory"]["weights"] / 2**20, ".1f"),
                            fmt(r["memory"]["intermediates"] / 2**20, ".1f"), fmt(r["texture_bytes"] / 2**20, ".1f"),
                            fmt(r.get("relative_error_vs_float32"), ".2e")])
    print_table(["model", "precision", "kernel ms", "weights MiB", "intermediates MiB", "texture MiB", "rel. error"], model_table,
                title="end to end")
    speedups = [a["ms"] / b["ms"] for a, b in pairs]
    summary = {"layer_speedup_geomean": geomean(speedups),
               "layers_faster_in_fp16": sum(s > 1 for s in speedups), "layers": len(speedups),
               "texture_bytes_ratio": (sum(b["texture_bytes"] for _, b in pairs) / max(1, sum(a["texture_bytes"] for a, _ in pairs)))}
    print(f"\nfloat16_acc32 vs float32 per layer: geomean speed-up {fmt(summary['layer_speedup_geomean'], '.2f')}x "
          f"({summary['layers_faster_in_fp16']}/{summary['layers']} layers faster); texture bytes x{summary['texture_bytes_ratio']:.2f}")
    return summary


def plot(entries, model_rows, path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    by_layer: dict = {}
    for e in entries:
        if "ms" in e:
            by_layer.setdefault(e["layer"], {})[e["precision"]] = e["ms"]
    names = [k for k, v in by_layer.items() if len(v) == 2]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(max(8, 0.2 * len(names) + 4), 4), gridspec_kw={"width_ratios": [3, 1]})
    ax1.bar(range(len(names)), [by_layer[n]["float32"] / by_layer[n]["float16_acc32"] for n in names], color="tab:blue")
    ax1.axhline(1.0, color="grey", lw=0.8)
    ax1.set_xticks(range(len(names)))
    ax1.set_xticklabels([f"L{i}" for i in range(len(names))], fontsize=6)
    ax1.set_ylabel("fp32 time / float16_acc32 time")
    ax1.set_title("per conv layer")
    models = sorted({r["model"] for r in model_rows})
    for k, precision in enumerate(PRECISIONS):
        vals = [next(r["kernel_ms"] for r in model_rows if r["model"] == m and r["precision"] == precision) for m in models]
        ax2.bar(np.arange(len(models)) + 0.4 * k, vals, 0.4, label=precision)
    ax2.set_xticks(np.arange(len(models)) + 0.2)
    ax2.set_xticklabels(models, fontsize=7)
    ax2.set_ylabel("kernel ms")
    ax2.set_title("end to end")
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_device_argument(parser)
    add_target_argument(parser)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--layers", type=int, default=None, help="only the first N layers")
    parser.add_argument("--repeat", type=int, default=5)
    add_split_arguments(parser, "kernels and models", dest="from_dir")
    args = parser.parse_args()
    names = [n for n in args.models.split(",") if n]
    layer_models = tuple("mobilenetv2" if n == "mobilenet_v2" else n for n in names)
    if args.from_dir is not None:
        from tir_adreno.runtime import opencl as runtime
        from tir_adreno.tuning.programs import ConvProgram

        device = runtime.get_device(args.device)
        meta = read_cases(args.from_dir)
        entries, image_size = meta["entries"], meta["image_size"]
        programs = load_bundles(args.from_dir, entries, lambda e: e["key"],
                                lambda e, m: ConvProgram(e["algorithm"], m, tuple(e["stages"])))
        compiled = load_models(names, args.from_dir, device)
    else:
        from tir_adreno.runtime import opencl as runtime

        device = None if args.build_only else runtime.get_device(args.device)
        profile = target_profile(args, build_only=args.build_only is not None)
        layers = [scaled(layer, args.image_size) for layer in layer_lists.layers(layer_models, args.layers)]
        image_size = args.image_size
        entries, programs = build_layers(layers, profile, args.build_only)
        compiled = build_models(names, image_size, device, profile, args.build_only)
        if args.build_only is not None:
            write_cases(args.build_only, {"entries": entries, "image_size": image_size})
            print(f"built {len(programs)} layer programs and {len(names) * len(PRECISIONS)} models into {args.build_only}; "
                  f"run: python benchmarks/precision.py --from {args.build_only}")
            return
    start = time.perf_counter()
    run_layers(entries, programs, device)
    model_rows = run_models(compiled, names, args.repeat)
    summary = summarize(entries, model_rows)
    payload = {"image_size": image_size, "precisions": PRECISIONS, "layers": entries, "models": model_rows,
               "summary": summary, "run_s": time.perf_counter() - start}
    path = write_json(NAME, device.name, payload, args.results_dir)
    png = plot(entries, model_rows, results_path(NAME, device.name, args.results_dir).with_suffix(".png"))
    print(f"wrote {path}" + (f" and {png}" if png else ""))


if __name__ == "__main__":
    main()
