"""EdgeNeXt's block tails and split depthwise convs: launches, kernel and wall time of ONNX models
compiled three ways from one run, every way the target's profile otherwise:

- "apart": the plan before (each block tail's residual add after the permute back to NCHW its own
  ``add`` kernel; the hierarchical split depthwise convs as exported: slices, adds, convs, concat);
- "tail": the residual add in fc2's conv epilogue (``passes.conv_emit._permuted_residual``);
- "fused": that and each split block as one ``hierarchical_depthwise`` launch per conv, the
  positional encoding added by the last (``strategy.fusion.hierarchical_depthwise``): the profile's
  own plan.

    python benchmarks/edgenext_blocks.py --onnx edgenext_xx_small.onnx convnextv2_atto.onnx --target nvidia-h200 --build-only DIR  # here (TVM)
    python benchmarks/edgenext_blocks.py --from DIR                                                                               # on the GPU, no TVM

Kernel time: the median over ``--repeat`` profiled runs (the ways alternating) of the sum of OpenCL
event times, per model and per kernel family; wall time likewise over unprofiled runs; the outputs
compared with the first way's (``ways.py``). Each add, slice, concat, depthwise and
``hierarchical_depthwise`` launch (shape, median us) is in the JSON.
"""

from __future__ import annotations

from ways import main, patched, together

WAYS = ("apart", "tail", "fused")
_SPLIT_APART = patched("tir_adreno.strategy.fusion", hierarchical_depthwise=lambda profile: False)
_TAIL_APART = patched("tir_adreno.passes.conv_emit", _permuted_residual=lambda rw, tail, user: None)
SETTINGS = {"apart": together(_SPLIT_APART, _TAIL_APART), "tail": _SPLIT_APART}
DETAIL = ("hierarchical_depthwise", "depthwise_conv2d_nchw4c", "slice_channels", "concat_channels", "add")


if __name__ == "__main__":
    main(__doc__, "edgenext_blocks", WAYS, settings=SETTINGS, detail=DETAIL)
