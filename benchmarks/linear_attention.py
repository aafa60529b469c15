"""EfficientViT's ReLU linear attention in one launch on a wide GPU (issue 21): launches, kernel and
wall time of ONNX models (EfficientViT) with each LiteMLA attention as the split form ("split": the
plan before, ``strategy.attention.linear_attention_schedule`` off while compiling: ``concat_channels``,
``linear_kv_partials``, ``linear_kv_finish``, ``linear_apply``) and as one ``linear_attention``
reading the concat's two maps itself ("one_kernel": the profile's own plan), from one run; every way
is the target's profile otherwise.

    python benchmarks/linear_attention.py --onnx efficientvit_b0.onnx --target nvidia-h200 --build-only DIR   # here (TVM)
    python benchmarks/linear_attention.py --from DIR                                                        # on the GPU, no TVM

Kernel time: the median over ``--repeat`` profiled runs (the two ways alternating) of the sum of
OpenCL event times, per model and per kernel family; wall time likewise over unprofiled runs; the
outputs of the two ways are compared with each other (``ways.py``).
"""

from __future__ import annotations

from ways import main, patched

WAYS = ("split", "one_kernel")
#: "split": no one-launch form on any profile while compiling.
SETTINGS = {"split": patched("tir_adreno.strategy.attention", linear_attention_schedule=lambda *args: None)}


if __name__ == "__main__":
    main(__doc__, "linear_attention", WAYS, settings=SETTINGS,
         detail=("concat_channels", "linear_kv_partials", "linear_kv_finish", "linear_apply", "linear_attention"))
