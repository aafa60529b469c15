"""Blocked kernels reading an operand in place, from its plain NCHW buffer (``rules.common.read_in_place``):
``elementwise.binary(plain_b=True)`` (B the ``[N, C, H, W]`` buffer of a tensor like A) and
``concat.concat_channels(plain=...)`` (some inputs plain buffers), or from the wider map it is a window
of (``concat.concat_channels(views=...)``: a split's part), on textures and buffers, against
float64 NumPy: one IEEE operation (or a copy) per element, so equal after rounding to float32 (a
division within OpenCL's 2.5 ulp); padded lanes of the output 0; outputs poisoned first."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers.conv import from_nchw4c, to_nchw4c
from helpers.numeric import rand
from helpers.strategies import NCHW_SEEDS
from primfuncs import concat, elementwise, gather
from tir_adreno.codegen import build

OPS = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide}
SCOPES = ["global.texture", "global"]


def _launch(device, func, inputs):
    """Run ``func`` on ``inputs`` (one per parameter but the last, the poisoned output)."""
    module = build.build_cached(func)
    (name,) = module.functions
    specs = module[name].params
    tensors = [device.empty(s).upload(v) for s, v in zip(specs, inputs)] + [device.empty(specs[-1]).poison()]
    device.load(module)(name, *tensors)
    return tensors[-1].numpy()


@given(NCHW_SEEDS, st.sampled_from(sorted(OPS)), st.sampled_from(SCOPES))
def test_binary_reads_plain_b(device, d, op, scope):
    n, c, h, w, seed = d
    rng = np.random.default_rng(seed)
    a, b = rand(rng, (n, c, h, w)), rand(rng, (n, c, h, w))
    blocked_a = to_nchw4c(a)
    out = _launch(device, elementwise.binary(blocked_a.shape, op, scope=scope, channels=c, plain_b=True), [blocked_a, b])
    expected = OPS[op](a.astype(np.float64), b.astype(np.float64)).astype(np.float32)
    if op == "divide":
        np.testing.assert_allclose(from_nchw4c(out, c), expected, rtol=2.5 * 2.0**-23, atol=0)
    else:
        np.testing.assert_array_equal(from_nchw4c(out, c), expected)
    np.testing.assert_array_equal(from_nchw4c(out, out.shape[1] * 4)[:, c:], 0)  # padded lanes


@given(NCHW_SEEDS, st.lists(st.integers(1, 9), min_size=2, max_size=concat.MAX_INPUTS), st.data(), st.sampled_from(SCOPES))
def test_concat_reads_plain_inputs(device, d, chans, data, scope):
    n, _, h, w, seed = d
    plain = data.draw(st.sets(st.integers(0, len(chans) - 1), min_size=1))
    rng = np.random.default_rng(seed)
    xs = [rand(rng, (n, c, h, w)) for c in chans]
    inputs = [x if i in plain else to_nchw4c(x) for i, x in enumerate(xs)]
    out = _launch(device, concat.concat_channels(n, chans, h, w, scope=scope, plain=tuple(plain)), inputs)
    total = sum(chans)
    np.testing.assert_array_equal(from_nchw4c(out, total), np.concatenate(xs, axis=1))
    np.testing.assert_array_equal(from_nchw4c(out, out.shape[1] * 4)[:, total:], 0)


@given(NCHW_SEEDS, st.lists(st.integers(1, 9), min_size=2, max_size=concat.MAX_INPUTS), st.data(), st.sampled_from(SCOPES))
def test_concat_reads_windows_of_wider_maps(device, d, chans, data, scope):
    """Inputs read through a window of whole channel blocks of a wider map (blocks before it, and
    after it where its width is whole blocks); the aligned and the lane-picking paths alike."""
    n, _, h, w, seed = d
    viewed = data.draw(st.sets(st.integers(0, len(chans) - 1), min_size=1))
    rng = np.random.default_rng(seed)
    xs = [rand(rng, (n, c, h, w)) for c in chans]
    inputs, views = [], []
    for i, (x, c) in enumerate(zip(xs, chans)):
        if i not in viewed:
            inputs.append(to_nchw4c(x))
            views.append(())
            continue
        before = data.draw(st.integers(0, 2))
        after = data.draw(st.integers(0, 2)) if c % 4 == 0 else 0  # a partial last block ends the map
        wider = np.concatenate([rand(rng, (n, 4 * before, h, w)), x, rand(rng, (n, 4 * after, h, w))], axis=1)
        inputs.append(to_nchw4c(wider))
        views.append((gather.Affine(inputs[-1].shape, (0, before, 0, 0, 0), (1,) * 5),))
    out = _launch(device, concat.concat_channels(n, chans, h, w, scope=scope, views=tuple(views)), inputs)
    total = sum(chans)
    np.testing.assert_array_equal(from_nchw4c(out, total), np.concatenate(xs, axis=1))
    np.testing.assert_array_equal(from_nchw4c(out, out.shape[1] * 4)[:, total:], 0)


def test_bad_plain_operands():
    with pytest.raises(ValueError, match="needs channels"):
        elementwise.binary((1, 1, 1, 1, 4), "add", plain_b=True)
    with pytest.raises(ValueError, match="per-channel vector"):
        elementwise.binary((1, 1, 1, 1, 4), "add", channels=3, plain_b=True, broadcast_channels=True)
    with pytest.raises(ValueError, match="not among"):
        concat.concat_channels(1, (4, 4), 2, 2, plain=(2,))
    window = (gather.Affine((1, 3, 2, 2, 4), (0, 1, 0, 0, 0), (1,) * 5),)
    with pytest.raises(ValueError, match="none for a plain input"):
        concat.concat_channels(1, (4, 4), 2, 2, plain=(1,), views=((), window))
    with pytest.raises(ValueError, match="one per input"):
        concat.concat_channels(1, (4, 4), 2, 2, views=(window,))
