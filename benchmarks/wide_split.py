"""Per-sample statistics on a wide GPU (issue 21): kernel time of ONNX models with group norm and
the attention statistics (XCA's weights, linear attention's KV) in one kernel (one work group per
(sample, group or head): what PoCL and Adreno run) and in their split forms (partial statistics
over many work groups, then a kernel combining them: what the H200's profile picks,
``strategy.norm.group_norm_schedule`` / ``attention_schedule``), from one run. "one-kernel" is the
target's profile with no more than ``ONE_GROUP_MAX_COMPUTE_UNITS`` compute units, "split" the
profile itself; nothing else in these models depends on the compute units.

    python benchmarks/wide_split.py --onnx mobilevitv2_050.onnx edgenext_xx_small.onnx efficientvit_b0.onnx \
        --target nvidia-h200 --build-only DIR                                                               # here (TVM)
    python benchmarks/wide_split.py --from DIR                                                         # on the GPU, no TVM

Kernel time: the median over ``--repeat`` profiled runs (the two ways alternating) of the sum of
OpenCL event times, per model and per kernel family (the table printed last but one); the outputs
of the two ways are compared with each other (``ways.py``).
"""

from __future__ import annotations

from dataclasses import replace

from ways import main, wide_profile

WAYS = ("one-kernel", "split")


def _profiles(target: str) -> dict:
    from tir_adreno.strategy.width import ONE_GROUP_MAX_COMPUTE_UNITS

    profile = wide_profile(target, "wide_split")
    return {"one-kernel": replace(profile, compute_units=ONE_GROUP_MAX_COMPUTE_UNITS), "split": profile}


if __name__ == "__main__":
    main(__doc__, "wide_split", WAYS, profiles=_profiles, target_help="a wide device profile")
