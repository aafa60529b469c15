"""``x @ W`` with a constant ``W``: run as a conv (the conv strategy and epilogue)."""

from __future__ import annotations

import numpy as np

from tir_adreno.passes.conv_emit import as_conv_operands, lower_conv2d
from tir_adreno.passes.convs import as_conv_node
from tir_adreno.passes.graph import Node, const, dtype, static_shape
from tir_adreno.passes.rewriter import Rewriter
from tir_adreno.passes.rules.base import rule


@rule("relax.matmul")
def matmul(rw: Rewriter, node: Node):
    """``x @ W`` with a constant ``W [K, M]`` as a conv, through the conv rule (the
    conv strategy and epilogue: bias, activation): over the channels of an NHWC activation
    (ConvNeXt's Linear between permutes), of tokens ``[N, L, K]`` (a transformer's Linear) or of
    ``[N, K]`` (a classifier), or, when ``x`` is
    the flatten of ``[N, C, H, W]`` (VGG), as an HxW conv over that activation. (A wide GPU's
    classifier GEMV is the ``head_gemv`` pattern's, tried first.)"""
    a, w_expr = node.args
    w = const(w_expr)
    a_shape = static_shape(a)
    if w is None or w.dtype != np.float32 or w.ndim != 2 or a_shape is None or dtype(a) != "float32":
        return None
    found = as_conv_operands(rw, node, w, a_shape)
    if found is None:
        return None
    conv_node = as_conv_node(node, *found)
    del w, found  # the conv node holds the weights; these copies go before the conv packs its own (VGG-19: 400 MB each)
    return lower_conv2d(rw, conv_node)
