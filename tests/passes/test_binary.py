"""Binary ops of two activations on NCHW4c textures (issue 21: FastViT's RepMixer subtracts its
norm branch from its mixer branch): the ``binary`` kernel for add, subtract, multiply and divide,
same shape or a ``[N, C, 1, 1]`` vector broadcast over H, W, against NumPy (fp32 and half
images), and graphs against onnxruntime with no layout transform inside."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import helper

from helpers.numeric import pack_nchw4c, rand, unpack_nchw4c
from helpers.onnx_graphs import check_pattern, conv_node, pattern_graph
from primfuncs import elementwise
from primfuncs._common import TEXTURE
from primfuncs.lanes import blocked
from tir_adreno import ops

NUMPY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide}


@given(op=st.sampled_from(sorted(NUMPY)), broadcast=st.booleans(), n=st.integers(1, 2), channels=st.integers(1, 10),
       h=st.integers(1, 5), w=st.integers(1, 6), scope=st.sampled_from([TEXTURE, "global"]),
       precision=st.sampled_from(["float32", "float16_acc32"]), seed=st.integers(0, 2**32 - 1))
def test_binary_kernel(device, op, broadcast, n, channels, h, w, scope, precision, seed):
    """``a op b`` per element as NumPy's float32 (one rounded operation; OpenCL allows division
    2.5 ulp), ``b`` broadcast over H, W when ``broadcast``; padded lanes written as 0 (a divide's
    are 0 / 0). Half images: the inputs and the result rounded to half."""
    rng = np.random.default_rng(seed)
    a = rand(rng, (n, channels, h, w))
    b = rand(rng, (n, channels, 1, 1) if broadcast else (n, channels, h, w))
    storage = "float16" if precision == "float16_acc32" and scope == TEXTURE else None
    kwargs = {"channels": channels} if op == "divide" else {}
    func = elementwise.binary((n, blocked(channels), h, w, 4), op, scope=scope, broadcast_channels=broadcast, **kwargs)
    loaded, name = ops.compile(func, device)
    specs = [replace(spec, storage=storage) if spec.scope == TEXTURE else spec for spec in loaded[name].params]
    tensors = [device.empty(spec).upload(pack_nchw4c(v)) for spec, v in zip(specs, (a, b))]
    out = device.empty(specs[-1]).poison()
    loaded(name, *tensors, out)
    y = out.numpy()
    if storage:
        a, b = a.astype(np.float16).astype(np.float32), b.astype(np.float16).astype(np.float32)
    ref = NUMPY[op](a, b)
    rtol = 2.0**-11 if storage else 3 * 2.0**-24 if op == "divide" else 0.0
    np.testing.assert_allclose(unpack_nchw4c(y, channels), ref, rtol=rtol, atol=0)
    assert np.all(y[:, -1, :, :, (channels - 1) % 4 + 1 :] == 0), "padded lanes not zero"


def test_divide_needs_channels():
    with pytest.raises(ValueError, match="needs channels"):
        elementwise.binary((1, 1, 2, 2, 4), "divide")


def _scaled(nodes, inits, x, y, channels, rng):
    """``y = x * layer_scale`` (a per-channel constant, as FastViT's)."""
    inits[f"{y}_ls"] = rng.standard_normal((channels, 1, 1))
    nodes.append(helper.make_node("Mul", [x, f"{y}_ls"], [y]))


def test_subtract_of_two_activations_stays_on_textures():
    """``x + layer_scale * (relu(mixer(x)) - norm(x))``, the norm a batch norm, the mixer a
    depthwise conv: the ReLU keeps the two sides from being linear branches of one value (without
    it this is FastViT's RepMixer, one conv: tests/passes/test_reparam.py), so the Sub of two
    activations is one ``subtract`` kernel, everything ours, no layout transform inside."""
    rng, inits = np.random.default_rng(3), {}
    node = helper.make_node
    inits.update(bn_s=rng.uniform(0.5, 1.5, 6), bn_b=rng.standard_normal(6), bn_m=rng.standard_normal(6) * 0.1, bn_v=rng.uniform(0.5, 1.5, 6))
    nodes = [conv_node(rng, inits, "x", "c", 6, 3),
             conv_node(rng, inits, "c", "mix", 6, 6, group=6),
             node("Relu", ["mix"], ["act"]),
             node("BatchNormalization", ["c", "bn_s", "bn_b", "bn_m", "bn_v"], ["nrm"]),
             node("Sub", ["act", "nrm"], ["d"])]
    _scaled(nodes, inits, "d", "ds", 6, rng)
    nodes += [node("Add", ["c", "ds"], ["r"]), conv_node(rng, inits, "r", "y", 4, 6, k=1)]
    names = check_pattern(pattern_graph(nodes, inits))
    assert names.count("subtract") == 1, names


def test_divide_and_channel_broadcasts_stay_on_textures():
    """``a / b`` of two activations (6 channels: a padded block), ``x - mean_hw(x)`` and ``x / mean_hw(t)`` with the ``[N, C, 1, 1]``
    operand broadcast: binary kernels, everything ours (divisors ``t = sigmoid + 1`` in (1, 2))."""
    rng, inits = np.random.default_rng(5), {}
    inits["one"] = np.float32(1.0)
    node = helper.make_node
    nodes = [conv_node(rng, inits, "x", "c", 6, 3), node("Sigmoid", ["c"], ["s"]), node("Add", ["s", "one"], ["t"]),
             node("Div", ["c", "t"], ["q"]),
             node("ReduceMean", ["q"], ["m"], axes=[2, 3], keepdims=1), node("Sub", ["q", "m"], ["centered"]),
             node("GlobalAveragePool", ["t"], ["tm"]), node("Div", ["centered", "tm"], ["scaled"]),
             conv_node(rng, inits, "scaled", "y", 4, 6, k=1)]
    names = check_pattern(pattern_graph(nodes, inits, opset=13))
    assert names.count("divide") == 1 and names.count("subtract_channels") == 1 and names.count("divide_channels") == 1, names
