"""Every conv layer of ResNet-50 and MobileNetV2 (batch 1, 224, fp32), several ways, one device.

Ways, all through the same pyopencl runtime and timed the same way (median
OpenCL event time after warm-up, input sets rotated):

- ``ours``: what a model compiled for ``--target`` runs for that layer:
  ``strategy.conv2d_plan(geometry, epilogue, "float32", profile, records)``, i.e. the
  placement (texture / buffer), algorithm (direct / Winograd) and config the strategy
  picks from the profile's defaults, or from ``--records FILE`` (``tir-adreno tune``)
  where they hold the layer. The plan (algorithm, placement, config, source) is in
  each JSON row. Epilogue: none, like the other ways (a model's conv adds its folded
  bias and activation, one read and a clamp per output pixel in registers; the plan's
  choice does not depend on the epilogue);
- ``ours_tex``: our direct conv (``primfuncs.conv``), NCHW4c activations and
  OIHW4o weights in textures;
- ``ours_buf``: the same schedule on buffers (both: the profile's default direct conv);
- ``upstream``: upstream TVM's generic OpenCL conv (``Target({"kind": "opencl"})``,
  default GPU pipeline, dlight schedules; ``tir_adreno.tools.baseline``), NCHW buffers;
- ``cudnn`` (NVIDIA devices, when torch with CUDA imports): PyTorch/cuDNN fp32,
  TF32 off, CUDA events.

A depthwise conv that a model compiled for ``--target`` runs fused into the 1x1 conv
reading it (``strategy.fusion.fuse_depthwise_pointwise``, kernel
``primfuncs.conv.depthwise_pointwise_nchw4c``) also gets a row ``<dw key>+<1x1 name>``
(count = blocks with that pair; ``layers.pairs``): ``ours`` = the fused kernel, the other
ways = their depthwise time + their 1x1 time. The summary is printed twice: per conv
(each conv alone, as before) and "as the model runs" (fused pairs replace their
depthwise row and their share of the 1x1 row's count): the one issue 12's targets use.

Every output is checked against a float64 NumPy conv (relative error <= 1e-4,
outputs poisoned first); a wrong or failed kernel is flagged and left out of
the means. Prints a per-layer table and a summary LAST (speed ratios per model
and overall, geomean over distinct layers, and the slowest depthwise layer's
ratio), writes ``benchmarks/results/conv_layers-<device>.json``.

Run here (TVM + PoCL):           python benchmarks/conv_layers.py
Split (a device without TVM):    python benchmarks/conv_layers.py --build-only DIR --target nvidia-h200 [--records FILE]
                                 python benchmarks/conv_layers.py --from DIR         # numpy + pyopencl only
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

import numpy as np

import common  # noqa: E402  (puts the repository root on sys.path)
from common import nchw4c_to_nchw, nchw_to_nchw4c, oihw_to_oihw4o
import layers as layer_lists

from primfuncs.conv.winograd_math import winograd_weight_transform  # NumPy only: fine without TVM
from tir_adreno.tuning import programs as tuning
from tir_adreno.strategy.packing import pack_nchw4c, pack_oihw4o, unpack_nchw4c
from tir_adreno.runtime.bundle import KernelModule
from tir_adreno.reference import conv2d_nchw, depthwise_pointwise, relative_error
from tir_adreno.runtime.texture import is_texture_scope

NAME = "conv_layers"
OPENCL_WAYS = ("ours", "ours_tex", "ours_buf", "upstream")
#: Our ways' placements: "ours" takes the strategy's (defaults or records).
PLACEMENT = {"ours_tex": "texture", "ours_buf": "buffer"}
ALL_WAYS = (*OPENCL_WAYS, "cudnn")
RTOL = 1e-4


# ---------------------------------------------------------------------------------------------
# layouts: packed on the host with NumPy (the run-only path has no TVM to build layout kernels)
PACK = {"NCHW": lambda x: x, "OIHW": lambda w: w, "NCHW4c": nchw_to_nchw4c, "OIHW4o": oihw_to_oihw4o}


def unpack(y: np.ndarray, layout: str, channels: int) -> np.ndarray:
    return nchw4c_to_nchw(y, channels) if layout == "NCHW4c" else y


def reference_conv2d(x: np.ndarray, w: np.ndarray, layer: layer_lists.ConvLayer) -> np.ndarray:
    """float64 conv2d of ``layer`` (symmetric padding)."""
    ph, pw = layer.padding
    return conv2d_nchw(x, w, layer.strides, (ph, pw, ph, pw), layer.dilation, layer.groups)


# ---------------------------------------------------------------------------------------------
# build (needs TVM): layer x way -> KernelModule + how to feed it
def build_case(layer: layer_lists.ConvLayer, way: str, profile, records=None) -> tuple[KernelModule, dict]:
    """Compile one way of one layer for ``profile``; returns the module and its case description.

    Our ways are the stages of a ``strategy.conv2d_plan`` (case keys ``stages`` and ``plan``);
    "ours" plans with ``records`` (a ``tir_adreno.strategy.records.Records`` or None), as a model does.
    """
    from tir_adreno.tools import baseline
    from tir_adreno.codegen import build

    if way != "upstream":
        from primfuncs.conv import conv2d_geometry
        from primfuncs.epilogue import Epilogue
        from tir_adreno.strategy import conv as strategy

        geom = conv2d_geometry(layer.data_shape, layer.weight_shape, layer.strides, layer.padding, layer.dilation, layer.groups)
        choice = None if way == "ours" else strategy.ConvChoice("direct", None, PLACEMENT[way])
        plan = strategy.conv2d_plan(geom, Epilogue(), "float32", profile, records if way == "ours" else None, choice)
        program = tuning.build_program(plan)
        return program.module, {"stages": list(program.stages), "plan": plan_info(plan)}
    func = baseline.upstream_conv2d(
        layer.data_shape, layer.weight_shape, layer.strides, layer.padding, layer.dilation, layer.groups
    )
    module = build.build_cached(func, build.OPENCL_TARGET)
    layouts = ("NCHW", "OIHW", "NCHW")
    function = baseline.FUNCTION_NAME
    params = module[function].params
    if len(params) != 3:
        raise RuntimeError(f"{way}: expected (data, weight, output) parameters, got {[p.name for p in params]}")
    return module, {"function": function, "layouts": list(layouts)}


def geometry(layer: layer_lists.ConvLayer):
    from primfuncs.conv import conv2d_geometry

    return conv2d_geometry(layer.data_shape, layer.weight_shape, layer.strides, layer.padding, layer.dilation, layer.groups)


def build_fused(pair: layer_lists.ConvPair, profile, records=None) -> tuple[KernelModule, dict] | None:
    """The fused depthwise -> 1x1 kernel of ``pair`` as a model compiled for ``profile`` runs it
    (``strategy.fusion.fuse_depthwise_pointwise`` with ``records``, the plan's PrimFunc, no epilogues
    like the other ways), or None when the strategy runs the two convs apart there."""
    from primfuncs.epilogue import Epilogue
    from tir_adreno.codegen import build
    from tir_adreno.strategy import fusion

    plan = fusion.fuse_depthwise_pointwise(geometry(pair.depthwise), geometry(pair.pointwise), profile, records)
    if plan is None:
        return None
    module = build.build_cached(plan.primfunc(Epilogue(), Epilogue()))
    info = {"algorithm": "direct", "fused": True, "placement": plan.placement, "config": plan.config_string,
            "source": plan.source, "scopes": [plan.scope, plan.weight_scope], "recompute_macs": plan.recompute_macs}
    return module, {"stages": list(module.functions), "plan": info}


def plan_info(plan) -> dict:
    """What the JSON rows say about a ``strategy.ConvPlan``: the choice, readable and as records hold it."""
    return {
        "algorithm": plan.algorithm, "placement": plan.placement, "config": plan.config_string, "source": plan.source,
        "scopes": [plan.scope, plan.weight_scope, plan.tile_scope], "choice": plan.choice.to_dict(),
    }


def build_all(selected, ways, out_dir: Path | None, profile, records=None):
    """Build every (layer, way) for ``profile`` (``records``: a records file for the way "ours");
    with ``out_dir`` also save bundles + cases.json there."""
    import tvm

    from tir_adreno.strategy.records import open_records

    tuned = open_records(records, profile)
    cases, modules = [], {}
    for layer in selected:
        for way in ways:
            if way == "cudnn":
                continue
            case = {"layer": layer.key, "way": way}
            t0 = time.perf_counter()
            try:
                module, info = build_case(layer, way, profile, tuned)
                case.update(info)
                modules[(layer.key, way)] = module
                if out_dir is not None:
                    rel = f"kernels/{layer.key}-{way}.json"
                    module.save(out_dir / rel)
                    case["bundle"] = rel
            except Exception as err:  # recorded, flagged in the table; never silently dropped
                case["error"] = f"build: {type(err).__name__}: {err}"
                common.log(f"  build failed {layer.key} {way}: {case['error']}")
            case["build_s"] = round(time.perf_counter() - t0, 3)
            cases.append(case)
        common.log(f"built {layer.key}")
    for pair in layer_lists.pairs(selected) if "ours" in ways else ():
        case = {"layer": pair.key, "way": "ours", "fused": True}
        t0 = time.perf_counter()
        try:
            built = build_fused(pair, profile, tuned)
            if built is None:  # the model runs this pair as two convs: their rows say it all
                continue
            module, info = built
            case.update(info)
            modules[(pair.key, "ours")] = module
            if out_dir is not None:
                rel = f"kernels/{pair.key}-ours.json"
                module.save(out_dir / rel)
                case["bundle"] = rel
        except Exception as err:
            case["error"] = f"build: {type(err).__name__}: {err}"
            common.log(f"  build failed {pair.key}: {case['error']}")
        case["build_s"] = round(time.perf_counter() - t0, 3)
        cases.append(case)
        common.log(f"built {pair.key} (fused)")
    meta = {
        "tvm": tvm.__version__,
        "target": profile.name,
        "records": None if records is None else str(records),
        "layers": [layer.to_dict() for layer in selected],
        "ways": [w for w in ways if w != "cudnn"],
        "cases": cases,
    }
    if out_dir is not None:
        common.write_cases(out_dir, meta)
    return meta, modules


def load_cases(src: Path):
    meta = common.read_cases(src)
    return meta, common.load_bundles(src, meta["cases"], lambda case: (case["layer"], case["way"]))


# ---------------------------------------------------------------------------------------------
# run (no TVM): OpenCL ways and cuDNN
def _timing_knobs(first_s: float, budget_s: float) -> dict:
    """Few repeats for slow kernels (a CPU OpenCL), many for fast ones."""
    if first_s * 5 > budget_s:
        return dict(warmup=1, min_repeat=3, max_repeat=50, budget_s=budget_s)
    return dict(warmup=2, min_repeat=5, max_repeat=200, budget_s=budget_s)


def run_opencl_case(dev, module: KernelModule, case: dict, layer, inputs, ref, budget_s: float) -> dict:
    function = case["function"]
    data_layout, weight_layout, out_layout = case["layouts"]
    specs = module[function].params
    for spec in specs:
        if is_texture_scope(spec.scope) and not dev.limits.fits(spec.shape, spec.scope):
            raise RuntimeError(f"{spec.name} {spec.shape} does not fit {dev.name}'s images")
    loaded = dev.load(module)
    sets = []
    for x, w in inputs:
        data, weight = dev.empty(specs[0]), dev.empty(specs[1])
        data.upload(PACK[data_layout](x))
        weight.upload(PACK[weight_layout](w))
        sets.append((data, weight))
    out = dev.empty(specs[2]).poison()
    first_s = loaded(function, *sets[0], out)
    y = unpack(out.numpy(), out_layout, layer.out_shape[1])
    err = relative_error(y, ref)
    median, samples = common.median_time(
        lambda s: loaded(function, *s, out), sets, **_timing_knobs(first_s, budget_s)
    )
    return {"time_s": median, "samples": len(samples), "rel_err": err, "ok": err <= RTOL}


def pack_weights(algorithm: str, w: np.ndarray) -> np.ndarray:
    """OIHW weights as the first stage of ``algorithm`` reads them (OIHW4o, or Winograd's ``G g G^T``)."""
    return pack_oihw4o(w) if algorithm == "direct" else winograd_weight_transform(w, int(algorithm[-1]))


def run_program_case(dev, program: tuning.ConvProgram, layer, inputs, ref, budget_s: float, rtol: float = RTOL) -> dict:
    """Time ``program`` (every stage, summed) on rotated input sets; output (and intermediates) poisoned first."""
    weight_name = program.inputs[1]  # W (direct) or U (Winograd)
    packed = [{"X": pack_nchw4c(x), weight_name: pack_weights(program.algorithm, w)} for x, w in inputs]
    return run_packed(dev, program, packed, layer.out_shape[1], ref, budget_s, rtol)


def run_packed(dev, program: tuning.ConvProgram, packed: list[dict], channels: int, ref, budget_s: float,
               rtol: float = RTOL) -> dict:
    """:func:`run_program_case` on input sets already packed (parameter name -> host array)."""
    specs = program.specs
    for spec in specs.values():
        if is_texture_scope(spec.scope) and not dev.limits.fits(spec.shape, spec.scope):
            raise RuntimeError(f"{spec.name} {spec.shape} does not fit {dev.name}'s images (rebuild for this device)")
    out = dev.empty(specs[program.outputs[-1]]).poison()
    sets = []
    for arrays in packed:
        tensors = {name: dev.empty(specs[name]).upload(a) for name, a in arrays.items()}
        sets.append(program.bind(dev, {**tensors, program.outputs[-1]: out}))  # intermediates poisoned once per set
    first_s = program.run(dev, sets[0])
    err = relative_error(unpack_nchw4c(out.numpy(), channels), ref)
    median, samples = common.median_time(lambda s: program.run(dev, s), sets, **_timing_knobs(first_s, budget_s))
    return {"time_s": median, "samples": len(samples), "rel_err": err, "ok": err <= rtol}


def cudnn_available(dev) -> str | None:
    """None when cuDNN can run here, else why not."""
    if "nvidia" not in dev.name.lower():
        return "not an NVIDIA device"
    try:
        import torch
    except ImportError:
        return "torch not importable"
    if not torch.cuda.is_available():
        return "torch has no CUDA device"
    return None


#: ~100 us of GPU spin before each timed cuDNN call (see run_cudnn_case).
CUDA_SLEEP_CYCLES = 200_000


def cudnn_info() -> dict:
    import torch

    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "gpu": torch.cuda.get_device_name(),
        "allow_tf32": False,
        "cudnn_benchmark": True,
        "timing": "CUDA events around one F.conv2d call, GPU kept busy by a spin kernel while enqueuing",
    }


def run_cudnn_case(layer, inputs, ref, budget_s: float) -> dict:
    import torch

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True  # cuDNN picks its fastest algorithm per shape
    sets = [(torch.from_numpy(x).cuda(), torch.from_numpy(w).cuda()) for x, w in inputs]
    kw = dict(stride=layer.strides, padding=layer.padding, dilation=layer.dilation, groups=layer.groups)
    conv = torch.nn.functional.conv2d

    def run(s):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        # Keep the GPU busy while the host enqueues: the events then time the conv's
        # kernels alone, not the host's launch latency (OpenCL event times exclude it too).
        torch.cuda._sleep(CUDA_SLEEP_CYCLES)
        start.record()
        conv(*s, **kw)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e-3

    with torch.no_grad():
        y = conv(*sets[0], **kw)
        torch.cuda.synchronize()
        err = relative_error(y.cpu().numpy(), ref)
        median, samples = common.median_time(run, sets, warmup=5, min_repeat=20, max_repeat=200, budget_s=budget_s)
    return {"time_s": median, "samples": len(samples), "rel_err": err, "ok": err <= RTOL}


def run_all(dev, selected, meta, modules, ways, budget_s: float, input_sets: int, seed: int):
    cases = {(c["layer"], c["way"]): c for c in meta["cases"]}
    skip_cudnn = cudnn_available(dev) if "cudnn" in ways else "not requested"
    if "cudnn" in ways and skip_cudnn:
        common.log(f"cudnn: skipped ({skip_cudnn})")
    meta["cudnn"] = {"skipped": skip_cudnn} if skip_cudnn else cudnn_info()
    rng = np.random.default_rng(seed)
    rows = []
    for layer in selected:
        inputs = [
            (
                rng.standard_normal(layer.data_shape).astype(np.float32),
                rng.standard_normal(layer.weight_shape).astype(np.float32),
            )
            for _ in range(input_sets)
        ]
        ref = reference_conv2d(*inputs[0], layer)
        results = {}
        for way in ways:
            if way == "cudnn":
                if skip_cudnn:
                    continue
                runner = lambda: run_cudnn_case(layer, inputs, ref, budget_s)  # noqa: E731
            else:
                case = cases.get((layer.key, way))
                if case is None:
                    results[way] = {"error": "not built (absent from the cases file)"}
                    continue
                if "error" in case:
                    results[way] = {"error": case["error"]}
                    continue
                module = modules[(layer.key, way)]
                if "stages" in case:
                    program = tuning.ConvProgram(case["plan"]["algorithm"], module, tuple(case["stages"]))
                    runner = lambda: run_program_case(dev, program, layer, inputs, ref, budget_s)  # noqa: E731
                else:
                    runner = lambda: run_opencl_case(dev, module, case, layer, inputs, ref, budget_s)  # noqa: E731
            results[way] = _timed(runner, layer.flops, case if way != "cudnn" else {})
        rows.append({"layer": layer.to_dict(), "key": layer.key, "flops": layer.flops, "results": results})
        _log_row(layer.key, results)
    return rows


def _timed(runner, flops: int, case: dict) -> dict:
    """``runner()``'s result with GFLOP/s, its wall time and ``case``'s plan; a failure as an error."""
    t0 = time.perf_counter()
    try:
        res = runner()
        res["gflops"] = flops / res["time_s"] * 1e-9
    except Exception as err:
        res = {"error": f"run: {type(err).__name__}: {err}"}
        common.log(traceback.format_exc())
    res["wall_s"] = round(time.perf_counter() - t0, 3)
    if "plan" in case:
        res["plan"] = case["plan"]
    return res


def _log_row(key: str, results: dict):
    common.log(f"{key:34s} " + "  ".join(
        f"{w}={r['gflops']:.1f}GF/s{'' if r['ok'] else ' WRONG'}" if "gflops" in r else f"{w}=ERR"
        for w, r in results.items()))


def run_fused(dev, selected, meta, modules, rows, ways, budget_s: float, input_sets: int, seed: int):
    """A row per depthwise -> 1x1 pair the strategy fused when building: ``ours`` = the fused kernel
    (checked against the float64 depthwise then 1x1 reference, output poisoned), every other way
    = its depthwise row's time + its 1x1 row's time (both checked there)."""
    cases = {c["layer"]: c for c in meta["cases"] if c.get("fused")}
    by_key = {r["key"]: r for r in rows}
    rng = np.random.default_rng(seed + 1)
    out = []
    for pair in layer_lists.pairs(selected):
        case = cases.get(pair.key)
        if case is None:
            continue
        dw, pw = pair.depthwise, pair.pointwise
        flops = dw.flops + pw.flops  # the useful work (the fused kernel's recompute is not counted)
        results = {}
        if "error" in case:
            results["ours"] = {"error": case["error"]}
        else:
            inputs = [tuple(rng.standard_normal(shape).astype(np.float32)
                            for shape in (dw.data_shape, dw.weight_shape, pw.weight_shape)) for _ in range(input_sets)]
            ref = depthwise_pointwise(*inputs[0], dw.strides, dw.padding * 2, dw.dilation)  # (top, left, bottom, right)
            program = tuning.ConvProgram("direct", modules[(pair.key, "ours")], tuple(case["stages"]))
            packed = [{"X": pack_nchw4c(x), "W_dw": pack_oihw4o(w_dw), "W": pack_oihw4o(w)} for x, w_dw, w in inputs]
            results["ours"] = _timed(lambda: run_packed(dev, program, packed, pw.out_shape[1], ref, budget_s), flops, case)
        for way in ways:
            parts = [by_key[key]["results"].get(way) for key in (dw.key, pw.key)]
            if way != "ours" and all(_good(p) for p in parts):
                t = sum(p["time_s"] for p in parts)
                results[way] = {"time_s": t, "gflops": flops / t * 1e-9, "ok": True,
                                "rel_err": max(p["rel_err"] for p in parts), "sum_of": [dw.key, pw.key]}
        out.append({"key": pair.key, "model": dw.model, "count": pair.count, "flops": flops,
                    "fused": {"depthwise": dw.key, "pointwise": pw.key}, "convs": [dw.to_dict(), pw.to_dict()],
                    "results": results})
        _log_row(pair.key, results)
    return out


# ---------------------------------------------------------------------------------------------
# report
def _good(res: dict | None):
    return res is not None and res.get("ok") and "time_s" in res


def _ratio(row, a, b):
    ra, rb = row["results"].get(a), row["results"].get(b)
    if _good(ra) and _good(rb):
        return rb["time_s"] / ra["time_s"]  # speed of a relative to b
    return None


RATIOS = (
    ("ours", "upstream"),
    ("ours", "cudnn"),
    ("ours_tex", "upstream"),
    ("ours_buf", "upstream"),
    ("ours_tex", "ours_buf"),
    ("ours_tex", "cudnn"),
    ("ours_buf", "cudnn"),
    ("upstream", "cudnn"),
)


def units(rows, fused=()) -> list[tuple[dict, int, bool]]:
    """(row, count, depthwise) per distinct kernel: every conv alone (``fused`` empty), or as the
    model runs (each fused pair's row replaces its depthwise row's and its 1x1 row's count for
    the pair's blocks; rows left with count 0 drop out)."""
    used = {}
    for f in fused:
        for key in f["fused"].values():
            used[key] = used.get(key, 0) + f["count"]
    out = [(r, r["layer"]["count"] - used.get(r["key"], 0), layer_lists.ConvLayer.from_dict(r["layer"]).depthwise)
           for r in rows]
    return [u for u in out if u[1] > 0] + [(f, f["count"], True) for f in fused]


def _model(row) -> str:
    return row["model"] if "fused" in row else row["layer"]["model"]


def summarize(kernels, ways):
    """Ratios and totals per model and overall over ``kernels`` (:func:`units`)."""
    summary = {}
    models = sorted({_model(r) for r, _, _ in kernels}, key=lambda m: list(layer_lists.MODELS).index(m))
    for model in [*models, "all"]:
        mrows = [u for u in kernels if model == "all" or _model(u[0]) == model]
        s = {"layers": len(mrows), "conv_count": sum(n * (2 if "fused" in r else 1) for r, n, _ in mrows)}
        for a, b in RATIOS:
            if a not in ways or b not in ways:
                continue
            pairs = [(_ratio(r, a, b), n) for r, n, _ in mrows]
            depthwise = [(_ratio(r, a, b), r["key"]) for r, _, dw in mrows if dw and _ratio(r, a, b)]
            s[f"{a}/{b}"] = {
                "geomean": common.geomean([p for p, _ in pairs]),
                "geomean_count_weighted": common.weighted_geomean(pairs),
                "layers_compared": sum(p is not None for p, _ in pairs),
                # The slowest depthwise layer (issue 12: none below 1.0x upstream).
                "depthwise_min": min(depthwise)[0] if depthwise else None,
                "depthwise_min_layer": min(depthwise)[1] if depthwise else None,
            }
        totals = {}
        for way in ways:
            good = [(r, n) for r, n, _ in mrows if _good(r["results"].get(way))]
            if not good:
                continue
            t = sum(r["results"][way]["time_s"] * n for r, n in good)
            f = sum(r["flops"] * n for r, n in good)
            totals[way] = {"time_s": t, "gflops": f / t * 1e-9, "complete": len(good) == len(mrows)}
        s["totals"] = totals
        for a, b in RATIOS:
            if a in totals and b in totals and totals[a]["complete"] and totals[b]["complete"]:
                s[f"{a}/{b}"]["total_time_ratio"] = totals[b]["time_s"] / totals[a]["time_s"]
        summary[model] = s
    return summary


SHORT = {"ours": "ours", "ours_tex": "tex", "ours_buf": "buf", "upstream": "up", "cudnn": "cudnn"}


#: The two summaries: their JSON key and their printed label.
SUMMARIES = (
    ("summary", "per conv (each conv alone)"),
    ("summary_as_model_runs", "as the model runs (fused depthwise -> 1x1 pairs as one kernel; issue 12's targets)"),
)


def _cells(r, shown, ratios, fused_count: int) -> tuple[list[str], list[str]]:
    """A table row (plain conv or fused pair) and its error lines."""
    if "fused" in r:
        dw, pw = (layer_lists.ConvLayer.from_dict(d) for d in r["convs"])
        cells = [r["key"], f"{dw.description} + 1x1 ->{pw.weight_shape[0]}", str(r["count"])]
        flags = ["fused kernel (other ways: dw + 1x1)"]
    else:
        layer = layer_lists.ConvLayer.from_dict(r["layer"])
        cells, flags = [r["key"], layer.description, str(layer.count)], []
        if fused_count:  # the model runs it (or its share) inside the fused rows
            flags.append("fused" if fused_count == layer.count else f"fused {fused_count}/{layer.count}")
    cells.append(f"{r['flops'] / 1e6:.1f}")
    errors = []
    for w in shown:
        res = r["results"].get(w)
        if res is None:
            cells.append("-")
        elif "error" in res:
            cells.append("ERR")
            flags.append(f"{SHORT[w]} {res['error'].split(':', 1)[0]} error")
            errors.append(f"{r['key']} {w}: {res['error'].splitlines()[0][:300]}")
        else:
            cells.append(f"{res['gflops']:.1f}" + ("" if res["ok"] else "!"))
            if not res["ok"]:
                flags.append(f"{SHORT[w]} WRONG (rel err {res['rel_err']:.2g})")
    cells += [common.fmt(_ratio(r, a, b)) for a, b in ratios]
    if "ours" in shown:  # the strategy's choice: algorithm (F2/F4), config, placement
        cells.append(r["results"].get("ours", {}).get("plan", {}).get("config", "-"))
    cells.append("; ".join(flags))
    return cells, errors


def print_report(rows, fused, summaries, ways, device_name):
    """The per-layer table (each fused pair after its 1x1 row), then totals and ratios per summary."""
    shown = [w for w in ways if any(w in r["results"] for r in rows)]
    ratios = [(a, b) for a, b in RATIOS if a in shown and b in shown]
    headers = ["layer", "conv", "n", "MFLOP"] + [f"{SHORT[w]} GF/s" for w in shown]
    headers += [f"{SHORT[a]}/{SHORT[b]}" for a, b in ratios] + (["ours plan"] if "ours" in shown else []) + ["flags"]
    fused_count = {}
    for f in fused:
        fused_count[f["fused"]["depthwise"]] = fused_count.get(f["fused"]["depthwise"], 0) + f["count"]
    table, errors = [], []
    for r in rows:
        for row in [r, *(f for f in fused if f["fused"]["pointwise"] == r["key"])]:
            cells, errs = _cells(row, shown, ratios, fused_count.get(row["key"], 0))
            table.append(cells)
            errors += errs
    if errors:
        print("\nerrors (full text in the JSON):")
        print("\n".join(f"  {e}" for e in errors))
    print()
    title = f"conv2d layers on {device_name} (fp32, batch 1; GF/s = GFLOP/s, ! = wrong output)"
    common.print_table(headers, table, title=title)
    for key, label in SUMMARIES:
        summary = summaries[key]
        print()
        trows = []
        for model, s in summary.items():
            cells = [model, str(s["layers"]), str(s["conv_count"])]
            for w in shown:
                t = s["totals"].get(w)
                star = "" if t is None or t["complete"] else "*"
                cells += [common.fmt(t and t["time_s"] * 1e3, ".3f") + star, common.fmt(t and t["gflops"], ".1f") + star]
            trows.append(cells)
        th = ["model", "kernels", "convs"] + [h for w in shown for h in (f"{SHORT[w]} ms", f"{SHORT[w]} GF/s")]
        common.print_table(
            th,
            trows,
            title=f"{label}: totals over every conv of the model (distinct kernels x count; "
            "* = some layers failed, left out)",
        )
        print()
        rrows = []
        for model, s in summary.items():
            for a, b in ratios:
                r = s.get(f"{a}/{b}", {})
                rrows.append(
                    [
                        model,
                        f"{SHORT[a]}/{SHORT[b]}",
                        common.fmt(r.get("geomean")),
                        common.fmt(r.get("geomean_count_weighted")),
                        common.fmt(r.get("total_time_ratio")),
                        common.fmt(r.get("depthwise_min")),
                        f"{r.get('layers_compared', 0)}/{s['layers']}",
                    ]
                )
        common.print_table(
            ["model", "speed ratio", "geomean", "weighted geomean", "total time", "depthwise min", "kernels"],
            rrows,
            title=f"{label}: speed ratios a/b (> 1: a is faster): geomean over distinct kernels, geomean weighted "
            "by count, ratio of total times, the slowest depthwise kernel",
        )


# ---------------------------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_device_argument(p)
    common.add_target_argument(p)
    common.add_split_arguments(p)
    p.add_argument("--models", default="resnet50,mobilenetv2", help="comma-separated: resnet50, mobilenetv2")
    p.add_argument("--limit", type=int, default=None, help="only the first N layers of each model")
    p.add_argument("--only", default=None, help=f"comma-separated subset of {','.join(ALL_WAYS)}")
    p.add_argument("--budget", type=float, default=0.5, help="seconds of timing per kernel (default 0.5)")
    p.add_argument("--input-sets", type=int, default=2, help="input sets rotated while timing (default 2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--records", metavar="FILE", type=Path, default=None,
                   help="tuning records (tir-adreno tune) the way 'ours' plans with, as a compiled model does")
    args = p.parse_args(argv)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    for m in args.models:
        if m not in layer_lists.MODELS:
            p.error(f"--models: unknown model {m!r}; choose from {','.join(layer_lists.MODELS)}")
    args.ways = ALL_WAYS
    if args.only:
        args.ways = tuple(w.strip() for w in args.only.split(",") if w.strip())
        bad = [w for w in args.ways if w not in ALL_WAYS]
        if bad:
            p.error(f"--only: unknown way(s) {bad}; choose from {','.join(ALL_WAYS)}")
    if args.limit is not None and args.limit < 1:
        p.error("--limit must be >= 1")
    if args.input_sets < 1:
        p.error("--input-sets must be >= 1")
    if args.records is not None and (args.src or not args.records.is_file()):
        p.error("--records: the records are read when building (not with --from)" if args.src
                else f"--records: no such file {args.records}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    selected = layer_lists.layers(args.models, args.limit)
    started = time.perf_counter()
    if args.build_only:
        args.build_only.mkdir(parents=True, exist_ok=True)
        meta, _ = build_all(selected, args.ways, args.build_only, common.target_profile(args, build_only=True), args.records)
        failed = [c for c in meta["cases"] if "error" in c]
        common.log(
            f"wrote {len(meta['cases']) - len(failed)} kernels to {args.build_only} "
            f"({len(failed)} failed) in {time.perf_counter() - started:.0f} s"
        )
        return 1 if failed else 0

    from tir_adreno.runtime import opencl as runtime

    dev = runtime.get_device(args.device)
    common.log(f"device: {dev.name}")
    if args.src:
        meta, modules = load_cases(args.src)
        if not args.only:  # the ways that were built, and cuDNN where it exists
            args.ways = (*meta["ways"], "cudnn")
        built = {lay["model"] + "." + lay["name"] for lay in meta["layers"]}
        missing = [layer.key for layer in selected if layer.key not in built]
        if missing:
            common.log(f"not in {args.src}: {missing} (rebuild with --build-only)")
        selected = [layer for layer in selected if layer.key in built]
    else:
        meta, modules = build_all(selected, args.ways, None, common.target_profile(args), args.records)
    build_s = time.perf_counter() - started
    rows = run_all(dev, selected, meta, modules, args.ways, args.budget, args.input_sets, args.seed)
    fused = run_fused(dev, selected, meta, modules, rows, args.ways, args.budget, args.input_sets, args.seed)
    summaries = {"summary": summarize(units(rows), args.ways),
                 "summary_as_model_runs": summarize(units(rows, fused), args.ways)}
    run_s = time.perf_counter() - started - build_s
    payload = {
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "rtol": RTOL,
        "tvm": meta.get("tvm"),
        "cudnn": meta.get("cudnn"),
        "device_info": {
            "name": dev.name,
            "version": dev.cl_device.version.strip(),
            "driver": dev.cl_device.driver_version.strip(),
        },
        "timing": "median OpenCL event time (cuDNN: CUDA events) after warm-up, input sets rotated",
        "build_s": round(build_s, 1),
        "run_s": round(run_s, 1),
        "target": meta.get("target"),
        "layers": rows,
        "fused": fused,
        **summaries,
    }
    path = common.write_json(NAME, dev.name, payload, args.results_dir)
    common.log(f"build {build_s:.0f} s, run {run_s:.0f} s; wrote {path}")
    print_report(rows, fused, summaries, args.ways, dev.name)
    bad = [
        (r["key"], w) for r in [*rows, *fused] for w, res in r["results"].items()
        if "error" in res or not res.get("ok", False)
    ]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
