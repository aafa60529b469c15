"""A Linear that runs as a 1x1 conv on blocked tokens (``passes.map_boundary._linear_output``): the
conv reads either form, so when its value's token region wants plain (a sum over channels, a GEMM,
the model's output) it writes the plain tokens itself instead of leaving them blocked for each
plain reader to unpack. SwiftFormer's additive attention in small: a residual map read by a conv
(so it stays blocked) and, as tokens, by a Linear whose output is normalized over its channels
(``q / sqrt(sum(q * q))``) and read by a second Linear, plus the conv's tokens, against onnxruntime (random input and
weights; channels not multiples of 4)."""

from helpers.onnx_graphs import f32, i64, make, node, run_all_ours, tensor

N, C, H, W, D = 2, 6, 5, 7, 10


def _additive_model():
    nodes = [node("Conv", ["x", "w3"], ["m"], pads=[1, 1, 1, 1]), node("Add", ["m", "x"], ["r"]),
             node("Conv", ["r", "w1"], ["side"]),
             node("Reshape", ["r", "ncl"], ["rows"]), node("Transpose", ["rows"], ["t"], perm=[0, 2, 1]),
             node("MatMul", ["t", "wq"], ["q0"]), node("Add", ["q0", "bq"], ["q"]),
             node("Mul", ["q", "q"], ["qq"]), node("ReduceSum", ["qq", "last"], ["ss"], keepdims=1),
             node("Sqrt", ["ss"], ["nrm"]), node("Div", ["q", "nrm"], ["qn"]), node("MatMul", ["qn", "w2"], ["y0"]),
             node("Reshape", ["side", "ndl"], ["side_rows"]), node("Transpose", ["side_rows"], ["side_t"], perm=[0, 2, 1]),
             node("Add", ["y0", "side_t"], ["y"])]
    inits = [f32("w3", (C, C, 3, 3), scale=0.3), f32("w1", (D, C, 1, 1)), i64("ncl", [N, C, H * W]),
             f32("wq", (C, D)), f32("bq", (D,)), i64("last", [-1]), f32("w2", (D, D)),
             i64("ndl", [N, D, H * W])]
    return make(nodes, [tensor("x", [N, C, H, W])], [tensor("y", [N, H * W, D])], inits,
                opset=17)


def test_linear_on_blocked_tokens_writes_them_plain():
    """The residual map stays blocked (a 1x1 conv reads it too); the Linear reads its blocked tokens
    as a 1x1 conv and writes q plain: the squares, the sum, the norm and the second Linear (our
    GEMM) run on plain tokens. One transform, the input's packing, in 8 launches (before this rule:
    3 transforms in 10 launches, q and its sum of squares each unpacked)."""
    ops, transforms = run_all_ours(_additive_model(), 3, (N, C, H, W))
    assert transforms == ["nchw_to_nchw4c"], ops
    assert len(ops) == 8, ops
