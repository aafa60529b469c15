"""The 1x1 conv with a layer norm over its input channels folded in (``conv2d_nchw4c(norm_eps=...)``,
``primfuncs.conv.norm``) against float64 NumPy: ``conv(LN(X))`` with gamma, beta and the conv's
bias folded on the host in float64 as the Relax rule folds them (``W' = W diag(gamma)``,
``s = sum_c W'``, ``b' = W beta + b``).

Fresh random inputs, poisoned outputs (every pixel written, padding lanes zero), both scopes,
float32 and float16_acc32 (half images, float32 arithmetic), C not a multiple of 4, tiles that
overhang, split_k, the 1-D grid and the tiled GEMM, and inputs whose per-pixel mean is large
against their spread (the case the shifted statistics are for).
"""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from helpers.conv import CONV_RTOL as RTOL
from helpers.conv import check_blocked_output
from helpers.nonfinite import assert_matches, nonfinite, run_finite_poison
from helpers.numeric import assert_close, pack_nchw4c, pack_oihw4o, rand, sanitized, unpack_nchw4c
from helpers.strategies import SCOPES, SEEDS, WORK_GROUPS

from primfuncs import conv
from primfuncs._common import BUFFER, TEXTURE
from primfuncs.conv import ConvConfig
from primfuncs.epilogue import Epilogue
from primfuncs.conv.prologue import Prologue
from tir_adreno import ops
from tir_adreno.reference import conv2d_epilogue, layer_norm
from tir_adreno.strategy.packing import pack_bias

#: float16_acc32: the output's half rounding (2^-11 of each element) dominates (as for the gated conv).
HALF_RTOL = 2.0**-10


def fold_layer_norm(w, bias, gamma, beta):
    """(W', s, b') of ``conv(LN(x) * gamma + beta, W) + bias`` in float64 (``primfuncs.conv.norm``)."""
    w = np.asarray(w, np.float64)
    folded_bias = w[:, :, 0, 0] @ beta + (0 if bias is None else bias)
    folded = w * gamma[None, :, None, None]
    return folded, folded.sum(axis=(1, 2, 3)), folded_bias


@st.composite
def norm_cases(draw):
    """A 1x1 conv reading a layer norm: C 1..13 (not a multiple of 4 too), the direct kernel's 3-D
    grid, split_k and 1-D grid, or the tiled GEMM (split_k, k_chunk), tiles that overhang."""
    n, c, o = draw(st.integers(1, 2)), draw(st.integers(1, 13)), draw(st.integers(1, 10))
    grid = draw(st.sampled_from(["3d", "split", "flat", "tiled", "tiled"]))
    if grid == "tiled":
        config = ConvConfig(draw(st.integers(1, 2)), draw(st.integers(1, 4)), draw(st.sampled_from([(4, 2, 1), (8, 1, 1)])),
                            split_k=draw(st.integers(1, 2)), tiled=True, k_chunk=draw(st.integers(1, 4)))
    elif grid == "flat":
        config = ConvConfig(draw(st.integers(1, 4)), draw(st.integers(1, 4)), (draw(st.sampled_from([1, 5, 16])), 1, 1), flat=True)
    else:
        config = ConvConfig(draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(st.sampled_from(WORK_GROUPS)),
                            split_k=2 if grid == "split" else 1)
    epilogue = Epilogue(bias=True, activation=draw(st.sampled_from([None, "gelu"])), residual=draw(st.booleans()))
    return dict(data_shape=(n, c, draw(st.integers(1, 7)), draw(st.integers(1, 9))), weight_shape=(o, c, 1, 1),
                epilogue=epilogue, config=config, prologue=Prologue(norm_eps=draw(st.sampled_from([1e-6, 1e-5]))))


NORM_DIRECT = dict(data_shape=(2, 6, 3, 7), weight_shape=(5, 6, 1, 1), epilogue=Epilogue(bias=True, residual=True),
                   config=ConvConfig(2, 4, (4, 2, 1), split_k=2), prologue=Prologue(norm_eps=1e-6))
NORM_TILED = dict(data_shape=(1, 9, 5, 6), weight_shape=(7, 9, 1, 1), epilogue=Epilogue(bias=True, activation="gelu"),
                  config=ConvConfig(2, 2, (4, 2, 1), split_k=2, tiled=True, k_chunk=3), prologue=Prologue(norm_eps=1e-6))


def run_norm_case(device, case, scope, precision, seed, mean=0.0, out_layout="NCHW4c"):
    """Run ``case`` on inputs ``mean + N(0, 1)`` (per pixel means spread around ``mean``), Y stored
    in ``out_layout`` (a plain one in a float32 buffer: the tokens a folded norm's conv writes for
    token readers, ``strategy.conv.plain_io_plan``); (NCHW output, float64 reference, whether Y is
    half, the reference's terms' magnitudes)."""
    rng = np.random.default_rng(seed)
    n, c, h, w_ = case["data_shape"]
    o = case["weight_shape"][0]
    epi = case["epilogue"]
    x = (rand(rng, (n, c, h, w_)) + mean * (1 + 0.1 * rand(rng, (n, 1, h, w_)))).astype(np.float32)
    w, bias = rand(rng, case["weight_shape"]), rand(rng, (o,))
    gamma, beta = 1 + 0.5 * rand(rng, (c,)), 0.5 * rand(rng, (c,))
    residual = rand(rng, (n, o, h, w_)) if epi.residual else None
    folded, wsum, folded_bias = fold_layer_norm(w, bias, gamma.astype(np.float64), beta.astype(np.float64))
    if out_layout != "NCHW4c":
        case = dict(case, epilogue=replace(epi, out_layout=out_layout, out_scope=BUFFER))
    with sanitized(seed):
        loaded, name = ops.compile(conv.conv2d_nchw4c(**case, scope=scope), device)
    half = precision == "float16_acc32"
    plain_y = lambda s: out_layout != "NCHW4c" and s.name == "Y"  # noqa: E731  (a plain tensor is float32)
    specs = [replace(s, storage="float16") if half and s.scope != BUFFER and not plain_y(s) else s for s in loaded[name].params]
    assert [s.name for s in specs[:-1]] == ["X", "W", "WeightSum", "Bias", *["Residual"] * epi.residual]
    rounded = {s.name: s.storage == "float16" for s in specs}
    r16 = lambda v, name: v.astype(np.float16).astype(np.float64) if rounded[name] else np.asarray(v, np.float64)  # noqa: E731
    w32 = folded.astype(np.float32)
    inputs = [pack_nchw4c(x), pack_oihw4o(w32), pack_bias(wsum.astype(np.float32)), pack_bias(folded_bias.astype(np.float32)),
              *([pack_nchw4c(residual)] if epi.residual else [])]
    tensors = [device.empty(s).upload(v) for s, v in zip(specs, inputs)]
    out = device.empty(specs[-1]).poison()
    loaded(name, *tensors, out)
    # float64: the layer norm's z = (x - mu) / sqrt(var + eps) of the inputs the kernel saw (half-rounded
    # where stored half), then the 1x1 conv of z * gamma + beta as folded (W' as the kernel read it)
    z = layer_norm(r16(x, "X"), np.ones(c), np.zeros(c), axis=1, epsilon=case["prologue"].norm_eps)
    ref = np.einsum("oc,nchw->nohw", r16(w32, "W")[:, :, 0, 0], z) + folded_bias[None, :, None, None]
    ref = conv2d_epilogue(ref, None, None if residual is None else r16(residual, "Residual"), epi.activation)
    # the same sums of magnitudes (GELU's slope is at most 1.13): a few output pixels can cancel
    # to near 0, where float32's error is relative to the terms, not to the sum
    scale = np.einsum("oc,nchw->nohw", np.abs(r16(w32, "W")[:, :, 0, 0]), np.abs(z)) + np.abs(folded_bias)[None, :, None, None]
    scale = 1.13 * (scale + (0 if residual is None else np.abs(residual)))
    y = out.numpy()
    if out_layout == "NHWC":
        return y.transpose(0, 3, 1, 2), ref, rounded["Y"], scale
    if out_layout == "NCHW":
        return y, ref, rounded["Y"], scale
    check_blocked_output(y, o)
    return unpack_nchw4c(y, o), ref, rounded["Y"], scale


@given(case=norm_cases(), scope=SCOPES, precision=st.sampled_from(["float32", "float16_acc32"]), seed=SEEDS)
@example(case=NORM_DIRECT, scope=TEXTURE, precision="float32", seed=0)
@example(case=NORM_TILED, scope=BUFFER, precision="float16_acc32", seed=1)
@example(case=dict(data_shape=(1, 3, 1, 1), weight_shape=(1, 3, 1, 1), epilogue=Epilogue(bias=True, activation="gelu"),
                   config=ConvConfig(1, 1, (1, 1, 1)), prologue=Prologue(norm_eps=1e-6)),
         scope=TEXTURE, precision="float32", seed=2_227_242_142)  # one output pixel whose sum cancels (CI, stop 43)
def test_norm_conv_matches_numpy(device, case, scope, precision, seed):
    """``act(conv(LN(X)) + bias + residual)`` against float64 NumPy, the output poisoned (every
    pixel written, padding lanes 0)."""
    y, ref, half, scale = run_norm_case(device, case, scope, precision, seed)
    assert_close(y, ref, HALF_RTOL if half else RTOL, scale=scale)


@given(case=norm_cases(), scope=SCOPES, out_layout=st.sampled_from(["NHWC", "NCHW"]), seed=SEEDS)
@example(case=NORM_TILED, scope=TEXTURE, out_layout="NHWC", seed=0)
@example(case=NORM_DIRECT, scope=BUFFER, out_layout="NHWC", seed=1)
def test_norm_conv_plain_output_matches_numpy(device, case, scope, out_layout, seed):
    """The folded norm's conv writing Y as a plain float32 buffer (tokens ``[N, H * W, O]``: "NHWC",
    or "NCHW"), X blocked in ``scope``: every element written (poisoned), as the blocked store."""
    y, ref, half, scale = run_norm_case(device, case, scope, "float32", seed, out_layout=out_layout)
    assert not half and np.all(np.isfinite(y)), "output element not written (poison survived)"
    assert_close(y, ref, RTOL, scale=scale)


@pytest.mark.parametrize("case", [NORM_DIRECT, NORM_TILED], ids=["direct", "tiled"])
@pytest.mark.parametrize("mean", [1e3, -3e4])
def test_norm_conv_large_mean(device, case, mean):
    """Pixels at ``mean`` +- 1 (float32 x keeps ~2^-24 |mean| of each value): the shifted
    statistics and products stay within the float32 tolerance of the float64 layer norm of the
    same float32 inputs; unshifted sums would lose ~|mean|^2 / var of their bits."""
    y, ref, _, _ = run_norm_case(device, dict(case, epilogue=Epilogue(bias=True)), BUFFER, "float32", 3, mean=mean)
    assert_close(y, ref, RTOL)


def test_norm_conv_bad_arguments():
    """A layer norm folds into a dense 1x1 conv, stride 1, unpadded, float32 accumulators, no gate."""
    one = dict(data_shape=(1, 8, 4, 4), weight_shape=(8, 8, 1, 1))
    with pytest.raises(ValueError, match="1x1"):
        conv.conv2d_nchw4c((1, 8, 4, 4), (8, 8, 3, 3), padding=1, prologue=Prologue(norm_eps=1e-6))
    with pytest.raises(ValueError, match="stride"):
        conv.conv2d_nchw4c(**one, strides=2, prologue=Prologue(norm_eps=1e-6))
    with pytest.raises(ValueError, match="norm_eps must be"):
        conv.conv2d_nchw4c(**one, prologue=Prologue(norm_eps=-1.0))
    with pytest.raises(ValueError, match="float32 kernel"):
        conv.conv2d_nchw4c(**one, dtype="float16", prologue=Prologue(norm_eps=1e-6))
    with pytest.raises(ValueError, match="float32 kernel"):
        conv.conv2d_nchw4c(**one, dtype="float16", prologue=Prologue(acc_dtype="float32", norm_eps=1e-6))
    with pytest.raises(ValueError, match="gate"):
        conv.conv2d_nchw4c(**one, prologue=Prologue(gate_scope=TEXTURE, norm_eps=1e-6))
    with pytest.raises(ValueError, match="gate"):
        conv.conv2d_nchw4c(**one, config=ConvConfig(1, 1, (4, 4, 1), tiled=True), prologue=Prologue(gate_scope=BUFFER, norm_eps=1e-6))
    with pytest.raises(ValueError, match="folded norm"):
        conv.conv2d_nchw4c(**one, scope=BUFFER, prologue=Prologue(data_layout="NCHW", norm_eps=1e-6))


@pytest.mark.parametrize("case", [NORM_DIRECT, NORM_TILED], ids=["direct", "tiled"])
def test_norm_conv_nonfinite(device, case):
    """NaN/+-Inf in a pixel's channels make every output of that pixel NaN, as the layer norm then
    the conv do in NumPy (its mean is +-Inf or NaN, its deviations NaN); other pixels stay finite and
    exact, the padding lanes 0."""
    rng = np.random.default_rng(8)
    n, c, h, w_ = case["data_shape"]
    o = case["weight_shape"][0]
    case = dict(case, epilogue=Epilogue(bias=True))
    x = nonfinite(rng, (n, c, h, w_), 3)
    w, bias = rand(rng, case["weight_shape"]), rand(rng, (o,))
    gamma, beta = 1 + 0.5 * rand(rng, (c,)), 0.5 * rand(rng, (c,))
    folded, wsum, folded_bias = fold_layer_norm(w, bias, gamma.astype(np.float64), beta.astype(np.float64))
    w32 = folded.astype(np.float32)
    out = run_finite_poison(device, conv.conv2d_nchw4c(**case, scope=BUFFER), pack_nchw4c(x), pack_oihw4o(w32),
                            pack_bias(wsum.astype(np.float32)), pack_bias(folded_bias.astype(np.float32)))
    with np.errstate(invalid="ignore"):
        z = layer_norm(x, np.ones(c), np.zeros(c), axis=1, epsilon=case["prologue"].norm_eps)
        ref = np.einsum("oc,nchw->nohw", w32[:, :, 0, 0].astype(np.float64), z) + folded_bias[None, :, None, None]
    assert np.all(unpack_nchw4c(out, out.shape[1] * 4)[:, o:] == 0), "padding lanes not zero"
    assert_matches(unpack_nchw4c(out, o), ref, rtol=RTOL)
