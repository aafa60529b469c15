"""The fused depthwise -> 1x1 conv kernel (primfuncs.conv.depthwise_pointwise_nchw4c) against
the float64 composition of tir_adreno.reference's depthwise and 1x1 convs, and the conv with an
input gate (``conv2d_nchw4c(gate_scope=...)``, a squeeze-excitation's multiply) against
``conv(X * G[n, c])``.

Fresh random inputs, poisoned outputs (every pixel written, padding lanes zero), both scopes,
stride 1 and 2, with and without residual, split_k, the 1-D grid, and NaN/Inf as the unfused kernels.
"""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from helpers.conv import CONV_RTOL as RTOL
from helpers.conv import check_blocked_output, fused_inputs, reference_epilogue
from helpers.nonfinite import assert_matches, nonfinite, run_finite_poison
from helpers.numeric import assert_close, pack_nchw4c, pack_oihw4o, rand, run_kernel, sanitized, unpack_nchw4c
from helpers.strategies import SCOPES, SEEDS, STRIDE1_RESIDUAL, WORK_GROUPS, fused_cases

from primfuncs import conv
from primfuncs._common import BUFFER, TEXTURE
from primfuncs.conv import ConvConfig
from primfuncs.epilogue import Epilogue
from primfuncs.conv.prologue import Prologue
from tir_adreno import ops
from tir_adreno.reference import conv2d_nchw
from tir_adreno.strategy.packing import pack_bias

# The float64 reference computes inf - inf on purpose (the non-finite case).
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")


STRIDE2 = dict(data_shape=(2, 8, 9, 8), dw_weight_shape=(8, 1, 3, 3), pw_weight_shape=(5, 8, 1, 1), strides=2,
               padding=(1, 1, 0, 0), prologue=Prologue(depthwise=Epilogue(bias=True, activation="relu6")),
               epilogue=Epilogue(bias=True), config=ConvConfig(4, 2, (2, 2, 2), split_k=2))
# A grouped 1x1 with block-aligned groups (EfficientViT's multi-scale aggregation: a 5x5 depthwise,
# then groups of 16 channels): each tile computes its group's input blocks only. 3 groups of 8 -> 8
# channels (the 4-block tile shrinks to the group's 2, split_k over its 2 input blocks); 2 groups of
# 12 -> 4 channels, with both biases and the residual.
GROUPED_SPLIT = dict(data_shape=(1, 24, 7, 6), dw_weight_shape=(24, 1, 5, 5), pw_weight_shape=(24, 8, 1, 1), groups=3,
                     strides=1, padding=2, prologue=Prologue(depthwise=Epilogue()), epilogue=Epilogue(),
                     config=ConvConfig(4, 2, (2, 2, 2), split_k=2))
GROUPED_RESIDUAL = dict(data_shape=(2, 24, 5, 7), dw_weight_shape=(24, 1, 3, 3), pw_weight_shape=(8, 12, 1, 1), groups=2,
                        strides=1, padding=1, prologue=Prologue(depthwise=Epilogue(bias=True, activation="relu6")),
                        epilogue=Epilogue(bias=True, residual=True), config=ConvConfig(2, 3, (4, 2, 1)))


@given(case=fused_cases(), scope=SCOPES, seed=SEEDS)
@example(case=STRIDE1_RESIDUAL, scope=TEXTURE, seed=0)
@example(case=STRIDE2, scope=BUFFER, seed=1)
@example(case=GROUPED_SPLIT, scope=BUFFER, seed=2)
@example(case=GROUPED_RESIDUAL, scope=TEXTURE, seed=3)
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
        (dict(prologue=Prologue(depthwise=Epilogue(residual=True))), "prologue.depthwise"),
        (dict(pw_weight_shape=(8, 3, 1, 1), groups=2), "groups=2: .* multiples of 4"),  # 3 input channels a group
        (dict(data_shape=(1, 16, 7, 9), dw_weight_shape=(16, 1, 3, 3), pw_weight_shape=(12, 8, 1, 1), groups=2),
         "groups=2: .* multiples of 4"),  # 6 output channels a group
    ],
)
def test_depthwise_pointwise_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        conv.depthwise_pointwise_nchw4c(**{**STRIDE1_RESIDUAL, **kwargs})


# -- the input gate: a squeeze-excitation's multiply x * gate[n, c] read by the conv (gate_scope) ------

#: float16_acc32: X, the gate, the weights and Y in half images, float32 arithmetic: the output's
#: half rounding (2^-11 of each element) dominates, as in tests/passes/test_excite.py.
HALF_RTOL = 2.0**-10


@st.composite
def gated_cases(draw):
    """A small conv with an input gate: 1x1 (the SE projection) or 3x3 with asymmetric padding,
    stride 1 or 2, dense or block-aligned groups, C not a multiple of 4, tiles that overhang,
    split_k, the 1-D grid and the tiled GEMM (dense; a gate read as it stages the input)."""
    n, k = draw(st.integers(1, 2)), draw(st.sampled_from([1, 1, 3]))
    grid = draw(st.sampled_from(["3d", "3d", "split", "flat", "tiled"]))
    groups = 1 if grid == "tiled" else draw(st.sampled_from([1, 1, 2]))
    c, o = (8, 8) if groups == 2 else (draw(st.integers(1, 13)), draw(st.integers(1, 10)))
    padding = tuple(draw(st.integers(0, k // 2)) for _ in range(4))
    work_group = (draw(st.sampled_from([1, 5, 16])), 1, 1) if grid == "flat" else draw(st.sampled_from(WORK_GROUPS))
    if grid == "tiled":
        config = ConvConfig(draw(st.integers(1, 2)), draw(st.integers(1, 4)), draw(st.sampled_from([(4, 2, 1), (8, 1, 1)])),
                            split_k=draw(st.integers(1, 2)), tiled=True, k_chunk=draw(st.integers(1, 4)))
    else:
        config = ConvConfig(draw(st.integers(1, 4)), draw(st.integers(1, 4)), work_group, split_k=2 if grid == "split" else 1,
                            flat=grid == "flat")
    epilogue = Epilogue(bias=draw(st.booleans()), activation=draw(st.sampled_from([None, "relu", "hardswish"])),
                        residual=draw(st.booleans()))
    return dict(data_shape=(n, c, draw(st.integers(k, 9)), draw(st.integers(k, 9))), weight_shape=(o, c // groups, k, k),
                strides=draw(st.integers(1, 2)), padding=padding, groups=groups, epilogue=epilogue, config=config)


GATED_1X1 = dict(data_shape=(2, 6, 5, 7), weight_shape=(5, 6, 1, 1), strides=1, padding=0, groups=1,
                 epilogue=Epilogue(bias=True, residual=True), config=ConvConfig(2, 4, (4, 2, 1)))
GATED_TILED_3X3 = dict(data_shape=(2, 9, 5, 6), weight_shape=(6, 9, 3, 3), strides=1, padding=(1, 1, 0, 1), groups=1,
                       epilogue=Epilogue(bias=True), config=ConvConfig(2, 2, (4, 2, 1), split_k=2, tiled=True, k_chunk=3))
GATED_GROUPED_3X3 = dict(data_shape=(1, 8, 6, 5), weight_shape=(8, 4, 3, 3), strides=2, padding=(1, 0, 1, 1), groups=2,
                         epilogue=Epilogue(activation="relu"), config=ConvConfig(1, 2, (2, 2, 2), split_k=2))


@given(case=gated_cases(), scope=SCOPES, gate_scope=SCOPES, precision=st.sampled_from(["float32", "float16_acc32"]), seed=SEEDS)
@example(case=GATED_1X1, scope=TEXTURE, gate_scope=TEXTURE, precision="float32", seed=0)
@example(case=GATED_GROUPED_3X3, scope=BUFFER, gate_scope=TEXTURE, precision="float16_acc32", seed=1)
@example(case=GATED_TILED_3X3, scope=BUFFER, gate_scope=BUFFER, precision="float32", seed=2)
def test_gated_conv_matches_numpy(device, case, scope, gate_scope, precision, seed):
    """``act(conv(X * G[n, c], W) + bias + residual)`` against float64 NumPy, the output poisoned
    (every pixel written, padding lanes 0). In float16_acc32 every image is half (the reference
    takes the half-rounded inputs), the arithmetic float32."""
    rng = np.random.default_rng(seed)
    geom = conv.conv2d_geometry(case["data_shape"], case["weight_shape"], case["strides"], case["padding"], 1, case["groups"])
    epi = case["epilogue"]
    x, w, g = rand(rng, case["data_shape"]), rand(rng, case["weight_shape"]), rand(rng, (geom.n, geom.c, 1, 1))
    bias = rand(rng, (geom.o,)) if epi.bias else None
    residual = rand(rng, geom.out_shape) if epi.residual else None
    with sanitized(seed):
        loaded, name = ops.compile(conv.conv2d_nchw4c(**case, scope=scope, prologue=Prologue(gate_scope=gate_scope)), device)
    half = precision == "float16_acc32"
    specs = [replace(s, storage="float16") if half and s.scope != BUFFER else s for s in loaded[name].params]
    rounded = {s.name: s.storage == "float16" for s in specs}
    r16 = lambda v, name: v.astype(np.float16).astype(np.float64) if rounded[name] else v.astype(np.float64)  # noqa: E731
    inputs = [pack_nchw4c(x), pack_nchw4c(g), pack_oihw4o(w), *([pack_bias(bias)] if epi.bias else []),
              *([pack_nchw4c(residual)] if epi.residual else [])]
    assert [s.name for s in specs[:-1]] == ["X", "Gate", "W", *["Bias"] * epi.bias, *["Residual"] * epi.residual]
    tensors = [device.empty(s).upload(v) for s, v in zip(specs, inputs)]
    out = device.empty(specs[-1]).poison()
    loaded(name, *tensors, out)
    y = out.numpy()
    gated = r16(x, "X") * r16(g, "Gate")
    ref = reference_epilogue(conv2d_nchw(gated, r16(w, "W"), geom.strides, geom.padding, geom.dilation, geom.groups),
                             bias, None if residual is None else r16(residual, "Residual"), epi.activation)
    check_blocked_output(y, geom.o)
    assert_close(unpack_nchw4c(y, geom.o), ref, HALF_RTOL if rounded["Y"] else RTOL)


def test_gated_conv_bad_arguments():
    """A gate is read by the blocked path and the tiled GEMM: not per lane (general groups,
    depthwise); its scope is checked like any other."""
    dense = dict(data_shape=(1, 8, 4, 4), weight_shape=(8, 8, 1, 1))
    with pytest.raises(ValueError, match="scope"):
        conv.conv2d_nchw4c(**dense, config=ConvConfig(1, 1, (4, 4, 1), tiled=True), prologue=Prologue(gate_scope="local"))
    with pytest.raises(ValueError, match="grouped path"):
        conv.conv2d_nchw4c((1, 6, 4, 4), (6, 2, 3, 3), groups=3, prologue=Prologue(gate_scope=TEXTURE))
    with pytest.raises(ValueError, match="scope"):
        conv.conv2d_nchw4c(**dense, prologue=Prologue(gate_scope="local"))
