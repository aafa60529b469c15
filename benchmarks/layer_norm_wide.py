"""Layer norm over the channels on a wide GPU (issue 21): kernel time of ONNX models with each layer
norm in the one kernel (a work item per pixel walking all of its channel blocks: what PoCL and
Adreno run) and in the wide form (``layernorm.layer_norm_channels_wide``: a work group per pixel
over its channel blocks, where ``strategy.pool.layer_norm_schedule`` takes it), from one run; every
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

import argparse
import contextlib
from pathlib import Path

from common import add_device_argument, log, write_json
from tir_adreno import runtime
from ways import build_ways, compare, load_ways

WAYS = ("one-kernel", "wide", "wide-all")


@contextlib.contextmanager
def _layer_norm_rule(min_blocks: int, max_pixels_per_unit: int):
    """``strategy.pool.layer_norm_schedule``'s thresholds set while compiling."""
    from tir_adreno.strategy import pool

    saved = pool.LAYER_NORM_WIDE_MIN_BLOCKS, pool.LAYER_NORM_WIDE_MAX_PIXELS_PER_UNIT
    pool.LAYER_NORM_WIDE_MIN_BLOCKS, pool.LAYER_NORM_WIDE_MAX_PIXELS_PER_UNIT = min_blocks, max_pixels_per_unit
    try:
        yield
    finally:
        pool.LAYER_NORM_WIDE_MIN_BLOCKS, pool.LAYER_NORM_WIDE_MAX_PIXELS_PER_UNIT = saved


def _settings() -> dict:
    return {"one-kernel": lambda: _layer_norm_rule(2**31, 0), "wide-all": lambda: _layer_norm_rule(2, 2**31)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--onnx", type=Path, nargs="+", default=[], metavar="FILE", help="ONNX models, named by stem")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--precision", default="float32")
    parser.add_argument("--target", default="nvidia-h200", help="a wide device profile (default nvidia-h200)")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--build-only", type=Path, metavar="DIR", help="compile and save the ways into DIR (needs TVM)")
    mode.add_argument("--from", dest="source", type=Path, metavar="DIR", help="run the models saved by --build-only (no TVM)")
    parser.add_argument("--results-dir", type=Path, default=None, help="default: benchmarks/results")
    add_device_argument(parser)
    args = parser.parse_args()
    if args.build_only:
        from tir_adreno.strategy.pool import is_wide
        from tir_adreno.strategy.profile import get_profile

        if not args.onnx:
            parser.error("--build-only needs --onnx FILE...")
        profile = get_profile(args.target)
        if not is_wide(profile):
            raise SystemExit(f"layer_norm_wide: {args.target} is not wide ({profile.compute_units} compute units): it runs one kernel")
        return build_ways(args.onnx, {way: profile for way in WAYS}, args.precision, args.build_only, log, _settings())
    device = runtime.get_device(args.device)
    models = load_ways(args.source, WAYS, device)
    results = compare(models, args.repeat, WAYS, detail=("layer_norm_channels", "grn_scale", "sum_hw", "mean_hw"))
    precision = next(iter(next(iter(models.values())).values())).precision
    payload = {"repeat": args.repeat, "precision": precision, "models": results}
    name = "layer_norm_wide" + ("" if precision == "float32" else f"-{precision}")
    log(f"wrote {write_json(name, device.name, payload, args.results_dir)}")


if __name__ == "__main__":
    main()
