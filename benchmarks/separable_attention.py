"""MobileViT-v2's separable self-attention in one kernel (issue 21): launches, kernel and wall time
of ONNX models (MobileViT-v2) with the attention between its qkv and out convs as one
``separable_attention`` kernel ("one_kernel": ``passes.patterns.separable_attention``) and as
before it ("apart": that rule left out of the registry while compiling: ``split_channels``,
``softmax_w``, ``multiply_broadcast_c``, ``sum_w``, ``relu``, ``multiply_broadcast_w``), from one run.

    python benchmarks/separable_attention.py --onnx mobilevitv2_050.onnx --target nvidia-h200 --build-only DIR   # here (TVM)
    python benchmarks/separable_attention.py --from DIR                                                        # on the GPU, no TVM

Kernel time: the median over ``--repeat`` profiled runs (the two ways alternating) of the sum of
OpenCL event times, per model and per kernel family; wall time likewise over unprofiled runs; the
outputs of the two ways are compared with each other (``ways.py``).
"""

from __future__ import annotations

from unittest import mock

from ways import main

WAYS = ("apart", "one_kernel")


def _without_rule():
    """The fusion patterns without ``separable_attention`` while compiling (the plan before it)."""
    from tir_adreno.passes import dispatch
    from tir_adreno.passes.patterns import separable_attention

    return mock.patch.object(dispatch, "PATTERNS", tuple(p for p in dispatch.PATTERNS if p is not separable_attention.separable_attention))


if __name__ == "__main__":
    main(__doc__, "separable_attention", WAYS, settings={"apart": _without_rule})
