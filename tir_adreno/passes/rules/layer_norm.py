"""Layer norm over the channels of an activation."""

from __future__ import annotations

import numpy as np
from tvm import relax

from primfuncs import layernorm

from tir_adreno.passes.graph import Node, const, static_shape
from tir_adreno.passes.kernel_index import kernel
from tir_adreno.passes.op_info import node_info
from tir_adreno.passes.rewriter import Rewriter
from tir_adreno.passes.rules.base import rule
from tir_adreno.strategy.packing import pack_bias


@rule("relax.nn.layer_norm")
def layer_norm(rw: Rewriter, node: Node):
    """Layer norm over the channels: the last axis of an NHWC activation (ConvNeXt, between
    permutes) or axis 1 of an NCHW one, with constant gamma and beta."""
    x_var, gamma, beta = node.args
    shape = static_shape(x_var)
    axes = [int(a) % len(shape) for a in node.attrs.axes] if shape is not None else None
    layout_ = {(3,): "NHWC", (1,): "NCHW"}.get(tuple(axes or ()))
    x = rw.activation(x_var, layout_) if layout_ and len(shape) == 4 else None
    if x is None:
        return None
    c = x.channels
    g = const(gamma) if bool(node.attrs.scale) else np.ones(c, np.float32)
    b = const(beta) if bool(node.attrs.center) else np.zeros(c, np.float32)
    if g is None or b is None or g.size != c or b.size != c:
        return None
    shape5 = x.shape5
    scope = rw.scope_for(shape5)
    func = kernel(layernorm.layer_norm_channels, shape5, c, float(node.attrs.epsilon), scope=scope)
    params = [relax.const(pack_bias(v.reshape(c).astype(np.float32))) for v in (g, b)]
    out = rw.emit_kernel(func, [rw.blocked(x, scope), *params], shape5, op_info=node_info(node, epsilon=float(node.attrs.epsilon)))
    rw.define(node.var, out, scope, x.nchw, x.layout)
    return out
