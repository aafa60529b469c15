"""Transposed attention on textures (issue 21): EdgeNeXt's cross-covariance attention (XCA) kernels
against float64 NumPy, and the SDTA block as timm exports it (tokens of a map, layer norm, Linear,
XCA, Linear, residual, back to the map) against onnxruntime with no layout transform inside."""

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from onnx import helper

from helpers.numeric import pack_nchw4c, run_kernel, unpack_nchw4c
from helpers.onnx_graphs import check_pattern, conv_node, pattern_graph
from helpers.strategies import SCOPES, SEEDS
from primfuncs import attention
from primfuncs._common import TEXTURE

#: float32 dots over <= 64 tokens and a softmax over <= 13 numbers: measured <= 4e-7 (weights) and
#: <= 5e-7 (apply, relative to max |y|).
RTOL = 2e-6


def xca_reference(x, heads, d, offsets, temperature, eps=1e-12):
    """(A, Y) of primfuncs.attention in float64 from NCHW ``x``; ``offsets`` = (q, k, v) channels."""
    b, c, h, w = x.shape
    t = x.reshape(b, c, h * w).astype(np.float64)
    q, k, v = (t[:, o : o + heads * d].reshape(b, heads, d, h * w) for o in offsets)
    q = q / np.maximum(np.linalg.norm(q, axis=-1, keepdims=True), eps)
    k = k / np.maximum(np.linalg.norm(k, axis=-1, keepdims=True), eps)
    a = q @ k.transpose(0, 1, 3, 2) * np.asarray(temperature, np.float64).reshape(1, heads, 1, 1)
    a = np.exp(a - a.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    return a, (a @ v).reshape(b, heads * d, h, w)


@st.composite
def xca_cases(draw):
    """(n, heads, d, extra channels, offsets (q, k, v), h, w): head sizes not a multiple of 4 and
    ranges not aligned to the 4-lane pixel, in any order inside the map."""
    heads, d = draw(st.integers(1, 4)), draw(st.integers(1, 13))
    extra = draw(st.integers(0, 5))
    span = heads * d
    channels = 3 * span + extra
    offsets = tuple(draw(st.integers(0, channels - span)) for _ in range(3))
    return draw(st.integers(1, 2)), heads, d, channels, offsets, draw(st.integers(1, 8)), draw(st.integers(1, 8))


@given(xca_cases(), SCOPES, SEEDS)
@example((1, 4, 12, 144, (0, 48, 96), 5, 6), TEXTURE, 1)  # EdgeNeXt-XXS stage 2 (d = 12, aligned)
@example((1, 2, 22, 132, (0, 44, 88), 3, 4), TEXTURE, 2)  # d = 22: heads straddle pixels
@example((2, 3, 1, 9, (0, 3, 6), 2, 3), "global", 3)  # d = 1: one pixel holds several heads
def test_xca_kernels(device, case, scope, seed):
    """Both kernels against float64: a zero channel (its norm clamps to eps, its row of logits is 0),
    temperatures in [0.1, 4], poisoned outputs, padded output lanes 0."""
    n, heads, d, channels, (qo, ko, vo), h, w = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, channels, h, w)).astype(np.float32)
    x[0, qo] = 0.0
    temperature = rng.uniform(0.1, 4.0, heads).astype(np.float32)
    a_ref, y_ref = xca_reference(x, heads, d, (qo, ko, vo), temperature)
    xb = pack_nchw4c(x)
    a = run_kernel(device, attention.xca_weights(xb.shape, channels, heads, d, qo, ko, scope=scope), xb, temperature)
    np.testing.assert_allclose(a, a_ref, rtol=RTOL, atol=RTOL)
    y = run_kernel(device, attention.xca_apply(xb.shape, channels, heads, d, vo, scope=scope), xb, a.astype(np.float32))
    out = unpack_nchw4c(y, heads * d)
    assert np.max(np.abs(out - y_ref)) <= RTOL * np.max(np.abs(y_ref)), np.max(np.abs(out - y_ref))
    assert np.all(y[:, -1, :, :, (heads * d - 1) % 4 + 1 :] == 0), "padded lanes not zero"


def test_xca_bad_arguments():
    with pytest.raises(ValueError, match="k_offset"):
        attention.xca_weights((1, 3, 2, 2, 4), 12, 2, 3, 0, 7)
    with pytest.raises(ValueError, match="channels"):
        attention.xca_apply((1, 2, 2, 2, 4), 12, 2, 2, 0)
    with pytest.raises(ValueError, match="epsilon"):
        attention.xca_weights((1, 3, 2, 2, 4), 12, 2, 2, 0, 4, epsilon=-1.0)


def _sdta_nodes(x, y, inits, channels, heads, size, rng, pos_embedding):
    """timm's EdgeNeXt SplitTransposeBlock after its conv branch, as torch.onnx.export writes it
    (opset 17): tokens, (positional embedding,) LayerNorm, qkv Linear, XCA, proj Linear, gamma,
    residual, then back to the map through LayerNorm's NHWC view."""
    c, d, tokens = channels, channels // heads, size * size
    node = helper.make_node
    inits.update(
        shape_tokens=np.array([1, c, tokens], np.int64), shape_qkv=np.array([1, tokens, 3, heads, -1], np.int64),
        shape_out=np.array([1, tokens, c], np.int64), shape_map=np.array([1, size, size, c], np.int64),
        ones=np.array([1, 1, 1], np.int64), zero=np.array([0], np.int64), eps=np.float32(1e-12),
        ln_g=rng.standard_normal(c), ln_b=rng.standard_normal(c), qkv_w=rng.standard_normal((c, 3 * c)) / np.sqrt(c),
        qkv_b=rng.standard_normal(3 * c) * 0.1, temperature=rng.uniform(0.5, 2.0, (heads, 1, 1)),
        proj_w=rng.standard_normal((c, c)) / np.sqrt(c), proj_b=rng.standard_normal(c) * 0.1, gamma=rng.uniform(0.5, 1.5, c),
        pos=rng.standard_normal((1, tokens, c)),
    )
    for name in ("shape_tokens", "shape_qkv", "shape_out", "shape_map", "ones", "zero"):
        inits[name] = inits[name].astype(np.int64)
    first = [node("Reshape", [x, "shape_tokens"], ["flat"]), node("Transpose", ["flat"], ["t0" if pos_embedding else "t"], perm=[0, 2, 1])]
    if pos_embedding:
        first.append(node("Add", ["t0", "pos"], ["t"]))
    normalize = []
    for i in (0, 1):
        normalize += [node("ReduceL2", [f"s{i}"], [f"l2_{i}"], axes=[-1], keepdims=1), node("Clip", [f"l2_{i}", "eps", ""], [f"cl{i}"]),
                      node("Shape", [f"s{i}"], [f"sh{i}"]), node("Expand", [f"cl{i}", f"sh{i}"], [f"ex{i}"]),
                      node("Div", [f"s{i}", f"ex{i}"], [f"n{i}"])]
    return first + [
        node("LayerNormalization", ["t", "ln_g", "ln_b"], ["ln"], axis=-1, epsilon=1e-6),
        node("MatMul", ["ln", "qkv_w"], ["qkv0"]),
        node("Add", ["qkv_b", "qkv0"], ["qkv"]),
        node("Reshape", ["qkv", "shape_qkv"], ["qkv5"]),
        node("Transpose", ["qkv5"], ["qkvt"], perm=[2, 0, 3, 4, 1]),
        node("Split", ["qkvt", "ones"], ["p0", "p1", "p2"], axis=0),
        *[node("Squeeze", [f"p{i}", "zero"], [f"s{i}"]) for i in range(3)],
        *normalize,
        node("Transpose", ["n1"], ["kt"], perm=[0, 1, 3, 2]),
        node("MatMul", ["n0", "kt"], ["scores"]),
        node("Mul", ["scores", "temperature"], ["scaled"]),
        node("Softmax", ["scaled"], ["attn"], axis=-1),
        node("MatMul", ["attn", "s2"], ["mixed"]),
        node("Transpose", ["mixed"], ["mixed_t"], perm=[0, 3, 1, 2]),
        node("Reshape", ["mixed_t", "shape_out"], ["heads_out"]),
        node("MatMul", ["heads_out", "proj_w"], ["proj0"]),
        node("Add", ["proj_b", "proj0"], ["proj"]),
        node("Mul", ["gamma", "proj"], ["scaled_proj"]),
        node("Add", ["t", "scaled_proj"], ["res"]),
        node("Reshape", ["res", "shape_map"], ["nhwc"]),
        node("Transpose", ["nhwc"], [y], perm=[0, 3, 1, 2]),
    ]


def _sdta_model(channels, heads, pos_embedding, seed):
    rng, inits, size = np.random.default_rng(seed), {}, 7
    nodes = [conv_node(rng, inits, "x", "c", channels, 3), *_sdta_nodes("c", "m", inits, channels, heads, size, rng, pos_embedding),
             conv_node(rng, inits, "m", "y", 4, channels, k=1)]
    model = pattern_graph(nodes, {k: v for k, v in inits.items() if v.dtype != np.int64})
    from onnx import numpy_helper  # the shape and axes inputs stay int64

    model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in inits.items() if v.dtype == np.int64)
    return model


@pytest.mark.parametrize("channels,heads,pos_embedding", [(24, 2, True), (20, 2, False)])
def test_sdta_block_stays_on_textures(channels, heads, pos_embedding):
    """conv -> SDTA (head size 12, 4-aligned, with the positional embedding; and 10, straddling
    pixels) -> conv: the attention in two kernels, the tokens views of the map, no layout transform."""
    names = check_pattern(_sdta_model(channels, heads, pos_embedding, seed=channels))
    assert names.count("xca_weights") == 1 and names.count("xca_apply") == 1, names
    assert names.count("layer_norm_channels") == 1, names
    assert names.count("add") == (1 if pos_embedding else 0), names  # the embedding; the residual is the proj conv's
