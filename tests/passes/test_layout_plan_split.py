"""The layout planner on cascaded group attention (EfficientViT, SHViT): a 1x1 conv's qkv map is split
along channels into a query (through a depthwise conv), a key and a value that GEMMs read as tokens.
``LayoutPlan.split_plain`` runs the split on the plain map, so the conv writes it plain, the depthwise
conv reads its part in place and writes its tokens plain, and no layout kernel runs inside the graph
(on main: one per part, a pair around the identity reshape and one on each side of the head's
norm); the classifier head's
``BatchNorm1d -> Linear`` is folded into the Linear (``linear_norm``), not left upstream; a ``Pad``
by zero amounts is a gather. Against onnxruntime."""

import numpy as np
import pytest

from helpers.onnx_graphs import PATTERN_RTOL, batch_norm_inits, f32, i64, i_f32, make, node, plan_kernels, tensor
from tir_adreno import compile_model
from tir_adreno.compiler import import_model
from tir_adreno.passes.graph import Graph
from tir_adreno.passes.layout_plan import BLOCKED, PLAIN, LayoutPlan
from tir_adreno.reference import reference_outputs, relative_error
from tir_adreno.strategy.profile import resolve

LAYOUT_KERNELS = ("nchw_to_nchw4c", "nhwc_to_nchw4c", "nchw4c_to_nchw", "nchw4c_to_nhwc")
C, D, H, W, CLASSES = 12, 8, 4, 5, 12


def _attention_head(query_conv: bool = True, head_norm: bool = True):
    """x -> 1x1 conv (qkv, 3 * D channels) -> reshape to its own shape -> split; the query through a
    3x3 depthwise conv (``query_conv``), flattened, scaled, transposed; softmax(qᵀ k) applied to v;
    the result back to a map -> 1x1 conv -> global pool -> flatten -> [BatchNorm1d] -> Linear."""
    L = H * W
    nodes = [node("Conv", ["x", "wqkv", "bqkv"], ["qkv"]), node("Reshape", ["qkv", "s_map"], ["qkv2"]),
             node("Split", ["qkv2", "parts"], ["q0", "k", "v"], axis=1)]
    inits = [f32("wqkv", (3 * D, C, 1, 1), 0.3), f32("bqkv", (3 * D,), 0.1), i64("s_map", [1, 3 * D, H, W]),
             i64("parts", [D, D, D]), i64("s_tok", [1, D, L]), i_f32("scale", 0.25), i64("s_out", [1, D, H, W]),
             f32("wp", (C, D, 1, 1), 0.3), f32("wl", (C, CLASSES), 0.3), f32("bl", (CLASSES,), 0.1)]
    if query_conv:
        nodes.append(node("Conv", ["q0", "wdw", "bdw"], ["q"], group=D, pads=[1, 1, 1, 1]))
        inits += [f32("wdw", (D, 1, 3, 3), 0.3), f32("bdw", (D,), 0.1)]
    else:
        nodes.append(node("Identity", ["q0"], ["q"]))
    nodes += [node("Reshape", ["q", "s_tok"], ["qf"]), node("Mul", ["qf", "scale"], ["qs"]),
              node("Transpose", ["qs"], ["qt"], perm=[0, 2, 1]), node("Reshape", ["k", "s_tok"], ["kf"]),
              node("MatMul", ["qt", "kf"], ["a"]), node("Softmax", ["a"], ["p"], axis=-1),
              node("Reshape", ["v", "s_tok"], ["vf"]), node("Transpose", ["p"], ["pt"], perm=[0, 2, 1]),
              node("MatMul", ["vf", "pt"], ["o"]), node("Reshape", ["o", "s_out"], ["om"]),
              node("Conv", ["om", "wp"], ["y"]), node("GlobalAveragePool", ["y"], ["g"]), node("Flatten", ["g"], ["f"])]
    if head_norm:
        nodes.append(node("BatchNormalization", ["f", "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["fn"]))
        inits += batch_norm_inits("bn", C)
    else:
        nodes.append(node("Identity", ["f"], ["fn"]))
    nodes += [node("MatMul", ["fn", "wl"], ["l"]), node("Add", ["l", "bl"], ["logits"])]
    return make(nodes, [tensor("x", [1, C, H, W])], [tensor("logits", [1, CLASSES])], inits, opset=17)


def _run(model, seed):
    rng = np.random.default_rng(seed)
    inputs = {"x": rng.standard_normal((1, C, H, W)).astype(np.float32)}
    compiled = compile_model(model, progress=lambda _: None)
    (out,), (ref,) = compiled.run(inputs), reference_outputs(model, inputs)
    assert relative_error(out, ref) <= PATTERN_RTOL, relative_error(out, ref)
    return compiled.profile()


@pytest.mark.parametrize("query_conv", [True, False])
def test_cascaded_attention_has_no_layout_kernel(query_conv):
    """No layout kernel and nothing upstream: the qkv conv reads the model input and writes its map
    plain, the split is gathers, the query's depthwise conv reads and writes plain, the output conv
    reads the attention's result in place, the head's norm is in the Linear's weights."""
    rows = _run(_attention_head(query_conv), seed=3 + query_conv)
    assert not [r for r in rows if not r["ours"]], rows
    assert not [r for r in rows if r["op"].startswith(LAYOUT_KERNELS)], [r["op"] for r in rows]
    # the split's parts: the depthwise conv reads the query in place (``Prologue.x_view``, a channel
    # slice of the plain qkv map; one gather before stop 51); the key and value (and, without that
    # conv, every part) read by the GEMMs through views of the qkv map, so no gather of theirs runs (until stop 48 two more ran, kept by the split's tuple alone:
    # tests/passes/test_unread_calls.py); then the attention (one ``softmax_attention`` kernel since
    # stop 55: 2 GEMMs and a softmax before), 2 convs (+ the depthwise), the pool, the Linear (on
    # main before the planner: 17 and 16 launches, 7 of them layout kernels, and an upstream batch norm)
    assert not [r for r in rows if r["op"].startswith("gather")], [r["op"] for r in rows]
    assert len(rows) == (6 if query_conv else 5), [r["op"] for r in rows]


def test_head_norm_folds_into_the_linear():
    """``BatchNormalization -> MatMul`` on [N, C]: no norm kernel, the same launches as without it."""
    profile = resolve(profile="pocl")
    with_norm = plan_kernels(_attention_head(head_norm=True), profile)
    without = plan_kernels(_attention_head(head_norm=False), profile)
    assert not [k for k in with_norm if "norm" in k or "affine" in k], with_norm
    assert len(with_norm) == len(without), (with_norm, without)


def test_split_wants_read_through_views():
    """The key and value parts are wanted plain (flattened to tokens a GEMM reads), the query part
    blocked (a conv reads it): the split runs plain when the conv before it can write plain, the
    depthwise conv then reading its part in place."""
    mod, _ = import_model(_attention_head())
    g = Graph(mod["main"], mod)
    plan = LayoutPlan.build(g)
    (split,) = [n for n in g.nodes if n.op == "relax.split"]
    wants = {p.index: plan.view_wants(p.var) for p in g.users(split.var)}
    assert wants == {0: {BLOCKED}, 1: {PLAIN}, 2: {PLAIN}}, wants
    assert plan.wants(g.users(split.var)[1].var) == {PLAIN}


def test_zero_pad_is_a_gather():
    """ONNX ``Pad`` by zero amounts on a channels-last map (EfficientViT's window padding when the
    windows divide the map): a copy gather of ours, not upstream's pad."""
    nodes = [node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]), node("Pad", ["t", "pads"], ["pd"]),
             node("MatMul", ["pd", "w"], ["y"])]
    inits = [i64("pads", [0] * 8), f32("w", (C, 6), 0.3)]
    model = make(nodes, [tensor("x", [1, C, H, W])], [tensor("y", [1, H, W, 6])], inits, opset=17)
    rows = _run(model, seed=9)
    assert not [r for r in rows if not r["ours"]], rows
