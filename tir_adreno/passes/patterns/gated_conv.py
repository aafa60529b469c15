"""The gated conv: ``x * gate`` (``gate`` a per-channel ``[N, C, 1, 1]`` activation, either operand
order; a squeeze-excitation's gate multiply) whose only user is a conv that reads the gate itself
(``strategy.fusion.can_fuse("gate", ...)``): that conv, reading ``x * gate``, so an SE block adds
one launch to the network. The multiply's value never exists: its only reader is the conv."""

from __future__ import annotations

from tir_adreno.passes.conv_emit import emit_conv2d
from tir_adreno.passes.convs import sole_conv_reader
from tir_adreno.passes.graph import Node, static_shape
from tir_adreno.passes.patterns.base import Match, Plan, pattern
from tir_adreno.passes.rewriter import Rewriter
from tir_adreno.passes.rules.common import binary_operands
from tir_adreno.strategy.fusion import can_fuse


def _match(g, node: Node) -> Match | None:
    """A multiply of a 4-d map and its per-channel vector (either order) whose only user is a conv
    our kernels take, reading it as its input."""
    out_shape = static_shape(node.var)
    if len(node.args) != 2 or out_shape is None or len(out_shape) != 4:
        return None
    first, second = node.args
    vector = (*out_shape[:2], 1, 1)
    if not any(static_shape(x) == out_shape and static_shape(v) == vector for x, v in ((first, second), (second, first))):
        return None
    reader = sole_conv_reader(g, node.var, out_shape)
    return Match(node, {"conv": reader[0], "geometry": reader[1]}) if reader is not None else None


def _plan(match: Match, profile, records, precision) -> Plan | None:
    fusion = can_fuse("gate", match.geometry, profile, precision, records)
    return Plan(match, fusion) if fusion is not None else None


@pattern("relax.multiply", match=_match, plan=_plan, before=("producer_gemm", "binary", "elementwise", "broadcast_binary"))
def gated_conv2d(rw: Rewriter, plan: Plan):
    """The conv after the gate multiply, reading ``x * gate``; else None (the multiply runs apart,
    ``elementwise.binary``)."""
    node, conv = plan.match.anchor, plan.match.conv
    operands = binary_operands(rw, node)
    if operands is None or not operands[2]:
        return None
    x, gate, _ = operands
    conv.fused = True
    return emit_conv2d(rw, conv, x, gate)
