"""Which float16 convs accumulate in float32 (``strategy.precision.conv_accumulator_dtype``) and
how the strategy hands that to the factories; the sources are checked in test_fp16.py."""

import re
from dataclasses import fields

import pytest

from primfuncs import attention, conv, excite, layernorm, reduce
from primfuncs._common import TEXTURE, TEXTURE_WEIGHT
from primfuncs.epilogue import Epilogue
from primfuncs.conv.prologue import Prologue
from tir_adreno.codegen import build
from tir_adreno.strategy import conv as strategy, fusion
from tir_adreno.strategy.precision import FLOAT_ACCUMULATION_MIN_K, conv_accumulator_dtype
from tir_adreno.strategy.profile import get_profile

F16 = "float16"


def test_float16_convs_accumulate_in_float32_beyond_the_threshold_only():
    k = FLOAT_ACCUMULATION_MIN_K
    assert conv_accumulator_dtype("float16", k) == "float16"
    assert conv_accumulator_dtype("float16", k + 1) == "float32"
    assert conv_accumulator_dtype("float16", 9) == conv_accumulator_dtype("float16", 25) == "float16"  # depthwise
    for precision in ("float32", "float16_acc32"):
        assert conv_accumulator_dtype(precision, 4608) == "float32"


def _kwargs(geom, precision, algorithm="direct"):
    plan = strategy.conv2d_plan(geom, Epilogue(bias=True), precision, get_profile("adreno"),
                                choice=strategy.ConvChoice(algorithm))
    (_, kwargs), = plan.stages
    return _arguments(kwargs)


def _arguments(kwargs):
    """The stage's arguments with the prologue's set fields among them (a Winograd or fused stage
    calls the factory, which takes them as a ``Prologue``; a direct stage the strategy's wrapper)."""
    prologue = kwargs.get("prologue", Prologue())
    return {**kwargs, **{f.name: getattr(prologue, f.name) for f in fields(prologue) if getattr(prologue, f.name) != f.default}}


@pytest.mark.parametrize("algorithm", ["direct", "winograd_2x2"])
def test_plans_name_acc_dtype_for_long_float16_convs_and_leave_float32_plans_as_they_were(algorithm):
    long = conv.conv2d_geometry((1, 64, 8, 8), (16, 64, 3, 3), padding=1)  # K = 576 (Winograd's GEMM: 64)
    short = conv.conv2d_geometry((1, 8, 8, 8), (16, 8, 3, 3), padding=1)  # K = 72 (Winograd's GEMM: 8)
    assert _kwargs(long, "float16", algorithm)["acc_dtype"] == "float32"
    for precision in ("float32", "float16_acc32"):
        assert "acc_dtype" not in _kwargs(long, precision, algorithm)  # float32 kernels: same arguments, same keys
    assert ("acc_dtype" in _kwargs(short, "float16", algorithm)) == (algorithm == "direct")
    depthwise = conv.conv2d_geometry((1, 64, 8, 8), (64, 1, 3, 3), padding=1, groups=64)
    assert "acc_dtype" not in _kwargs(depthwise, "float16")


def test_the_fused_kernel_accumulates_its_1x1_conv_by_its_channels():
    dw = conv.conv2d_geometry((1, 64, 8, 8), (64, 1, 3, 3), padding=1, groups=64)
    pw = conv.conv2d_geometry((1, 64, 8, 8), (32, 64, 1, 1))
    for precision, acc in (("float16", "float32"), ("float32", None)):
        plan = fusion.FusedPlan(dw, pw, precision, conv.ConvConfig(), "texture", "default", TEXTURE, TEXTURE_WEIGHT, 0)
        _, kwargs = plan.stage(Epilogue(), Epilogue())
        assert _arguments(kwargs).get("acc_dtype") == acc


def test_acc_dtype_is_float32_or_the_kernel_dtype():
    with pytest.raises(TypeError, match="acc_dtype"):
        conv.conv2d_nchw4c((1, 8, 4, 4), (8, 8, 1, 1), dtype="float32", prologue=Prologue(acc_dtype="float16"))
    with pytest.raises(TypeError, match="acc_dtype"):
        conv.depthwise_conv2d_nchw4c((1, 8, 4, 4), (8, 1, 3, 3), dtype="float16", prologue=Prologue(acc_dtype="int32"))


# -- the contract per kernel family ------------------------------------------------------------------
# float16: sums over more than FLOAT_ACCUMULATION_MIN_K terms in float32, read in the kernels'
# OpenCL C (no device here runs half math). float16_acc32: float32 kernels on half tensors, run on
# PoCL with sums long enough that a half accumulator would break the fp16 bound.

#: A half product converted to float and added to a float accumulator (primfuncs._common.multiply_add).
FLOAT_MULTIPLY_ADD = re.compile(r"acc_ptr\[\d+\] = \(acc_ptr\[\d+\] \+ \(convert_float\(\(\w+\[\d+\] \* \w+\[\d+\]\)\)\)\)")


def _local_arrays(source: str) -> set[str]:
    """``"float acc"``, ``"half px"``, ...: the element type and name of every private and local array."""
    return {f"{t} {n}" for t, n in re.findall(r"(?:__local )?(half|float)\d? (\w+)_ptr\[", source)}


def _fused_source(channels: int) -> str:
    """The float16 fused depthwise -> 1x1 kernel as the strategy plans it (K of its 1x1 = ``channels``)."""
    dw = conv.conv2d_geometry((1, channels, 6, 6), (channels, 1, 3, 3), padding=1, groups=channels)
    pw = conv.conv2d_geometry((1, channels, 6, 6), (8, channels, 1, 1))
    plan = fusion.FusedPlan(dw, pw, "float16", conv.ConvConfig(), "texture", "default", TEXTURE, TEXTURE_WEIGHT, 0)
    factory, kwargs = plan.stage(Epilogue(bias=True), Epilogue(bias=True))
    return build.build(factory(**kwargs)).source


def test_float16_fused_depthwise_pointwise_accumulates_by_the_rule():
    """The fused kernel's 1x1 sums over K = C: float32 (each half product converted) at C = 64,
    half at C = 16 (Adreno's half rate, as a depthwise conv's)."""
    long, short = _fused_source(64), _fused_source(16)
    assert "float acc" in _local_arrays(long) and "half acc" not in _local_arrays(long)
    assert FLOAT_MULTIPLY_ADD.search(long) and "half res" in _local_arrays(long)  # the tile back to half before its epilogue
    assert "half acc" in _local_arrays(short) and "float acc" not in _local_arrays(short)


#: float16 kernels whose statistics are long sums (over pixels, tokens or channels): each keeps them
#: in float32 (the arrays named) and holds no half array but its loaded pixels and constants.
STATISTICS_KERNELS = {
    "sum_squares_hw": (lambda: reduce.reduce((1, 16, 8, 8, 4), 64, "sum", (2, 3), True, dtype=F16, scope=TEXTURE, square=True,
                                             out_dtype="float32"), {"acc", "partial"}),
    "group_norm": (lambda: layernorm.group_norm((1, 16, 8, 8, 4), 64, 2, 1e-5, dtype=F16, scope=TEXTURE), {"acc", "sums", "stats"}),
    "group_norm_partials": (lambda: layernorm.group_norm_partials((1, 16, 8, 8, 4), 64, 2, 4, dtype=F16, scope=TEXTURE),
                            {"acc", "sums", "stats"}),
    "group_norm_apply": (lambda: layernorm.group_norm_apply((1, 16, 8, 8, 4), 64, 2, 4, dtype=F16, scope=TEXTURE),
                         {"acc", "folded", "stats"}),
    "excitation": (lambda: excite.excitation((1, 16, 8, 8, 4), 64, 8, 64, dtype=F16, scope=TEXTURE), {"acc", "sums", "partial", "P", "H"}),
    "xca_weights": (lambda: attention.xca_weights((1, 18, 7, 7, 4), 72, 2, 12, 0, 24, dtype=F16, scope=TEXTURE), {"dot", "kk", "q"}),
    "xca_partials": (lambda: attention.xca_partials((1, 18, 7, 7, 4), 72, 2, 12, 0, 24, 3, dtype=F16, scope=TEXTURE), {"dot", "kk", "q"}),
    "xca_finish": (lambda: attention.xca_finish(1, 2, 12, 3, dtype=F16), {"s", "m", "total"}),
    "linear_kv": (lambda: attention.linear_kv((1, 12, 9, 9, 4), 48, 2, 8, 16, 32, dtype=F16, scope=TEXTURE), {"kv", "k"}),
    "layer_norm_channels": (lambda: layernorm.layer_norm_channels((1, 16, 8, 8, 4), 64, 1e-6, dtype=F16, scope=TEXTURE), {"stats"}),
}
#: Loaded pixels, weights and outputs: half is their storage, not a sum.
HALF_OPERANDS = {"px", "pq", "pk", "x", "gb", "xp", "wp", "wd", "xs", "out", "res"}


@pytest.mark.parametrize("name", sorted(STATISTICS_KERNELS))
def test_float16_statistics_accumulate_in_float32(name):
    """(The norm folds into convs are float32 kernels only: tests/kernels/test_conv2d_*norm.py, _grn.py.)"""
    make, sums = STATISTICS_KERNELS[name]
    arrays = _local_arrays(build.build(make()).source)
    halves = {a[len("half "):] for a in arrays if a.startswith("half ")}
    assert not halves - HALF_OPERANDS, f"{name}: half sums {sorted(halves - HALF_OPERANDS)}"
    assert {f"float {s}" for s in sums} <= arrays, f"{name}: {sorted(arrays)}"

