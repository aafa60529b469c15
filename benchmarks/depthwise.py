"""MobileNetV2's depthwise conv layers (batch 1, 224, fp32): our depthwise configs vs upstream, one device.

Ways per layer, all through the same pyopencl runtime (median OpenCL event time
after warm-up, input sets rotated; every output checked against a float64
NumPy conv, relative error <= 1e-4):

- ``old``: the depthwise config before ``register_window`` (1 x 4 columns,
  work group (8, 4, 1); still ``DEPTHWISE_DEFAULTS`` "mobile" / "cpu"), textures;
- ``gpu``: ``DEPTHWISE_DEFAULTS["gpu"]`` on textures; ``gpu_wbuf`` the same with
  its weights in a buffer; ``gpu_buf`` the same schedule on buffers;
- ``sweep`` (textures) and ``sweep_buf`` (activations and weights in buffers):
  ``register_window`` on / off x ``w_block`` 1, 2, 4 x 2-D work groups of 64, 128,
  256 items along W, then H (buffers: 1 and 2 columns); 3-D groups of 128 (W, H,
  then channel blocks) for 1 and 2 columns (textures); the 1-D grid in output
  order (``ConvConfig.flat``) for 1 and 2 columns in groups of 32, 64, 128, 256
  (textures: 128); in the summary each is the fastest per layer, named ways included;
- ``upstream``: upstream TVM's generic OpenCL conv (``conv_layers.py``'s baseline);
- ``cudnn``: PyTorch/cuDNN fp32 on NVIDIA devices with torch.

Prints per layer the time of each way and ratios to upstream, then the summary
LAST; writes ``benchmarks/results/depthwise-<device>.json``.

Run here (TVM + PoCL):           python benchmarks/depthwise.py
Split (a device without TVM):    python benchmarks/depthwise.py --build-only DIR   # with TVM
                                 python benchmarks/depthwise.py --from DIR         # numpy + pyopencl only
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
from conv_layers import build_case, cudnn_available, reference_conv2d, run_cudnn_case, run_opencl_case

NAME = "depthwise"
NAMED = ("old", "gpu", "gpu_wbuf", "gpu_buf")


def candidates(layer):
    """(way, label, ConvConfig, scope, weight scope) of our kernels for ``layer``."""
    from primfuncs import conv
    from tir_adreno.strategy import defaults
    from primfuncs._common import BUFFER, TEXTURE, TEXTURE_WEIGHT, ceildiv

    geom = conv.conv2d_geometry(
        layer.data_shape, layer.weight_shape, layer.strides, layer.padding, layer.dilation, layer.groups
    )
    gpu = defaults.default_config(geom, defaults.kind_profile("gpu"))
    out = [
        ("old", conv.ConvConfig(1, 4, (8, 4, 1)), TEXTURE, TEXTURE_WEIGHT),
        ("gpu", gpu, TEXTURE, TEXTURE_WEIGHT),
        ("gpu_wbuf", gpu, TEXTURE, BUFFER),
        ("gpu_buf", gpu, BUFFER, BUFFER),
    ]

    def grid(wb, threads, depth=1):
        return conv.fill_work_group((geom.n * ceildiv(geom.ow, wb), geom.oh, depth), threads, max_x=32)

    sweep = []  # (config, on buffers too)
    for register_window in (True, False):
        for wb in (1, 2, 4):
            for threads in (64, 128, 256) if register_window else (128,):
                sweep.append((conv.ConvConfig(1, wb, grid(wb, threads), register_window=register_window), wb < 4))
        for wb in (1, 2):  # 3-D groups: small images fill a group with channel blocks too
            sweep.append((conv.ConvConfig(1, wb, grid(wb, 128, geom.o4), register_window=register_window), False))
        for wb in (1, 2):  # 1-D grid in output order, upstream's shape (ConvConfig.flat); 32: more groups on small maps
            for threads in (32, 64, 128, 256):
                cfg = conv.ConvConfig(1, wb, (threads, 1, 1), register_window=register_window, flat=True)
                sweep.append((cfg, True))
    for cfg, on_buffers in sweep:
        if not cfg.flat or cfg.work_group[0] == 128:  # textures: flat at 128 only (all at the floor there)
            out.append(("sweep", cfg, TEXTURE, TEXTURE_WEIGHT))
        if on_buffers:
            out.append(("sweep_buf", cfg, BUFFER, BUFFER))
    return [(way, label(cfg, scope, wscope), cfg, scope, wscope) for way, cfg, scope, wscope in out]


def label(cfg, scope: str, weight_scope: str) -> str:
    where = " buf" if scope == "global" else " wbuf" if weight_scope == "global" else ""
    flags = (" reg" if cfg.register_window else "") + (" flat" if cfg.flat else "")
    return f"{cfg.w_block}col wg{'x'.join(map(str, cfg.work_group))}{flags}{where}"


def build_all(selected, out_dir: Path | None):
    import tvm

    from primfuncs import conv
    from tir_adreno.codegen import build

    cases, modules = [], {}
    for layer in selected:
        seen, ours = set(), []
        for way, lab, cfg, scope, wscope in candidates(layer):
            if way.startswith("sweep") and lab in seen:  # a named way already builds this config
                continue
            seen.add(lab)
            ours.append((way, lab, cfg, scope, wscope))
        for way, lab, cfg, scope, wscope in [*ours, ("upstream", "upstream", None, None, None)]:
            case = {"layer": layer.key, "way": way, "label": lab, "id": f"{layer.key}-{len(cases)}"}
            try:
                if way == "upstream":
                    module, info = build_case(layer, "upstream", None)  # upstream needs no profile
                    case.update(info)
                else:
                    func = conv.depthwise_conv2d_nchw4c(
                        layer.data_shape, layer.weight_shape, strides=layer.strides, padding=layer.padding,
                        dilation=layer.dilation, config=cfg, scope=scope, prologue=conv.Prologue(weight_scope=wscope),
                    )
                    module = build.build_cached(func)
                    (function,) = module.functions
                    case.update(function=function, layouts=["NCHW4c", "OIHW4o", "NCHW4c"])
                modules[case["id"]] = module
                if out_dir is not None:
                    case["bundle"] = f"kernels/{case['id']}.json"
                    module.save(out_dir / case["bundle"])
            except Exception as err:  # recorded, shown in the table
                case["error"] = f"build: {type(err).__name__}: {err}"
                common.log(f"  build failed {case['id']} {lab}: {case['error']}")
            cases.append(case)
        common.log(f"built {layer.key}: {len(ours) + 1} kernels")
    meta = {"tvm": tvm.__version__, "layers": [layer.to_dict() for layer in selected], "cases": cases}
    if out_dir is not None:
        common.write_cases(out_dir, meta)
    return meta, modules


def run_all(dev, selected, meta, modules, budget_s: float, seed: int):
    skip_cudnn = cudnn_available(dev)
    rng = np.random.default_rng(seed)
    rows = []
    for layer in selected:
        inputs = [
            (rng.standard_normal(layer.data_shape).astype(np.float32), rng.standard_normal(layer.weight_shape).astype(np.float32))
            for _ in range(2)
        ]
        ref = reference_conv2d(*inputs[0], layer)
        results = []
        for case in [c for c in meta["cases"] if c["layer"] == layer.key]:
            res = {"way": case["way"], "label": case["label"]}
            if "error" in case:
                res["error"] = case["error"]
            else:
                try:
                    res.update(run_opencl_case(dev, modules[case["id"]], case, layer, inputs, ref, budget_s))
                except Exception as err:
                    res["error"] = f"run: {type(err).__name__}: {err}"
                    common.log(traceback.format_exc())
            results.append(res)
        if not skip_cudnn:
            try:
                results.append({"way": "cudnn", "label": "cudnn", **run_cudnn_case(layer, inputs, ref, budget_s)})
            except Exception as err:
                results.append({"way": "cudnn", "label": "cudnn", "error": f"run: {err}"})
        rows.append({"key": layer.key, "layer": layer.to_dict(), "flops": layer.flops, "results": results})
        common.log(f"{layer.key}: " + ", ".join(f"{r['label']}={r['time_s'] * 1e6:.1f}us" for r in results if _good(r)))
    return rows, skip_cudnn


def _good(r):
    return r is not None and r.get("ok") and "time_s" in r


#: What a summary way picks from: the fastest of these ways' results.
PICKS = {"sweep": ("sweep", "old", "gpu"), "sweep_buf": ("sweep_buf", "gpu_buf")}


def _pick(row, way):
    """The result of ``way`` in ``row`` (``PICKS``: the fastest texture / buffer config, named ones
    included), or None."""
    ways = PICKS.get(way, (way,))
    good = [r for r in row["results"] if r["way"] in ways and _good(r)]
    return min(good, key=lambda r: r["time_s"]) if good else None


def summarize(rows):
    ways = [*NAMED, "sweep", "sweep_buf", "cudnn"]
    summary = {}
    for way in ways:
        ratios = [(_pick(r, "upstream")["time_s"] / _pick(r, way)["time_s"], r["layer"]["count"]) for r in rows if _pick(r, way) and _pick(r, "upstream")]
        if not ratios:
            continue
        summary[way] = {
            "vs_upstream_geomean": common.geomean([x for x, _ in ratios]),
            "vs_upstream_min": min(x for x, _ in ratios),
            "total_us": sum(_pick(r, way)["time_s"] * r["layer"]["count"] for r in rows if _pick(r, way)) * 1e6,
            "layers": len(ratios),
        }
    up = [r for r in rows if _pick(r, "upstream")]
    summary["upstream"] = {"total_us": sum(_pick(r, "upstream")["time_s"] * r["layer"]["count"] for r in up) * 1e6}
    return summary


def print_report(rows, summary, device_name):
    ways = [*NAMED, "sweep", "sweep_buf", "upstream", "cudnn"]
    table = []
    for r in rows:
        cells = [r["key"], str(r["layer"]["count"])]
        for way in ways:
            p = _pick(r, way)
            cells.append(common.fmt(p and p["time_s"] * 1e6, ".1f"))
        for way in ("sweep", "sweep_buf"):
            best = _pick(r, way)
            cells.append(best["label"] if best else "-")
        up = _pick(r, "upstream")
        cells += [common.fmt(up and _pick(r, w) and up["time_s"] / _pick(r, w)["time_s"]) for w in ("gpu", "gpu_buf", "sweep", "sweep_buf")]
        bad = [x["label"] for x in r["results"] if "error" in x or not x.get("ok", False)]
        cells.append(", ".join(bad))
        table.append(cells)
    headers = ["layer", "n"] + [f"{w} us" for w in ways] + ["best texture", "best buffer", "up/gpu", "up/gpu_buf", "up/sweep", "up/sweep_buf", "failed"]
    common.print_table(headers, table, title=f"depthwise layers on {device_name}: median OpenCL event time (us)")
    print()
    srows = [[w, common.fmt(s.get("vs_upstream_geomean")), common.fmt(s.get("vs_upstream_min")), common.fmt(s["total_us"], ".1f")] for w, s in summary.items()]
    common.print_table(["way", "speed vs upstream (geomean)", "worst layer", "total us (x count)"], srows, title="summary")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_device_argument(p)
    common.add_split_arguments(p)
    p.add_argument("--budget", type=float, default=0.1, help="seconds of timing per kernel (default 0.1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit", type=int, default=None, help="only the first N layers (a quick check)")
    args = p.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        p.error("--limit must be >= 1")
    selected = [layer for layer in layer_lists.layers(["mobilenetv2"]) if layer.depthwise][: args.limit]
    started = time.perf_counter()
    if args.build_only:
        meta, _ = build_all(selected, args.build_only)
        failed = [c for c in meta["cases"] if "error" in c]
        common.log(f"wrote {len(meta['cases'])} kernels to {args.build_only} ({len(failed)} failed) in {time.perf_counter() - started:.0f} s")
        return 1 if failed else 0

    from tir_adreno.runtime import opencl as runtime

    dev = runtime.get_device(args.device)
    if args.src:
        meta = common.read_cases(args.src)
        modules = common.load_bundles(args.src, meta["cases"], lambda case: case["id"])
    else:
        meta, modules = build_all(selected, None)
    rows, skip_cudnn = run_all(dev, selected, meta, modules, args.budget, args.seed)
    summary = summarize(rows)
    payload = {
        "tvm": meta.get("tvm"),
        "cudnn": {"skipped": skip_cudnn} if skip_cudnn else "fp32, TF32 off",
        "timing": "median OpenCL event time (cuDNN: CUDA events) after warm-up, input sets rotated",
        "run_s": round(time.perf_counter() - started, 1),
        "layers": rows,
        "summary": summary,
    }
    path = common.write_json(NAME, dev.name, payload, args.results_dir)
    common.log(f"wrote {path}")
    print_report(rows, summary, dev.name)
    return 1 if any("error" in x or not x.get("ok", False) for r in rows for x in r["results"]) else 0


if __name__ == "__main__":
    sys.exit(main())
