"""No launch whose result nothing reads. A ``Split`` our pass lowers to one gather per part binds the
parts as a tuple; where a reader takes its part from the split's input instead (the concat gather
of MambaOut's gated block reads the identity part as a slice of the fc1 output), that part's gather
was kept alive by the tuple alone: 18 of MambaOut-femto's 196 launches and 48 of EfficientViT-M0's
310 computed values nothing read. The graph here is MambaOut's gated block as timm exports it
(channels-last: fc1 -> Split into gate, identity and conv parts -> the conv part through a
depthwise conv in NCHW -> Concat(identity, conv) -> gate activation times it -> fc2 + residual),
run against onnxruntime on the CPU profile and the wide GPU profile's plan."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from helpers.onnx_graphs import PATTERN_RTOL, f32, i64, node
from tir_adreno import compile_model
from tir_adreno.reference import reference_outputs, relative_error
from tir_adreno.strategy.profile import get_profile

C, H, W = 6, 5, 7
GATE, IDENTITY, CONV = 8, 5, 3  # fc1's channels split as MambaOut splits them: gate | identity | conv


def _gated_block():
    nodes = [
        node("Transpose", ["x"], ["x_cl"], perm=[0, 2, 3, 1]),
        node("MatMul", ["x_cl", "fc1"], ["h"]),
        node("Split", ["h", "sizes"], ["g", "i", "c"], axis=-1),
        node("Transpose", ["c"], ["c_map"], perm=[0, 3, 1, 2]),
        node("Conv", ["c_map", "dw"], ["c_dw"], pads=[1, 1, 1, 1], group=CONV),
        node("Transpose", ["c_dw"], ["c_cl"], perm=[0, 2, 3, 1]),
        node("Concat", ["i", "c_cl"], ["ic"], axis=-1),
        node("Sigmoid", ["g"], ["g_s"]),
        node("Mul", ["g", "g_s"], ["g_act"]),
        node("Mul", ["g_act", "ic"], ["gated"]),
        node("MatMul", ["gated", "fc2"], ["out_cl"]),
        node("Add", ["out_cl", "x_cl"], ["sum_cl"]),
        node("Transpose", ["sum_cl"], ["y"], perm=[0, 3, 1, 2]),
    ]
    inits = [f32("fc1", (C, GATE + IDENTITY + CONV), scale=0.5), f32("dw", (CONV, 1, 3, 3)),
             f32("fc2", (GATE, C), scale=0.5), i64("sizes", [GATE, IDENTITY, CONV])]
    graph = helper.make_graph(nodes, "gated_block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, W])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def unread_calls(plan) -> list[str]:
    """Labels of the calls that write a temporary no later call reads."""
    written: dict[int, str] = {}
    read: set[int] = set()
    for call in plan.calls:
        read.update(t for t in call.args if t in written)
        for t in call.args:
            if plan.tensors[t].kind == "temp" and t not in written:
                written[t] = call.label
    return [label for t, label in written.items() if t not in read]


@pytest.mark.parametrize("profile", ["pocl", "nvidia-h200"])
def test_gated_block_launches_nothing_unread(profile):
    model = _gated_block()
    compiled = compile_model(model, profile=get_profile(profile), progress=lambda _: None)
    x = {"x": np.random.default_rng(3).standard_normal((1, C, H, W)).astype(np.float32)}
    (out,) = compiled.run(x)
    (ref,) = reference_outputs(model, x)
    assert relative_error(out, ref) <= PATTERN_RTOL
    assert unread_calls(compiled.plan) == [], [c.label for c in compiled.plan.calls]
    assert all(c.ours for c in compiled.plan.calls), [(c.label, c.ours) for c in compiled.plan.calls]


@pytest.mark.parametrize("profile", ["pocl", "nvidia-h200"])
def test_gate_times_concat_reads_the_split_parts_in_place(profile):
    """``act(g) * Concat(i, c)`` is no launch: fc2's GEMM computes it as it reads A, the gate and
    identity parts in fc1's output and the conv part in the conv's (``plain_elementwise.View`` in
    its ``Producer``; one elementwise launch before ``producer_gemm``): no gather for the gate part,
    the identity part or the concat (were 3 more launches); the depthwise conv reads its part of
    fc1's output in place too (``Prologue.x_view``; a gather before stop 51). What stays gathered:
    the input and output transposes (the model's NCHW)."""
    model = _gated_block()
    compiled = compile_model(model, profile=get_profile(profile), progress=lambda _: None)
    labels = [c.label for c in compiled.plan.calls]
    assert sum(label.startswith("elementwise_plain") for label in labels) == 0, labels
    assert sum(label.startswith("gather") for label in labels) == 2, labels
    assert len(labels) == 5, labels
    x = {"x": np.random.default_rng(4).standard_normal((1, C, H, W)).astype(np.float32)}
    assert relative_error(compiled.run(x)[0], reference_outputs(model, x)[0]) <= PATTERN_RTOL
