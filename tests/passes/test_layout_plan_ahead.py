"""The layout planner's rules that look past the op being rewritten (``passes.layout_plan``):

- a Linear on ``[N, K]`` held only plain (a class token gathered from plain tokens) is our GEMM,
  not a 1x1 conv on its packed form (``conv_emit.as_conv_operands``);
- a pixelwise reader in a token region whose other operand is not computed yet but comes from
  plain values only wants plain (``LayoutPlan.plain_to_come``): SwiftFormer's key Linear, whose
  attention side (a row sum of the plain query side) meets it in a multiply;
- a binary op of two maps whose other operand is held only blocked reads a plain operand in place,
  so a pixelwise op before it runs plain and no pack runs (``LayoutPlan._result_wants``), and a
  plain chain stops before it (``LayoutPlan.ends_plain_chain``): SwiftFormer's attention output,
  back as a map, scaled per channel and added to the blocked residual.

Each against onnxruntime (random input and weights; channels not multiples of 4), asserting the
layout transforms and launches of the plan."""

from helpers.onnx_graphs import f32, i64, make, node, run_all_ours, tensor

N, C, H, W, D = 2, 6, 5, 7, 10
L = H * W


def _class_token_model():
    """Tokens through a Linear, the class token gathered (``x[:, 0]``) into a second Linear."""
    nodes = [node("MatMul", ["x", "w1"], ["t0"]), node("Add", ["t0", "b1"], ["t"]),
             node("Gather", ["t", "first"], ["cls"], axis=1), node("MatMul", ["cls", "w2"], ["y0"]),
             node("Add", ["y0", "b2"], ["y"])]
    inits = [f32("w1", (C, D)), f32("b1", (D,)), i64("first", 0), f32("w2", (D, 7)), f32("b2", (7,))]
    return make(nodes, [tensor("x", [N, L, C])], [tensor("y", [N, 7])], inits, opset=17)


def test_linear_on_a_plain_class_token_is_a_gemm():
    """Both Linears are GEMMs, the second reading the class token through the gather (a view):
    no transform, two launches (before: the class token gathered, packed for a 1x1 conv and its
    output unpacked: 2 transforms in 5 launches)."""
    ops, transforms = run_all_ours(_class_token_model(), 11, (N, L, C))
    assert transforms == [], ops
    assert len(ops) == 2, ops


def _normalized(t, tag):
    """``t / sqrt(sum(t * t, -1))`` (F.normalize as exported, without its clamp)."""
    return [node("Mul", [t, t], [f"{tag}_sq"]), node("ReduceSum", [f"{tag}_sq", "last"], [f"{tag}_ss"], keepdims=1),
            node("Sqrt", [f"{tag}_ss"], [f"{tag}_nrm"]), node("Div", [t, f"{tag}_nrm"], [f"{tag}n"])]


def _additive_nodes():
    """A residual map ``r`` (read by a 1x1 conv too, so it stays blocked) as tokens into a query and
    a key Linear, each normalized; the query's global attention ``sum(qn * (qn @ wg), tokens)``
    scales the key, through a projection plus the key and a final Linear to ``out`` ``[N, L, C]``."""
    return [node("Conv", ["x", "w3"], ["m"], pads=[1, 1, 1, 1]), node("Add", ["m", "x"], ["r"]),
            node("Conv", ["r", "w1"], ["side"]),
            node("Reshape", ["r", "ncl"], ["rows"]), node("Transpose", ["rows"], ["t"], perm=[0, 2, 1]),
            node("MatMul", ["t", "wq"], ["q0"]), node("Add", ["q0", "bq"], ["q"]), *_normalized("q", "q"),
            node("MatMul", ["t", "wk"], ["k0"]), node("Add", ["k0", "bk"], ["k"]), *_normalized("k", "k"),
            node("MatMul", ["qn", "wg"], ["g"]), node("Mul", ["g", "qn"], ["gq"]),
            node("ReduceSum", ["gq", "tokens"], ["gs"], keepdims=1), node("Mul", ["gs", "kn"], ["gk"]),
            node("MatMul", ["gk", "wp"], ["p"]), node("Add", ["p", "kn"], ["pk"]), node("MatMul", ["pk", "wf"], ["out"])]


def _additive_inits():
    return [f32("w3", (C, C, 3, 3), scale=0.3), f32("w1", (C, C, 1, 1)), i64("ncl", [N, C, L]),
            f32("wq", (C, D)), f32("bq", (D,)), f32("wk", (C, D)), f32("bk", (D,)), i64("last", [-1]),
            f32("wg", (D, 1)), i64("tokens", [1]), f32("wp", (D, D)), f32("wf", (D, C))]


def test_key_read_with_the_plain_query_side_is_written_plain():
    """The key Linear (a 1x1 conv on the blocked tokens) writes plain: its reader ``gs * kn``
    meets the query side's row sum, still to be computed but from plain values only. The input's
    packing and the side output's unpacking in 17 launches (before this rule: the key's region
    tied, so the key and its sum of squares stayed blocked and were unpacked: 4 transforms in 20;
    18 before ``gs * kn`` was computed by the projection's GEMM, ``producer_gemm``)."""
    model = make(_additive_nodes(), [tensor("x", [N, C, H, W])], [tensor("out", [N, L, C]), tensor("side", [N, C, H, W])],
                 _additive_inits(), opset=17)
    ops, transforms = run_all_ours(model, 5, (N, C, H, W))
    assert transforms == ["nchw_to_nchw4c", "nchw4c_to_nchw"], ops
    assert len(ops) == 17, ops


def test_scaled_tokens_added_to_a_blocked_map_in_place():
    """The attention's tokens, back as a map (a gather) and scaled per channel, run plain and the
    residual add reads them in place beside the blocked map: no pack, the input's packing and the
    two outputs' unpacking in 21 launches (before: the map packed for the scale run blocked, and
    the key's two unpackings above: 6 transforms in 26)."""
    nodes = [*_additive_nodes(), node("Transpose", ["out"], ["o_t"], perm=[0, 2, 1]), node("Reshape", ["o_t", "nchw"], ["o_map"]),
             node("Mul", ["o_map", "gamma"], ["scaled"]), node("Add", ["r", "scaled"], ["res"]),
             node("Conv", ["res", "w4"], ["y"])]
    inits = [*_additive_inits(), i64("nchw", [N, C, H, W]), f32("gamma", (C, 1, 1)), f32("w4", (C, C, 1, 1))]
    model = make(nodes, [tensor("x", [N, C, H, W])], [tensor("y", [N, C, H, W]), tensor("side", [N, C, H, W])],
                 inits, opset=17)
    ops, transforms = run_all_ours(model, 9, (N, C, H, W))
    assert transforms == ["nchw_to_nchw4c", "nchw4c_to_nchw", "nchw4c_to_nchw"], ops
    assert "add_plain" in ops, ops  # the blocked add reading the plain operand in place
    assert len(ops) == 21, ops  # 23 before an elementwise chain read its movement-op operand in place, 22 before producer_gemm
