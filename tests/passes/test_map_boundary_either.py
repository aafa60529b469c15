"""A conv that reads a plain NCHW value in place takes either form (``passes.map_boundary``:
``token_output`` counts it as neither side's reader, ``_shared_input`` reads the plain buffer):
a value read by the heads' reshape of an attention (plain) and by a depthwise or dense conv is
written plain by its conv, and the other conv reads it in place, instead of staying blocked and
being unpacked for the heads. EfficientFormerV2's attention in small: V from a 1x1 conv, read by
the heads and by a local 3x3 depthwise conv (or a 1x1 conv), against onnxruntime (random input and
weights, the logits scaled by 1/sqrt(d); channels not multiples of 4)."""

import pytest

from helpers.onnx_graphs import f32, i64, i_f32, make, node, run_all_ours, tensor

N, C, H, W = 2, 5, 4, 6
HEADS, D = 2, 3  # heads of D channels
V = HEADS * D


def _attention_model(local: str):
    """q, k, v from 1x1 convs of x; v read by the heads' reshape and by ``local`` ("depthwise": a
    3x3 depthwise conv; "dense": a 1x1 conv); the heads' output, back as a map, plus the local
    branch, into a 1x1 output conv."""
    heads = lambda t: node("Reshape", [t, "heads"], [f"{t}_h"])  # noqa: E731  [N, heads, d, L]
    local_node = (node("Conv", ["v", "wl"], ["loc"], pads=[1, 1, 1, 1], group=V) if local == "depthwise"
                  else node("Conv", ["v", "wl"], ["loc"]))
    nodes = [node("Conv", ["x", "wq"], ["q"]), node("Conv", ["x", "wk"], ["k"]), node("Conv", ["x", "wv", "bv"], ["v"]),
             heads("q"), heads("k"), heads("v"), local_node,
             node("Transpose", ["q_h"], ["q_t"], perm=[0, 1, 3, 2]), node("MatMul", ["q_t", "k_h"], ["logits"]),
             node("Mul", ["logits", "scale"], ["scaled"]), node("Softmax", ["scaled"], ["attn"], axis=-1),
             node("Transpose", ["v_h"], ["v_t"], perm=[0, 1, 3, 2]), node("MatMul", ["attn", "v_t"], ["o"]),
             node("Transpose", ["o"], ["o_t"], perm=[0, 1, 3, 2]), node("Reshape", ["o_t", "map"], ["o_map"]),
             node("Add", ["o_map", "loc"], ["mixed"]), node("Conv", ["mixed", "wo"], ["y"])]
    wl = f32("wl", (V, 1, 3, 3), scale=0.5) if local == "depthwise" else f32("wl", (V, V, 1, 1), scale=0.5)
    inits = [f32("wq", (V, C, 1, 1), scale=0.5), f32("wk", (V, C, 1, 1), scale=0.5), f32("wv", (V, C, 1, 1), scale=0.5),
             f32("bv", (V,)), i64("heads", [N, HEADS, D, H * W]), i_f32("scale", [D ** -0.5]), wl,
             i64("map", [N, V, H, W]), f32("wo", (C, V, 1, 1))]
    return make(nodes, [tensor("x", [N, C, H, W])], [tensor("y", [N, C, H, W])], inits, opset=17)


@pytest.mark.parametrize("local", ["depthwise", "dense"])
def test_value_read_by_heads_and_a_conv_is_written_plain(local):
    """v's conv writes plain NCHW, the heads read it as a view and the local conv reads it in
    place: transforms are the input's packing (three convs read it), the packing of the heads'
    output (the add runs as the local conv's residual epilogue) and the output's unpacking, in 10
    launches (the attention one ``softmax_attention`` kernel; before it 12, and before this rule v
    also unpacked for the heads, 4 transforms in 13 launches)."""
    ops, transforms = run_all_ours(_attention_model(local), 7, (N, C, H, W))
    assert transforms == ["nchw_to_nchw4c", "nchw_to_nchw4c1", "nchw4c_to_nchw"], ops
    assert len(ops) == 10, ops
