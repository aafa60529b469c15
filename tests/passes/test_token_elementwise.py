"""The ``token_elementwise`` rule: unary and binary ops on plain tensors (tokens, heads,
channels-last maps) as exporters write them run as ONE kernel of ours per chain, against
onnxruntime; the plan has no upstream elementwise op and no layout transform."""

import numpy as np
import pytest

from helpers.onnx_graphs import PATTERN_RTOL, f32, i64, i_f32, make, node, tensor
from tir_adreno import compile_model
from tir_adreno.reference import reference_outputs, relative_error

LAYOUT_KERNELS = ("nchw_to_nchw4c", "nhwc_to_nchw4c", "nchw4c_to_nchw", "nchw4c_to_nhwc", "copy")


#: float16_acc32: the buffers between our kernels are half (the CLI's tolerance for it).
HALF_RTOL = 1e-2


def _run(model, shapes: dict, seed: int, precision: str = "float32"):
    """Compile ``model``, check it against onnxruntime on random inputs; the plan's rows."""
    rng = np.random.default_rng(seed)
    inputs = {name: (rng.standard_normal(s) * 2).astype(np.float32) for name, s in shapes.items()}
    compiled = compile_model(model, progress=lambda _: None, precision=precision)
    outs = compiled.run(inputs)
    rtol = PATTERN_RTOL if precision == "float32" else HALF_RTOL
    for out, ref in zip(outs, reference_outputs(model, inputs)):
        assert relative_error(out, ref) <= rtol, relative_error(out, ref)
    rows = compiled.profile()
    assert not [r for r in rows if not r["ours"]], rows  # nothing upstream
    assert not [r for r in rows if r["op"].startswith(LAYOUT_KERNELS)], rows  # no layout transform
    return rows


def _elementwise(rows):
    return [r for r in rows if r["op"].startswith("elementwise_plain")]


@pytest.mark.parametrize("precision", ["float32", "float16_acc32"])
def test_hardswish_on_tokens_is_one_kernel(precision):
    """LeViT's HardSwish on tokens as exported (``x * clip(x + 3, 0, 6) / 6``) then a residual add
    and a scale by a per-channel constant: one kernel (also on half buffers)."""
    nodes = [node("Add", ["x", "three"], ["a"]), node("Clip", ["a", "lo", "hi"], ["c"]), node("Div", ["c", "six"], ["d"]),
             node("Mul", ["x", "d"], ["h"]), node("Add", ["h", "r"], ["s"]), node("Mul", ["s", "gamma"], ["y"])]
    inits = [i_f32("three", 3.0), i_f32("lo", 0.0), i_f32("hi", 6.0), i_f32("six", 6.0), f32("gamma", (16,))]
    model = make(nodes, [tensor("x", [2, 7, 16]), tensor("r", [2, 7, 16])], [tensor("y", [2, 7, 16])], inits, opset=17)
    rows = _run(model, {"x": (2, 7, 16), "r": (2, 7, 16)}, seed=1, precision=precision)
    assert len(rows) == 1 and len(_elementwise(rows)) == 1, rows


def test_attention_bias_broadcast_add_then_softmax_input():
    """Q Kᵀ scores ``[N, heads, L, L]`` plus a constant bias ``[heads, L, L]`` (broadcast over N),
    then a per-head divide by ``[heads, 1, 1]``: one kernel, two constant buffers."""
    nodes = [node("Add", ["s", "bias"], ["b"]), node("Div", ["b", "t"], ["y"])]
    inits = [f32("bias", (3, 5, 5)), f32("t", (3, 1, 1), low=1.0)]
    model = make(nodes, [tensor("s", [2, 3, 5, 5])], [tensor("y", [2, 3, 5, 5])], inits, opset=17)
    rows = _run(model, {"s": (2, 3, 5, 5)}, seed=2)
    assert len(_elementwise(rows)) == 1, rows


@pytest.mark.parametrize("op", ["Sqrt", "Exp", "Neg", "Abs", "Reciprocal", "Erf", "Tanh", "Sigmoid", "Relu"])
def test_unary_then_pow_and_max(op):
    """A unary op, then ``Pow`` by 2, then ``Max`` with another tensor broadcast along the tokens:
    one kernel (NaN where the unary op makes one, as onnxruntime)."""
    nodes = [node(op, ["x"], ["u"]), node("Pow", ["u", "two"], ["p"]), node("Max", ["p", "m"], ["y"])]
    model = make(nodes, [tensor("x", [1, 6, 8]), tensor("m", [1, 1, 8])], [tensor("y", [1, 6, 8])], [i_f32("two", 2.0)], opset=17)
    x = np.random.default_rng(3).uniform(0.1, 3.0, (1, 6, 8)).astype(np.float32)  # sqrt and reciprocal defined
    m = np.random.default_rng(4).standard_normal((1, 1, 8)).astype(np.float32)
    compiled = compile_model(model, progress=lambda _: None)
    (out,) = compiled.run({"x": x, "m": m})
    (ref,) = reference_outputs(model, {"x": x, "m": m})
    assert relative_error(out, ref) <= PATTERN_RTOL
    rows = compiled.profile()
    assert len(rows) == 1 and len(_elementwise(rows)) == 1, rows


def test_gelu_on_channels_last_map_and_gate():
    """A gated MLP on a channels-last map ``[N, H, W, C]`` (MambaOut's): erf-GELU of one tensor
    times another, each half a model input: one kernel, no layout transform (NHWC is plain)."""
    nodes = [node("Div", ["a", "sqrt2"], ["d"]), node("Erf", ["d"], ["e"]), node("Add", ["e", "one"], ["e1"]),
             node("Mul", ["a", "e1"], ["g"]), node("Mul", ["g", "half"], ["gelu"]), node("Mul", ["gelu", "b"], ["y"])]
    inits = [i_f32("sqrt2", 2.0**0.5), i_f32("one", 1.0), i_f32("half", 0.5)]
    model = make(nodes, [tensor("a", [1, 4, 5, 12]), tensor("b", [1, 4, 5, 12])], [tensor("y", [1, 4, 5, 12])], inits, opset=17)
    rows = _run(model, {"a": (1, 4, 5, 12), "b": (1, 4, 5, 12)}, seed=5)
    assert len(rows) == 1 and len(_elementwise(rows)) == 1, rows


def test_subtract_of_two_plain_gemm_outputs_runs_plain():
    """Two Linears on a channels-last map subtracted: the subtract reads both plain GEMM outputs (no
    pack), as the second GEMM's epilogue (an expression with the first's output as its operand)."""
    nodes = [node("MatMul", ["x", "w1"], ["p"]), node("MatMul", ["x", "w2"], ["q"]), node("Sub", ["p", "q"], ["y"])]
    inits = [f32("w1", (8, 12)), f32("w2", (8, 12))]
    model = make(nodes, [tensor("x", [1, 3, 5, 8])], [tensor("y", [1, 3, 5, 12])], inits, opset=17)
    rows = _run(model, {"x": (1, 3, 5, 8)}, seed=6)
    assert not _elementwise(rows) and len(rows) == 2 and all(r["op"].startswith("gemm") for r in rows), rows


def test_operands_read_through_slices_transposes_and_concat():
    """``sigmoid(x[..., :8]) * Concat(x[..., 8:], zᵀ)``: both operands are read through the slices,
    the transpose and the concat (``plain_elementwise.View``): ONE launch in all, no gather."""
    nodes = [node("Slice", ["x", "s0", "e0", "ax"], ["g"]), node("Slice", ["x", "s1", "e1", "ax"], ["i"]),
             node("Transpose", ["z"], ["zt"], perm=[0, 2, 1, 3]), node("Concat", ["i", "zt"], ["c"], axis=3),
             node("Sigmoid", ["g"], ["gs"]), node("Mul", ["gs", "c"], ["y"])]
    inits = [i64("s0", [0]), i64("e0", [8]), i64("s1", [8]), i64("e1", [12]), i64("ax", [3])]
    model = make(nodes, [tensor("x", [1, 3, 5, 12]), tensor("z", [1, 5, 3, 4])], [tensor("y", [1, 3, 5, 8])], inits, opset=17)
    rows = _run(model, {"x": (1, 3, 5, 12), "z": (1, 5, 3, 4)}, seed=7)
    assert len(rows) == 1 and len(_elementwise(rows)) == 1, rows


def test_a_view_operand_whose_chain_broadcasts_past_it():
    """``x[..., :4] * 2 + b`` where ``b`` broadcasts the product over the tokens: the slice cannot be
    a view of the output's shape, so it stays a gather and the chain one kernel."""
    nodes = [node("Slice", ["x", "s0", "e0", "ax"], ["a"]), node("Mul", ["a", "two"], ["m"]), node("Add", ["m", "b"], ["y"])]
    inits = [i64("s0", [0]), i64("e0", [4]), i64("ax", [2]), i_f32("two", 2.0)]
    model = make(nodes, [tensor("x", [2, 1, 8]), tensor("b", [2, 3, 4])], [tensor("y", [2, 3, 4])], inits, opset=17)
    rows = _run(model, {"x": (2, 1, 8), "b": (2, 3, 4)}, seed=8)
    assert len(_elementwise(rows)) == 1, rows


def test_a_batch_norm_in_a_chain_on_tokens():
    """``BatchNormalization`` of ``[N, C, L]`` tokens (over axis 1) between two steps of a chain:
    its per-channel scale and shift are a constant input broadcast along L, one kernel."""
    stats = [f32("scale", (6,)), f32("shift", (6,)), f32("mean", (6,)), f32("var", (6,), low=0.5)]
    nodes = [node("Add", ["x", "r"], ["s"]), node("BatchNormalization", ["s", "scale", "shift", "mean", "var"], ["n"], epsilon=1e-5),
             node("Tanh", ["n"], ["y"])]
    model = make(nodes, [tensor("x", [2, 6, 10]), tensor("r", [2, 6, 10])], [tensor("y", [2, 6, 10])], stats, opset=17)
    rows = _run(model, {"x": (2, 6, 10), "r": (2, 6, 10)}, seed=6)
    assert len(rows) == 1 and len(_elementwise(rows)) == 1, rows
