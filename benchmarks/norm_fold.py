"""A layer norm over the channels folded into the 1x1 conv that reads it (issue 21): launches,
kernel and wall time of ONNX models with each ``dwconv -> LayerNorm -> pwconv1`` norm in its own
kernel ("apart": ``strategy.conv.FOLD_NORM_KINDS`` empty while compiling, the plan before the fold)
and read by the conv ("folded": the profile's own plan, ``primfuncs.conv.norm``), from one run; every
way is the target's profile otherwise. Each layer norm's and each 1x1 conv's launch (shape, median
us) is in the JSON.

    python benchmarks/norm_fold.py --onnx convnextv2_atto.onnx edgenext_xx_small.onnx --target nvidia-h200 --build-only DIR  # here (TVM)
    python benchmarks/norm_fold.py --from DIR                                                                               # on the GPU, no TVM

Kernel time: the median over ``--repeat`` profiled runs (the ways alternating) of the sum of OpenCL
event times, per model and per kernel family; wall time likewise over unprofiled runs; the outputs
of the two ways are compared with each other (``ways.py``).
"""

from __future__ import annotations

import contextlib

from common import log
from tir_adreno import runtime
from ways import arguments, build_ways, compare, load_ways, parse, save_results

WAYS = ("apart", "folded")


@contextlib.contextmanager
def _no_fold():
    """``strategy.conv.fold_norm`` off while compiling (no device class folds)."""
    from tir_adreno.strategy import conv

    saved = conv.FOLD_NORM_KINDS
    conv.FOLD_NORM_KINDS = ()
    try:
        yield
    finally:
        conv.FOLD_NORM_KINDS = saved


def main():
    args = parse(arguments(__doc__))
    if args.build_only:
        from tir_adreno.strategy.profile import get_profile

        profile = get_profile(args.target)
        return build_ways(args.onnx, {way: profile for way in WAYS}, args.precision, args.build_only, log, {"apart": _no_fold})
    device = runtime.get_device(args.device)
    models = load_ways(args.source, WAYS, device)
    results = compare(models, args.repeat, WAYS, source=args.source, detail=("layer_norm_channels", "conv2d"))
    save_results("norm_fold", models, results, args, device)


if __name__ == "__main__":
    main()
