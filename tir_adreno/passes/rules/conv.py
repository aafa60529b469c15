"""Convs: ``nn.conv2d`` with its epilogue fused (bias, batch norm and constant scale/shift folded
into the weights, then a residual add and an activation in the kernel) and the placement boundary
crossed in the kernel (``passes.conv_emit``). A conv fused with its neighbours (a depthwise conv
with its 1x1 reader, a gated or norm-reading conv, an excitation) is a pattern's
(``passes.patterns``), tried first."""

from __future__ import annotations

from tir_adreno.passes.conv_emit import lower_conv2d
from tir_adreno.passes.graph import Node
from tir_adreno.passes.rewriter import Rewriter
from tir_adreno.passes.rules.base import rule


@rule("relax.nn.conv2d")
def conv2d(rw: Rewriter, node: Node):
    return lower_conv2d(rw, node)
