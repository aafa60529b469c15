"""Structural reparameterization (issue 21: FastViT's RepMixer and MobileOne blocks exported without
``reparameterize()``): launches, kernel and wall time of ONNX models with their parallel linear
branches run as they are ("branches": the Relax pass without ``passes.reparam``, what it did
before) and summed into one conv each ("reparam"), from one run.

    python benchmarks/reparam.py --onnx fastvit_t8.onnx --target nvidia-h200 --build-only DIR   # here (TVM)
    python benchmarks/reparam.py --from DIR                                                   # on the GPU, no TVM
    python benchmarks/reparam.py --onnx fastvit_t8.onnx --build-only DIR                     # this device's profile
    python benchmarks/reparam.py --from DIR --check-onnx fastvit_t8.onnx                     # and against onnxruntime

Kernel time: the median over ``--repeat`` profiled runs (the two ways alternating) of the sum of
OpenCL event times, per model and per kernel family; the outputs of the two ways are compared with
each other (``ways.py``), and with onnxruntime's for the models given to ``--check-onnx``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from common import print_table
from ways import arguments, build, measure_ways, parse, patched, save_results

WAYS = ("branches", "reparam")


#: "branches": the Relax pass without its reparameterization while compiling.
SETTINGS = {"branches": patched("tir_adreno.passes.dispatch", reparameterize=lambda mod: mod)}


def _check_onnx(models: dict, paths) -> dict:
    """Model stem -> way -> relative error of its output against onnxruntime's (one random input)."""
    if not paths:
        return {}
    import onnx  # only here: the GPU machine runs --from without it

    from tir_adreno.reference import reference_outputs, relative_error

    errors, rows = {}, []
    for path in paths:
        if path.stem not in models:
            raise SystemExit(f"reparam: {path.stem} was not built into the --from folder")
        ways = models[path.stem]
        first = next(iter(ways.values()))
        x = {n: np.random.default_rng(17).standard_normal(first.plan.tensors[t].shape).astype("float32") for n, t in first.plan.inputs}
        (ref, *_) = reference_outputs(onnx.load(str(path)), x)
        errors[path.stem] = {way: relative_error(cm.run(x)[0], ref) for way, cm in ways.items()}
        rows.append([path.stem, *(f"{errors[path.stem][w]:.1e}" for w in WAYS)])
    print_table(["model", *(f"vs onnxruntime {w}" for w in WAYS)], rows)
    return errors


def main():
    parser = arguments(__doc__, target=None)
    parser.add_argument("--check-onnx", type=Path, nargs="*", default=[], metavar="FILE",
                        help="with --from: compare each way of these models with onnxruntime (needs onnx)")
    args = parse(parser)
    if args.build_only:
        return build(args, WAYS, SETTINGS)
    models, results, device = measure_ways(args, WAYS)
    for stem, errors in _check_onnx(models, args.check_onnx).items():
        results[stem]["vs_onnxruntime"] = errors
    return save_results("reparam", models, results, args, device)


if __name__ == "__main__":
    main()
