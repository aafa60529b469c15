"""The last work group of the fused depthwise conv and excitation on a wide GPU (issue 21: 7 x 7
maps of many channels, 20-26 us a launch on the H200): "before" issues one global load per item
at a time in the split kernels' dependent sums (``primfuncs.excite.SPLIT_LOADS`` 1: the kernel
before the change), "after" :data:`~primfuncs.excite.SPLIT_LOADS` loads first, then their sums
in the same order (the first layer's ``W1``, the last work group's gather of the partial sums and
its second layer's ``W2``); "after-g32" and "after-g64" also spread a small map over about 32 / 64
work groups per sample (``strategy.excite.DEPTHWISE_EXCITATION_MIN_GROUPS``: 36 / 72 instead of
15 for 576 channels of 7 x 7). Every way is the target's profile otherwise; each fused
(``depthwise_excitation``) and ``excitation_split`` launch (shape, median us) is in the JSON.

    python benchmarks/excite_tail.py --onnx mobilenetv3_small_100.onnx efficientnet_b0.onnx mixnet_s.onnx \\
        --target nvidia-h200 --build-only DIR    # here (TVM)
    python benchmarks/excite_tail.py --from DIR   # on the GPU, no TVM

As ``dw_excite.py`` (``ways.py``): kernel time the median over ``--repeat`` profiled runs (the
ways alternating) of the sum of OpenCL event times, per model and per kernel family; wall time
likewise over unprofiled runs; the outputs of the ways compared with the first's (a bundle saved
without weights runs with random ones: timing only).
"""

from __future__ import annotations

from ways import main, patched

WAYS = ("before", "after", "after-g32", "after-g64")
EXCITE = "tir_adreno.strategy.excite"
SETTINGS = {"before": patched("primfuncs.excite", SPLIT_LOADS=1),
            "after-g32": patched(EXCITE, DEPTHWISE_EXCITATION_MIN_GROUPS=32),
            "after-g64": patched(EXCITE, DEPTHWISE_EXCITATION_MIN_GROUPS=64)}


if __name__ == "__main__":
    main(__doc__, "excite_tail", WAYS, settings=SETTINGS, detail=("depthwise_excitation", "excitation"))
