"""Per-sample norms: layer norm over the channels of an activation and ``relax.nn.group_norm`` over
(C / groups, H, W). Their multi-op forms and fusions are patterns (``passes.patterns``): the group
norm as exported, the norms folded into the conv that reads them, GRN, a classifier head's norm."""

from __future__ import annotations

from tvm import relax

from primfuncs import layernorm

from tir_adreno.passes.graph import Node
from tir_adreno.passes.op_info import node_info
from tir_adreno.passes.rewriter import Rewriter
from tir_adreno.passes.rules.base import rule
from tir_adreno.passes.rules.common import (emit_group_norm, emit_with_chain, group_norm_op_parts, is_nchw_map, layer_norm_operands,
                                            with_epilogue)
from tir_adreno.strategy.norm import group_norm_schedule, layer_norm_schedule
from tir_adreno.strategy.packing import pack_bias


@rule("relax.nn.layer_norm")
def layer_norm(rw: Rewriter, node: Node):
    """Layer norm over the channels: the last axis of an NHWC activation (ConvNeXt, between
    permutes) or of tokens ``[N, L, C]`` (a transformer block on a map's tokens), or axis 1 of an
    NCHW one or of a classifier's ``[N, C]`` (EfficientViT's head), with constant gamma and beta: one
    ``layer_norm_channels`` kernel, or on a wide GPU for a small map of many channels
    ``layer_norm_channels_wide`` (``strategy.norm.layer_norm_schedule``). (A norm folded into the
    conv that reads it is the ``layer_norm_conv`` pattern's, a classifier's in its head GEMV the
    ``head_gemv`` pattern's: both tried first.)"""
    found = layer_norm_operands(rw, node)
    if found is None:
        return None
    x, _, _, g, b = found
    c = x.channels
    shape5 = x.shape5
    scope = rw.scope_for(shape5)
    wide = layer_norm_schedule(rw.profile, shape5)  # None: one work item per pixel
    eps = float(node.attrs.epsilon)
    params = [relax.const(pack_bias(v.reshape(c).astype(rw.dtype))) for v in (g, b)]
    inputs, info = [rw.blocked(x, scope), *params], node_info(node, epsilon=eps)
    make = (with_epilogue(layernorm.layer_norm_channels, shape5, c, eps, scope=scope) if wide is None else
            with_epilogue(layernorm.layer_norm_channels_wide, shape5, c, eps, scope=scope, **wide))
    if is_nchw_map(node.var, x):  # the elementwise chain after a map's norm is its epilogue
        return emit_with_chain(rw, node, make, shape5, scope, x.nchw, inputs, info)
    out = rw.emit_kernel(make(), inputs, shape5, op_info=info)
    rw.define(node.var, out, scope, x.nchw, x.layout)
    return out


@rule("relax.nn.group_norm")
def group_norm_op(rw: Rewriter, node: Node):
    """``relax.nn.group_norm`` over H, W of an NCHW activation (ONNX ``GroupNormalization``) with
    constant per-channel gamma and beta: one ``group_norm`` kernel, split on a wide GPU
    (``strategy.norm.group_norm_schedule``), and what follows."""
    parts = group_norm_op_parts(rw, node)
    return emit_group_norm(rw, *parts, split=group_norm_schedule(rw.profile, parts[0].shape5, parts[1])) if parts is not None else None
