"""Group norm (MobileViT-v2's GroupNorm1, issue 21) on NCHW4c textures: the ``group_norm`` kernel
against float64 NumPy (fp32 and half images), and graphs against onnxruntime with the norm in one
kernel and no layout transform inside: timm's GroupNorm as ``torch.onnx.export`` writes it
(``Reshape`` -> ``InstanceNormalization`` -> ``Reshape`` -> ``Mul`` -> ``Add``, 1 and 2 groups)
and ONNX ``GroupNormalization`` (``relax.nn.group_norm``)."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from onnx import helper

from helpers.numeric import pack_nchw4c, rand, unpack_nchw4c
from helpers.onnx_graphs import check_pattern, conv_node, pattern_graph
from primfuncs import layernorm
from primfuncs._common import TEXTURE
from primfuncs.lanes import blocked
from tir_adreno import ops
from tir_adreno.strategy.packing import pack_bias

#: float32 statistics: the error grows with the mean in standard deviations (the float32 sums of
#: values around the mean). Measured 7.6e-8 (mean 0) and 2.2e-6 (mean 30 sigma) relative to the
#: output's magnitude, i.e. ~7e-8 x (1 + |mean| / std); held to 5e-7 x that.
RTOL = 5e-7


def _reference(x, groups, gamma, beta, eps, activation=None):
    """float64 group norm of NCHW ``x`` (population variance, as torch and ONNX)."""
    n, c, h, w = x.shape
    xg = x.astype(np.float64).reshape(n, groups, -1)
    y = (xg - xg.mean(axis=2, keepdims=True)) / np.sqrt(xg.var(axis=2, keepdims=True) + eps)
    y = y.reshape(n, c, h, w) * gamma[None, :, None, None] + beta[None, :, None, None]
    return np.maximum(y, 0.0) if activation == "relu" else y


@st.composite
def group_norm_cases(draw):
    """(n, channels, groups, h, w): one group of any channels, or groups of a multiple of 4 channels."""
    groups = draw(st.integers(1, 4))
    channels = draw(st.integers(1, 13)) if groups == 1 else 4 * groups * draw(st.integers(1, 3))
    return draw(st.integers(1, 2)), channels, groups, draw(st.integers(1, 9)), draw(st.integers(1, 11))


@given(case=group_norm_cases(), scope=st.sampled_from([TEXTURE, "global"]), precision=st.sampled_from(["float32", "float16_acc32"]),
       activation=st.sampled_from([None, "relu"]), offset=st.sampled_from([0.0, 30.0]), seed=st.integers(0, 2**32 - 1))
@example(case=(1, 6, 1, 1, 1), scope=TEXTURE, precision="float32", activation=None, offset=0.0, seed=1)  # 6 elements, a padded block
@example(case=(2, 24, 3, 17, 23), scope="global", precision="float32", activation=None, offset=30.0, seed=2)  # > 64 pixels per item
def test_group_norm_kernel(device, case, scope, precision, activation, offset, seed):
    """Each (sample, group) normalized over its (C / groups, H, W) elements, then scaled and shifted
    per channel; padded lanes written as 0. ``offset``: a mean 30 standard deviations from 0 (a
    one-pass ``E[x^2] - E[x]^2`` loses ~7 digits there). Half images: the kernel reads x rounded
    to half and writes y rounded to half, its statistics float32."""
    n, channels, groups, h, w = case
    rng = np.random.default_rng(seed)
    x = rand(rng, (n, channels, h, w)) + np.float32(offset)
    gamma, beta = rand(rng, (channels,)) + 1.0, rand(rng, (channels,))
    storage = "float16" if precision == "float16_acc32" and scope == TEXTURE else None
    func = layernorm.group_norm((n, blocked(channels), h, w, 4), channels, groups, 1e-5, activation, scope=scope)
    loaded, name = ops.compile(func, device)
    specs = [replace(spec, storage=storage) if spec.scope == TEXTURE else spec for spec in loaded[name].params]
    inputs = [pack_nchw4c(x), pack_bias(gamma), pack_bias(beta)]
    tensors = [device.empty(spec).upload(v) for spec, v in zip(specs, inputs)]
    out = device.empty(specs[-1]).poison()
    loaded(name, *tensors, out)
    y = out.numpy()
    x_in = x.astype(np.float16) if storage else x
    ref = _reference(x_in, groups, gamma, beta, 1e-5, activation)
    got = unpack_nchw4c(y, channels).astype(np.float64)
    # |y| ~ |gamma| |z| + |beta|: float32 (or half output) rounding relative to that magnitude
    scale = np.abs(gamma)[None, :, None, None] * 4 + np.abs(beta)[None, :, None, None]
    rtol = 2.0**-10 if storage else RTOL * (1.0 + offset)  # std 1, mean offset
    assert np.all(np.abs(got - ref) <= rtol * scale), float(np.max(np.abs(got - ref) / scale))
    assert np.all(y[:, -1, :, :, (channels - 1) % 4 + 1 :] == 0), "padded lanes not zero"


def test_group_norm_refuses_bad_groups():
    with pytest.raises(ValueError, match="groups of a multiple of 4"):
        layernorm.group_norm((1, 2, 3, 3, 4), 8, 4)  # 2 channels per group: groups inside a block
    with pytest.raises(ValueError, match="groups of a multiple of 4"):
        layernorm.group_norm((1, 3, 3, 3, 4), 12, 5)
    with pytest.raises(ValueError, match="does not fill"):
        layernorm.group_norm((1, 2, 3, 3, 4), 3, 1)
    with pytest.raises(ValueError, match="epsilon"):
        layernorm.group_norm((1, 1, 3, 3, 4), 4, 1, -1.0)


def _group_norm_nodes(x, y, inits, channels, groups, rng):
    """timm's GroupNorm (``GroupNorm1``: groups=1) as torch.onnx.export writes it (opset 17)."""
    inits.update(gn_shape=np.array([0, groups, -1], np.int64), gn_s=rng.uniform(0.5, 1.5, groups), gn_b=rng.standard_normal(groups),
                 gn_w=rng.standard_normal((channels, 1, 1)), gn_bias=rng.standard_normal((channels, 1, 1)))
    node = helper.make_node
    return [
        node("Reshape", [x, "gn_shape"], ["gn_r"]),
        node("InstanceNormalization", ["gn_r", "gn_s", "gn_b"], ["gn_i"], epsilon=1e-5),
        node("Shape", [x], ["gn_xs"]),
        node("Reshape", ["gn_i", "gn_xs"], ["gn_o"]),
        node("Mul", ["gn_o", "gn_w"], ["gn_m"]),
        node("Add", ["gn_m", "gn_bias"], [y]),
    ]


def _graph(nodes, inits):
    model = pattern_graph(nodes, {k: v for k, v in inits.items() if v.dtype != np.int64})
    for k, v in inits.items():  # integer initializers (reshape targets) stay int64
        if v.dtype == np.int64:
            model.graph.initializer.append(helper.make_tensor(k, 7, v.shape, v.ravel().tolist()))
    return model


@pytest.mark.parametrize("channels,groups", [(6, 1), (8, 2)])
def test_exported_group_norm_stays_on_textures(channels, groups):
    """conv -> GroupNorm (1 group over 6 channels: a padded block; 2 groups of 4) -> conv: one
    group_norm kernel, everything ours, no layout transform inside."""
    rng, inits = np.random.default_rng(7), {}
    nodes = [conv_node(rng, inits, "x", "c", channels, 3), *_group_norm_nodes("c", "n", inits, channels, groups, rng),
             conv_node(rng, inits, "n", "y", 4, channels, k=1)]
    names = check_pattern(_graph(nodes, inits))
    assert names.count("group_norm") == 1 and len(names) == 3, names


def test_onnx_group_normalization_stays_on_textures():
    """ONNX GroupNormalization (opset 21: per-channel scale and bias; ``relax.nn.group_norm``),
    then a Relu: one group_norm kernel with the activation fused."""
    rng, inits = np.random.default_rng(8), {}
    inits.update(g_s=rng.standard_normal(8), g_b=rng.standard_normal(8))
    nodes = [conv_node(rng, inits, "x", "c", 8, 3),
             helper.make_node("GroupNormalization", ["c", "g_s", "g_b"], ["n"], num_groups=2, epsilon=1e-5),
             helper.make_node("Relu", ["n"], ["r"]), conv_node(rng, inits, "r", "y", 4, 8, k=1)]
    names = check_pattern(pattern_graph(nodes, inits, opset=21))
    assert names.count("group_norm") == 1 and len(names) == 3, names  # the Relu fused
