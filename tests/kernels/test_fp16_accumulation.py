"""Which float16 convs accumulate in float32 (``strategy.precision.conv_accumulator_dtype``) and
how the strategy hands that to the factories; the sources are checked in test_fp16.py."""

import pytest

from primfuncs import conv
from primfuncs._common import TEXTURE, TEXTURE_WEIGHT
from primfuncs.epilogue import Epilogue
from tir_adreno.strategy import conv as strategy, fusion
from tir_adreno.strategy.precision import FLOAT_ACCUMULATION_MIN_K, conv_accumulator_dtype
from tir_adreno.strategy.profile import get_profile


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
    return kwargs


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
        assert kwargs.get("acc_dtype") == acc


def test_acc_dtype_is_float32_or_the_kernel_dtype():
    with pytest.raises(TypeError, match="acc_dtype"):
        conv.conv2d_nchw4c((1, 8, 4, 4), (8, 8, 1, 1), dtype="float32", acc_dtype="float16")
    with pytest.raises(TypeError, match="acc_dtype"):
        conv.depthwise_conv2d_nchw4c((1, 8, 4, 4), (8, 1, 3, 3), dtype="float16", acc_dtype="int32")
