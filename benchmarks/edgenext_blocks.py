"""EdgeNeXt's block tails and split depthwise convs: launches, kernel and wall time of ONNX models
compiled three ways from one run, every way the target's profile otherwise:

- "apart": the plan before (each block tail's residual add after the permute back to NCHW its own
  ``add`` kernel; the hierarchical split depthwise convs as exported: slices, adds, convs, concat);
- "tail": the residual add in fc2's conv epilogue (``passes.rules.conv._permuted_residual``);
- "fused": that and each split block as one ``hierarchical_depthwise`` launch per conv
  (``strategy.conv.hierarchical_depthwise``): the profile's own plan.

    python benchmarks/edgenext_blocks.py --onnx edgenext_xx_small.onnx convnextv2_atto.onnx --target nvidia-h200 --build-only DIR  # here (TVM)
    python benchmarks/edgenext_blocks.py --from DIR                                                                               # on the GPU, no TVM

Kernel time: the median over ``--repeat`` profiled runs (the ways alternating) of the sum of OpenCL
event times, per model and per kernel family; wall time likewise over unprofiled runs; the outputs
compared with the first way's (``ways.py``). Each add, slice, concat, depthwise and
``hierarchical_depthwise`` launch (shape, median us) is in the JSON.
"""

from __future__ import annotations

import contextlib

from common import log
from tir_adreno import runtime
from ways import arguments, build_ways, compare, load_ways, parse, save_results

WAYS = ("apart", "tail", "fused")


@contextlib.contextmanager
def _without(tail: bool):
    """``strategy.conv.hierarchical_depthwise`` off while compiling, and with ``tail`` the block
    tail's permuted residual left to its own add kernel (the plan before)."""
    from tir_adreno.passes.rules import conv as conv_rules
    from tir_adreno.strategy import conv

    saved = conv.hierarchical_depthwise, conv_rules._permuted_residual
    conv.hierarchical_depthwise = lambda profile: False
    if tail:
        conv_rules._permuted_residual = lambda rw, tail_, user: None
    try:
        yield
    finally:
        conv.hierarchical_depthwise, conv_rules._permuted_residual = saved


def main():
    args = parse(arguments(__doc__))
    if args.build_only:
        from tir_adreno.strategy.profile import get_profile

        profile = get_profile(args.target)
        settings = {"apart": lambda: _without(tail=True), "tail": lambda: _without(tail=False)}
        return build_ways(args.onnx, {way: profile for way in WAYS}, args.precision, args.build_only, log, settings)
    device = runtime.get_device(args.device)
    models = load_ways(args.source, WAYS, device)
    detail = ("hierarchical_depthwise", "depthwise_conv2d_nchw4c", "slice_channels", "concat_channels", "add")
    results = compare(models, args.repeat, WAYS, source=args.source, detail=detail)
    save_results("edgenext_blocks", models, results, args, device)


if __name__ == "__main__":
    main()
