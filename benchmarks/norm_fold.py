"""A layer norm over the channels, or a group norm's apply, folded into the 1x1 conv that reads it
(issue 21): launches, kernel and wall time of ONNX models with each ``dwconv -> LayerNorm -> pwconv1``
norm in its own kernel and each split group norm's ``group_norm_apply`` before its 1x1 conv
("apart": ``strategy.fusion.FOLD_NORM_KINDS`` empty while compiling, the plan before the folds) and
read by the conv ("folded": the profile's own plan, ``primfuncs.conv.norm``: the conv reads the
layer norm's input, or ``group_norm_partials``' statistics), from one run; every way is the target's
profile otherwise. Each layer norm's, group norm kernel's and 1x1 conv's launch (shape, median us)
is in the JSON.

    python benchmarks/norm_fold.py --onnx convnextv2_atto.onnx edgenext_xx_small.onnx mobilevitv2_050.onnx --target nvidia-h200 --build-only DIR  # here (TVM)
    python benchmarks/norm_fold.py --from DIR                                                                               # on the GPU, no TVM

Kernel time: the median over ``--repeat`` profiled runs (the ways alternating) of the sum of OpenCL
event times, per model and per kernel family; wall time likewise over unprofiled runs; the outputs
of the two ways are compared with each other (``ways.py``).
"""

from __future__ import annotations

from ways import main, patched

WAYS = ("apart", "folded")
#: "apart": ``strategy.fusion.fold_norm`` off while compiling (no device class folds).
SETTINGS = {"apart": patched("tir_adreno.strategy.fusion", FOLD_NORM_KINDS=())}


if __name__ == "__main__":
    main(__doc__, "norm_fold", WAYS, settings=SETTINGS, detail=("layer_norm_channels", "group_norm", "conv2d"))
