"""Classifier heads on wide GPUs (issue 21): launches, kernel and wall time of ONNX models with the
heads before ("before": ``strategy.excite.HEAD_GEMV_BLOCKS`` None while compiling: the tiled conv
on the vector, ``mean_hw``, ``layer_norm_channels_wide`` and ``hardswish`` apart), with the head
GEMV but every pool apart ("apart": ``HEAD_GEMV_POOL_ADDS`` None: ``mean_hw``, then
``pooled_pointwise`` on its vector) and as the profile plans them ("after": the GEMV pooling a
small map itself, a layer norm and its activation its prologue); from one run, every way the
target's profile otherwise. "apart" against "after" measures whether many work groups each
re-pooling the map beat the pool's own launch (``head_gemv_schedule``'s rule). Each
``pooled_pointwise``, ``mean_hw``, ``layer_norm``, ``hardswish`` and conv launch (shape, median us)
is in the JSON.

    python benchmarks/head_gemv.py --onnx /work/exports/efficientvit_b0.onnx ... --target nvidia-h200 --build-only DIR  # here (TVM)
    python benchmarks/head_gemv.py --from DIR                                                                           # on the GPU, no TVM

``--ways before after`` builds only those (``ways.py``: ``--from`` runs the ways DIR holds), e.g.
the eight issue-21 models in two ways to keep the bundle small, ``--ways apart after`` for the
pool question on a few.

Kernel time: the median over ``--repeat`` profiled runs (the ways alternating) of the sum of OpenCL
event times, per model and per kernel family; wall time likewise over unprofiled runs; the outputs
of the ways are compared with the first's (``ways.py``).
"""

from __future__ import annotations

from ways import main, patched

WAYS = ("before", "apart", "after")
SETTINGS = {
    # the heads as before this change
    "before": patched("tir_adreno.strategy.excite", HEAD_GEMV_BLOCKS=None),
    # the head GEMV, every global pool its own mean_hw launch
    "apart": patched("tir_adreno.strategy.excite", HEAD_GEMV_POOL_ADDS=None),
}


if __name__ == "__main__":
    main(__doc__, "head_gemv", WAYS, settings=SETTINGS,
         detail=("pooled_pointwise", "mean_hw", "layer_norm", "hardswish", "conv2d"))
