"""The squeeze-excitation on a wide GPU (issue 21): launches, kernel and wall time of ONNX models
with each excitation in one work group per sample ("one-group": ``excite.excitation``, what PoCL
and Adreno run) and spread over work groups in the same one launch ("split":
``excite.excitation_split``, what ``strategy.excite.excitation_split_schedule`` gives the H200),
from one run; "split-p256" / "split-p2048" pool about 256 / 2048 pixels per work group instead of
:data:`~tir_adreno.strategy.excite.EXCITATION_SPLIT_PIXELS`, "split-t256" runs 256 work items
per work group instead of :data:`~tir_adreno.strategy.excite.EXCITATION_SPLIT_THREADS`. Every way
is the target's profile otherwise. Each excitation launch's shape and median time per way are in
the JSON.

    python benchmarks/excite_split.py --onnx efficientnet_b0.onnx mobilenetv3_small_100.onnx \\
        --target nvidia-h200 --weights efficientnet_b0 --build-only DIR                         # here (TVM)
    python benchmarks/excite_split.py --from DIR                                               # on the GPU, no TVM

Kernel time: the median over ``--repeat`` profiled runs (the ways alternating) of the sum of
OpenCL event times, per model and per kernel family; wall time likewise over unprofiled runs. The
models named by ``--weights`` keep their weights in "one-group" only; "split" gets them there
(:func:`share_weights`: its plan's constants are the same ones plus the scratch of each
excitation) and the two ways' outputs are compared (``ways.py``); the rest run with random
weights (timing only), so the bundle fits the device machine's carry.
"""

from __future__ import annotations

import json
from pathlib import Path
from unittest import mock

import numpy as np

from common import log
from ways import arguments, build, measure_ways, parse, save_results, wide_profile

WAYS = ("one-group", "split", "split-p256", "split-p2048", "split-t256")
#: The way whose weights are saved (where ``--weights`` names the model) and the one given them there.
BASE, SHARED = "one-group", "split"


def _split_rule(pixels: int | None = None, threads: int | None = None, split: bool = True):
    """``strategy.excite``'s split excitation constants set while compiling (``split`` False: never split)."""
    def setting():  # strategy.excite (TVM) imported only when building
        from tir_adreno.strategy import excite as pool

        return mock.patch.multiple(pool, EXCITATION_SPLIT_PIXELS=None if not split else pixels or pool.EXCITATION_SPLIT_PIXELS,
                                   EXCITATION_SPLIT_THREADS=threads or pool.EXCITATION_SPLIT_THREADS)

    return setting


SETTINGS = {"one-group": _split_rule(split=False), "split-p256": _split_rule(pixels=256),
            "split-p2048": _split_rule(pixels=2048), "split-t256": _split_rule(threads=256)}


def _plan(directory: Path):
    from tir_adreno.runtime import cache
    from tir_adreno.runtime.executor import Plan

    return Plan.from_dict(json.loads(bytes(cache.read(directory / "model.json")))["plan"])


def share_weights(base: Path, way: Path) -> None:
    """Write ``way``'s ``weights.npz`` from ``base``'s: its constants in plan order are
    ``base``'s, with zeros (each split excitation's partial sums and tickets) where the next of
    ``base``'s does not match in shape and dtype. A wrong match shows in the compared outputs."""
    from tir_adreno.runtime import cache, weights
    from tir_adreno.runtime.saved import replace_weights

    given = weights.arrays(cache.read(base / "weights.npz"))
    theirs = [(i, t) for i, t in enumerate(_plan(base).tensors) if t.kind == "const"]
    out, k = {}, 0
    for i, t in enumerate(_plan(way).tensors):
        if t.kind != "const":
            continue
        if k < len(theirs) and (theirs[k][1].shape, theirs[k][1].storage_dtype) == (t.shape, t.storage_dtype):
            out[str(i)], k = given[str(theirs[k][0])], k + 1
        else:
            out[str(i)] = np.zeros(t.shape, t.storage_dtype)
    if k != len(theirs):
        raise SystemExit(f"excite_split: {way.name} takes {k} of {base.name}'s {len(theirs)} constants")
    replace_weights(way, out)
    log(f"{way.name}: {k} weights of {base.name}, {len(out) - k} scratch")


def main():
    parser = arguments(__doc__, target_help="a wide device profile")
    parser.add_argument("--weights", nargs="*", default=[], metavar="STEM",
                        help="models whose one-group and split ways keep their weights (outputs compared)")
    args = parse(parser)
    if args.build_only:
        build(args, WAYS, SETTINGS, profiles=lambda target: dict.fromkeys(WAYS, wide_profile(target, "excite_split")))
        for path in args.onnx:  # timing only, or shared there: the weights left out
            for way in WAYS:
                if path.stem not in args.weights or way != BASE:
                    (args.build_only / f"{path.stem}-{way}" / "weights.npz").unlink()
        return
    for base in args.source.glob(f"*-{BASE}"):
        if (base / "weights.npz").exists() and not (args.source / base.name.replace(BASE, SHARED) / "weights.npz").exists():
            share_weights(base, args.source / base.name.replace(BASE, SHARED))
    models, results, device = measure_ways(args, WAYS, detail=("excitation",))
    save_results("excite_split", models, results, args, device)


if __name__ == "__main__":
    main()
