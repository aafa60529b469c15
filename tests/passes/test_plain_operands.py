"""Blocked kernels that take either form of an operand (``rules.common.read_in_place``): an operand
held only as a plain NCHW buffer (a GEMM's result seen as a map: EfficientViT's cascaded heads, SHViT's
single head) is read by the channel concat (``rules.concat``) or by a binary op of two maps
(``rules.elementwise.binary``: EfficientViT's head output added to the next head's input) from that
buffer, not packed by an ``nchw_to_nchw4c`` kernel first. Against onnxruntime, with the plan's layout
kernels and launches counted exactly (main: one pack per plain operand)."""

import numpy as np
import pytest

from helpers.onnx_graphs import PATTERN_RTOL, f32, i64, make, node, tensor
from tir_adreno import compile_model
from tir_adreno.compiler import import_model
from tir_adreno.passes.graph import Graph
from tir_adreno.passes.layout_plan import BLOCKED, LayoutPlan
from tir_adreno.reference import reference_outputs, relative_error

LAYOUT_KERNELS = ("nchw_to_nchw4c", "nhwc_to_nchw4c", "nchw4c_to_nchw", "nchw4c_to_nhwc")
C, H, W = 8, 4, 5


def _head(nodes, inits, i, d):
    """Head ``i``: the tokens ``[1, H * W, C]`` (input ``tt``) -> Linear to ``d`` -> a ``[1, d, H, W]``
    map, plain (the GEMM's result, transposed by a gather)."""
    nodes += [node("MatMul", ["tt", f"wl{i}"], [f"l{i}"]), node("Transpose", [f"l{i}"], [f"lt{i}"], perm=[0, 2, 1]),
              node("Reshape", [f"lt{i}", f"s_map{i}"], [f"h{i}"])]
    inits += [f32(f"wl{i}", (C, d), 0.3), i64(f"s_map{i}", [1, d, H, W])]
    return f"h{i}"


def _heads_concat(order: str, map_channels: int, head_channels: tuple):
    """x -> 1x1 conv (``map_channels``, a blocked map); and per head: the tokens ``[1, H * W, C]``
    (a second input) -> Linear -> back to a ``[1, d, H, W]`` map (plain); the map and the heads
    concatenated on channels (``order``: "map_first" or "map_last") -> relu -> 1x1 conv."""
    nodes = [node("Conv", ["x", "wm", "bm"], ["m"])]
    inits = [f32("wm", (map_channels, C, 1, 1), 0.3), f32("bm", (map_channels,), 0.1)]
    heads = [_head(nodes, inits, i, d) for i, d in enumerate(head_channels)]
    parts = ["m", *heads] if order == "map_first" else [*heads, "m"]
    total = map_channels + sum(head_channels)
    nodes += [node("Concat", parts, ["cat"], axis=1), node("Relu", ["cat"], ["r"]), node("Conv", ["r", "wp", "bp"], ["y"])]
    inits += [f32("wp", (6, total, 1, 1), 0.3), f32("bp", (6,), 0.1)]
    return make(nodes, [tensor("x", [1, C, H, W]), tensor("tt", [1, H * W, C])], [tensor("y", [1, 6, H, W])], inits, opset=17)


def _profile(model, seed):
    rng = np.random.default_rng(seed)
    inputs = {"x": rng.standard_normal((1, C, H, W)).astype(np.float32),
              "tt": rng.standard_normal((1, H * W, C)).astype(np.float32)}
    compiled = compile_model(model, progress=lambda _: None)
    (out,), (ref,) = compiled.run(inputs), reference_outputs(model, inputs)
    assert relative_error(out, ref) <= PATTERN_RTOL, relative_error(out, ref)
    return compiled.profile()


@pytest.mark.parametrize("order, map_channels, head_channels", [
    ("map_first", 8, (4,)),         # SHViT: blocks of 4 channels, the plain head last
    ("map_last", 6, (5,)),          # the plain head first, channels straddling the 4-lane blocks
    ("map_first", 3, (4, 5, 2)),    # EfficientViT: several plain heads, odd channel counts
])
def test_plain_heads_read_by_the_concat(order, map_channels, head_channels):
    rows = _profile(_heads_concat(order, map_channels, head_channels), seed=map_channels + len(head_channels))
    ops = [r["op"] for r in rows]
    assert not [r for r in rows if not r["ours"]], rows
    # only the model output's unpack (the first conv reads x in place); the heads go into the concat
    # as they are (on main: one nchw_to_nchw4c more per head)
    assert len([o for o in ops if o.startswith(LAYOUT_KERNELS)]) == 1, ops
    assert len([o for o in ops if o.startswith("concat_channels")]) == 1, ops
    # the map's conv, a GEMM and its transpose (a gather) per head, the concat (the relu after it its
    # epilogue), the output conv and its unpack
    assert len(rows) == 4 + 2 * len(head_channels), ops
    assert not [o for o in ops if o.startswith("relu")], ops


def _head_binary(op: str, head_first: bool, channels: int):
    """x -> 1x1 conv (a blocked map of ``channels``) ``op`` a plain head of as many channels (its
    operand order: ``head_first``) -> 1x1 conv (EfficientViT: a head's output added to the next
    head's input before that head's qkv conv)."""
    nodes = [node("Conv", ["x", "wm", "bm"], ["m"])]
    inits = [f32("wm", (channels, C, 1, 1), 0.3), f32("bm", (channels,), 0.1)]
    head = _head(nodes, inits, 0, channels)
    nodes += [node(op, [head, "m"] if head_first else ["m", head], ["s"]), node("Conv", ["s", "wp", "bp"], ["y"])]
    inits += [f32("wp", (6, channels, 1, 1), 0.3), f32("bp", (6,), 0.1)]
    return make(nodes, [tensor("x", [1, C, H, W]), tensor("tt", [1, H * W, C])], [tensor("y", [1, 6, H, W])], inits, opset=17)


@pytest.mark.parametrize("op, head_first, channels, packs", [
    ("Add", True, 8, 0),    # EfficientViT's order: the plain head first (the add commutes: read as B)
    ("Add", False, 5, 0),   # channels not filling the last 4-lane block
    ("Sub", False, 6, 0),   # map - head: the head is B, read in place
    ("Sub", True, 6, 1),    # head - map: the plain operand is A, packed (no swap for a subtraction)
    ("Mul", True, 7, 0),
])
def test_plain_head_read_by_the_binary_op(op, head_first, channels, packs):
    rows = _profile(_head_binary(op, head_first, channels), seed=channels + head_first)
    ops = [r["op"] for r in rows]
    assert not [r for r in rows if not r["ours"]], rows
    # the model output's unpack, plus the head's pack where the kernel cannot read it in place
    assert len([o for o in ops if o.startswith(LAYOUT_KERNELS)]) == 1 + packs, ops
    assert len([o for o in ops if o.endswith("_plain")]) == 1 - packs, ops
    # the map's conv, the GEMM and its transpose, the binary op, the output conv and its unpack
    assert len(rows) == 6 + packs, ops


def test_channel_concat_wants_either_form():
    """``LayoutPlan.wants``: a channel concat takes either form of its inputs (no want: the plain heads
    are not counted as wanted blocked), its result what its readers want (the relu's conv: blocked)."""
    mod, _ = import_model(_heads_concat("map_first", 3, (4, 5)))
    g = Graph(mod["main"], mod)
    plan = LayoutPlan.build(g)
    (cat,) = [n for n in g.nodes if n.op == "relax.concat"]
    assert [plan.wants(f) for f in cat.args[0].fields] == [frozenset()] * 3
    assert plan.wants(cat.var) == {BLOCKED}
