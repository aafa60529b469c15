"""The fused depthwise -> 1x1 conv kernel (primfuncs.conv2d.depthwise_pointwise_nchw4c) against
the float64 composition of tir_adreno.reference's depthwise and 1x1 convs.

Fresh random inputs, poisoned outputs (every pixel written, padding lanes zero), both scopes,
stride 1 and 2, with and without residual, split_k, the 1-D grid, and NaN/Inf as the unfused kernels.
"""

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from strategies import SCOPES, SEEDS, WORK_GROUPS
from test_conv2d import RTOL, check_blocked_output
from test_nonfinite import assert_matches, nonfinite
from test_nonfinite import run as run_nonfinite
from util import assert_close, pack_nchw4c, pack_oihw4o, rand, run_kernel, unpack_nchw4c

from primfuncs import conv2d as conv
from primfuncs._common import BUFFER, TEXTURE
from primfuncs.conv2d import ConvConfig
from primfuncs.epilogue import Epilogue
from tir_adreno import reference
from tir_adreno.strategy.packing import pack_bias

# The float64 reference computes inf - inf on purpose (the non-finite case).
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")


@st.composite
def fused_cases(draw):
    """A small depthwise (3x3 or 1x1, stride 1 or 2, asymmetric padding) -> 1x1 pair."""
    n, c, o = draw(st.integers(1, 2)), draw(st.integers(1, 10)), draw(st.integers(1, 10))
    k = draw(st.sampled_from([3, 3, 1]))
    stride = draw(st.integers(1, 2))
    padding = tuple(draw(st.integers(0, k // 2)) for _ in range(4))
    h, w = draw(st.integers(k, 9)), draw(st.integers(k, 9))
    dw_epilogue = Epilogue(bias=draw(st.booleans()), activation=draw(st.sampled_from([None, "relu6", "sigmoid"])))
    epilogue = Epilogue(bias=draw(st.booleans()), activation=draw(st.sampled_from([None, "relu", "relu6"])),
                        residual=draw(st.booleans()))
    grid = draw(st.sampled_from(["3d", "3d", "split", "flat"]))  # ConvConfig.flat: a 1-D grid of (g, 1, 1) groups
    work_group = (draw(st.sampled_from([1, 5, 16])), 1, 1) if grid == "flat" else draw(st.sampled_from(WORK_GROUPS))
    config = ConvConfig(draw(st.integers(1, 4)), draw(st.integers(1, 4)), work_group, split_k=2 if grid == "split" else 1,
                        flat=grid == "flat")
    return dict(data_shape=(n, c, h, w), dw_weight_shape=(c, 1, k, k), pw_weight_shape=(o, c, 1, 1), strides=stride,
                padding=padding, dw_epilogue=dw_epilogue, epilogue=epilogue, config=config)


# MobileNetV2's block tails: stride 1 with the residual add, stride 2 without (C and O tails).
STRIDE1_RESIDUAL = dict(data_shape=(1, 6, 7, 9), dw_weight_shape=(6, 1, 3, 3), pw_weight_shape=(9, 6, 1, 1), strides=1,
                        padding=1, dw_epilogue=Epilogue(bias=True, activation="relu6"),
                        epilogue=Epilogue(bias=True, residual=True), config=ConvConfig(2, 3, (4, 2, 1)))
STRIDE2 = dict(data_shape=(2, 8, 9, 8), dw_weight_shape=(8, 1, 3, 3), pw_weight_shape=(5, 8, 1, 1), strides=2,
               padding=(1, 1, 0, 0), dw_epilogue=Epilogue(bias=True, activation="relu6"),
               epilogue=Epilogue(bias=True), config=ConvConfig(4, 2, (2, 2, 2), split_k=2))


def fused_inputs(rng, case, make=rand):
    """(kernel inputs in their blocked layouts, float64 reference output) of ``case``."""
    dw, pw = conv.depthwise_pointwise_geometry(case["data_shape"], case["dw_weight_shape"], case["pw_weight_shape"],
                                               case["strides"], case["padding"])
    dw_epi, epi = case["dw_epilogue"], case["epilogue"]
    x, w_dw, w_pw = make(rng, case["data_shape"]), rand(rng, case["dw_weight_shape"]), rand(rng, case["pw_weight_shape"])
    dw_bias = rand(rng, (dw.c,)) if dw_epi.bias else None
    bias = rand(rng, (pw.o,)) if epi.bias else None
    residual = rand(rng, pw.out_shape) if epi.residual else None
    ref = reference.depthwise_pointwise(x, w_dw, w_pw, dw.strides, dw.padding, dw.dilation, dw_bias, dw_epi.activation,
                                        bias, residual, epi.activation)
    inputs = [pack_nchw4c(x), pack_oihw4o(w_dw), *([] if dw_bias is None else [pack_bias(dw_bias)]), pack_oihw4o(w_pw),
              *([] if bias is None else [pack_bias(bias)]), *([] if residual is None else [pack_nchw4c(residual)])]
    return inputs, ref


@given(case=fused_cases(), scope=SCOPES, seed=SEEDS)
@example(case=STRIDE1_RESIDUAL, scope=TEXTURE, seed=0)
@example(case=STRIDE2, scope=BUFFER, seed=1)
def test_depthwise_pointwise_matches_numpy(device, case, scope, seed):
    inputs, ref = fused_inputs(np.random.default_rng(seed), case)
    out = run_kernel(device, conv.depthwise_pointwise_nchw4c(**case, scope=scope), *inputs)
    check_blocked_output(out, ref.shape[1])
    assert_close(unpack_nchw4c(out, ref.shape[1]), ref, RTOL)


@pytest.mark.parametrize("scope", [TEXTURE, BUFFER])
def test_depthwise_pointwise_nonfinite(device, scope):
    """NaN/+-Inf in X propagate as through the unfused kernels (relu6 after the depthwise clamps
    Inf, keeps NaN); the padding lanes of the output stay 0."""
    case = dict(STRIDE1_RESIDUAL, epilogue=Epilogue(bias=True, activation="relu"))
    inputs, ref = fused_inputs(np.random.default_rng(5), case, make=lambda rng, shape: nonfinite(rng, shape, 3, scale=4.0))
    out = run_nonfinite(device, conv.depthwise_pointwise_nchw4c(**case, scope=scope), *inputs)
    assert np.all(unpack_nchw4c(out, 12)[:, 9:] == 0)
    assert_matches(unpack_nchw4c(out, 9), ref, rtol=RTOL)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(dw_weight_shape=(12, 1, 3, 3)), "multiplier 1"),
        (dict(pw_weight_shape=(9, 6, 3, 3)), "pw_weight_shape"),
        (dict(pw_weight_shape=(9, 5, 1, 1)), "pw_weight_shape"),
        (dict(dw_epilogue=Epilogue(residual=True)), "dw_epilogue"),
    ],
)
def test_depthwise_pointwise_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        conv.depthwise_pointwise_nchw4c(**{**STRIDE1_RESIDUAL, **kwargs})
