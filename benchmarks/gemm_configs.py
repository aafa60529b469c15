"""Register GEMM against the local-memory tiled and the split-reduction GEMMs (``primfuncs.gemm``,
``GemmConfig(tiled=True)``, ``GemmConfig(split_k=S)``) on the catalogue's GEMM shapes, with cuBLAS
beside them (issue 35).

For each shape of :data:`SHAPES` (DeiT-tiny's Linears and attention products, MLP-Mixer s32's
token and channel MLPs, PVT-v2-b0's and LeViT-128s' examples, the last stages' long reductions
with few outputs; batch 1, named by source) this builds, for the ``--target`` profile (default
nvidia-h200): the register kernel as that profile planned it before the tiled kernel
(``tiled_min_groups`` 0: :func:`strategy.gemm.gemm_config`); the tiled default
(``strategy.gemm.tiled_gemm_config``; where no tiled config fills the GPU, the smallest as
"tiled_small") and its neighbours (every ``TILED_GEMM_CONFIGS`` entry fitted as the rule fits it,
the default's ``k_chunk`` halved and doubled; each of those with and without the next step prefetched, ``GemmConfig.prefetch``, and the
default's ``k_chunk`` x4 prefetched where it fits local memory); from K = 64 the split default
(``strategy.gemm.split_gemm_config``) and its neighbours (tile rows 1, 2, 4; the split halved and
doubled; columns doubled); and the rule's pick ("rule", one of those). Every kernel runs on
NaN-poisoned outputs, is checked against a float64 NumPy product (each element within
``2 (K + 4) u`` of ``|A| |B|``, the kernel tests' bound) and timed (median OpenCL event time, two
input sets rotated). With torch and CUDA present, ``torch.matmul`` of the same operands (cuBLAS,
TF32 off) is timed in the same run, 20 calls replayed in one CUDA graph (CUDA events around one
eager call time the host's dispatch, ~20 us). Prints per shape the configs, then one table last.
JSON: ``benchmarks/results/gemm_configs-<device>.json``.

    python benchmarks/gemm_configs.py --build-only DIR          # here (TVM)
    python benchmarks/gemm_configs.py --from DIR                # on the GPU: numpy + pyopencl (+ torch)
    python benchmarks/gemm_configs.py --from DIR --shapes deit  # shapes whose name contains a word
    python benchmarks/gemm_configs.py --build-only DIR --shapes mambaout --explore   # and a wider tiled grid

The shapes are the products as stored (``trans_b`` for Q Kᵀ), without the views and epilogues the
plans give them (bias, GELU, ``alpha``, ``out_perm``): the kernels' main loops, not the fusions.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
import traceback
from pathlib import Path

import numpy as np

import common  # noqa: E402  (puts the repository root on sys.path)
from conv_configs import build_case, load_cases, save_kernels

NAME = "gemm_configs"
U32 = 2.0**-24
#: name -> (A shape, B shape, trans_a, trans_b): the stored operands of each product.
SHAPES = {
    "deit_tiny.qkv": ((1, 197, 192), (192, 576), False, False),
    "deit_tiny.proj": ((1, 197, 192), (192, 192), False, False),
    "deit_tiny.fc1": ((1, 197, 192), (192, 768), False, False),
    "deit_tiny.fc2": ((1, 197, 768), (768, 192), False, False),
    "deit_tiny.q_kT": ((1, 3, 197, 64), (1, 3, 197, 64), False, True),
    "deit_tiny.attn_v": ((1, 3, 197, 197), (1, 3, 197, 64), False, False),
    "mixer_s32.token_fc1": ((1, 512, 49), (49, 256), False, False),
    "mixer_s32.token_fc2": ((1, 512, 256), (256, 49), False, False),
    "mixer_s32.channel_fc1": ((1, 49, 512), (512, 2048), False, False),
    "mixer_s32.channel_fc2": ((1, 49, 2048), (2048, 512), False, False),
    "pvt_v2_b0.s1_fc1": ((1, 3136, 32), (32, 256), False, False),
    "pvt_v2_b0.s1_q_kT": ((1, 1, 3136, 32), (1, 1, 49, 32), False, True),
    "pvt_v2_b0.s4_fc1": ((1, 49, 256), (256, 2048), False, False),
    "levit_128s.s1_qkv": ((1, 196, 128), (128, 256), False, False),
    "levit_128s.s1_q_kT": ((1, 4, 196, 16), (1, 4, 196, 16), False, True),
    # LeViT's later stages (49 and 16 tokens): products too small for the rule's tiled kernel
    "levit_128s.s2_qkv": ((1, 49, 256), (256, 384), False, False),
    "levit_128s.s2_fc1": ((1, 49, 256), (256, 512), False, False),
    "levit_128s.s3_qkv": ((1, 16, 384), (384, 512), False, False),
    "levit_128s.s3_fc1": ((1, 16, 384), (384, 768), False, False),
    "levit_128s.s3_q_kT": ((1, 8, 16, 16), (1, 8, 16, 16), False, True),
    # long reductions with few outputs (the split kernel's): the last stages' MLPs, Kᵀ V, a head
    "levit_128s.s3_fc2": ((1, 16, 768), (768, 384), False, False),
    "pit_ti.s3_fc2": ((1, 50, 1024), (1024, 256), False, False),
    "coat_lite_tiny.s1_kT_v": ((1, 8, 3137, 8), (1, 8, 3137, 8), True, False),
    "mambaout_femto.s4_fc2": ((1, 7, 7, 768), (768, 288), False, False),
    # gMLP's channel MLP around its spatial gating, MambaOut's first gated MLP (56 x 56 tokens)
    "gmlp_ti16.fc1": ((1, 196, 128), (128, 768), False, False),
    "gmlp_ti16.fc2": ((1, 196, 384), (384, 128), False, False),
    "mambaout_femto.s1_fc1": ((1, 56, 56, 48), (48, 256), False, False),
    "mambaout_femto.head_fc2": ((1, 1152), (1152, 1000), False, False),
    # MambaOut's gated MLPs past the first stage (stage 3: 9 blocks, 40% of its H200 time)
    "mambaout_femto.s2_fc1": ((1, 28, 28, 96), (96, 512), False, False),
    "mambaout_femto.s2_fc2": ((1, 28, 28, 256), (256, 96), False, False),
    "mambaout_femto.s3_fc1": ((1, 14, 14, 192), (192, 1024), False, False),
    "mambaout_femto.s3_fc2": ((1, 14, 14, 512), (512, 192), False, False),
    "mambaout_femto.s4_fc1": ((1, 7, 7, 288), (288, 1536), False, False),
}
#: ``--explore``: the tiled kernel's tiles (rows, cols), work groups (ty, tx) and k_chunk besides
#: the rule's neighbours, prefetched, each where its tiles fit local memory.
EXPLORE = {"tiles": ((1, 1), (2, 1), (4, 1), (1, 2), (2, 2)), "groups": ((8, 8), (16, 8), (8, 16), (16, 16), (32, 8)),
           "k_chunks": (4, 8, 16)}


def candidates(name: str, profile, explore: bool = False) -> list[tuple[str, object]]:
    """(kind, GemmConfig) of shape ``name`` on ``profile``: "register" (the profile's rule without
    the tiled kernel), "tiled" (its tiled default) or "tiled_small", then the neighbours; with
    ``explore`` also :data:`EXPLORE`'s tiled configs ("explore")."""
    from primfuncs.conv.config import MAX_LOCAL_BYTES
    from primfuncs.gemm import MAX_WORK_GROUP, gemm_geometry
    from primfuncs.gemm_parts import GemmConfig
    from primfuncs.gemm_tiled import tiled_local_bytes
    from tir_adreno.strategy import gemm as strategy

    a, b, trans_a, trans_b = SHAPES[name]
    geom = gemm_geometry(a, b, trans_a, trans_b)
    out = [("register", strategy.gemm_config(geom, dataclasses.replace(profile, tiled_min_groups=0)))]
    fitted = strategy.fitted_tiled_configs(geom)  # the rule's candidates, work group and k_chunk cut as it cuts them
    tiled = strategy.tiled_gemm_config(geom, profile)
    default = tiled or fitted[-1]
    out.append(("tiled" if tiled else "tiled_small", default))
    out += [("tiled_neighbour", c) for c in fitted]
    out += [("tiled_neighbour", dataclasses.replace(default, k_chunk=kc)) for kc in (default.k_chunk // 2, default.k_chunk * 2) if kc >= 1]
    # each tiled config with and without the next step's reads prefetched, and the default's with 4x the chunk
    out += [("unprefetched" if c.prefetch else "prefetch", dataclasses.replace(c, prefetch=not c.prefetch)) for kind, c in list(out) if c.tiled]
    quad = dataclasses.replace(default, k_chunk=default.k_chunk * 4, prefetch=True)
    if tiled_local_bytes(quad) <= MAX_LOCAL_BYTES:
        out.append(("prefetch", quad))
    if geom.k >= 64:  # the split kernel's default and its neighbours (tile rows, split, columns)
        split = strategy.split_gemm_config(geom)
        out.append(("split", split))
        out += [("split_neighbour", dataclasses.replace(split, rows=rows)) for rows in (1, 2, 4)]
        for k_split, tx in ((split.split_k // 2, split.tx), (split.split_k * 2, split.tx), (split.split_k, split.tx * 2), (split.split_k * 2, split.tx // 2)):
            if k_split >= 2 and tx >= 1 and k_split * tx <= MAX_WORK_GROUP:
                out.append(("split_neighbour", dataclasses.replace(split, split_k=k_split, tx=tx)))
    out.append(("rule", strategy.gemm_config(geom, profile)))
    if explore:
        for (rows, cols), (ty, tx), kc in itertools.product(EXPLORE["tiles"], EXPLORE["groups"], EXPLORE["k_chunks"]):
            config = GemmConfig(rows, cols, ty, tx, tiled=True, k_chunk=kc, prefetch=True)
            if tiled_local_bytes(config) <= MAX_LOCAL_BYTES:
                out.append(("explore", config))
    return out


def build_all(names, profile, out_dir: Path, explore: bool = False):
    """Build every (shape, config) kernel into ``out_dir`` (``kernels.json.gz`` + ``cases.json``,
    conv_configs' format); identical configs of a shape are one case with several kinds."""
    import tvm

    from primfuncs import gemm

    cases, by_source = [], {}
    for name in names:
        a, b, trans_a, trans_b = SHAPES[name]
        seen = {}
        for kind, config in candidates(name, profile, explore):
            if str(config) in seen:
                seen[str(config)]["kinds"].append(kind)
                continue
            case = seen[str(config)] = {"shape": name, "kinds": [kind], "label": str(config), "config": dataclasses.asdict(config)}
            build_case(case, lambda: gemm.gemm(a, b, trans_a, trans_b, config=config), by_source, {}, name)
            cases.append(case)
        common.log(f"built {name}: {len(seen)} configs")
    save_kernels(out_dir, by_source, {"tvm": tvm.__version__, "target": profile.name, "shapes": list(names), "cases": cases})
    return cases


# ---------------------------------------------------------------------------------------------
# run (no TVM)
def operands(name: str, rng) -> tuple[list, np.ndarray, np.ndarray, int]:
    """(two input sets [A, B], the float64 product of the first, its error bound, K)."""
    a_shape, b_shape, trans_a, trans_b = SHAPES[name]
    sets = [[rng.standard_normal(a_shape).astype(np.float32), rng.standard_normal(b_shape).astype(np.float32)] for _ in range(2)]
    a, b = (np.asarray(v, np.float64) for v in sets[0])
    a, b = (np.swapaxes(a, -1, -2) if trans_a else a), (np.swapaxes(b, -1, -2) if trans_b else b)
    k = a.shape[-1]
    return sets, a @ b, 2 * (k + 4) * U32 * (np.abs(a) @ np.abs(b)), k


def run_shape(dev, name: str, cases, modules, budget_s: float, seed: int) -> list[dict]:
    """Each case of shape ``name`` run, checked and timed (:func:`run_case`)."""
    sets, ref, bound, _ = operands(name, np.random.default_rng(seed))
    results = [run_case(dev, case, modules, sets, ref, bound, budget_s) for case in cases]
    for res in results:
        common.log(f"  {name} {res['label']:28s} {res['kinds']}: " + (f"{res['time_s'] * 1e6:.1f} us ok={res['ok']}" if "time_s" in res
                                                                      else res.get("error", "?")[:100]))
    return results


def run_case(dev, case: dict, modules, sets, ref, bound, budget_s: float) -> dict:
    """One kernel on a NaN-poisoned output: ``ok`` when every element is within ``bound`` of the
    float64 ``ref``, its median event time; a build or run failure as ``error``."""
    res = {k: case[k] for k in ("kinds", "label", "config")}
    if "error" in case:  # the build failed: shown in the table, never dropped
        return {**res, "error": case["error"]}
    try:
        module, function = modules[case["kernel"]], case["function"]
        specs = module[function].params
        tensors = [[dev.empty(spec).upload(np.ascontiguousarray(x, spec.dtype)) for spec, x in zip(specs, s)] for s in sets]
        out = dev.empty(specs[-1]).poison()
        loaded = dev.load(module)
        loaded(function, *tensors[0], out)
        excess = np.abs(out.numpy().reshape(ref.shape) - ref) - bound  # NaN (poison left) fails the check
        median, samples = common.median_time(lambda s: loaded(function, *s, out), tensors, budget_s=budget_s)
        res.update(time_s=median, samples=len(samples), ok=bool(np.all(excess <= 0)), max_excess=float(np.nanmax(excess)))
    except Exception as err:
        res["error"] = f"run: {type(err).__name__}: {err}"
        common.log(traceback.format_exc())
    return res


def cublas_time(name: str, seed: int, repeat: int = 50) -> float | None:
    """Median seconds of ``torch.matmul`` on the shape's operands as stored (a transposed operand a
    transposed view: cuBLAS reads it as stored), fp32 with TF32 off, replayed in a CUDA graph
    (``torch_baselines.replayed_call_ms``: the kernel's time, as ours' event times are); None without CUDA."""
    import torch_baselines

    if not torch_baselines.cuda_available():
        return None
    import torch

    torch_baselines.fp32_without_tf32()
    sets, _, _, _ = operands(name, np.random.default_rng(seed))
    a, b = (torch.from_numpy(x).cuda() for x in sets[0])
    _, _, trans_a, trans_b = SHAPES[name]
    a, b = (a.transpose(-1, -2) if trans_a else a), (b.transpose(-1, -2) if trans_b else b)
    return torch_baselines.replayed_call_ms(lambda: torch.matmul(a, b), repeat=repeat) * 1e-3


def shape_row(name: str, results, cublas_s) -> dict:
    """The summary of one shape: register, tiled default, best tiled (correct ones only), ratios."""
    good = [r for r in results if r.get("ok")]

    def of(kind):
        return next((r["time_s"] for r in good if kind in r["kinds"]), None)

    def best_of(kernel):
        return min((r for r in good if kernel(r["config"])), key=lambda r: r["time_s"], default=None)

    best, best_split = best_of(lambda c: c["tiled"]), best_of(lambda c: c.get("split_k", 1) > 1)
    best_plain, best_prefetch = best_of(lambda c: c["tiled"] and not c.get("prefetch")), best_of(lambda c: c.get("prefetch"))
    register, default = of("register"), of("tiled") or of("tiled_small")
    return {"shape": name, "register_s": register, "tiled_default_s": default, "tiled_kind": "tiled" if of("tiled") else "tiled_small",
            "best_tiled_s": best and best["time_s"], "best_tiled": best and best["label"], "split_s": of("split"),
            "best_split_s": best_split and best_split["time_s"], "best_split": best_split and best_split["label"],
            "best_unprefetched_s": best_plain and best_plain["time_s"],
            "best_prefetch_s": best_prefetch and best_prefetch["time_s"], "best_prefetch": best_prefetch and best_prefetch["label"],
            "rule_s": of("rule"), "rule": next((r["label"] for r in results if "rule" in r["kinds"]), None), "cublas_s": cublas_s,
            "wrong": [r["label"] for r in results if "ok" in r and not r["ok"]], "errors": [r["label"] for r in results if "error" in r]}


def macs(name: str) -> int:
    a, b, trans_a, trans_b = SHAPES[name]
    m, k = a[-2:][::-1] if trans_a else a[-2:]
    n = b[-2] if trans_b else b[-1]
    return int(np.prod(np.broadcast_shapes(a[:-2], b[:-2]) if len(b) > 2 else a[:-2], dtype=np.int64)) * m * k * n


def _us(seconds) -> str:
    return common.fmt(None if seconds is None else seconds * 1e6, ".1f")


def _ratio(x, y) -> str:
    return common.fmt(x / y if x and y else None, ".2f")


def print_report(rows) -> None:
    """One table, last: per shape register, tiled default, best tiled, split default, best split and
    the rule's pick (us, its config), the rule's pick / register and / cuBLAS."""
    table = []
    for r in rows:
        table.append([r["shape"], f"{r['macs'] / 1e6:.1f}", _us(r["register_s"]), _us(r["tiled_default_s"]) + ("" if r["tiled_kind"] == "tiled" else "*"),
                      _us(r["best_tiled_s"]), r["best_tiled"] or "-", _ratio(r.get("best_prefetch_s"), r.get("best_unprefetched_s")),
                      _us(r.get("split_s")), _us(r.get("best_split_s")), r.get("best_split") or "-",
                      _us(r.get("rule_s")), r.get("rule") or "-", _ratio(r.get("rule_s"), r["register_s"]), _us(r["cublas_s"]),
                      _ratio(r.get("rule_s"), r["cublas_s"]), "WRONG " + ",".join(r["wrong"]) if r["wrong"] else ("errors" if r["errors"] else "")])
    common.print_table(["shape", "MMAC", "register us", "tiled us", "best tiled us", "best tiled config", "prefetch/not", "split us", "best split us",
                        "best split config", "rule us", "rule's config", "rule/reg", "cuBLAS us", "rule/cuBLAS", "check"], table,
                       title="GEMM: register vs local-memory tiled vs split reduction (median OpenCL event time; * tiled_small: "
                             "no tiled config fills the GPU)")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_split_arguments(parser)
    common.add_device_argument(parser)
    parser.add_argument("--target", default="nvidia-h200", help="device profile whose configs are built (default nvidia-h200)")
    parser.add_argument("--shapes", default="", help="comma-separated words: the shapes whose name contains one (default: all)")
    parser.add_argument("--budget", type=float, default=0.3, help="timing budget per kernel, seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--explore", action="store_true", help="--build-only: also the tiled configs of EXPLORE (tiles, work groups, k_chunk)")
    return parser.parse_args(argv)


def select(names, words: str) -> list[str]:
    words = [w.strip() for w in words.split(",") if w.strip()]
    return [n for n in names if not words or any(w in n for w in words)]


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.build_only:
        from tir_adreno.strategy.profile import get_profile

        names = select(SHAPES, args.shapes)
        if not names:
            common.log(f"--shapes {args.shapes!r} names none of {list(SHAPES)}")
            return 2
        cases = build_all(names, get_profile(args.target), args.build_only, args.explore)
        failed = [c for c in cases if "error" in c]
        common.log(f"wrote {len(cases) - len(failed)} kernels of {len(names)} shapes to {args.build_only} ({len(failed)} failed)")
        return 1 if failed else 0
    if not args.src:
        common.log("give --build-only DIR (here, with TVM) or --from DIR (on the device)")
        return 2
    from tir_adreno.runtime import opencl as runtime

    meta, modules = load_cases(args.src)
    names = select(meta["shapes"], args.shapes)
    if not names:
        common.log(f"--shapes {args.shapes!r} names none of the built shapes {meta['shapes']}")
        return 2
    dev = runtime.get_device(args.device)
    common.log(f"device: {dev.name}; {len(names)} shapes built for {meta['target']}")
    payload = {"target": meta["target"], "tvm": meta["tvm"], "rows": [], "results": {},
               "timing": "median OpenCL event time after warm-up, 2 input sets rotated; cuBLAS: torch.matmul, CUDA events, TF32 off"}
    for name in names:
        results = run_shape(dev, name, [c for c in meta["cases"] if c["shape"] == name], modules, args.budget, args.seed)
        try:
            cublas = cublas_time(name, args.seed)
        except Exception as err:  # torch present but failing: shown, the OpenCL rows kept
            common.log(f"  {name} cuBLAS: {type(err).__name__}: {err}")
            cublas = None
        payload["results"][name] = results
        payload["rows"].append({**shape_row(name, results, cublas), "macs": macs(name)})
        path = common.write_json(NAME, dev.name, payload, args.results_dir)  # after every shape: a cut run keeps what it measured
    print_report(payload["rows"])
    common.log(f"wrote {path}")
    bad = [1 for row in payload["rows"] if row["wrong"] or row["errors"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
