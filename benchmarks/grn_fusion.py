"""ConvNeXt-V2's GRN (issue 21): launches and kernel time of ONNX models with GRN in two kernels
and its application read by the 1x1 conv after it ("fused": ``sum_squares_hw``, ``grn_scale``
writing ``1 + gamma * Nx``, the conv reading ``x * s`` with ``W . beta`` in its bias) and apart
("apart": the profile with fusion off, ``launch_cost_macs`` 0: ``multiply``, ``sum_hw``,
``grn_scale``, ``multiply_channels``, ``affine``, ``add`` before the conv, the plan before the
fusion; nothing else in ConvNeXt-V2 fuses), from one run.

    python benchmarks/grn_fusion.py --onnx convnextv2_atto.onnx --target nvidia-h200 --build-only DIR   # here (TVM)
    python benchmarks/grn_fusion.py --from DIR                                                          # on the GPU, no TVM

Kernel time: the median over ``--repeat`` profiled runs (the two ways alternating) of the sum of
OpenCL event times, per model and per kernel family; wall time likewise over unprofiled runs; the
outputs of the two ways are compared with each other (``ways.py``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common import add_device_argument, log, write_json
from tir_adreno import runtime
from ways import build_ways, compare, load_ways

WAYS = ("apart", "fused")


def _profiles(target: str) -> dict:
    from tir_adreno.strategy.profile import get_profile, without_fusion

    profile = get_profile(target)
    return {"apart": without_fusion(profile), "fused": profile}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--onnx", type=Path, nargs="+", default=[], metavar="FILE", help="ONNX models, named by stem")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--precision", default="float32")
    parser.add_argument("--target", default="nvidia-h200", help="the device profile of --build-only (default nvidia-h200)")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--build-only", type=Path, metavar="DIR", help="compile and save both ways into DIR (needs TVM)")
    mode.add_argument("--from", dest="source", type=Path, metavar="DIR", help="run the models saved by --build-only (no TVM)")
    parser.add_argument("--results-dir", type=Path, default=None, help="default: benchmarks/results")
    add_device_argument(parser)
    args = parser.parse_args()
    if args.build_only:
        if not args.onnx:
            parser.error("--build-only needs --onnx FILE...")
        return build_ways(args.onnx, _profiles(args.target), args.precision, args.build_only, log)
    device = runtime.get_device(args.device)
    models = load_ways(args.source, WAYS, device)
    results = compare(models, args.repeat, WAYS)
    precision = next(iter(next(iter(models.values())).values())).precision
    payload = {"repeat": args.repeat, "precision": precision, "models": results}
    name = "grn_fusion" + ("" if precision == "float32" else f"-{precision}")
    log(f"wrote {write_json(name, device.name, payload, args.results_dir)}")


if __name__ == "__main__":
    main()
