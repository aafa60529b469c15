"""Reductions of a blocked map seen as tokens (``rules.pool``, ``_view_reduction``), as SwiftFormer
exports them: a Linear on the tokens of a map runs as a 1x1 conv on the map (its output blocked,
seen as ``[N, L, C]``), then ``ReduceSum`` over the channels with the dims kept (``F.normalize``'s
``sum(q * q)``). The reduction runs on the map as our ``reduce`` kernel; against onnxruntime,
asserting that no kernel is upstream's."""

import zlib

import numpy as np
import pytest

from helpers.onnx_graphs import PATTERN_RTOL, f32, i64, make, node, tensor
from tir_adreno import compile_model
from tir_adreno.reference import reference_outputs, relative_error

#: float16_acc32 rounds every tensor between two of our kernels to half (docs/precision.md).
HALF_RTOL = 1e-2
N, C, H, W, D = 1, 8, 5, 7, 6  # D: the Linear's width (not a multiple of 4: the padded lanes must not count)


def tokens_model(op: str, axis: int):
    """SwiftFormer's attention input: x [N, C, H, W] -> 1x1 Conv -> the map, read by a residual
    ``Add`` (so it stays blocked) and as tokens (``Reshape [N, C, L] -> Transpose(0, 2, 1)``) by a
    Linear -> Mul by itself -> ``op`` over ``axis`` of ``[N, L, D]`` (dims kept) -> Div the tokens by it."""
    nodes = [node("Conv", ["x", "wc"], ["m"]), node("Add", ["m", "x"], ["z"]), node("Reshape", ["m", "s3"], ["f"]),
             node("Transpose", ["f"], ["t"], perm=[0, 2, 1]), node("MatMul", ["t", "wl"], ["q0"]), node("Add", ["q0", "b"], ["q"]),
             node("Mul", ["q", "q"], ["qq"])]
    inits = [f32("wc", (C, C, 1, 1)), f32("wl", (C, D)), i64("s3", [N, C, H * W]), f32("b", (D,))]
    if op == "ReduceSum":  # opset 13+: axes as an input; the others take the attribute up to opset 17
        nodes.append(node(op, ["qq", "axes"], ["r"], keepdims=1))
        inits.append(i64("axes", [axis]))
    else:
        nodes.append(node(op, ["qq"], ["r"], axes=[axis], keepdims=1))
    nodes.append(node("Div", ["q", "r"], ["y"]))
    return make(nodes, [tensor("x", [N, C, H, W])], [tensor("y", [N, H * W, D]), tensor("z", [N, C, H, W])], inits, opset=17)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax"])
@pytest.mark.parametrize("axis", [-1, 1, 2])
def test_reduction_of_map_tokens(op, axis, precision="float32"):
    model = tokens_model(op, axis)
    rng = np.random.default_rng(zlib.crc32(f"{op}{axis}".encode()))
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    compiled = compile_model(model, progress=lambda _: None, precision=precision)
    outs = compiled.run({"x": x}, profile=True)
    for y, ref in zip(outs, reference_outputs(model, {"x": x}), strict=True):
        assert y.shape == ref.shape and relative_error(y, ref) <= (PATTERN_RTOL if precision == "float32" else HALF_RTOL), relative_error(y, ref)
    rows = compiled.profile()
    assert all(r["ours"] for r in rows), [r["op"] for r in rows if not r["ours"]]
    name = op.removeprefix("Reduce").lower()
    reduced = [r for r in rows if r["op"] == name or r["op"].startswith(name + "_")]  # sum_c: our reduce kernel
    assert reduced, [r["op"] for r in rows]


def test_sum_of_map_tokens_under_float16_acc32():
    test_reduction_of_map_tokens("ReduceSum", -1, precision="float16_acc32")
