"""Layer norm over the channels on a wide GPU (issue 21): kernel time of ONNX models with each layer
norm in the one kernel (a work item per pixel walking all of its channel blocks: what PoCL and
Adreno run) and in the wide form (``layernorm.layer_norm_channels_wide``: a work group per pixel
over its channel blocks, where ``strategy.norm.layer_norm_schedule`` takes it), from one run; every
way is the target's profile otherwise (the group norm and attention splits alike). "wide-all"
spreads every layer norm of at least 2 channel blocks whatever its map (where the rule's
thresholds stand). Each layer norm launch's shape and median time per way are in the JSON (and
those of the GRN statistics, sum_hw and mean_hw: small-map reductions of the same kind).

    python benchmarks/layer_norm_wide.py --onnx convnextv2_atto.onnx edgenext_xx_small.onnx efficientvit_b0.onnx \
        --target nvidia-h200 --build-only DIR                                                        # here (TVM)
    python benchmarks/layer_norm_wide.py --from DIR                                             # on the GPU, no TVM

Kernel time: the median over ``--repeat`` profiled runs (the ways alternating) of the sum of
OpenCL event times, per model and per kernel family; the outputs of each way are compared with
the one kernel's (``ways.py``).
"""

from __future__ import annotations

from ways import main, patched, wide_profile

WAYS = ("one-kernel", "wide", "wide-all")


def _layer_norm_rule(min_blocks: int, max_pixels_per_unit: int):
    """``strategy.norm.layer_norm_schedule``'s thresholds set while compiling."""
    return patched("tir_adreno.strategy.norm", LAYER_NORM_WIDE_MIN_BLOCKS=min_blocks, LAYER_NORM_WIDE_MAX_PIXELS_PER_UNIT=max_pixels_per_unit)


SETTINGS = {"one-kernel": _layer_norm_rule(2**31, 0), "wide-all": _layer_norm_rule(2, 2**31)}


if __name__ == "__main__":
    main(__doc__, "layer_norm_wide", WAYS, profiles=lambda target: dict.fromkeys(WAYS, wide_profile(target, "layer_norm_wide")),
         settings=SETTINGS, detail=("layer_norm_channels", "grn_scale", "sum_hw", "mean_hw"), target_help="a wide device profile")
