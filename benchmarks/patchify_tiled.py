"""Patchify convs (kernel = stride, no padding: ConvNeXt-V2's and EdgeNeXt's 2x2 stride-2
downsamples) on the tiled kernel (issue 21): launches, kernel and wall time of ONNX models with
those convs on the direct kernel ("direct": ``strategy.defaults.TILED_PATCHIFY`` off while
compiling, the plan before) and on the tiled implicit GEMM like 1x1 convs ("tiled": the
profile's own plan), from one run; every way is the target's profile otherwise. Each conv's
launch (shape, median us) is in the JSON.

    python benchmarks/patchify_tiled.py --onnx convnextv2_atto.onnx edgenext_xx_small.onnx --target nvidia-h200 --build-only DIR  # here (TVM)
    python benchmarks/patchify_tiled.py --from DIR                                                                    # on the GPU, no TVM

Kernel time: the median over ``--repeat`` profiled runs (the ways alternating) of the sum of OpenCL
event times, per model and per kernel family; wall time likewise over unprofiled runs; the outputs
of the two ways are compared with each other (``ways.py``).
"""

from __future__ import annotations

from ways import main, patched

WAYS = ("direct", "tiled")
#: "direct": patchify convs keep the direct kernel (the plan before).
SETTINGS = {"direct": patched("tir_adreno.strategy.defaults", TILED_PATCHIFY=False)}


if __name__ == "__main__":
    main(__doc__, "patchify_tiled", WAYS, settings=SETTINGS, detail=("conv2d",))
