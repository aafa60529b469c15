"""Direct conv configs (primfuncs.conv): split_k kernels and the per-device-class defaults (tir_adreno.strategy.defaults).

split_k kernels sum partial tiles of several work items through local memory;
they run here on PoCL against the float64 NumPy conv (helpers.conv), with fresh
random inputs and poisoned outputs (every pixel written, padding lanes zero).
"""

import numpy as np
import pytest
from hypothesis import example, given
from helpers.conv import CONV_RTOL as RTOL
from helpers.conv import check_blocked_output, run_conv_case
from helpers.numeric import assert_close, sanitized
from helpers.strategies import SEEDS, SPLIT_3X3, SPLIT_GROUPED_ALIGNED, split_cases

from primfuncs import conv
from primfuncs._common import BUFFER, TEXTURE
from primfuncs.epilogue import Epilogue
from tir_adreno.strategy import defaults
from tir_adreno.strategy.profile import KINDS


@pytest.mark.parametrize("scope", [TEXTURE, BUFFER])
@given(case=split_cases(), seed=SEEDS)
@example(case=SPLIT_3X3, seed=0)
@example(case=SPLIT_GROUPED_ALIGNED, seed=1)
def test_split_k_matches_numpy(device, scope, case, seed):
    with sanitized(seed):
        got, ref, blocked_out = run_conv_case(device, case, scope, np.random.default_rng(seed))
    check_blocked_output(blocked_out, ref.shape[1])
    assert_close(got, ref, RTOL)


# ResNet-50-like layers, scaled down, where each class's default differs (split_k on "gpu").
DEFAULT_CASES = [
    ((1, 64, 7, 7), (32, 64, 3, 3), 1),  # deep 3x3: gpu splits the 16 blocks
    ((1, 96, 5, 5), (40, 96, 1, 1), 0),  # deep 1x1
    ((1, 3, 17, 17), (8, 3, 3, 3), 1),  # C < 8: no split on any class
    ((1, 16, 6, 6), (16, 1, 3, 3), 1),  # depthwise
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("data_shape, weight_shape, padding", DEFAULT_CASES)
def test_default_config_per_device_kind(device, kind, data_shape, weight_shape, padding):
    """Each class's default builds a correct kernel; "gpu" splits the deep layers."""
    depthwise = weight_shape[1] == 1 and data_shape[1] > 1
    groups = data_shape[1] if depthwise else 1
    geom = conv.conv2d_geometry(data_shape, weight_shape, 1, padding, 1, groups)
    config = defaults.default_config(geom, defaults.kind_profile(kind))
    wg = config.work_group
    assert wg[0] * wg[1] * wg[2] * config.split_k <= 256
    if kind == "gpu" and not depthwise and data_shape[1] >= 8:
        assert config.split_k > 1, config
    if kind != "gpu":
        assert config.split_k == 1, config
    if depthwise:  # one channel block per item; "gpu": the window in registers, 2 columns
        assert config.oc_block == 1 and config.register_window == (kind == "gpu"), config
    case = dict(
        data_shape=data_shape, weight_shape=weight_shape, strides=1, padding=padding, dilation=1, groups=groups,
        epilogue=Epilogue(bias=True, activation="relu"), config=config,
    )
    if depthwise:
        case["depthwise"] = True
    got, ref, blocked_out = run_conv_case(device, case, TEXTURE, np.random.default_rng(5))
    check_blocked_output(blocked_out, ref.shape[1])
    assert_close(got, ref, RTOL)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: conv.ConvConfig(split_k=0), ValueError, "split_k must be an int in 1..64"),
        (lambda: conv.ConvConfig(work_group=(8, 8, 1), split_k=8), ValueError, "x split_k 8 has more than 256"),
        (
            lambda: conv.depthwise_conv2d_nchw4c((1, 8, 6, 6), (8, 1, 3, 3), config=conv.ConvConfig(1, 4, split_k=2)),
            ValueError, "split_k=2 splits the input channel blocks",
        ),
        (
            lambda: conv.conv2d_nchw4c((1, 64, 32, 32), (64, 64, 1, 1), config=conv.ConvConfig(4, 4, (8, 4, 1), 8)),
            ValueError, "bytes of local memory",
        ),
        (lambda: defaults.kind_profile("tpu"), ValueError, "kind must be"),
    ],
)
def test_config_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()
