"""The tiled 1x1 conv with a group norm of its input folded in (``conv2d_nchw4c(group_norm=...)``,
``primfuncs.conv.norm.GroupNormFold``) against float64 NumPy: ``conv(GN(X))``, the statistics from
``group_norm_partials``' output (run first, as a model runs it), gamma folded into ``W`` and
``W beta`` into the bias on the host in float64 as the Relax rule folds them.

Fresh random inputs, poisoned outputs (every pixel written, padding lanes zero), both scopes,
float32 and float16_acc32 (half images, float32 arithmetic), 1 group of C not a multiple of 4 or
groups of whole blocks, slices from one to more than the work group's items, tiles that overhang,
split_k, inputs whose mean is large against their spread, and NaN/Inf in one sample.
"""

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from helpers.conv import CONV_RTOL as RTOL
from helpers.conv import check_blocked_output
from helpers.nonfinite import assert_matches, nonfinite, run_finite_poison
from helpers.numeric import assert_close, pack_nchw4c, pack_oihw4o, rand, run_kernel, sanitized, unpack_nchw4c
from helpers.strategies import SCOPES, SEEDS

from primfuncs import conv, layernorm
from primfuncs._common import BUFFER, TEXTURE, equal_slices
from primfuncs.conv import ConvConfig
from primfuncs.conv.norm import GroupNormFold
from primfuncs.epilogue import Epilogue
from primfuncs.lanes import blocked
from primfuncs.conv.prologue import Prologue
from tir_adreno.reference import conv2d_epilogue, group_norm
from tir_adreno.strategy.packing import pack_bias

#: float16_acc32: the output's half rounding (2^-11 of each element) dominates (as for the layer norm fold).
HALF_RTOL = 2.0**-10
#: float32 statistics of inputs at ``mean`` +- 1: the group's float32 mean is off by a few
#: ulp(mean) (the partials' float32 sums), which every normalized value carries: ~6e-8 x |mean|
#: of the output's magnitude (tests/passes/test_group_norm.py's bound, 5e-7 x (1 + |mean|), as for
#: the group norm kernels).
MEAN_RTOL = 5e-7


@st.composite
def group_norm_fold_cases(draw):
    """A tiled 1x1 conv reading a group norm: 1 group of 1..13 channels or 2-3 groups of 4-8
    channels, its partials in 1..40 slices (more than some work groups' items), tiles that overhang."""
    groups = draw(st.integers(1, 3))
    c = draw(st.integers(1, 13)) if groups == 1 else 4 * groups * draw(st.integers(1, 2))
    n, o, h, w = draw(st.integers(1, 2)), draw(st.integers(1, 10)), draw(st.integers(1, 7)), draw(st.integers(1, 9))
    slices = equal_slices(layernorm.group_norm_pixels((n, blocked(c), h, w, 4), groups), draw(st.integers(1, 40)))
    config = ConvConfig(draw(st.integers(1, 2)), draw(st.integers(1, 4)), draw(st.sampled_from([(4, 2, 1), (8, 1, 1), (2, 2, 1)])),
                        split_k=draw(st.integers(1, 2)), tiled=True, k_chunk=draw(st.integers(1, 4)))
    # relu, not gelu: a gelu tail of a lone output (1e-6 of its input) is off by 1e-2 relative in any conv
    epilogue = Epilogue(bias=True, activation=draw(st.sampled_from([None, "relu"])), residual=draw(st.booleans()))
    return dict(data_shape=(n, c, h, w), weight_shape=(o, c, 1, 1), epilogue=epilogue, config=config,
                prologue=Prologue(group_norm=GroupNormFold(groups, slices, draw(st.sampled_from([1e-6, 1e-5])))))


GN_ONE = dict(data_shape=(1, 6, 5, 7), weight_shape=(5, 6, 1, 1), epilogue=Epilogue(bias=True, residual=True),
              config=ConvConfig(2, 2, (4, 2, 1), split_k=2, tiled=True, k_chunk=3), prologue=Prologue(group_norm=GroupNormFold(1, 18, 1e-5)))
GN_GROUPS = dict(data_shape=(2, 16, 3, 5), weight_shape=(7, 16, 1, 1), epilogue=Epilogue(bias=True, activation="gelu"),
                 config=ConvConfig(1, 4, (8, 1, 1), tiled=True, k_chunk=2), prologue=Prologue(group_norm=GroupNormFold(2, 3, 1e-6)))


def _reference(x, w, gamma, beta, bias, groups, eps):
    """float64 ``conv(GN(x) * gamma + beta) + bias`` as folded: (W' = W diag(gamma), b' = W beta + b, z)."""
    w = np.asarray(w, np.float64)
    return w * gamma[None, :, None, None], w[:, :, 0, 0] @ beta + bias, group_norm(x, groups, eps)


def run_group_norm_case(device, case, scope, precision, seed, mean=0.0):
    """Run ``group_norm_partials`` then the folded conv of ``case`` on inputs ``mean + N(0, 1)``;
    (output, float64 reference, whether Y is half)."""
    rng = np.random.default_rng(seed)
    n, c, h, w_ = case["data_shape"]
    o = case["weight_shape"][0]
    epi, fold = case["epilogue"], case["prologue"].group_norm
    x = (rand(rng, (n, c, h, w_)) + np.float32(mean)).astype(np.float32)
    w, bias = rand(rng, case["weight_shape"]), rand(rng, (o,))
    gamma, beta = 1 + 0.5 * rand(rng, (c,)), 0.5 * rand(rng, (c,))
    residual = rand(rng, (n, o, h, w_)) if epi.residual else None
    half = precision == "float16_acc32" and scope == TEXTURE  # half images; buffers, the partials too, stay float32
    storage = "float16" if half else None
    x_in = x.astype(np.float16).astype(np.float32) if half else x
    folded, folded_bias, z = _reference(x_in, w, gamma.astype(np.float64), beta.astype(np.float64), bias, fold.groups, fold.epsilon)
    w32 = folded.astype(np.float32)
    shape5 = (n, blocked(c), h, w_, 4)
    with sanitized(seed):
        stats = run_kernel(device, layernorm.group_norm_partials(shape5, c, fold.groups, fold.slices, scope=scope), pack_nchw4c(x),
                           storage=storage)
        func = conv.conv2d_nchw4c(**case, scope=scope)
        y = run_kernel(device, func, pack_nchw4c(x), stats, pack_oihw4o(w32), pack_bias(folded_bias.astype(np.float32)),
                       *([pack_nchw4c(residual)] if epi.residual else []), storage=storage)
    r16 = (lambda v: v.astype(np.float16).astype(np.float64)) if half else (lambda v: np.asarray(v, np.float64))
    ref = np.einsum("oc,nchw->nohw", w32[:, :, 0, 0].astype(np.float64), z) + folded_bias[None, :, None, None]
    ref = conv2d_epilogue(ref, None, None if residual is None else r16(residual), epi.activation)
    check_blocked_output(y, o)
    return unpack_nchw4c(y, o), ref, half


@given(case=group_norm_fold_cases(), scope=SCOPES, precision=st.sampled_from(["float32", "float16_acc32"]), seed=SEEDS)
@example(case=GN_ONE, scope=TEXTURE, precision="float32", seed=0)
@example(case=GN_GROUPS, scope=BUFFER, precision="float32", seed=1)
@example(case=dict(GN_ONE, prologue=Prologue(group_norm=GroupNormFold(1, 35, 1e-5))), scope=BUFFER, precision="float16_acc32", seed=2)  # 35 slices, 8 items
@example(case=dict(data_shape=(2, 2, 2, 5), weight_shape=(3, 2, 1, 1), epilogue=Epilogue(bias=True, residual=True),
                   config=ConvConfig(2, 1, (2, 2, 1), tiled=True, k_chunk=3), prologue=Prologue(group_norm=GroupNormFold(1, 5, 1e-5))),
         scope=TEXTURE, precision="float32", seed=3)  # a partial last staging round: its guard once held a barrier only 2 of 4 items reached (PoCL segfault)
def test_group_norm_conv_matches_numpy(device, case, scope, precision, seed):
    """``act(conv(GN(X)) + bias + residual)`` against float64 NumPy, the output poisoned (every
    pixel written, padding lanes 0)."""
    y, ref, half = run_group_norm_case(device, case, scope, precision, seed)
    assert_close(y, ref, HALF_RTOL if half else RTOL)


@pytest.mark.parametrize("case", [GN_ONE, GN_GROUPS], ids=["one group", "groups"])
@pytest.mark.parametrize("mean", [1e3, -3e4])
def test_group_norm_conv_large_mean(device, case, mean):
    """Inputs at ``mean`` +- 1: the partials' two-pass statistics and the normalized inputs
    ``(x - mean) / std`` (no cancellation in the conv's sums) keep the output within the group norm
    kernels' bound, a few ulp(mean) of the mean carried by every normalized value."""
    y, ref, _ = run_group_norm_case(device, dict(case, epilogue=Epilogue(bias=True)), BUFFER, "float32", 3, mean=mean)
    assert_close(y, ref, MEAN_RTOL * (1 + abs(mean)))


def test_group_norm_conv_bad_arguments():
    """A group norm folds into the tiled dense 1x1 conv, stride 1, unpadded, float32, no gate, no
    layer norm, groups of whole blocks, slices of its partials."""
    one = dict(data_shape=(1, 8, 4, 4), weight_shape=(8, 8, 1, 1), config=ConvConfig(1, 1, (4, 4, 1), tiled=True))
    fold = GroupNormFold(1, 4, 1e-5)
    with pytest.raises(ValueError, match="tiled conv only"):
        conv.conv2d_nchw4c(**dict(one, config=ConvConfig(1, 1, (4, 4, 1))), prologue=Prologue(group_norm=fold))
    with pytest.raises(ValueError, match="1x1"):
        conv.conv2d_nchw4c((1, 8, 4, 4), (8, 8, 3, 3), padding=1, config=one["config"], prologue=Prologue(group_norm=fold))
    with pytest.raises(ValueError, match="multiple of 4"):
        conv.conv2d_nchw4c(**one, prologue=Prologue(group_norm=GroupNormFold(4, 4, 1e-5)))  # 2 channels a group
    with pytest.raises(ValueError, match="equal non-empty slices"):
        conv.conv2d_nchw4c(**one, prologue=Prologue(group_norm=GroupNormFold(1, 9, 1e-5)))  # 32 pixels: 9 slices of 4 leave one empty
    with pytest.raises(ValueError, match="epsilon"):
        conv.conv2d_nchw4c(**one, prologue=Prologue(group_norm=GroupNormFold(1, 4, -1.0)))
    with pytest.raises(ValueError, match="float32 kernel"):
        conv.conv2d_nchw4c(**one, dtype="float16", prologue=Prologue(acc_dtype="float32", group_norm=fold))
    with pytest.raises(ValueError, match="gate"):
        conv.conv2d_nchw4c(**one, scope=BUFFER, prologue=Prologue(gate_scope=BUFFER, group_norm=fold))
    with pytest.raises(ValueError, match="layer norm"):
        conv.conv2d_nchw4c(**one, prologue=Prologue(norm_eps=1e-6, group_norm=fold))
    with pytest.raises(ValueError, match="GroupNormFold"):
        conv.conv2d_nchw4c(**one, prologue=Prologue(group_norm=(1, 4, 1e-5)))


def test_group_norm_conv_nonfinite(device):
    """NaN/+-Inf in a sample make its group's mean NaN or +-Inf and its normalized values NaN, so
    every output of that sample is NaN, as the group norm then the conv give in NumPy; the other
    sample stays finite and exact, the padding lanes 0."""
    rng = np.random.default_rng(8)
    case = dict(GN_GROUPS, epilogue=Epilogue(bias=True))
    n, c, h, w_ = case["data_shape"]
    o, fold = case["weight_shape"][0], case["prologue"].group_norm
    x = nonfinite(rng, (n, c, h, w_), 3)  # in the first half: sample 0
    w, bias = rand(rng, case["weight_shape"]), rand(rng, (o,))
    folded, folded_bias, _ = _reference(np.zeros_like(x), w, 1 + 0.5 * rand(rng, (c,)).astype(np.float64),
                                        0.5 * rand(rng, (c,)).astype(np.float64), bias, fold.groups, fold.epsilon)
    w32 = folded.astype(np.float32)
    stats = run_kernel(device, layernorm.group_norm_partials((n, blocked(c), h, w_, 4), c, fold.groups, fold.slices, scope=BUFFER),
                       pack_nchw4c(x))
    out = run_finite_poison(device, conv.conv2d_nchw4c(**case, scope=BUFFER), pack_nchw4c(x), stats, pack_oihw4o(w32),
                            pack_bias(folded_bias.astype(np.float32)))
    with np.errstate(invalid="ignore"):
        z = group_norm(x, fold.groups, fold.epsilon)
        ref = np.einsum("oc,nchw->nohw", w32[:, :, 0, 0].astype(np.float64), z) + folded_bias[None, :, None, None]
    assert np.all(unpack_nchw4c(out, out.shape[1] * 4)[:, o:] == 0), "padding lanes not zero"
    assert np.isnan(ref[0]).all() and np.isfinite(ref[1]).all()
    assert_matches(unpack_nchw4c(out, o), ref, rtol=RTOL)
