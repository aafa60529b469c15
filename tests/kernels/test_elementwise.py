"""Elementwise kernels on NCHW4c textures and buffers: results equal NumPy's float32 exactly
(each is one correctly rounded IEEE operation per element)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from primfuncs import elementwise
from tir_adreno import ops
from tir_adreno.codegen import build
from helpers.strategies import NCHW_SEEDS
from helpers.numeric import rand

shapes = NCHW_SEEDS


def sample(d, count=1):
    n, c, h, w, seed = d
    rng = np.random.default_rng(seed)
    return [rand(rng, (n, c, h, w)) for _ in range(count)]


@given(shapes)
def test_add_multiply(d):
    a, b = sample(d, 2)
    np.testing.assert_array_equal(ops.add(a, b), a + b)
    np.testing.assert_array_equal(ops.multiply(a, b), a * b)


@given(shapes)
def test_relu_clip_relu6(d):
    (x,) = sample(d)
    x = x * 4  # reach past 6 for relu6
    np.testing.assert_array_equal(ops.relu(x), np.maximum(x, 0))
    np.testing.assert_array_equal(ops.relu6(x), np.clip(x, 0, 6))
    np.testing.assert_array_equal(ops.clip(x, -0.5, 1.25), np.clip(x, -0.5, 1.25))


@given(shapes)
def test_bias_add(d):
    (x,) = sample(d)
    bias = rand(np.random.default_rng(d[-1] + 1), (x.shape[1],))
    np.testing.assert_array_equal(ops.bias_add(x, bias), x + bias[None, :, None, None])


@given(shapes, st.sampled_from(["relu", "add", "bias_add"]))
def test_buffer_scope_same_schedule(device, d, op):
    """The buffer variant of each kernel computes the same values as the texture one."""
    n, c, h, w, seed = d
    rng = np.random.default_rng(seed)
    shape = (n, -(-c // 4), h, w, 4)
    x, y = rand(rng, shape), rand(rng, shape)
    bias = rand(rng, shape[1:2] + (4,))
    factory = {"relu": elementwise.relu, "add": elementwise.add, "bias_add": elementwise.bias_add}[op]
    inputs = {"relu": [x], "add": [x, y], "bias_add": [x, bias]}[op]
    expected = {"relu": np.maximum(x, 0), "add": x + y, "bias_add": x + bias[None, :, None, None, :]}[op]
    module = build.build_cached(factory(shape, scope="global"))
    (name,) = module.functions
    specs = module[name].params
    assert all(s.scope == "global" for s in specs)
    tensors = [device.empty(s).upload(v) for s, v in zip(specs, inputs)] + [device.empty(specs[-1]).poison()]
    device.load(module)(name, *tensors)
    np.testing.assert_array_equal(tensors[-1].numpy(), expected)


def test_bad_inputs():
    x = np.ones((1, 3, 2, 2), "float32")
    with pytest.raises(ValueError, match="b has shape"):
        ops.add(x, np.ones((1, 3, 2, 3), "float32"))
    with pytest.raises(TypeError, match="b has dtype"):
        ops.add(x, np.ones((1, 3, 2, 2), "float64"))
    with pytest.raises(TypeError, match="x has dtype int64"):
        ops.relu(np.ones((1, 3, 2, 2), "int64"))
    with pytest.raises(ValueError, match="x must be 4-d"):
        ops.relu(np.ones((3, 2, 2), "float32"))
    with pytest.raises(TypeError, match="numpy.ndarray"):
        ops.relu([[1.0]])
    with pytest.raises(ValueError, match="bias must have shape"):
        ops.bias_add(x, np.ones((4,), "float32"))
    with pytest.raises(ValueError, match="a_min <= a_max"):
        ops.clip(x, 1.0, 0.0)
    with pytest.raises(ValueError, match="unknown binary op"):
        elementwise.binary((1, 1, 1, 1, 4), "pow")
