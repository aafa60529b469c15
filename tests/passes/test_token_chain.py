"""Convs whose values only token ops read (``passes.token_chain``): a map reshaped into heads, then
moved (Transpose, Unsqueeze, Split, Squeeze) and scaled by constants on its way to a MatMul, is
written plain by its conv, so no ``nchw4c_to_nchw`` runs inside the model. Graphs in the forms of
MobileNetV4's mobile MQA (q from a conv, k and v from a strided depthwise + 1x1 conv) and
Visformer's attention (one conv for q, k, v: reshape to 5-d, permute, split, squeeze), against
onnxruntime (random input and weights, scaled as a trained attention's so that the softmax is not
saturated: 1/sqrt(d) on the logits; channels and maps not multiples of 4)."""

import numpy as np

from helpers.onnx_graphs import PATTERN_RTOL, f32, i64, i_f32, make, node, tensor
from tir_adreno import compile_model
from tir_adreno.compiler import import_model
from tir_adreno.passes import token_chain
from tir_adreno.passes.dispatch import merge_convs
from tir_adreno.passes.graph import Graph
from tir_adreno.passes.map_boundary import reads_plain
from tir_adreno.passes.patterns import PATTERNS
from tir_adreno.passes.rewriter import Rewriter
from tir_adreno.passes.rules import RULES, by_op
from tir_adreno.strategy.profile import resolve
from tir_adreno.reference import reference_outputs, relative_error

LAYOUT_KERNELS = ("nchw_to_nchw4c", "nhwc_to_nchw4c", "nchw4c_to_nchw", "nchw4c_to_nhwc", "copy")
N, C, H, W = 2, 6, 5, 7
HEADS, D = 2, 4  # q: HEADS heads of D channels; k, v: one head (multi-query)
KH, KW = 3, 4  # k and v maps: H, W after a stride-2 conv
OUT = 5


def _profile(model):
    """Run ``model`` on a random input against onnxruntime (float32); its profile rows."""
    compiled = compile_model(model, progress=lambda _: None)
    x = {"x": np.random.default_rng(11).standard_normal((N, C, H, W)).astype(np.float32)}
    (out,) = compiled.run(x, profile=True)
    (ref,) = reference_outputs(model, x)
    assert relative_error(out, ref) <= PATTERN_RTOL, relative_error(out, ref)
    return compiled.profile()


def _transforms(rows) -> list[str]:
    return [r["op"] for r in rows if r["op"].startswith(LAYOUT_KERNELS)]


def _down(tag: str) -> tuple[list, list]:
    """k or v: a stride-2 depthwise 3x3 conv, a 1x1 conv to D channels, reshaped to ``[N, D, L]``,
    transposed to tokens and unsqueezed to one head ``[N, 1, L, D]``."""
    nodes = [node("Conv", ["x", f"{tag}_dw"], [f"{tag}_d"], pads=[1, 1, 1, 1], strides=[2, 2], group=C),
             node("Conv", [f"{tag}_d", f"{tag}_pw"], [f"{tag}_map"]), node("Reshape", [f"{tag}_map", "ndl"], [f"{tag}_rows"]),
             node("Transpose", [f"{tag}_rows"], [f"{tag}_tok"], perm=[0, 2, 1]),
             node("Unsqueeze", [f"{tag}_tok", "axis1"], [f"{tag}_head"])]
    return nodes, [f32(f"{tag}_dw", (C, 1, 3, 3)), f32(f"{tag}_pw", (D, C, 1, 1), scale=0.5)]


def _mqa_model(scale_q: str = "Mul"):
    """MobileNetV4's mobile MQA block. ``scale_q``: the op scaling q by a constant (``Mul``), or
    ``Softmax`` (an op with a kernel of ours on the way: the chain rule does not apply)."""
    k_nodes, k_inits = _down("k")
    v_nodes, v_inits = _down("v")
    q_scale = (node("Mul", ["q_t", "scale"], ["q_s"]) if scale_q == "Mul" else node("Softmax", ["q_t"], ["q_s"], axis=-1))
    nodes = [node("Conv", ["x", "wq"], ["q_map"], pads=[1, 1, 1, 1]), node("Reshape", ["q_map", "heads"], ["q_h"]),
             node("Transpose", ["q_h"], ["q_t"], perm=[0, 1, 3, 2]), q_scale, *k_nodes, *v_nodes,
             node("Transpose", ["k_head"], ["k_t"], perm=[0, 1, 3, 2]), node("Mul", ["k_t", "scale"], ["k_s"]),
             node("MatMul", ["q_s", "k_s"], ["logits"]), node("Softmax", ["logits"], ["attn"], axis=-1),
             node("MatMul", ["attn", "v_head"], ["o"]), node("Transpose", ["o"], ["o_t"], perm=[0, 2, 1, 3]),
             node("Reshape", ["o_t", "nhwc"], ["o_nhwc"]), node("Transpose", ["o_nhwc"], ["o_map"], perm=[0, 3, 1, 2]),
             node("Conv", ["o_map", "wo"], ["y"])]
    inits = [f32("wq", (HEADS * D, C, 3, 3), scale=0.3), i64("heads", [N, HEADS, D, H * W]), i_f32("scale", [D ** -0.5]), i64("ndl", [N, D, KH * KW]),
             i64("axis1", [1]), *k_inits, *v_inits, i64("nhwc", [N, H, W, HEADS * D]), f32("wo", (OUT, HEADS * D, 1, 1))]
    return make(nodes, [tensor("x", [N, C, H, W])], [tensor("y", [N, OUT, H, W])], inits, opset=17)


def test_mobile_mqa_has_no_inner_transform():
    """q's conv and k's and v's 1x1 convs write plain NCHW (k and v not fused with their depthwise
    convs: that kernel writes NCHW4c only); the output conv reads the heads' channels-last map in
    place: the only layout transforms are the model's input's (three convs read it) and output's,
    every kernel ours."""
    rows = _profile(_mqa_model())
    assert all(r["ours"] for r in rows), [r["op"] for r in rows if not r["ours"]]
    assert _transforms(rows) == [rows[0]["op"], rows[-1]["op"]], [r["op"] for r in rows]
    assert rows[0]["op"].startswith("nchw_to_nchw4c") and rows[-1]["op"].startswith("nchw4c_to_nchw"), [r["op"] for r in rows]


def test_a_kernel_on_the_way_keeps_the_map_blocked():
    """A path through an op with a kernel of ours that is no constant scaling (here a Softmax on q's
    heads) is not a token chain: q's conv writes NCHW4c and one ``nchw4c_to_nchw`` reads it (k and
    v still write plain), besides the model's input and output transforms."""
    rows = _profile(_mqa_model(scale_q="Softmax"))
    found = [op.rstrip("0123456789") for op in _transforms(rows)]
    assert sorted(found) == ["nchw4c_to_nchw", "nchw4c_to_nchw", "nchw_to_nchw4c"], [r["op"] for r in rows]


def test_visformer_attention_has_no_inner_transform():
    """One 1x1 conv for q, k and v reshaped to ``[N, 3, heads, D, L]``, permuted to
    ``[3, N, heads, L, D]``, split and squeezed into q, k, v; the output transposed and reshaped back
    to a map for a 1x1 conv."""
    nodes = [node("Conv", ["x", "wqkv"], ["qkv"]), node("Reshape", ["qkv", "five"], ["qkv5"]),
             node("Transpose", ["qkv5"], ["qkv_t"], perm=[1, 0, 2, 4, 3]),
             node("Split", ["qkv_t", "ones"], ["q5", "k5", "v5"], axis=0),
             *[node("Squeeze", [f"{t}5", "axis0"], [t]) for t in "qkv"],
             node("Transpose", ["k"], ["k_t"], perm=[0, 1, 3, 2]), node("MatMul", ["q", "k_t"], ["logits"]),
             node("Mul", ["logits", "scale"], ["scaled"]), node("Softmax", ["scaled"], ["attn"], axis=-1),
             node("MatMul", ["attn", "v"], ["o"]), node("Transpose", ["o"], ["o_t"], perm=[0, 1, 3, 2]),
             node("Reshape", ["o_t", "nchw"], ["o_map"]), node("Conv", ["o_map", "wo"], ["y"])]
    inits = [f32("wqkv", (3 * HEADS * D, C, 1, 1), scale=0.5), i64("five", [N, 3, HEADS, D, H * W]), i64("ones", [1, 1, 1]),
             i64("axis0", [0]), i_f32("scale", [D ** -0.5]), i64("nchw", [N, HEADS * D, H, W]), f32("wo", (OUT, HEADS * D, 1, 1))]
    model = make(nodes, [tensor("x", [N, C, H, W])], [tensor("y", [N, OUT, H, W])], inits, opset=17)
    rows = _profile(model)
    assert all(r["ours"] for r in rows), [r["op"] for r in rows if not r["ours"]]
    assert _transforms(rows) == [rows[-1]["op"]], [r["op"] for r in rows]


def test_heads_with_a_residual_add_are_written_plain():
    """Two convs' maps reshaped into heads (``[N, heads, d, H*W]``: no token view) and added before
    a transpose and a MatMul by a constant read them: the add has a second activation, which no
    reader wants blocked (``token_chain._runs_plain_anyway``), so both convs write their heads plain
    and the only layout kernel is the model input's packing (two convs read it)."""
    e = 3
    nodes = [node("Conv", ["x", "w1", "b1"], ["map1"], pads=[1, 1, 1, 1]), node("Reshape", ["map1", "heads"], ["h1"]),
             node("Conv", ["x", "w2", "b2"], ["map2"]), node("Reshape", ["map2", "heads"], ["h2"]),
             node("Add", ["h1", "h2"], ["r"]), node("Transpose", ["r"], ["t"], perm=[0, 1, 3, 2]), node("MatMul", ["t", "m"], ["y"])]
    inits = [f32("w1", (D, C, 3, 3)), f32("b1", (D,)), f32("w2", (D, C, 1, 1)), f32("b2", (D,)),
             i64("heads", [N, HEADS, D // HEADS, H * W]), f32("m", (D // HEADS, e))]
    model = make(nodes, [tensor("x", [N, C, H, W])], [tensor("y", [N, HEADS, H * W, e])], inits, opset=17)
    rows = _profile(model)
    assert all(r["ours"] for r in rows), [r["op"] for r in rows if not r["ours"]]
    assert _transforms(rows) == ["nchw_to_nchw4c"], [r["op"] for r in rows]


def test_chain_rule_from_the_graph():
    """``token_chain.ends_plain`` on the MQA graph (before any rule runs): q's, k's and v's reshapes
    end plain; with a Softmax (a kernel of ours, no constant scaling) on q's path, q's does not."""
    found = {}
    for scale in ("Mul", "Softmax"):
        mod, _ = import_model(_mqa_model(scale))
        profile = resolve(profile="pocl")
        rw = Rewriter(merge_convs(mod, profile), profile, by_op((*PATTERNS, *RULES)))
        rw.graph = graph = Graph(rw.mod["main"], rw.mod)
        reshapes = [n for n in graph.nodes if n.op == "relax.reshape" and n.args[0] in graph.by_var
                    and graph.by_var[n.args[0]].op == "relax.nn.conv2d"]
        found[scale] = [token_chain.ends_plain(rw, n.var, reads_plain) for n in reshapes]
    assert found["Mul"] == [True, True, True], found
    assert found["Softmax"] == [False, True, True], found


def test_tokens_with_a_residual_add_are_written_plain():
    """LeViT's stem: a conv's map flattened and transposed to tokens, read by a Linear (MatMul by a
    constant) and by the residual add of its result, read by another Linear: no reader wants the
    tokens blocked, so the conv writes them plain and the model (plain input read in place, plain
    output) runs without any layout transform."""
    e = 3
    nodes = [node("Conv", ["x", "w1", "b1"], ["map1"], pads=[1, 1, 1, 1]), node("Reshape", ["map1", "ncl"], ["rows"]),
             node("Transpose", ["rows"], ["tok"], perm=[0, 2, 1]), node("MatMul", ["tok", "m"], ["h"]),
             node("Add", ["tok", "h"], ["r"]), node("MatMul", ["r", "m2"], ["y"])]
    inits = [f32("w1", (D, C, 3, 3)), f32("b1", (D,)), i64("ncl", [N, D, H * W]), f32("m", (D, D)), f32("m2", (D, e))]
    model = make(nodes, [tensor("x", [N, C, H, W])], [tensor("y", [N, H * W, e])], inits, opset=17)
    rows = _profile(model)
    assert all(r["ours"] for r in rows), [r["op"] for r in rows if not r["ours"]]
    assert _transforms(rows) == [], [r["op"] for r in rows]
