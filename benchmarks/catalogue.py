"""Issue 35's catalogue: timm models nobody tuned for, on our kernels, checked against onnxruntime.

The catalogue (:data:`CATALOGUE`) is data: each model's timm name, input size, the design of its
attention or token mixer, and its family. Exports (random weights, opset 17, TorchScript
exporter, plus the TorchScript trace for PyTorch baselines) come from
``benchmarks/torch_models.py --timm NAME,... --out DIR``. :data:`LAST_WAVE` lists the eight models
the last wave made fast (``models_e2e.py``'s H200 runs), for the same comparisons.

The coverage run compiles each model with ``compile_model`` on the default device (PoCL here),
runs it, compares with onnxruntime at every graph optimization level, and records per model: the
error against onnxruntime (fp32), how far onnxruntime's own levels differ from one another (an
error is judged only where they agree: some random-weight nets are chaotic), our share of kernel
time, layout transforms (kernels converting between the blocked and the plain form), launches,
and the upstream ops by name. One model at a time; results merge by model into
``benchmarks/results/catalogue-<device>.json`` (a PNG beside it), so a run that stops is resumed
by running it again: models already there are skipped unless ``--force``.

    python benchmarks/catalogue.py --onnx-dir /work/catalogue              # every catalogue model found there
    python benchmarks/catalogue.py --onnx-dir DIR --models pit_ti_224 --force
    python benchmarks/catalogue.py --list                                   # the catalogue as a table
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import time
from pathlib import Path

from common import add_device_argument, fmt, log, print_table, results_path, write_json


@dataclasses.dataclass(frozen=True)
class Model:
    """One catalogue entry: ``name`` is the export's file stem (``<name>.onnx``, ``<name>.pt.xz``)."""

    name: str
    timm: str
    input_size: int
    design: str  # the attention / token mixer (or, for a CNN, what is new in its blocks)
    family: str  # "attention", "token mixer" or "CNN"


def _m(timm: str, design: str, family: str, input_size: int = 224) -> Model:
    return Model(timm, timm, input_size, design, family)


CATALOGUE = (
    _m("deit_tiny_patch16_224", "softmax multi-head self-attention on tokens with a class token (ViT)", "attention"),
    _m("pit_ti_224", "softmax multi-head attention, tokens pooled between stages by a strided depthwise conv (PiT)", "attention"),
    _m("tiny_vit_5m_224", "window attention (7x7 windows, attention bias) after MBConv stages", "attention"),
    _m("pvt_v2_b0", "spatial-reduction attention: K and V from a strided conv of the map, linear-complexity", "attention"),
    _m("efficientvit_m0", "cascaded group attention: each head fed the previous head's output", "attention"),
    _m("mobilenetv4_hybrid_medium", "multi-query attention (one K/V head, K/V downsampled) in a UIB CNN", "attention"),
    _m("levit_128s", "attention with batch-normed projections, attention bias, shrinking attention", "attention"),
    _m("efficientformerv2_s0", "attention on 4-D maps with conv Q/K/V, talking heads and a local depthwise V", "attention"),
    _m("mobilevit_xxs", "unfold to patches, softmax transformer, fold back (MobileViT v1)", "attention"),
    _m("fastvit_mci0", "RepMixer (reparameterized depthwise) stages, then softmax attention (MobileCLIP)", "attention"),
    _m("xcit_nano_12_p16_224", "cross-covariance attention (over channels), local patch interaction, class attention", "attention"),
    _m("gcvit_xxtiny", "global context attention: window attention with queries from a global map", "attention"),
    _m("shvit_s1", "single-head attention on a split of the channels (SHViT)", "attention"),
    _m("swiftformer_xs", "efficient additive attention: a learned global query, no Q·Kᵀ matrix", "attention"),
    _m("visformer_tiny", "multi-head attention on 4-D maps with 1x1-conv projections after conv stages", "attention"),
    _m("coat_lite_tiny", "factorized attention (softmax over keys, Kᵀ·V first) with conv relative position", "attention"),
    _m("poolformerv2_s12", "pooling token mixer (average pool minus identity), MetaFormer", "token mixer"),
    _m("mambaout_femto", "gated CNN: gated MLP around a depthwise conv on channels-last maps", "token mixer"),
    _m("gmlp_ti16_224", "gated MLP with a spatial gating unit (a Linear across tokens)", "token mixer"),
    _m("mixer_s32_224", "MLP-Mixer: token-mixing MLP across patches, channel MLP", "token mixer"),
    _m("repvit_m0_9", "reparameterized MobileNet-style blocks with SE, token/channel mixer split (RepViT)", "CNN"),
    _m("starnet_s1", "star operation: element-wise product of two 1x1-conv branches", "CNN"),
    _m("ghostnetv2_100", "ghost modules with DFC attention (decoupled horizontal/vertical gating)", "CNN"),
    _m("mobilenetv4_conv_small", "universal inverted bottleneck blocks (MobileNetV4)", "CNN"),
    _m("hgnetv2_b0", "light conv aggregation blocks with effective SE (PP-HGNetV2)", "CNN"),
    _m("fasternet_t0", "partial convolution: a 3x3 conv on a quarter of the channels", "CNN"),
    _m("inception_next_atto", "Inception depthwise conv: square, horizontal and vertical band kernels", "CNN"),
)

#: The eight models of the last wave (issue 21; ONNX and TorchScript exports as the catalogue's).
LAST_WAVE = (
    _m("mobilevitv2_050", "separable self-attention (MobileViT v2)", "attention"),
    _m("edgenext_xx_small", "transposed (cross-covariance) attention, split depthwise convs", "attention"),
    _m("efficientvit_b0", "ReLU linear attention (LiteMLA)", "attention"),
    _m("fastvit_t8", "RepMixer, reparameterized convs", "token mixer"),
    _m("convnextv2_atto", "depthwise 7x7 conv, GRN on channels-last maps", "CNN"),
    _m("efficientnet_b0", "MBConv with squeeze-excitation", "CNN"),
    _m("mixnet_s", "mixed depthwise kernel sizes", "CNN"),
    _m("mobilenetv3_small_100", "MBConv with hard-swish and SE", "CNN"),
)
BY_NAME = {m.name: m for m in (*CATALOGUE, *LAST_WAVE)}

#: The issue's bar: error vs onnxruntime, our share of kernel time, layout transforms.
RTOL, MIN_OURS_SHARE, MAX_TRANSFORMS = 1e-4, 0.97, 4
#: A kernel converting between the blocked and the plain form (``nchw_to_nchw4c``,
#: ``nchw4c_to_tokens``, upstream's ``layout_transform``), as docs/coverage.md counts them.
LAYOUT_TRANSFORM = re.compile(r"_to_|layout_transform")
#: onnxruntime's graph optimization levels; the reference is the last (onnxruntime's default).
ORT_LEVELS = ("ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL")


def is_layout_transform(op: str) -> bool:
    return bool(LAYOUT_TRANSFORM.search(op))


def coverage_stats(compiled) -> dict:
    """Share of kernel time in ours, layout transforms, launches and upstream ops (by name, count
    and ms) of ``compiled``'s last profiled run."""
    from zoo import profile_stats

    stats = profile_stats(compiled)
    profile = compiled.profile()
    transforms = [p["op"] for p in profile if is_layout_transform(p["op"])]
    return {"ours_share": stats["ours_share"], "layout_transforms": len(transforms), "transform_ops": transforms,
            "launches": compiled.launch_count, "kernel_ms": stats["kernel_ms"],
            "upstream_kernels": stats["upstream_kernels"], "upstream_ms": stats["upstream_ms"]}


def onnxruntime_outputs(model, inputs: dict) -> dict:
    """{level: outputs} of onnxruntime (CPU) at each of :data:`ORT_LEVELS`; a level other than the
    reference's that onnxruntime cannot run is left out (the reference's failure is raised)."""
    import onnxruntime

    outputs = {}
    for level in ORT_LEVELS:
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        options.graph_optimization_level = getattr(onnxruntime.GraphOptimizationLevel, level)
        try:
            session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
            outputs[level] = session.run(None, inputs)
        except Exception:  # onnxruntime raises its own types
            if level == ORT_LEVELS[-1]:
                raise
    return outputs


def judge(error: float, ort_spread: float, stats: dict, constant: bool = False) -> dict:
    """The issue's bar for one model: error judged only where onnxruntime agrees with itself and
    its output is not (nearly) constant (a zero-initialized classifier: the check sees nothing)."""
    agrees = ort_spread <= RTOL
    return {"error_ok": bool(error <= RTOL) if agrees and not constant else None, "ort_agrees": agrees, "constant_reference": constant,
            "share_ok": stats["ours_share"] >= MIN_OURS_SHARE, "transforms_ok": stats["layout_transforms"] <= MAX_TRANSFORMS}


def run_model(path: Path, device, seed: int = 0) -> dict:
    """Compile, run and check one ONNX model: its row of the results."""
    from tir_adreno.reference import nearly_constant, relative_error
    from zoo import compile_onnx, random_inputs

    compiled, model, compile_s = compile_onnx(path, device)
    inputs = random_inputs(compiled, seed)
    compiled.run(inputs)  # warm-up
    start = time.perf_counter()
    compiled.run(inputs)
    wall_ms = (time.perf_counter() - start) * 1e3
    outputs = compiled.run(inputs, profile=True)  # poisoned first, events recorded
    stats = coverage_stats(compiled)
    refs = onnxruntime_outputs(model, inputs)
    reference = refs[ORT_LEVELS[-1]]

    def worst(actual, expected):
        return max((relative_error(a, e) for a, e in zip(actual, expected)), default=float("inf"))

    error = worst(outputs, reference) if len(outputs) == len(reference) else float("inf")
    spread = {level: worst(refs[level], reference) for level in ORT_LEVELS[:-1] if level in refs}
    ort_spread = max(spread.values(), default=0.0)
    return {"relative_error": error, "ort_spread": ort_spread, "ort_level_errors": spread, **stats,
            **judge(error, ort_spread, stats, any(nearly_constant(r) for r in reference)), "wall_ms": wall_ms, "compile_s": compile_s}


def _failure(err: Exception) -> str:
    return f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"[:300]


def rows(results: dict) -> list[list]:
    """The table's rows, one per model in catalogue order."""
    out = []
    for name, r in sorted(results.items(), key=lambda kv: _order(kv[0])):
        design = BY_NAME[name].family if name in BY_NAME else "-"
        if "failure" in r:
            out.append([name, design, "FAIL", "-", "-", "-", "-", "-", r["failure"][:100]])
            continue
        verdict = ("n/a (constant output)" if r.get("constant_reference") else "n/a (ort disagrees)") if r["error_ok"] is None \
            else "ok" if r["error_ok"] else "WRONG"
        top = sorted(r["upstream_ms"].items(), key=lambda kv: -kv[1])[:5]
        out.append([name, design, f"{fmt(r['relative_error'], '.1e')} {verdict}", fmt(r["ort_spread"], ".1e"),
                    fmt(100 * r["ours_share"], ".1f") + "%", r["layout_transforms"], r["launches"], fmt(r["kernel_ms"], ".0f"),
                    ", ".join(f"{op} x{r['upstream_kernels'][op]}" for op, _ in top) or "-"])
    return out


HEADERS = ["model", "family", "error vs ort", "ort levels", "ours", "transforms", "launches", "kernel ms", "upstream (by time)"]


def markdown(results: dict) -> str:
    """The results as docs/coverage.md's table (with each model's design), and the tally against the issue's bars."""
    lines = ["| model | family: attention / token mixer | error vs onnxruntime (its levels) | ours | layout transforms | launches | upstream ops (by time) |",
             "|---|---|---|---|---|---|---|"]
    for row in rows(results):
        name, r = row[0], results[row[0]]
        design = f"{BY_NAME[name].family}: {BY_NAME[name].design}" if name in BY_NAME else "-"
        if "failure" in r:
            lines.append(f"| {name} | {design} | fails: {r['failure']} | | | | |")
            continue
        lines.append(f"| {name} | {design} | {row[2]} ({row[3]}) | {row[4]} | {row[5]} | {row[6]} | {row[8]} |")
    groups = {"the catalogue": {m.name for m in CATALOGUE}, "the last wave's eight": {m.name for m in LAST_WAVE}}
    groups["other models"] = set(results) - set().union(*groups.values())
    for label, names in groups.items():
        if names & set(results):
            lines.append("\n" + tally({n: results[n] for n in results if n in names}, label))
    return "\n".join(lines)


def tally(results: dict, label: str) -> str:
    """One line: how many of ``results`` meet each of the issue's bars."""
    done = [r for r in results.values() if "failure" not in r]
    meets = sum(r["error_ok"] is not False and r["share_ok"] and r["transforms_ok"] for r in done)
    return (f"{label}: {len(done)} of {len(results)} run; {sum(r['error_ok'] is True for r in done)} within {RTOL:g} of onnxruntime "
            f"({sum(r['error_ok'] is None for r in done)} not judged: its levels disagree or the output is constant), "
            f"{sum(r['share_ok'] for r in done)} with >= {MIN_OURS_SHARE:.0%} of kernel time in ours, "
            f"{sum(r['transforms_ok'] for r in done)} with <= {MAX_TRANSFORMS} layout transforms; {meets} meet all three.")


def _order(name: str) -> int:
    names = [m.name for m in (*CATALOGUE, *LAST_WAVE)]
    return names.index(name) if name in names else len(names)


def _plot(path: Path) -> None:
    try:
        import plots
    except ImportError:  # matplotlib missing: the JSON and the table are the results
        return
    plots.plot_catalogue(json.loads(path.read_text()), path.with_suffix(".png"))


def _catalogue_table() -> None:
    print_table(["model (timm)", "input", "family", "attention / token mixer"],
                [[m.timm, m.input_size, m.family, m.design] for m in (*CATALOGUE, *LAST_WAVE)],
                title=f"issue 35 catalogue ({len(CATALOGUE)} models; the last wave's eight below them)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_device_argument(parser)
    parser.add_argument("--onnx-dir", type=Path, action="append", default=[], help="folder of <name>.onnx (repeatable)")
    parser.add_argument("--models", default=None, help="comma-separated (default: every catalogue model found in --onnx-dir)")
    parser.add_argument("--force", action="store_true", help="run models already in the results again")
    parser.add_argument("--results-dir", type=Path, default=None, help="where the JSON goes (default benchmarks/results)")
    parser.add_argument("--list", action="store_true", help="print the catalogue and stop")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown (docs/coverage.md's)")
    args = parser.parse_args(argv)
    if args.list:
        _catalogue_table()
        return 0
    if not args.onnx_dir:
        parser.error("--onnx-dir is required (folder of <name>.onnx from torch_models.py --timm)")
    found = {p.stem: p for d in args.onnx_dir for p in sorted(d.glob("*.onnx"))}
    names = args.models.split(",") if args.models else [m.name for m in CATALOGUE if m.name in found]
    missing = [n for n in names if n not in found]
    if missing or not names:
        parser.error(f"no <name>.onnx in {', '.join(map(str, args.onnx_dir))} for {missing or 'any catalogue model'}")

    from tir_adreno.runtime import opencl as runtime

    device = runtime.get_device(args.device)
    path = results_path("catalogue", device.name, args.results_dir)
    results = json.loads(path.read_text())["results"] if path.exists() else {}
    payload = {"rtol": RTOL, "min_ours_share": MIN_OURS_SHARE, "max_transforms": MAX_TRANSFORMS, "ort_levels": ORT_LEVELS}
    todo = [n for n in names if args.force or n not in results]
    log(f"{len(todo)} of {len(names)} models to run ({len(names) - len(todo)} already in {path})")
    for i, name in enumerate(todo, 1):
        log(f"[{i}/{len(todo)}] {name} ...")
        start = time.perf_counter()
        try:
            results[name] = run_model(found[name], device)
        except Exception as err:  # noqa: BLE001 (a model that fails is a row of the table)
            results[name] = {"failure": _failure(err)}
        r = results[name]
        log(f"  {time.perf_counter() - start:.0f} s: " + (r["failure"] if "failure" in r else
            f"error {r['relative_error']:.1e} (ort levels {r['ort_spread']:.1e}), ours {100 * r['ours_share']:.1f}%, "
            f"{r['layout_transforms']} transforms, {r['launches']} launches"))
        path = write_json("catalogue", device.name, {**payload, "results": results}, args.results_dir)
    if todo:
        _plot(path)
    if args.markdown:
        print(markdown(results))
        return 0 if all("failure" not in r for r in results.values()) else 1
    print_table(HEADERS, rows(results), title=f"issue 35 catalogue on {device.name}: error vs onnxruntime (fp32, its "
                f"default level; judged where its levels agree within {RTOL:g}), share of kernel time in ours, layout "
                f"transforms, launches (JSON: {path})")
    return 0 if all("failure" not in r for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
