"""A residual add with an operand not computed yet that only the plain form has
(``passes.map_boundary._form_now``: a window reverse, a reshape out of 6-d windows) wants its other
operand plain: GC ViT's stage norm, read by a blocked reader, by the window attention and by the
residual add after the window reverse. A conv's channels-last map, layer-normed, read by a max pool
(blocked), by its tokens' softmax (plain), and by an add with its own window partition and reverse,
whose sum a second max pool reads, against onnxruntime (random input and weights; channels not
multiples of 4)."""

from helpers.onnx_graphs import f32, i64, make, node, run_all_ours, tensor

N, C, H, W, D = 2, 5, 4, 6, 7


def _windows_model():
    to_map = lambda t, y: node("Transpose", [t], [y], perm=[0, 3, 1, 2])  # noqa: E731
    pool = lambda t, y: node("MaxPool", [t], [y], kernel_shape=[3, 3], pads=[1, 1, 1, 1])  # noqa: E731
    nodes = [node("Conv", ["x", "w"], ["m"], pads=[1, 1, 1, 1]), node("Transpose", ["m"], ["cl"], perm=[0, 2, 3, 1]),
             node("LayerNormalization", ["cl", "g", "b"], ["n"], axis=-1), to_map("n", "n_map"), pool("n_map", "p"),
             node("Reshape", ["n", "nld"], ["tok"]), node("Softmax", ["tok"], ["sm"], axis=-1),
             node("Reshape", ["sm", "nhwd"], ["sm_cl"]), to_map("sm_cl", "z"),
             node("Reshape", ["n", "win"], ["n6"]), node("Transpose", ["n6"], ["w6"], perm=[0, 1, 3, 2, 4, 5]),
             node("Transpose", ["w6"], ["r6"], perm=[0, 1, 3, 2, 4, 5]), node("Reshape", ["r6", "nhwd"], ["r"]),
             node("Add", ["n", "r"], ["s"]), to_map("s", "s_map"), pool("s_map", "q"),
             node("Add", ["p", "q"], ["pq"]), node("Add", ["pq", "z"], ["y"])]
    inits = [f32("w", (D, C, 3, 3), scale=0.3), f32("g", (D,)), f32("b", (D,)), i64("nld", [N, H * W, D]),
             i64("nhwd", [N, H, W, D]), i64("win", [N, 2, 2, 3, 2, D])]
    return make(nodes, [tensor("x", [N, C, H, W])], [tensor("y", [N, D, H, W])], inits, opset=17)


def test_add_with_a_window_reverse_wants_plain():
    """The norm's value counts once blocked (the first pool) and twice plain (its tokens' softmax,
    and the add with its window reverse, which exists only plain): the conv writes its
    channels-last map plain and the norm runs on rows: 3 transforms (the norm packed for each pool,
    the output unpacked) in 14 launches, every kernel ours (before this rule the add was followed on
    to the second pool, a tie: the map stayed blocked and the softmax on it went upstream)."""
    ops, transforms = run_all_ours(_windows_model(), 4, (N, C, H, W))
    assert transforms == ["nchw_to_nchw4c", "nchw_to_nchw4c", "nchw4c_to_nchw"], ops
    assert len(ops) == 12, ops  # 14 before elementwise chains read their movement-op operands in place
