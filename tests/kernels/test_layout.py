"""Layout transforms are exact: NCHW/NHWC <-> NCHW4c and OIHW -> OIHW4o, padded lanes zero; half the
examples (even seeds) under the texture bounds sanitizer."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from primfuncs import layout
from tir_adreno import ops
from helpers.strategies import NCHW_SEEDS, SCOPES
from helpers.numeric import pack_nchw4c, pack_oihw4o, rand, run_kernel, sanitized

dims = NCHW_SEEDS
scopes = SCOPES


@given(dims, scopes)
def test_nchw_roundtrip(device, d, scope):
    n, c, h, w, seed = d
    x = rand(np.random.default_rng(seed), (n, c, h, w))
    with sanitized(seed):
        packed = run_kernel(device, layout.nchw_to_nchw4c(x.shape, scope=scope), x)
        back = run_kernel(device, layout.nchw4c_to_nchw(x.shape, scope=scope), packed)
    np.testing.assert_array_equal(packed, pack_nchw4c(x))
    np.testing.assert_array_equal(back, x)


@given(dims, scopes)
def test_nhwc_roundtrip(device, d, scope):
    n, c, h, w, seed = d
    x = rand(np.random.default_rng(seed), (n, h, w, c))
    with sanitized(seed):
        packed = run_kernel(device, layout.nhwc_to_nchw4c(x.shape, scope=scope), x)
        back = run_kernel(device, layout.nchw4c_to_nhwc(x.shape, scope=scope), packed)
    np.testing.assert_array_equal(packed, pack_nchw4c(x.transpose(0, 3, 1, 2)))
    np.testing.assert_array_equal(back, x)


@given(dims, scopes, st.booleans(), st.sampled_from(["flat", "tokens"]))
def test_unpack_to_a_reshape(device, d, scope, channels_last, form):
    """The unpacking transforms write a reshape of their plain output (``out_shape``: a
    classifier's ``[N, C]`` when H = W = 1, tokens ``[N, C, H * W]`` / ``[N, H * W, C]``): the
    same elements in the same order, every one written (the output poisoned)."""
    n, c, h, w, seed = d
    plain = (n, h, w, c) if channels_last else (n, c, h, w)
    x = rand(np.random.default_rng(seed), plain)
    packed = pack_nchw4c(x.transpose(0, 3, 1, 2) if channels_last else x)
    out_shape = (n, c * h * w) if form == "flat" else (n, plain[1] * plain[2], c) if channels_last else (n, c, h * w)
    factory = layout.nchw4c_to_nhwc if channels_last else layout.nchw4c_to_nchw
    with sanitized(seed):
        got = run_kernel(device, factory(plain, scope=scope, out_shape=out_shape), packed)
    np.testing.assert_array_equal(got, x.reshape(out_shape))


def test_unpack_to_a_reshape_checks_the_size():
    with pytest.raises(ValueError, match="not a reshape"):
        layout.nchw4c_to_nchw((1, 8, 2, 2), out_shape=(1, 8))
    with pytest.raises(ValueError, match="not a reshape"):
        layout.nchw4c_to_nhwc((1, 2, 2, 8), out_shape=(0, 32))


@given(
    st.tuples(st.integers(1, 13), st.integers(1, 9), st.integers(1, 5), st.integers(1, 5), st.integers(0, 2**32 - 1)),
    st.sampled_from(["global.texture-weight", "global"]),
)
def test_oihw_to_oihw4o(device, d, scope):
    o, i, kh, kw, seed = d
    w = rand(np.random.default_rng(seed), (o, i, kh, kw))
    with sanitized(seed):
        packed = run_kernel(device, layout.oihw_to_oihw4o(w.shape, scope=scope), w)
    np.testing.assert_array_equal(packed, pack_oihw4o(w))


@given(dims)
def test_ops_to_from_nchw4c(d):
    n, c, h, w, seed = d
    x = rand(np.random.default_rng(seed), (n, c, h, w))
    packed = ops.to_nchw4c(x)
    np.testing.assert_array_equal(packed, pack_nchw4c(x))
    np.testing.assert_array_equal(ops.from_nchw4c(packed, c), x)


def test_factories_reject_bad_shapes():
    with pytest.raises(ValueError, match="4-d NCHW"):
        layout.nchw_to_nchw4c((1, 2, 3))
    with pytest.raises(ValueError, match="C must be >= 1"):
        layout.nchw_to_nchw4c((1, 0, 3, 3))
    with pytest.raises(ValueError, match="scope"):
        layout.nchw_to_nchw4c((1, 4, 3, 3), scope="shared")
    with pytest.raises(TypeError, match="dtype"):
        layout.oihw_to_oihw4o((4, 4, 3, 3), dtype="int8")
    with pytest.raises(ValueError, match="channels=9"):
        ops.from_nchw4c(np.zeros((1, 2, 2, 2, 4), "float32"), 9)
