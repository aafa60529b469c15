"""Direct conv vs Winograd F(2x2, 3x3) vs F(4x4, 3x3) on every 3x3 stride-1 conv layer of
ResNet-50 and VGG-16 (batch 1, 224x224, fp32), one device, and what "auto" picks.

Each way runs through the same pyopencl runtime and is timed the same way (median
OpenCL event time of all its kernels after warm-up, input sets rotated):

- ``direct``: ``primfuncs.conv`` (NCHW4c activations and OIHW4o weights in textures);
- ``winograd_2x2`` / ``winograd_4x4``: ``primfuncs.conv.winograd``, three kernels
  (input transform, batched GEMM, output transform); the weight transform is done
  once on the host and not timed, like any weight packing.

Kernels are planned by ``tir_adreno.strategy.conv.conv2d_plan`` for ``--target`` (default:
this device's profile, or ``adreno`` with ``--build-only``): tensors in textures where
they fit its image limits, else buffers, as ``ops.conv2d`` and the Relax pass place them. Every output is checked against a
float64 NumPy conv (relative error <= 1e-4 for direct and F(2x2), <= 1e-3 for
F(4x4); outputs and intermediates poisoned first); a wrong or failed way is
flagged and left out of the comparison.

"auto" is what ``tir-adreno tune`` would pick among the algorithms on this device:
a quick measurement of the same kernels (``tuning.measure_programs``) and its
rule (``tuning.pick_algorithm``: fastest, ties within 3% to the more accurate).
The table says whether that pick is the fastest by this benchmark's longer
timing. Prints a per-layer table and a summary LAST, writes
``benchmarks/results/winograd-<device>.json``.

Run here (TVM + PoCL):           python benchmarks/winograd.py [--limit N]
Split (a device without TVM):    python benchmarks/winograd.py --build-only DIR   # with TVM
                                 python benchmarks/winograd.py --from DIR         # numpy + pyopencl only
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

import numpy as np

import common  # noqa: E402  (puts the repository root on sys.path)
import layers as layer_lists
from conv_layers import reference_conv2d, run_program_case

from tir_adreno.tuning import programs as tuning

NAME = "winograd"
#: ``tir_adreno.strategy.conv.ALGORITHMS`` (not imported: ``--from`` runs without TVM).
WAYS = ("direct", "winograd_2x2", "winograd_4x4")
SHORT = {"direct": "direct", "winograd_2x2": "F2", "winograd_4x4": "F4"}
RTOL = {"direct": 1e-4, "winograd_2x2": 1e-4, "winograd_4x4": 1e-3}


def _vgg(name, c, hw, o, count=1):
    return layer_lists.ConvLayer("vgg16", name, (1, c, hw, hw), (o, c, 3, 3), (1, 1), (1, 1), 1, count)


# VGG-16 (torchvision ``vgg16``, configuration D): thirteen 3x3 stride-1 pad-1 convs; equal
# shapes listed once with their count.
VGG16 = (
    _vgg("features.0", 3, 224, 64),
    _vgg("features.2", 64, 224, 64),
    _vgg("features.5", 64, 112, 128),
    _vgg("features.7", 128, 112, 128),
    _vgg("features.10", 128, 56, 256),
    _vgg("features.12-14", 256, 56, 256, count=2),
    _vgg("features.17", 256, 28, 512),
    _vgg("features.19-21", 512, 28, 512, count=2),
    _vgg("features.24-28", 512, 14, 512, count=3),
)
#: Conv layers and multiply-adds of torchvision's VGG-16, for a self-check.
VGG16_EXPECTED = (13, 15_346_630_656)


def _eligible(layer) -> bool:
    return layer.weight_shape[2:] == (3, 3) and layer.strides == (1, 1) and layer.dilation == (1, 1) and layer.groups == 1


MODELS = {"resnet50": tuple(filter(_eligible, layer_lists.RESNET50)), "vgg16": VGG16}


def selected_layers(models, limit=None):
    out = []
    for model in models:
        out.extend(MODELS[model][:limit] if limit is not None else MODELS[model])
    return out


# ---------------------------------------------------------------------------------------------
# build (needs TVM)


def build_all(selected, profile, out_dir: Path | None):
    """Build every (layer, way) for ``profile``; with ``out_dir`` also save bundles + cases.json there."""
    import tvm

    from primfuncs.conv import conv2d_geometry
    from primfuncs.epilogue import Epilogue
    from tir_adreno.strategy import conv as strategy

    cases, programs = [], {}
    for layer in selected:
        geom = conv2d_geometry(layer.data_shape, layer.weight_shape, layer.strides, layer.padding, layer.dilation, layer.groups)
        for way in WAYS:
            case = {"layer": layer.key, "way": way}
            t0 = time.perf_counter()
            try:
                plan = strategy.conv2d_plan(geom, Epilogue(), "float32", profile, choice=strategy.ConvChoice(way))
                scopes = (plan.scope, plan.weight_scope, plan.tile_scope)
                program = tuning.build_program(plan)
                programs[(layer.key, way)] = program
                case.update(stages=list(program.stages), scopes=list(scopes))
                if out_dir is not None:
                    rel = f"kernels/{layer.key}-{way}.json"
                    program.module.save(out_dir / rel)
                    case["bundle"] = rel
            except Exception as err:  # recorded and flagged in the table, never dropped silently
                case["error"] = f"build: {type(err).__name__}: {err}"
                common.log(f"  build failed {layer.key} {way}: {case['error']}")
            case["build_s"] = round(time.perf_counter() - t0, 3)
            cases.append(case)
        common.log(f"built {layer.key}")
    meta = {
        "tvm": tvm.__version__,
        "target": profile.name,
        "build_limits": [profile.limits.image2d_max_width, profile.limits.image2d_max_height, profile.limits.image_max_array_size],
        "layers": [layer.to_dict() for layer in selected],
        "cases": cases,
    }
    if out_dir is not None:
        common.write_cases(out_dir, meta)
    return meta, programs


def load_cases(src: Path):
    meta = common.read_cases(src)
    programs = common.load_bundles(
        src,
        meta["cases"],
        lambda case: (case["layer"], case["way"]),
        lambda case, module: tuning.ConvProgram(case["way"], module, tuple(case["stages"])),
    )
    return meta, programs


# ---------------------------------------------------------------------------------------------
# run (no TVM)


def run_way(dev, program: tuning.ConvProgram, way, layer, inputs, ref, budget_s: float) -> dict:
    return run_program_case(dev, program, layer, inputs, ref, budget_s, RTOL[way])


def run_all(dev, selected, meta, programs, budget_s: float, input_sets: int, seed: int):
    cases = {(c["layer"], c["way"]): c for c in meta["cases"]}
    rng = np.random.default_rng(seed)
    rows = []
    for layer in selected:
        inputs = [
            (rng.standard_normal(layer.data_shape).astype(np.float32), rng.standard_normal(layer.weight_shape).astype(np.float32))
            for _ in range(input_sets)
        ]
        ref = reference_conv2d(*inputs[0], layer)
        results, ready = {}, {}
        for way in WAYS:
            case = cases.get((layer.key, way))
            if case is None or "error" in case:
                results[way] = {"error": case["error"] if case else "not built (absent from the cases file)"}
                continue
            t0 = time.perf_counter()
            try:
                results[way] = run_way(dev, programs[(layer.key, way)], way, layer, inputs, ref, budget_s)
                results[way]["gflops"] = layer.flops / results[way]["time_s"] * 1e-9
                results[way]["scopes"] = case.get("scopes")
                if results[way]["ok"]:
                    ready[way] = programs[(layer.key, way)]
            except Exception as err:
                results[way] = {"error": f"run: {type(err).__name__}: {err}"}
                common.log(traceback.format_exc())
            results[way]["wall_s"] = round(time.perf_counter() - t0, 3)
        row = {"layer": layer.to_dict(), "key": layer.key, "flops": layer.flops, "results": results}
        good = {w: r["time_s"] for w, r in results.items() if r.get("ok")}
        if good:
            row["fastest"] = min(good, key=good.get)
        if ready:  # what tuning would record: its own measurement of the same (correct) kernels, its rule
            auto_times = tuning.measure_programs(ready, dev)
            row["auto"] = {"algorithm": tuning.pick_algorithm(auto_times), "times_s": auto_times}
            row["auto_is_fastest"] = row["auto"]["algorithm"] == row.get("fastest")
            row["auto_vs_fastest"] = good[row["auto"]["algorithm"]] / good[row["fastest"]]
        rows.append(row)
        common.log(
            f"{layer.key:28s} "
            + "  ".join(
                f"{SHORT[w]}={r['time_s'] * 1e3:.2f}ms{'' if r['ok'] else ' WRONG'}" if "time_s" in r else f"{SHORT[w]}=ERR"
                for w, r in results.items()
            )
            + f"  auto={SHORT.get(row.get('auto', {}).get('algorithm'), '-')}"
        )
    return rows


# ---------------------------------------------------------------------------------------------
# report


def summarize(rows):
    summary = {}
    models = [m for m in MODELS if any(r["layer"]["model"] == m for r in rows)]
    for model in [*models, "all"]:
        mrows = [r for r in rows if model == "all" or r["layer"]["model"] == model]
        s = {"layers": len(mrows), "conv_count": sum(r["layer"]["count"] for r in mrows)}
        totals = {}
        for way in WAYS:
            good = [r for r in mrows if r["results"].get(way, {}).get("ok")]
            totals[way] = {
                "time_s": sum(r["results"][way]["time_s"] * r["layer"]["count"] for r in good),
                "complete": len(good) == len(mrows),
            }
        for name, pick in (("fastest", lambda r: r.get("fastest")), ("auto", lambda r: r.get("auto", {}).get("algorithm"))):
            chosen = [(r, pick(r)) for r in mrows if pick(r)]
            totals[name] = {
                "time_s": sum(r["results"][w]["time_s"] * r["layer"]["count"] for r, w in chosen),
                "complete": len(chosen) == len(mrows),
            }
        s["totals"] = totals
        s["auto_picked_fastest"] = sum(bool(r.get("auto_is_fastest")) for r in mrows)
        s["wins"] = {w: sum(r.get("fastest") == w for r in mrows) for w in WAYS}
        if totals["direct"]["complete"] and totals["auto"]["complete"] and totals["auto"]["time_s"] > 0:
            s["auto_speedup_over_direct"] = totals["direct"]["time_s"] / totals["auto"]["time_s"]
        summary[model] = s
    return summary


def print_report(rows, summary, device_name):
    headers = ["layer", "conv", "n", "MFLOP"] + [f"{SHORT[w]} ms" for w in WAYS]
    headers += ["F2 x", "F4 x", "F2 err", "F4 err", "fastest", "auto", "auto fastest?", "flags"]
    table, errors = [], []
    for r in rows:
        layer = layer_lists.ConvLayer.from_dict(r["layer"])
        res = r["results"]
        cells = [r["key"], layer.description, str(layer.count), f"{r['flops'] / 1e6:.0f}"]
        flags = []
        for w in WAYS:
            x = res.get(w, {})
            if "error" in x:
                cells.append("ERR")
                errors.append(f"{r['key']} {w}: {x['error'].splitlines()[0][:300]}")
            elif "time_s" in x:
                cells.append(f"{x['time_s'] * 1e3:.2f}" + ("" if x["ok"] else "!"))
                if not x["ok"]:
                    flags.append(f"{SHORT[w]} WRONG (rel err {x['rel_err']:.2g})")
                if x.get("scopes") and "global" in x["scopes"][1:]:
                    flags.append(f"{SHORT[w]} buffers: {','.join(s.replace('global.', '') for s in x['scopes'])}")
            else:
                cells.append("-")
        for w in ("winograd_2x2", "winograd_4x4"):  # speedup over direct
            a, b = res.get("direct", {}), res.get(w, {})
            cells.append(common.fmt(a["time_s"] / b["time_s"]) if a.get("ok") and b.get("ok") else "-")
        for w in ("winograd_2x2", "winograd_4x4"):
            cells.append(common.fmt(res.get(w, {}).get("rel_err"), ".1e"))
        cells.append(SHORT.get(r.get("fastest"), "-"))
        cells.append(SHORT.get(r.get("auto", {}).get("algorithm"), "-"))
        if "auto" in r:
            cells.append("yes" if r["auto_is_fastest"] else f"no ({r['auto_vs_fastest']:.2f}x)")
        else:
            cells.append("-")
        cells.append("; ".join(flags))
        table.append(cells)
    if errors:
        print("\nerrors (full text in the JSON):")
        print("\n".join(f"  {e}" for e in errors))
    print()
    common.print_table(
        headers, table,
        title=f"3x3 stride-1 conv layers on {device_name} (fp32, batch 1; ms = median OpenCL event time of all "
        "kernels; x = speedup over direct; ! = wrong output)",
    )
    print()
    trows = []
    for model, s in summary.items():
        t = s["totals"]
        cells = [model, str(s["layers"]), str(s["conv_count"])]
        for w in (*WAYS, "fastest", "auto"):
            cells.append(common.fmt(t[w]["time_s"] * 1e3, ".1f") + ("" if t[w]["complete"] else "*"))
        cells += [common.fmt(s.get("auto_speedup_over_direct")), f"{s['auto_picked_fastest']}/{s['layers']}"]
        cells.append(" ".join(f"{SHORT[w]}:{n}" for w, n in s["wins"].items()))
        trows.append(cells)
    common.print_table(
        ["model", "layers", "convs", "direct ms", "F2 ms", "F4 ms", "best ms", "auto ms", "auto/direct x",
         "auto = fastest", "fastest per layer"],
        trows,
        title="totals over every 3x3 stride-1 conv of the model (layer time x count; * = some layers failed, left out)",
    )


# ---------------------------------------------------------------------------------------------


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_device_argument(p)
    common.add_target_argument(p)
    common.add_split_arguments(p)
    p.add_argument("--models", default="resnet50,vgg16", help="comma-separated: resnet50, vgg16")
    p.add_argument("--limit", type=int, default=None, help="only the first N eligible layers of each model")
    p.add_argument("--budget", type=float, default=0.5, help="seconds of timing per way and layer (default 0.5)")
    p.add_argument("--input-sets", type=int, default=2, help="input sets rotated while timing (default 2)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    for m in args.models:
        if m not in MODELS:
            p.error(f"--models: unknown model {m!r}; choose from {','.join(MODELS)}")
    if args.limit is not None and args.limit < 1:
        p.error("--limit must be >= 1")
    if args.input_sets < 1:
        p.error("--input-sets must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    convs, macs = sum(r.count for r in VGG16), sum(r.count * r.flops // 2 for r in VGG16)
    assert (convs, macs) == VGG16_EXPECTED, (convs, macs)
    selected = selected_layers(args.models, args.limit)
    started = time.perf_counter()
    if args.build_only:
        args.build_only.mkdir(parents=True, exist_ok=True)
        meta, _ = build_all(selected, common.target_profile(args, build_only=True), args.build_only)
        failed = [c for c in meta["cases"] if "error" in c]
        common.log(f"wrote {len(meta['cases']) - len(failed)} programs to {args.build_only} ({len(failed)} failed) "
                   f"in {time.perf_counter() - started:.0f} s")
        return 1 if failed else 0

    from tir_adreno.runtime import opencl as runtime

    dev = runtime.get_device(args.device)
    common.log(f"device: {dev.name}")
    if args.src:
        meta, programs = load_cases(args.src)
        built = {lay["model"] + "." + lay["name"] for lay in meta["layers"]}
        missing = [layer.key for layer in selected if layer.key not in built]
        if missing:
            common.log(f"not in {args.src}: {missing} (rebuild with --build-only)")
        selected = [layer for layer in selected if layer.key in built]
        leaked = [m for m in ("tvm", "primfuncs.conv.direct", "primfuncs._common") if m in sys.modules]
        if leaked:
            raise RuntimeError(f"--from imported {leaked}: the run-only path must work without TVM")
    else:
        meta, programs = build_all(selected, common.target_profile(args), None)
    build_s = time.perf_counter() - started
    rows = run_all(dev, selected, meta, programs, args.budget, args.input_sets, args.seed)
    summary = summarize(rows)
    run_s = time.perf_counter() - started - build_s
    payload = {
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "rtol": RTOL,
        "tvm": meta.get("tvm"),
        "build_limits": meta.get("build_limits"),
        "device_info": {
            "name": dev.name,
            "version": dev.cl_device.version.strip(),
            "driver": dev.cl_device.driver_version.strip(),
            "image_limits": [dev.limits.image2d_max_width, dev.limits.image2d_max_height, dev.limits.image_max_array_size],
        },
        "timing": "median OpenCL event time (sum over a way's kernels) after warm-up, input sets rotated",
        "auto": "tuning.measure_programs on the same kernels + tuning.pick_algorithm (fastest; ties within "
        f"{tuning.TIE_MARGIN:.0%} go to the more accurate)",
        "build_s": round(build_s, 1),
        "run_s": round(run_s, 1),
        "layers": rows,
        "summary": summary,
    }
    path = common.write_json(NAME, dev.name, payload, args.results_dir)
    common.log(f"build {build_s:.0f} s, run {run_s:.0f} s; wrote {path}")
    print_report(rows, summary, dev.name)
    bad = [(r["key"], w) for r in rows for w, res in r["results"].items() if not res.get("ok", False)]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
