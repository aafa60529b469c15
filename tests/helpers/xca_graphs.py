"""EdgeNeXt's SDTA block (cross-covariance attention) as torch.onnx.export writes it, for the
attention tests (tests/passes/test_attention.py) and the precision plans (test_precision_plan.py)."""

import numpy as np
from onnx import helper

from helpers.onnx_graphs import conv_node, int_pattern_graph


def sdta_nodes(x, y, inits, channels, heads, size, rng, pos_embedding):
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


def sdta_model(channels, heads, pos_embedding, seed):
    rng, inits, size = np.random.default_rng(seed), {}, 7
    nodes = [conv_node(rng, inits, "x", "c", channels, 3), *sdta_nodes("c", "m", inits, channels, heads, size, rng, pos_embedding),
             conv_node(rng, inits, "m", "y", 4, channels, k=1)]
    return int_pattern_graph(nodes, inits)
