"""Data movement on plain tensors (``rules.token_layout``) as exporters write it, against
onnxruntime, asserting the plan: reshape-like ops are views (no launch), every other movement op
with the movement ops before it is one ``gather`` of ours, and nothing upstream runs."""

import numpy as np
import pytest

from helpers.onnx_graphs import PATTERN_RTOL, f32, i64, i_f32, make, node, tensor
from tir_adreno import compile_model
from tir_adreno.reference import reference_outputs, relative_error

LAYOUT_KERNELS = ("nchw_to_nchw4c", "nhwc_to_nchw4c", "nchw4c_to_nchw", "nchw4c_to_nhwc", "copy")


#: float16_acc32 rounds every tensor between two of our kernels to half (docs/precision.md).
HALF_RTOL = 1e-2


def _run(model, shapes: dict, seed: int, precision: str = "float32"):
    """Compile ``model``, check it against onnxruntime on fresh random inputs, and return the
    profile's rows after checking that every kernel is ours and none is a layout transform."""
    rng = np.random.default_rng(seed)
    inputs = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}
    compiled = compile_model(model, progress=lambda _: None, precision=precision)
    outs = compiled.run(inputs, profile=True)
    rtol = PATTERN_RTOL if precision == "float32" else HALF_RTOL
    for out, ref in zip(outs, reference_outputs(model, inputs), strict=True):
        assert out.shape == ref.shape and relative_error(out, ref) <= rtol, relative_error(out, ref)
    rows = compiled.profile()
    assert all(r["ours"] for r in rows), [r["op"] for r in rows if not r["ours"]]
    assert not [r for r in rows if r["op"].startswith(LAYOUT_KERNELS)], rows
    return rows


def _ops(rows) -> list[str]:
    """The ops of the rows, without the suffix that tells kernels of one name apart."""
    return [r["op"].rstrip("0123456789") for r in rows]


@pytest.mark.parametrize("precision", ["float32", "float16_acc32"])
def test_attention_heads_split_and_merge(precision):
    """A DeiT attention block as timm exports it: qkv Linear -> Reshape [N, L, 3, h, d] ->
    Transpose(2, 0, 3, 1, 4) -> Split -> Squeeze x3, (q kᵀ) v (the softmax between is another rule's; q and kᵀ scaled as torch's SDPA exports it), Transpose(0, 2, 1, 3) ->
    Reshape [N, L, C] -> proj Linear: four GEMM launches and nothing else. The reshapes and
    squeezes are views; Q Kᵀ and attention x V read q, k and v in the qkv GEMM's output through
    the split, the transpose and the reshape; attention x V stores its output in the transposed
    order, so the last Reshape is a view."""
    n, l, h, d = 1, 10, 2, 12
    c = h * d
    nodes = [node("MatMul", ["x", "wqkv"], ["qkv"]), node("Reshape", ["qkv", "s5"], ["q5"]),
             node("Transpose", ["q5"], ["t5"], perm=[2, 0, 3, 1, 4]), node("Split", ["t5", "sp"], ["qs", "ks", "vs"], axis=0),
             node("Squeeze", ["qs", "ax0"], ["q"]), node("Squeeze", ["ks", "ax0"], ["k"]), node("Squeeze", ["vs", "ax0"], ["v"]),
             node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), node("Mul", ["q", "sc"], ["qs2"]), node("Mul", ["kt", "sc"], ["kts"]),
             node("MatMul", ["qs2", "kts"], ["s"]),
             node("MatMul", ["s", "v"], ["o"]),
             node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]), node("Reshape", ["ot", "s3"], ["o3"]),
             node("MatMul", ["o3", "wp"], ["y"])]
    inits = [f32("wqkv", (c, 3 * c)), f32("wp", (c, c)), i64("s5", [n, l, 3, h, d]), i64("sp", [1, 1, 1]), i64("ax0", [0]),
             i64("s3", [n, l, c]), i_f32("sc", 0.5)]
    model = make(nodes, [tensor("x", [n, l, c])], [tensor("y", [n, l, c])], inits, opset=17)
    rows = _run(model, {"x": (n, l, c)}, seed=1, precision=precision)
    ops = _ops(rows)
    assert ops == ["gemm"] * 4, ops


def test_views_cost_no_launch():
    """Unsqueeze -> Reshape -> Flatten -> Squeeze between two Linears: no kernel between the GEMMs."""
    nodes = [node("MatMul", ["x", "w1"], ["a"]), node("Unsqueeze", ["a", "ax"], ["b"]), node("Reshape", ["b", "s"], ["c"]),
             node("Flatten", ["c"], ["f"], axis=1), node("Reshape", ["f", "s2"], ["g"]), node("MatMul", ["g", "w2"], ["y"])]
    inits = [f32("w1", (8, 12)), f32("w2", (12, 5)), i64("ax", [0]), i64("s", [1, 2, 3, 4, 12]), i64("s2", [2, 3, 4, 12])]
    model = make(nodes, [tensor("x", [2, 3, 4, 8])], [tensor("y", [2, 3, 4, 5])], inits, opset=17)
    rows = _run(model, {"x": (2, 3, 4, 8)}, seed=2)
    assert len(rows) == 2 and all(o.startswith("gemm") for o in _ops(rows)), _ops(rows)


@pytest.mark.parametrize("precision", ["float32", "float16_acc32"])
def test_cls_token_concat_take_pad_tile(precision):
    """The class token (an input, and a constant as timm exports it) concatenated before the patch tokens, a Gather of token 0 (a scalar index:
    the axis dropped), a Slice with a step, a Pad and a Tile on tokens: one gather each, all exact."""
    nodes = [node("Concat", ["cls", "x"], ["xc"], axis=1), node("Concat", ["tok", "x"], ["xt"], axis=1), node("Gather", ["xc", "i0"], ["first"], axis=1),
             node("Slice", ["xc", "st", "en", "axs", "sts"], ["sl"]), node("Pad", ["x", "pads", "pv"], ["pd"], mode="constant"),
             node("Tile", ["x", "reps"], ["tl"])]
    inits = [f32("tok", (2, 1, 8)), i64("i0", np.array(0)), i64("st", [1, 2]), i64("en", [6, 20]), i64("axs", [1, 2]), i64("sts", [2, 3]),
             i64("pads", [0, 1, 0, 0, 2, 3]), i_f32("pv", 0.5), i64("reps", [1, 2, 1])]
    outs = [tensor("xt", [2, 7, 8]), tensor("first", [2, 8]), tensor("sl", [2, 3, 6]), tensor("pd", [2, 9, 11]), tensor("tl", [2, 12, 8])]
    model = make(nodes, [tensor("cls", [2, 1, 8]), tensor("x", [2, 6, 8])], outs, inits, opset=17)
    rows = _run(model, {"cls": (2, 1, 8), "x": (2, 6, 8)}, seed=3, precision=precision)
    assert _ops(rows).count("gather") == 6, _ops(rows)


@pytest.mark.parametrize("reps", [[1, 4, 1, 1, 1], [2, 3, 1, 2, 1]])
def test_tile_of_an_unsqueezed_axis(reps):
    """GCViT's global query: ``Unsqueeze(axis 1) -> Tile`` repeating the new axis of 1 over the
    windows (topi's ``tile`` reads that axis at a constant 0, the modulo simplified away), then an
    Add: ours, exact, nothing upstream (the Tile was upstream's before); the add reads the tile
    in place (``plain_elementwise.View``), so no gather launches at all."""
    nodes = [node("MatMul", ["x", "w"], ["q"]), node("Unsqueeze", ["q", "ax"], ["u"]), node("Tile", ["u", "reps"], ["t"]),
             node("Add", ["t", "t"], ["y"])]
    out = [a * b for a, b in zip([1, 1, 3, 5, 6], reps)]
    model = make(nodes, [tensor("x", [1, 3, 5, 4])], [tensor("y", out)], [f32("w", (4, 6)), i64("ax", [1]), i64("reps", reps)], opset=17)
    rows = _run(model, {"x": (1, 3, 5, 4)}, seed=7)
    assert _ops(rows) == ["gemm", "elementwise_plain"], _ops(rows)
