"""Pooling schedules on one device: one work item per output ("thread") vs a work group per
output combining in shared memory ("group").

Cases: global average pool of 1x2048x7x7 and 1x1280x7x7 (ResNet-50 / MobileNetV2 heads)
and the ResNet stem max pool 3x3/2, padding 1, of 1x64x112x112; with ``--threshold-sweep``
also windows of 4 to 3136 taps (global and strided average pools), from which the default
``primfuncs.pool2d.GROUP_THRESHOLD`` was chosen. Every output is checked against a float64
NumPy reference first (relative error <= 1e-5, output poisoned). Times are medians of
OpenCL event times (``LoadedModule.time``). Prints a table LAST and writes JSON
(``--json``, default ``benchmarks/results/pooling-<device>.json``).

Run here (TVM + PoCL):           python benchmarks/pooling.py [--threshold-sweep]
Split (a device without TVM):    python benchmarks/pooling.py --build-only DIR   # with TVM
                                 python benchmarks/pooling.py --from DIR         # numpy + pyopencl only
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

import common  # noqa: E402  (puts the repository root on sys.path)
from common import nchw4c_to_nchw, nchw_to_nchw4c

from tir_adreno import reference as tir_reference
from tir_adreno.runtime.bundle import KernelModule

NAME = "pooling"
STRATEGIES = ("thread", "group")
RTOL = 1e-5


def _case(name, kind, shape, size=None, stride=None, padding=0, sweep=False):
    """``kind``: "global_avg", "max" or "avg" (sliding window ``size`` x ``size``)."""
    n, c, h, w = shape
    if kind == "global_avg":
        size, stride, out = (h, w), (1, 1), (1, 1)
    else:
        size, stride = (size, size), (stride, stride)
        out = tuple((e + 2 * padding - k) // s + 1 for e, k, s in zip((h, w), size, stride))
    return {
        "name": name, "kind": kind, "shape": list(shape), "size": list(size), "stride": list(stride),
        "padding": padding, "out_shape": [n, c, *out], "taps": size[0] * size[1], "sweep": sweep,
    }


MAIN_CASES = [
    _case("global_avg 1x2048x7x7", "global_avg", (1, 2048, 7, 7)),
    _case("global_avg 1x1280x7x7", "global_avg", (1, 1280, 7, 7)),
    _case("max 3x3/2 p1 1x64x112x112", "max", (1, 64, 112, 112), 3, 2, 1),
]
SWEEP_CASES = [_case(f"global_avg 1x256x{k}x{k}", "global_avg", (1, 256, k, k), sweep=True) for k in (2, 3, 4, 5, 6, 7, 8, 10, 14, 28, 56)]
SWEEP_CASES += [_case(f"global_avg 1x16x{k}x{k}", "global_avg", (1, 16, k, k), sweep=True) for k in (7, 14, 56)]
SWEEP_CASES += [_case(f"avg {k}x{k}/{k} 1x64x56x56", "avg", (1, 64, 56, 56), k, k, sweep=True) for k in (2, 3, 4, 5, 7, 8)]


# ---------------------------------------------------------------------------------------------
# build (needs TVM)
def build_case(case: dict, strategy: str) -> tuple[KernelModule, str]:
    from primfuncs import pool2d
    from tir_adreno.codegen import build

    shape = tuple(nchw_to_nchw4c(np.zeros(case["shape"], np.float32)).shape)
    if case["kind"] == "global_avg":
        func = pool2d.global_avg_pool2d(shape, strategy=strategy)
    else:
        func = pool2d.pool2d(
            shape, case["kind"], case["size"], case["stride"], case["padding"], strategy=strategy
        )
    module = build.build_cached(func)
    (function,) = module.functions
    return module, function


def build_all(cases, out_dir: Path | None):
    """Every (case, strategy) -> KernelModule; with ``out_dir`` also the bundles + cases.json."""
    import tvm

    modules, entries = {}, []
    for case in cases:
        for strategy in STRATEGIES:
            entry = {"case": case["name"], "strategy": strategy}
            try:
                module, entry["function"] = build_case(case, strategy)
                modules[(case["name"], strategy)] = module
                if out_dir is not None:
                    rel = f"kernels/{_slug(case['name'])}-{strategy}.json"
                    module.save(out_dir / rel)
                    entry["bundle"] = rel
            except Exception as err:  # recorded and shown, never dropped
                entry["error"] = f"build: {type(err).__name__}: {err}"
                common.log(f"  build failed {case['name']} {strategy}: {entry['error']}")
            entries.append(entry)
        common.log(f"built {case['name']}")
    meta = {"tvm": tvm.__version__, "cases": cases, "kernels": entries}
    if out_dir is not None:
        common.write_cases(out_dir, meta)
    return meta, modules


def load_all(src: Path):
    meta = common.read_cases(src)
    return meta, common.load_bundles(src, meta["kernels"], lambda entry: (entry["case"], entry["strategy"]))


def _slug(name: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in name)


# ---------------------------------------------------------------------------------------------
# run (no TVM)
def reference(case: dict, x: np.ndarray) -> np.ndarray:
    """float64 pooling (tir_adreno.reference): global average, or a sliding max/avg window."""
    if case["kind"] == "global_avg":
        return tir_reference.reduce(x, "mean", (2, 3), keepdims=True)
    p = case["padding"]
    return tir_reference.pool2d(x, case["kind"], case["size"], case["stride"], (p, p, p, p))


def run_case(dev, module: KernelModule, function: str, case: dict, x: np.ndarray, ref, repeat: int) -> dict:
    loaded = dev.load(module)
    a_spec, out_spec = module[function].params
    a = dev.empty(a_spec).upload(nchw_to_nchw4c(x))
    out = dev.empty(out_spec).poison()
    loaded(function, a, out)
    y = nchw4c_to_nchw(out.numpy(), case["out_shape"][1])
    finite = np.all(np.isfinite(y))
    err = float(np.max(np.abs(y - ref)) / np.max(np.abs(ref))) if finite else float("inf")
    seconds = loaded.time(function, [a, out], warmup=2, repeat=repeat)
    return {"time_us": seconds * 1e6, "rel_err": err, "ok": err <= RTOL, "scope": a_spec.scope,
            "local_size": list(module[function].launches[0].local_size)}


def run_all(dev, cases, meta, modules, repeat: int, seed: int):
    errors = {(e["case"], e["strategy"]): e["error"] for e in meta["kernels"] if "error" in e}
    functions = {(e["case"], e["strategy"]): e.get("function") for e in meta["kernels"]}
    rng = np.random.default_rng(seed)
    rows = []
    for case in cases:
        x = rng.standard_normal(case["shape"]).astype(np.float32)
        ref = reference(case, x)
        results = {}
        for strategy in STRATEGIES:
            key = (case["name"], strategy)
            if key in errors or key not in modules:
                results[strategy] = {"error": errors.get(key, "not built")}
                continue
            try:
                results[strategy] = run_case(dev, modules[key], functions[key], case, x, ref, repeat)
            except Exception as err:
                results[strategy] = {"error": f"run: {type(err).__name__}: {err}"}
        rows.append({**case, "results": results})
        common.log(f"{case['name']:28s} " + "  ".join(
            f"{s}={r['time_us']:.1f}us{'' if r['ok'] else ' WRONG'}" if "time_us" in r else f"{s}=ERR"
            for s, r in results.items()
        ))
    return rows


def _speedup(row):
    t, g = row["results"].get("thread", {}), row["results"].get("group", {})
    if t.get("ok") and g.get("ok"):
        return t["time_us"] / g["time_us"]
    return None


def threshold_from_sweep(rows):
    """Smallest window (taps) from which the group schedule wins every sweep case with at
    least as many taps; None when it never does."""
    sweep = sorted((r for r in rows if r["sweep"] and _speedup(r) is not None), key=lambda r: r["taps"])
    for i, r in enumerate(sweep):
        if all(_speedup(s) > 1.0 for s in sweep[i:]):
            return r["taps"]
    return None


def print_report(rows, device_name, threshold):
    table = []
    for r in rows:
        n, c, oh, ow = r["out_shape"]
        cells = [r["name"], str(r["taps"]), str(n * -(-c // 4) * oh * ow)]
        for s in STRATEGIES:
            res = r["results"].get(s, {})
            cells.append("ERR" if "error" in res else f"{res['time_us']:.1f}" + ("" if res["ok"] else "!"))
        sp = _speedup(r)
        cells += [common.fmt(sp), "-" if sp is None else ("group" if sp > 1 else "thread")]
        table.append(cells)
    print()
    if threshold is not None or any(r["sweep"] for r in rows):
        print(f"threshold sweep: group wins from {threshold} taps on" if threshold else "threshold sweep: group never wins on", device_name)
    common.print_table(
        ["case", "taps", "out pixels", "thread us", "group us", "thread/group", "faster"],
        table,
        title=f"pooling schedules on {device_name} (fp32; median OpenCL event time; ! = wrong output)",
    )


# ---------------------------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_device_argument(p)
    common.add_split_arguments(p)
    p.add_argument("--threshold-sweep", action="store_true", help="also time windows of 4..3136 taps")
    p.add_argument("--repeat", type=int, default=20, help="timed runs per kernel (median; default 20)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None, help="default: benchmarks/results/pooling-<device>.json")
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error("--repeat must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    cases = MAIN_CASES + (SWEEP_CASES if args.threshold_sweep else [])
    started = time.perf_counter()
    if args.build_only:
        args.build_only.mkdir(parents=True, exist_ok=True)
        meta, _ = build_all(cases, args.build_only)
        failed = [e for e in meta["kernels"] if "error" in e]
        common.log(f"wrote {len(meta['kernels']) - len(failed)} kernels to {args.build_only} ({len(failed)} failed)")
        return 1 if failed else 0

    from tir_adreno.runtime import opencl as runtime

    dev = runtime.get_device(args.device)
    common.log(f"device: {dev.name}")
    meta, modules = load_all(args.src) if args.src else build_all(cases, None)
    cases = meta["cases"]
    rows = run_all(dev, cases, meta, modules, args.repeat, args.seed)
    threshold = threshold_from_sweep(rows)
    payload = {
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "tvm": meta.get("tvm"),
        "rtol": RTOL,
        "device_info": {"name": dev.name, "version": dev.cl_device.version.strip(), "driver": dev.cl_device.driver_version.strip()},
        "timing": f"median of {args.repeat} OpenCL event times after 2 warm-up runs (LoadedModule.time)",
        "threshold_taps": threshold,
        "wall_s": round(time.perf_counter() - started, 1),
        "rows": rows,
    }
    if args.json is None:
        path = common.write_json(NAME, dev.name, payload, args.results_dir)
    else:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=1) + "\n")
        path = args.json
    common.log(f"wrote {path}")
    print_report(rows, dev.name, threshold)
    bad = [(r["name"], s) for r in rows for s, res in r["results"].items() if not res.get("ok")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
