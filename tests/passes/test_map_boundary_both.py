"""A token region that meets a blocked reader (``passes.map_boundary.token_region``): the value
some reader wants blocked counts once on the blocked side (its packing, when the region runs
plain) and its readers that run in either form are followed on, so their plain readers count
too; the conv writes the plain form when more values want it. A conv's tokens read by a softmax
and a sum of scaled squares (plain) and, back as a map, by a max pool (blocked), against
onnxruntime (random input and weights; channels not multiples of 4)."""

from helpers.onnx_graphs import f32, i64, i_f32, make, node, run_all_ours, tensor

N, C, H, W, D = 2, 5, 4, 6, 7


def _tokens_and_pool_model():
    nodes = [node("Conv", ["x", "w"], ["m"], pads=[1, 1, 1, 1]), node("Reshape", ["m", "ndl"], ["rows"]),
             node("Transpose", ["rows"], ["t"], perm=[0, 2, 1]),
             node("Softmax", ["t"], ["sm"], axis=-1), node("Mul", ["t", "c"], ["u"]), node("Mul", ["u", "u"], ["uu"]),
             node("ReduceSum", ["uu", "last"], ["s"], keepdims=1), node("Add", ["sm", "s"], ["z"]),
             node("Transpose", ["t"], ["t_rows"], perm=[0, 2, 1]), node("Reshape", ["t_rows", "map"], ["t_map"]),
             node("MaxPool", ["t_map"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             node("Reshape", ["p", "ndl"], ["p_rows"]), node("Transpose", ["p_rows"], ["p_t"], perm=[0, 2, 1]),
             node("Add", ["z", "p_t"], ["y"])]
    inits = [f32("w", (D, C, 3, 3), scale=0.3), i64("ndl", [N, D, H * W]), i_f32("c", 0.5), i64("last", [-1]),
             i64("map", [N, D, H, W])]
    return make(nodes, [tensor("x", [N, C, H, W])], [tensor("y", [N, H * W, D])], inits, opset=17)


def test_tokens_read_blocked_too_are_written_plain():
    """The tokens count once blocked (the pool packs them) and twice plain (the softmax reads them,
    the sum reads their scaled squares): the conv writes them plain, and the softmax and the sum run
    as our row kernels. Transforms: the tokens packed for the pool, in 9 launches, every kernel ours;
    the pool writes the tokens the add reads (``rules.pool`` asks ``map_boundary.token_output``; before
    that: its output unpacked for the add, 11 launches; before this rule: the conv wrote them blocked,
    3 transforms in 11 launches, and the softmax on blocked tokens was left to upstream)."""
    ops, transforms = run_all_ours(_tokens_and_pool_model(), 9, (N, C, H, W))
    assert transforms == ["nchw_to_nchw4c"], ops
    assert len(ops) == 9, ops
