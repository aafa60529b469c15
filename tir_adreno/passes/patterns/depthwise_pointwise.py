"""A depthwise conv and the 1x1 conv that alone reads it (after the depthwise conv's tail: bias,
batch norm, activation) as one kernel (``primfuncs.conv.depthwise_pointwise_nchw4c``) where
``strategy.fusion.can_fuse("depthwise_pointwise", ...)`` gives its plan: the 1x1 conv's tiles
recompute the depthwise conv when that costs less than the launch and the round trip it saves."""

from __future__ import annotations

from tir_adreno.passes.conv_emit import conv_tail, emit_depthwise_pointwise
from tir_adreno.passes.convs import conv_geometry, conv_operands
from tir_adreno.passes.graph import Node
from tir_adreno.passes.patterns.base import Match, Plan, pattern
from tir_adreno.passes.rewriter import Rewriter
from tir_adreno.strategy.fusion import fuses


def _match(g, node: Node) -> Match | None:
    """A grouped conv our kernels may take (whether it is depthwise, and its 1x1 reader, are found
    after its tail)."""
    operands = conv_operands(node) if int(node.attrs.groups) > 1 else None
    if operands is None:
        return None
    return Match(node, {"operands": operands})


def _plan(match: Match, profile, records, precision) -> Plan | None:
    """Fusion on; the fused plan needs both convs' geometry after the tail: ``emit`` asks
    ``strategy.fusion.can_fuse("depthwise_pointwise", ...)``."""
    return Plan(match) if fuses(profile) else None


@pattern("relax.nn.conv2d", match=_match, plan=_plan, before=("conv2d",))
def depthwise_pointwise(rw: Rewriter, plan: Plan):
    """The depthwise conv (its tail folded) with its 1x1 reader as one kernel, else None with
    nothing fused (the conv rule's)."""
    node, (data_layout, w) = plan.match.anchor, plan.match.operands
    x = rw.activation(node.args[0], data_layout)
    if x is None:
        return None
    fused_before = rw.graph.fused_marks()
    tail = conv_tail(rw, node, w, data_layout)
    geom = conv_geometry(node, x.nchw, tail.w.shape)
    fused = emit_depthwise_pointwise(rw, x, geom, tail, tail.epilogue, data_layout) if geom.is_depthwise and tail.residual is None else None
    if fused is None:  # the conv rule finds the tail again
        rw.graph.restore_fused(fused_before)
    return fused
