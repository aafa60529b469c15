"""The fused depthwise -> 1x1 conv kernel (primfuncs.conv.depthwise_pointwise_nchw4c) against
the float64 composition of tir_adreno.reference's depthwise and 1x1 convs.

Fresh random inputs, poisoned outputs (every pixel written, padding lanes zero), both scopes,
stride 1 and 2, with and without residual, split_k, the 1-D grid, and NaN/Inf as the unfused kernels.
"""

import numpy as np
import pytest
from hypothesis import example, given

from helpers.conv import CONV_RTOL as RTOL
from helpers.conv import check_blocked_output, fused_inputs
from helpers.nonfinite import assert_matches, nonfinite, run_finite_poison
from helpers.numeric import assert_close, run_kernel, sanitized, unpack_nchw4c
from helpers.strategies import SCOPES, SEEDS, STRIDE1_RESIDUAL, fused_cases

from primfuncs import conv
from primfuncs._common import BUFFER, TEXTURE
from primfuncs.conv import ConvConfig
from primfuncs.epilogue import Epilogue

# The float64 reference computes inf - inf on purpose (the non-finite case).
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")


STRIDE2 = dict(data_shape=(2, 8, 9, 8), dw_weight_shape=(8, 1, 3, 3), pw_weight_shape=(5, 8, 1, 1), strides=2,
               padding=(1, 1, 0, 0), dw_epilogue=Epilogue(bias=True, activation="relu6"),
               epilogue=Epilogue(bias=True), config=ConvConfig(4, 2, (2, 2, 2), split_k=2))


@given(case=fused_cases(), scope=SCOPES, seed=SEEDS)
@example(case=STRIDE1_RESIDUAL, scope=TEXTURE, seed=0)
@example(case=STRIDE2, scope=BUFFER, seed=1)
def test_depthwise_pointwise_matches_numpy(device, case, scope, seed):
    inputs, ref = fused_inputs(np.random.default_rng(seed), case)
    with sanitized(seed):
        out = run_kernel(device, conv.depthwise_pointwise_nchw4c(**case, scope=scope), *inputs)
    check_blocked_output(out, ref.shape[1])
    assert_close(unpack_nchw4c(out, ref.shape[1]), ref, RTOL)


@pytest.mark.parametrize("scope", [TEXTURE, BUFFER])
def test_depthwise_pointwise_nonfinite(device, scope):
    """NaN/+-Inf in X propagate as through the unfused kernels (relu6 after the depthwise clamps
    Inf, keeps NaN); the padding lanes of the output stay 0."""
    case = dict(STRIDE1_RESIDUAL, epilogue=Epilogue(bias=True, activation="relu"))
    inputs, ref = fused_inputs(np.random.default_rng(5), case, make=lambda rng, shape: nonfinite(rng, shape, 3, scale=4.0))
    out = run_finite_poison(device, conv.depthwise_pointwise_nchw4c(**case, scope=scope), *inputs)
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
