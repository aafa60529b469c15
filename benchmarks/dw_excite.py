"""A depthwise conv and the squeeze-excitation pooling its output in one launch on a wide GPU
(issue 21): launches, kernel and wall time of ONNX models with the two apart ("apart": the
depthwise kernel, then ``excitation_split``; ``strategy.excite.DEPTHWISE_EXCITATION_PIXELS`` None
while compiling, the plan before the fusion) and fused ("fused": ``excite.depthwise_excitation``,
the target's profile's plan), from one run; "fused-p256-t256" and "fused-p128-t128" give each
work group of the fused kernel about 256 output pixels and 256 items / 128 and 128 instead of
:data:`~tir_adreno.strategy.excite.DEPTHWISE_EXCITATION_PIXELS` and ``_THREADS``. Every way is the
target's profile otherwise. Each depthwise, excitation and fused launch (shape, median us) is in
the JSON.

    python benchmarks/dw_excite.py --onnx mobilenetv3_small_100.onnx efficientnet_b0.onnx mixnet_s.onnx \\
        --target nvidia-h200 --build-only DIR    # here (TVM)
    python benchmarks/dw_excite.py --from DIR   # on the GPU, no TVM

Kernel time: the median over ``--repeat`` profiled runs (the ways alternating) of the sum of OpenCL
event times, per model and per kernel family; wall time likewise over unprofiled runs; the outputs
of the ways are compared with the first's (``ways.py``).
"""

from __future__ import annotations

from ways import main, patched

WAYS = ("apart", "fused", "fused-p256-t256", "fused-p128-t128")
EXCITE = "tir_adreno.strategy.excite"
SETTINGS = {"apart": patched(EXCITE, DEPTHWISE_EXCITATION_PIXELS=None),
            "fused-p256-t256": patched(EXCITE, DEPTHWISE_EXCITATION_PIXELS=256, DEPTHWISE_EXCITATION_THREADS=256),
            "fused-p128-t128": patched(EXCITE, DEPTHWISE_EXCITATION_PIXELS=128, DEPTHWISE_EXCITATION_THREADS=128)}


if __name__ == "__main__":
    main(__doc__, "dw_excite", WAYS, settings=SETTINGS, detail=("depthwise", "excitation"))
