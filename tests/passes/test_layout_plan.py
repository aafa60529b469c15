"""The layout planner (``passes.layout_plan``): flexible pixelwise ops run in the layout of their
neighbours, so a graph mixing blocked maps (convs) and plain tensors (GEMMs on channels-last maps,
tokens) has layout transforms only where a model input enters a conv and where a conv's result
leaves as a model output; against onnxruntime."""

import numpy as np
import tvm
from tvm import relax

from helpers.onnx_graphs import PATTERN_RTOL, f32, make, node, tensor
from tir_adreno import compile_model
from tir_adreno.compiler import import_model
from tir_adreno.passes.graph import Graph
from tir_adreno.passes.layout_plan import BLOCKED, PLAIN, LayoutPlan
from tir_adreno.reference import reference_outputs, relative_error

LAYOUT_KERNELS = ("nchw_to_nchw4c", "nhwc_to_nchw4c", "nchw4c_to_nchw", "nchw4c_to_nhwc")


def _mixed_model():
    """A conv branch on an NCHW map (blocked) and a gated MLP on a channels-last map (plain: a GEMM,
    a gate multiply, a residual add, HardSwish) side by side, and a conv output added to a model input."""
    nodes = [node("Conv", ["x", "wc"], ["c"]), node("Relu", ["c"], ["cr"]), node("Add", ["cr", "z"], ["y1"]),
             node("MatMul", ["a", "w"], ["p"]), node("Mul", ["p", "b"], ["q"]), node("Add", ["q", "a"], ["r"]),
             node("HardSwish", ["r"], ["y2"])]
    inits = [f32("wc", (8, 8, 1, 1)), f32("w", (8, 8))]
    inputs = [tensor("x", [1, 8, 4, 6]), tensor("z", [1, 8, 4, 6]), tensor("a", [1, 4, 6, 8]), tensor("b", [1, 4, 6, 8])]
    return make(nodes, inputs, [tensor("y1", [1, 8, 4, 6]), tensor("y2", [1, 4, 6, 8])], inits, opset=17)


def test_transforms_only_at_inputs_and_outputs():
    """Transforms only at the model's inputs and outputs: the conv reads its input x as it is and
    adds the input z in its epilogue (an expression operand: z packed where it enters, the sum
    unpacked where it leaves); the MLP's gate multiply, residual add and HardSwish are the GEMM's
    epilogue on its plain output (two operands, b and a: no transform and no kernel of their own)."""
    model = _mixed_model()
    rng = np.random.default_rng(7)
    inputs = {"x": (1, 8, 4, 6), "z": (1, 8, 4, 6), "a": (1, 4, 6, 8), "b": (1, 4, 6, 8)}
    inputs = {k: rng.standard_normal(s).astype(np.float32) for k, s in inputs.items()}
    compiled = compile_model(model, progress=lambda _: None)
    outs = compiled.run(inputs)
    for out, ref in zip(outs, reference_outputs(model, inputs)):
        assert relative_error(out, ref) <= PATTERN_RTOL
    rows = compiled.profile()
    assert not [r for r in rows if not r["ours"]], rows
    transforms = sorted(r["op"].rstrip("0123456789") for r in rows if r["op"].startswith(LAYOUT_KERNELS))
    assert transforms == ["nchw4c_to_nchw", "nchw_to_nchw4c"], transforms  # y1 out, z in
    assert [r["op"] for r in rows if not r["op"].startswith(LAYOUT_KERNELS)] == ["conv2d_nchw4c", "gemm"], rows
    assert len(rows) == 4, rows  # pack z, conv (+ relu + z), unpack y1; the GEMM (+ * b + a, HardSwish)


def test_wants_follow_flexible_readers():
    """A value read by a conv is wanted blocked; by the output, plain; through a chain of
    flexible ops, what the chain's end wants."""
    mod, _ = import_model(_mixed_model())
    g = Graph(mod["main"], mod)
    plan = LayoutPlan.build(g)
    by_op = {}
    for n in g.nodes:
        by_op.setdefault(n.op, []).append(n)
    (matmul,) = by_op["relax.matmul"]
    assert plan.wants(matmul.var) == {PLAIN}  # multiply -> add -> HardSwish -> output
    params = {p.name: p for p in mod["main"].params}
    assert plan.wants(params["x"]) == {BLOCKED}
    assert plan.wants(params["z"]) == {PLAIN}


def test_an_op_on_a_value_held_both_ways_runs_where_its_reader_wants_it():
    """A model input packed for a conv is held both ways; an add of it that nothing fuses, read by
    the model's output, runs plain (no transform: the plain form is there and the output wants
    plain), not blocked and then unpacked: the planner charges running plain only for readers
    that want blocked."""
    nodes = [node("Conv", ["x", "wc"], ["y1"]), node("Add", ["x", "c"], ["y2"])]
    inits = [f32("wc", (8, 8, 1, 1)), f32("c", (1, 8, 1, 1))]
    model = make(nodes, [tensor("x", [1, 8, 4, 6])], [tensor("y1", [1, 8, 4, 6]), tensor("y2", [1, 8, 4, 6])], inits, opset=17)
    inputs = {"x": np.random.default_rng(3).standard_normal((1, 8, 4, 6)).astype(np.float32)}
    compiled = compile_model(model, progress=lambda _: None)
    for out, ref in zip(compiled.run(inputs), reference_outputs(model, inputs)):
        assert relative_error(out, ref) <= PATTERN_RTOL
    rows = compiled.profile()
    assert not [r for r in rows if not r["ours"]], rows
    transforms = sorted(r["op"].rstrip("0123456789") for r in rows if r["op"].startswith(LAYOUT_KERNELS))
    assert transforms == ["nchw4c_to_nchw", "nchw_to_nchw4c"], rows  # x in, y1 out; the add reads x plain
