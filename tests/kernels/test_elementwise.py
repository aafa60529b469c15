"""Elementwise kernels on NCHW4c textures and buffers: results equal NumPy's float32 exactly
(each is one correctly rounded IEEE operation per element)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from primfuncs import elementwise, gather
from primfuncs._common import BUFFER, TEXTURE
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


def _window(x5, before, after):
    """(buffer, view): blocked ``x5`` as channel blocks ``before .. before + C/4`` of a wider map
    (the others NaN: a read outside the window poisons the result), and the gather steps reading it."""
    wider = np.pad(x5, [(0, 0), (before, after), (0, 0), (0, 0), (0, 0)], constant_values=np.nan)
    return wider, (gather.Affine(wider.shape, (0, before, 0, 0, 0), (1,) * 5),)


@given(shapes, st.sampled_from([TEXTURE, BUFFER]), st.sampled_from(["add", "subtract", "multiply"]),
       st.sampled_from(["a", "b", "both", "a_plain_b"]), st.integers(0, 3), st.integers(0, 2))
def test_binary_reads_channel_windows_in_place(device, d, scope, op, viewed, before, after):
    """``binary`` reading A and/or B as a window of whole channel blocks of a wider map through
    ``a_view`` / ``b_view`` (a slice of the map's channels read in place: EfficientViT's cascaded
    heads), with B blocked or plain, in textures and buffers."""
    n, c, h, w, seed = d
    rng = np.random.default_rng(seed)
    shape = (n, -(-c // 4), h, w, 4)
    x, y = rand(rng, shape), rand(rng, shape)
    x[:, -1, :, :, c % 4 or 4:] = 0  # the padded lanes of the last block are 0, as in every blocked map
    y[:, -1, :, :, c % 4 or 4:] = 0
    plain_b = viewed == "a_plain_b"
    a, a_view = _window(x, before, after) if viewed != "b" else (x, ())
    b, b_view = _window(y, after, before) if viewed in ("b", "both") else (y, ())
    if plain_b:
        b = np.ascontiguousarray(y.transpose(0, 1, 4, 2, 3).reshape(n, -1, h, w)[:, :c])
    func = elementwise.binary(shape, op, scope=scope, channels=c if plain_b else None, plain_b=plain_b, a_view=a_view, b_view=b_view)
    module = build.build_cached(func)
    (name,) = module.functions
    specs = module[name].params
    assert [tuple(s.shape) for s in specs[:2]] == [a.shape, b.shape]
    tensors = [device.empty(s).upload(v) for s, v in zip(specs, [a, b])] + [device.empty(specs[-1]).poison()]
    device.load(module)(name, *tensors)
    np.testing.assert_array_equal(tensors[-1].numpy(), elementwise.BINARY_OPS[op](x, y))


def test_binary_views_keep_a_pixel_whole():
    """A view must keep a pixel's 4 lanes together (they are one vector read) and may read B only
    where B is a whole blocked tensor."""
    shape = (1, 2, 3, 3, 4)
    with pytest.raises(ValueError, match="lanes apart"):
        elementwise.binary(shape, "add", a_view=(gather.Permute((0, 1, 2, 4, 3)),))
    window = (gather.Affine((1, 4, 3, 3, 4), (0, 1, 0, 0, 0), (1,) * 5),)
    with pytest.raises(ValueError, match="b_view"):
        elementwise.binary(shape, "add", broadcast_channels=True, b_view=window)
