"""Snapshot every plan the strategy makes, and compare two snapshots: the refactoring oracle.

For each reference model x device profile x precision it compiles the model without a device
(``compile_plan``) and records what would run: every planned call (kernel key, function, name,
ours or upstream, config, source), every tensor (shape, dtype, scope, storage, kind), the hash of
each kernel's OpenCL source and launch plan, and the hash of each packed weight. Two snapshots
that compare equal mean the code change planned, packed and generated exactly the same thing.

    python benchmarks/plan_snapshot.py --write before.json      # on the old code
    python benchmarks/plan_snapshot.py --compare before.json    # on the new code: exit 1 on a difference
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time

from common import log, print_table

MODELS = ("resnet18", "resnet50", "mobilenet_v2", "onnx:squeezenet", "onnx:inception_v2")
PROFILES = ("adreno", "pocl", "nvidia-h200")
PRECISIONS = ("float32", "float16_acc32")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:20]


def load_reference_model(name: str):
    """A built-in Relax model, ``onnx:<light model>`` with seeded random weights, or a path to an
    ``.onnx`` export (a timm model from ``torch_models.py --timm``) as it was exported."""
    if name.endswith(".onnx"):
        import onnx

        return onnx.load(name)
    if name.startswith("onnx:"):
        import onnx

        from tir_adreno.frontend.onnx_models import light_model_path, randomize_weights, strip_final_softmax

        return strip_final_softmax(randomize_weights(onnx.load(light_model_path(name[5:])), seed=3))
    from tir_adreno.frontend.models import get_model

    return get_model(name)


def snapshot_case(model, profile: str, precision: str) -> dict:
    from tir_adreno.compiler import compile_plan
    from tir_adreno.strategy.profile import get_profile

    plan, kernels, weights = compile_plan(model, get_profile(profile), progress=lambda _: None, precision=precision)
    plan_dict = plan.to_dict()
    return {
        "calls": plan_dict["calls"],
        "tensors": plan_dict["tensors"],
        "kernels": {key: _sha(k.to_json().encode()) for key, k in sorted(kernels.items())},
        "sources": {key: _sha(k.source.encode()) for key, k in sorted(kernels.items())},
        "weights": {str(i): [list(w.shape), str(w.dtype), _sha(w.tobytes())] for i, w in sorted(weights.items())},
    }


def take_snapshot(models, profiles, precisions) -> dict:
    snap = {}
    for name in models:
        model = load_reference_model(name)
        for profile in profiles:
            for precision in precisions:
                t0 = time.perf_counter()
                snap[f"{name}/{profile}/{precision}"] = case = snapshot_case(model, profile, precision)
                log(f"{name} {profile} {precision}: {len(case['calls'])} calls, {len(case['kernels'])} kernels "
                    f"({time.perf_counter() - t0:.1f} s)")
    return snap


def differences(old: dict, new: dict) -> list[str]:
    """One line per part of a case that differs (empty when the snapshots are identical)."""
    out = []
    for case in sorted(set(old) | set(new)):
        if case not in old or case not in new:
            out.append(f"{case}: only in {'new' if case in new else 'old'}")
            continue
        for part in ("calls", "tensors", "kernels", "sources", "weights"):
            a, b = old[case][part], new[case][part]
            if a != b:
                if isinstance(a, list):
                    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                    out.append(f"{case}: {part} differ from #{first} ({len(a)} vs {len(b)})")
                else:
                    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
                    out.append(f"{case}: {part} differ for {len(keys)} entries, e.g. {keys[0]}")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", metavar="FILE", help="write the snapshot of this code to FILE")
    mode.add_argument("--compare", metavar="FILE", help="compare this code's snapshot with FILE (exit 1 on a difference)")
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--profiles", nargs="+", default=list(PROFILES))
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS))
    args = parser.parse_args(argv)
    snap = json.loads(json.dumps(take_snapshot(args.models, args.profiles, args.precisions)))  # as it reads back
    if args.write:
        with open(args.write, "w") as f:
            json.dump(snap, f, indent=1, sort_keys=True)
        log(f"wrote {len(snap)} cases to {args.write}")
        return 0
    with open(args.compare) as f:
        old = {k: v for k, v in json.load(f).items() if k in snap}
    diff = differences(old, snap)
    rows = [[case, len(snap[case]["calls"]), len(snap[case]["kernels"]), "same" if not any(d.startswith(case + ":") for d in diff) else "DIFFERENT"]
            for case in sorted(snap)]
    for line in diff:
        print(line)
    print_table(["case", "calls", "kernels", "vs " + args.compare], rows)
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
