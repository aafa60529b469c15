"""Layer norm over the channels of NCHW4c tensors: the one kernel (``layer_norm_channels``, a work
item per pixel walking its channel blocks) and the wide form (``layer_norm_channels_wide``, a work
group per pixel over its channel blocks) against float64 NumPy, float32 and float16_acc32 (half
images and half buffers, Gamma and Beta too), on poisoned outputs."""

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from helpers.numeric import pack_nchw4c, rand, run_kernel, sanitized, unpack_nchw4c
from primfuncs import layernorm
from primfuncs._common import BUFFER, TEXTURE
from primfuncs.lanes import blocked
from tir_adreno.codegen import build
from tir_adreno.reference import layer_norm
from tir_adreno.strategy.packing import pack_bias

#: float32: the error of the normalized value grows with the pixel's largest value in standard
#: deviations (:func:`_conditioning`) and with the square root of the channel count (float32 sums).
#: Measured at most 4.5e-8 x that x sqrt(C), relative to ``|gamma| (|z| + 1) + |beta|`` (z the
#: normalized value), over 300 examples of both forms, 1 to 1280 channels; held to 2.5e-7 x that.
RTOL = 2.5e-7
#: float16_acc32: X, Gamma, Beta read rounded to half (the reference takes them so), Y rounded to
#: half (2^-11 of its magnitude) on top of the float32 arithmetic's error.
HALF_RTOL = 2.0**-10
EPS = 1e-5


def _reference(x, gamma, beta):
    """float64 (y, z) of a layer norm over axis 1 of NCHW ``x``: ``z`` normalized, ``y = z gamma + beta``."""
    z = layer_norm(x, np.ones(x.shape[1]), np.zeros(x.shape[1]), axis=1, epsilon=EPS)
    return z * gamma[None, :, None, None] + beta[None, :, None, None], z


def _conditioning(x):
    """Per pixel ``1 + max |x| / sqrt(var + eps)``: how far float32 rounding of ``x`` and of the
    mean (``u max |x|``) moves the normalized value (two close channels, or a mean many standard
    deviations off 0, make it large)."""
    x = x.astype(np.float64)
    return 1.0 + np.max(np.abs(x), axis=1, keepdims=True) / np.sqrt(x.var(axis=1, keepdims=True) + EPS)


@st.composite
def cases(draw):
    """(n, channels, h, w, threads): few channels or many (more blocks than the work group has
    items: several rounds, a short last one), 1x1 maps, the default work group or another."""
    channels = draw(st.one_of(st.integers(1, 20), st.integers(21, 400)))
    threads = draw(st.sampled_from([None, 1, 3, 8, 64]))
    return draw(st.integers(1, 2)), channels, draw(st.integers(1, 4)), draw(st.integers(1, 5)), threads


def _run(device, form, case, x, gamma, beta, scope, precision):
    n, channels, h, w, threads = case
    shape = (n, blocked(channels), h, w, 4)
    if form == "one":
        func = layernorm.layer_norm_channels(shape, channels, EPS, scope=scope)
    else:
        func = layernorm.layer_norm_channels_wide(shape, channels, EPS, scope=scope, threads=threads)
    half = precision == "float16_acc32"
    return run_kernel(device, func, pack_nchw4c(x), pack_bias(gamma), pack_bias(beta), storage="float16" if half and scope == TEXTURE else None,
                      half=build.ALL_BUFFERS if half else ())


@given(case=cases(), form=st.sampled_from(["one", "wide"]), scope=st.sampled_from([TEXTURE, BUFFER]),
       precision=st.sampled_from(["float32", "float16_acc32"]), offset=st.sampled_from([0.0, 30.0]), seed=st.integers(0, 2**32 - 1))
@example(case=(1, 1280, 1, 1, None), form="wide", scope=TEXTURE, precision="float32", offset=30.0, seed=1)  # EfficientViT's head: 5 rounds
@example(case=(1, 130, 2, 3, 64), form="wide", scope=BUFFER, precision="float16_acc32", offset=0.0, seed=2)  # 33 blocks: a short last round
@example(case=(2, 1, 1, 2, None), form="wide", scope=TEXTURE, precision="float32", offset=0.0, seed=3)  # one channel: y = beta
@example(case=(1, 66, 3, 3, 3), form="one", scope=BUFFER, precision="float32", offset=30.0, seed=4)
@example(case=(1, 2, 1, 2, None), form="one", scope=TEXTURE, precision="float32", offset=0.0, seed=1)  # two close channels: z ill-conditioned
def test_layer_norm_kernels(device, case, form, scope, precision, offset, seed):
    """Each pixel normalized over its channels, then scaled and shifted per channel, in both forms;
    padded lanes written as 0 over a NaN-poisoned output. ``offset``: a mean 30 standard
    deviations from 0 (a one-pass ``E[x^2] - E[x]^2`` would lose ~7 digits there). Half of the
    examples run under the texture bounds sanitizer. Under
    float16_acc32 the kernel reads X, Gamma and Beta rounded to half and writes Y rounded to half;
    the reference takes the same rounded inputs."""
    n, channels, h, w, _ = case
    rng = np.random.default_rng(seed)
    x = rand(rng, (n, channels, h, w)) + np.float32(offset)
    gamma, beta = rand(rng, (channels,)) + 1.0, rand(rng, (channels,))
    with sanitized(seed):
        y = _run(device, form, case, x, gamma, beta, scope, precision)
    half = precision == "float16_acc32"
    if half:
        x, gamma, beta = (v.astype(np.float16).astype(np.float32) for v in (x, gamma, beta))
    ref, z = _reference(x, gamma, beta)
    got = unpack_nchw4c(y, channels).astype(np.float64)
    assert np.all(np.isfinite(got)), "an output element was not written (poison survived)"
    scale = np.abs(gamma)[None, :, None, None] * (np.abs(z) + 1.0) + np.abs(beta)[None, :, None, None]
    bound = RTOL * np.sqrt(channels) * _conditioning(x) + (HALF_RTOL if half else 0.0)
    assert np.all(np.abs(got - ref) <= bound * scale), float(np.max(np.abs(got - ref) / scale))
    assert np.all(y[:, -1, :, :, (channels - 1) % 4 + 1 :] == 0), "padded lanes not zero"


def test_layer_norm_threads():
    """The wide form's work group covers the channel blocks with a power of two, at most 64 items."""
    assert [layernorm.layer_norm_threads(c4) for c4 in (1, 2, 3, 16, 20, 40, 64, 65, 320)] == [1, 2, 4, 16, 32, 64, 64, 64, 64]


@pytest.mark.parametrize("factory", [layernorm.layer_norm_channels, layernorm.layer_norm_channels_wide])
def test_layer_norm_bad_arguments(factory):
    with pytest.raises(ValueError, match="channels"):
        factory((1, 2, 2, 2, 4), 4)
    with pytest.raises(ValueError, match="epsilon"):
        factory((1, 1, 2, 2, 4), 3, -1.0)
    with pytest.raises(ValueError, match="NCHW4c"):
        factory((1, 1, 2, 2), 3)
    with pytest.raises(TypeError, match="dtype"):
        factory((1, 1, 2, 2, 4), 3, dtype="int8")


def test_layer_norm_wide_bad_threads():
    with pytest.raises(ValueError, match="threads"):
        layernorm.layer_norm_channels_wide((1, 1, 2, 2, 4), 3, threads=0)
