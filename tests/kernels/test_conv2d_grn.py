"""The tiled conv with ConvNeXt-V2's GRN scale folded in (``conv2d_nchw4c(gate_scope=..., grn_eps=...)``)
against float64 NumPy: ``conv(x * s + beta)`` with ``s = 1 + gamma sqrt(S) / (mean_c sqrt(S) + eps)``,
``S`` the sums of squares over H, W from ``sum_squares_hw`` (run first, as a model runs it), ``W beta``
in the bias on the host in float64 as the Relax rule folds it.

Fresh random inputs of varied magnitudes (1e-3 to 1e3, so ``S`` spans 1e-6 to 1e8), poisoned outputs
(every pixel written, padding lanes zero), both scopes, float32 and float16_acc32 (half images and a
half ``Gamma``, float32 sums and arithmetic), C not a multiple of 4, more input blocks than the
work group's items (several rounds) and fewer, tiles that overhang, split_k, 1x1 and 3x3 kernels.
"""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from helpers.conv import CONV_RTOL as RTOL
from helpers.conv import check_blocked_output
from helpers.numeric import assert_close, pack_nchw4c, pack_oihw4o, rand, run_kernel, sanitized, unpack_nchw4c
from helpers.strategies import SCOPES, SEEDS

from primfuncs import conv, reduce
from primfuncs._common import BUFFER, TEXTURE
from primfuncs.conv import ConvConfig
from primfuncs.epilogue import Epilogue
from primfuncs.lanes import blocked
from primfuncs.conv.prologue import Prologue
from tir_adreno.reference import conv2d_epilogue, conv2d_nchw, grn_nx
from tir_adreno.strategy.packing import pack_bias

#: float16_acc32: the output's half rounding (2^-11 of each element) dominates (as for the norm folds).
HALF_RTOL = 2.0**-10


@st.composite
def grn_fold_cases(draw):
    """A tiled dense conv reading GRN's scale: 1..70 input channels (up to 18 blocks: more than the
    8-item work groups, fewer than 16), 1x1 or unpadded 3x3, tiles that overhang, split_k."""
    c, k = draw(st.integers(1, 70)), draw(st.sampled_from([1, 1, 3]))
    n, o, h, w = draw(st.integers(1, 2)), draw(st.integers(1, 10)), draw(st.integers(k, 7)), draw(st.integers(k, 9))
    config = ConvConfig(draw(st.integers(1, 2)), draw(st.integers(1, 4)), draw(st.sampled_from([(4, 2, 1), (8, 1, 1), (2, 2, 1)])),
                        split_k=draw(st.integers(1, 2)), tiled=True, k_chunk=draw(st.integers(1, 4)))
    epilogue = Epilogue(bias=True, activation=draw(st.sampled_from([None, "relu"])), residual=draw(st.booleans()))
    return dict(data_shape=(n, c, h, w), weight_shape=(o, c, k, k), epilogue=epilogue, config=config,
                prologue=Prologue(grn_eps=draw(st.sampled_from([1e-6, 1e-5]))))


#: A 3x3 conv over 15 channels: at magnitude 1e3 its outputs would pass half's 65504 with unit weights.
GRN_HALF_3X3 = dict(data_shape=(1, 15, 6, 6), weight_shape=(4, 15, 3, 3), epilogue=Epilogue(bias=True),
                    config=ConvConfig(1, 1, (4, 2, 1), tiled=True, k_chunk=1), prologue=Prologue(grn_eps=1e-6))
GRN_WIDE = dict(data_shape=(1, 70, 3, 5), weight_shape=(9, 70, 1, 1), epilogue=Epilogue(bias=True, residual=True),
                config=ConvConfig(2, 2, (2, 2, 1), split_k=2, tiled=True, k_chunk=3), prologue=Prologue(grn_eps=1e-6))  # 18 blocks, 8 items


def run_grn_case(device, case, scope, precision, seed, magnitude=1.0):
    """Run ``sum_squares_hw`` then the folded conv of ``case`` on inputs ``magnitude * N(0, 1)``;
    (output, float64 reference, whether Y is half)."""
    rng = np.random.default_rng(seed)
    n, c, h, w_ = case["data_shape"]
    o, k = case["weight_shape"][0], case["weight_shape"][2]
    epi = case["epilogue"]
    half = precision == "float16_acc32" and scope == TEXTURE  # half images and a half Gamma; the sums stay float32
    x = (rand(rng, (n, c, h, w_)) * np.float32(magnitude)).astype(np.float32)
    # Large inputs keep their sums of squares beyond half (float32 there); the weights shrink with
    # them under half storage so that the output stays within half's 65504 (an overflow is inf).
    w, bias = rand(rng, case["weight_shape"]) / np.float32(max(magnitude, 1.0) if half else 1.0), rand(rng, (o,))
    gamma, beta = rand(rng, (c,)), 0.5 * rand(rng, (c,))
    residual = rand(rng, (n, o, h - k + 1, w_ - k + 1)) if epi.residual else None
    r16 = (lambda v: v.astype(np.float16).astype(np.float64)) if half else (lambda v: np.asarray(v, np.float64))
    folded_bias = w.astype(np.float64).sum(axis=(2, 3)) @ beta.astype(np.float64) + bias  # W . beta, the rule's fold
    shape5 = (n, blocked(c), h, w_, 4)
    with sanitized(seed):
        sums = run_kernel(device, reduce.reduce(shape5, c, "sum", (2, 3), True, scope=scope, square=True, out_dtype="float32"),
                          pack_nchw4c(x), storage="float16" if half else None, pinned=(1,))
        func = conv.conv2d_nchw4c(**{**case, "prologue": replace(case["prologue"], gate_scope=scope)}, scope=scope)
        y = run_kernel(device, func, pack_nchw4c(x), sums, pack_bias(gamma), pack_oihw4o(w), pack_bias(folded_bias.astype(np.float32)),
                       *([pack_nchw4c(residual)] if epi.residual else []), storage="float16" if half else None, pinned=(1,),
                       half={2} if half else ())
    xr = r16(x)
    s = 1 + r16(gamma)[None, :, None, None] * grn_nx((xr * xr).sum(axis=(2, 3), keepdims=True), case["prologue"].grn_eps)
    ref = conv2d_nchw(xr * s, w.astype(np.float64)) + folded_bias.astype(np.float32)[None, :, None, None]
    ref = conv2d_epilogue(ref, None, None if residual is None else r16(residual), epi.activation)
    check_blocked_output(y, o)
    return unpack_nchw4c(y, o), ref, half


@settings(max_examples=max(2, settings().max_examples // 4))  # each example builds two kernels: 2 in CI
@given(case=grn_fold_cases(), scope=SCOPES, precision=st.sampled_from(["float32", "float16_acc32"]),
       magnitude=st.sampled_from([1e-3, 1.0, 1e3]), seed=SEEDS)
@example(case=GRN_WIDE, scope=TEXTURE, precision="float32", magnitude=1.0, seed=0)
@example(case=dict(GRN_WIDE, data_shape=(2, 70, 3, 5)), scope=BUFFER, precision="float32", magnitude=1e3, seed=1)
@example(case=GRN_WIDE, scope=TEXTURE, precision="float16_acc32", magnitude=1e-3, seed=2)
@example(case=GRN_HALF_3X3, scope=TEXTURE, precision="float16_acc32", magnitude=1e3, seed=0)  # sums beyond half
def test_grn_conv_matches_numpy(device, case, scope, precision, magnitude, seed):
    """``act(conv(x * s + beta) + bias + residual)`` against float64 NumPy, the output poisoned
    (every pixel written, padding lanes 0)."""
    y, ref, half = run_grn_case(device, case, scope, precision, seed, magnitude)
    assert_close(y, ref, HALF_RTOL if half else RTOL)


def test_grn_conv_bad_arguments():
    """GRN's scale folds into the tiled conv with a gate (its sums), float32, no other norm."""
    one = dict(data_shape=(1, 8, 4, 4), weight_shape=(8, 8, 1, 1), config=ConvConfig(1, 1, (4, 4, 1), tiled=True), scope=BUFFER)
    with pytest.raises(ValueError, match="tiled conv only"):
        conv.conv2d_nchw4c(**dict(one, config=ConvConfig(1, 1, (4, 4, 1))), prologue=Prologue(gate_scope=BUFFER, grn_eps=1e-6))
    with pytest.raises(ValueError, match="gate_scope"):
        conv.conv2d_nchw4c(**one, prologue=Prologue(grn_eps=1e-6))
    with pytest.raises(ValueError, match="epsilon"):
        conv.conv2d_nchw4c(**one, prologue=Prologue(gate_scope=BUFFER, grn_eps=-1.0))
    with pytest.raises(ValueError, match="float32 kernel"):
        conv.conv2d_nchw4c(**one, prologue=Prologue(gate_scope=BUFFER, acc_dtype="float32", grn_eps=1e-6), dtype="float16")
    with pytest.raises(ValueError, match="layer norm"):
        conv.conv2d_nchw4c(**one, prologue=Prologue(gate_scope=BUFFER, norm_eps=1e-6, grn_eps=1e-6))
