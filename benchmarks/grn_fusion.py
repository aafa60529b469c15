"""ConvNeXt-V2's GRN (issue 21): launches and kernel time of ONNX models with GRN apart ("apart":
the profile with fusion off, ``launch_cost_macs`` 0: ``multiply``, ``sum_hw``, ``grn_scale``,
``multiply_channels``, ``affine``, ``add`` before the conv, the plan before the fusion; nothing
else in ConvNeXt-V2 fuses), in two kernels read by the 1x1 conv after it ("fused":
``sum_squares_hw``, ``grn_scale`` writing ``1 + gamma * Nx``, the conv reading ``x * s`` with
``W . beta`` in its bias; ``strategy.fusion.fold_grn`` off while compiling) and in one kernel and that
conv ("folded": the profile's own plan: where the conv runs tiled it computes ``s`` from the sums
of squares itself, no ``grn_scale``), from one run.

    python benchmarks/grn_fusion.py --onnx convnextv2_atto.onnx --target nvidia-h200 --build-only DIR   # here (TVM)
    python benchmarks/grn_fusion.py --from DIR                                                          # on the GPU, no TVM

Kernel time: the median over ``--repeat`` profiled runs (the ways alternating) of the sum of
OpenCL event times, per model and per kernel family; wall time likewise over unprofiled runs; the
outputs of the later ways are compared with the first's (``ways.py``).
"""

from __future__ import annotations

from ways import main, patched

WAYS = ("apart", "fused", "folded")
#: "fused": GRN's scale in its own ``grn_scale`` kernel (the conv never computes it).
SETTINGS = {"fused": patched("tir_adreno.strategy.fusion", fold_grn=lambda *args, **kwargs: False)}


def _profiles(target: str) -> dict:
    from tir_adreno.strategy.profile import get_profile, without_fusion

    profile = get_profile(target)
    return {"apart": without_fusion(profile), "fused": profile, "folded": profile}


if __name__ == "__main__":
    main(__doc__, "grn_fusion", WAYS, profiles=_profiles, settings=SETTINGS, detail=("grn_scale", "sum_squares", "conv2d"))
