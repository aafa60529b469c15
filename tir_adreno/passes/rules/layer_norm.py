"""Per-sample norms: layer norm over the channels of an activation, and the statistics step of
ConvNeXt-V2's global response norm (GRN)."""

from __future__ import annotations

import numpy as np
from tvm import relax

from primfuncs import grn, layernorm

from tir_adreno.passes.graph import Node, const, same, static_shape
from tir_adreno.passes.kernel_index import kernel
from tir_adreno.passes.op_info import elementwise_info, node_info
from tir_adreno.passes.rewriter import Rewriter
from tir_adreno.passes.rules.base import rule
from tir_adreno.strategy.packing import pack_bias


@rule("relax.nn.layer_norm")
def layer_norm(rw: Rewriter, node: Node):
    """Layer norm over the channels: the last axis of an NHWC activation (ConvNeXt, between
    permutes) or of tokens ``[N, L, C]`` (a transformer block on a map's tokens), or axis 1 of an
    NCHW one or of a classifier's ``[N, C]`` (EfficientViT's head), with constant gamma and beta."""
    x_var, gamma, beta = node.args
    shape = static_shape(x_var)
    axes = tuple(int(a) % len(shape) for a in node.attrs.axes) if shape is not None else None
    layout_ = {(4, (3,)): "NHWC", (4, (1,)): "NCHW", (3, (2,)): "NLC", (2, (1,)): "NC"}.get((len(shape or ()), axes))
    x = (rw.values.get(x_var) if layout_ in ("NLC", "NC") else rw.activation(x_var, layout_)) if layout_ else None
    if x is None or x.layout != layout_ or not (x.blocked or x.plain is not None):
        return None
    c = x.channels
    g = const(gamma) if bool(node.attrs.scale) else np.ones(c, np.float32)
    b = const(beta) if bool(node.attrs.center) else np.zeros(c, np.float32)
    if g is None or b is None or g.size != c or b.size != c:
        return None
    shape5 = x.shape5
    scope = rw.scope_for(shape5)
    func = kernel(layernorm.layer_norm_channels, shape5, c, float(node.attrs.epsilon), scope=scope)
    params = [relax.const(pack_bias(v.reshape(c).astype(rw.dtype))) for v in (g, b)]
    out = rw.emit_kernel(func, [rw.blocked(x, scope), *params], shape5, op_info=node_info(node, epsilon=float(node.attrs.epsilon)))
    rw.define(node.var, out, scope, x.nchw, x.layout)
    return out


def _scalar(expr) -> float | None:
    value = const(expr)
    return float(value.reshape(())) if value is not None and value.size == 1 else None


@rule("relax.sqrt")
def grn_scale(rw: Rewriter, node: Node):
    """GRN's ``Nx = G / (mean_c G + eps)`` with ``G = sqrt(S)`` (``S = sum_hw x * x``, ``[N, C, 1, 1]``)
    as exported: ``sqrt`` -> ``mean`` over C -> ``add`` eps -> ``divide(G, that)``: one ``grn_scale``
    kernel (the square, the sum and GRN's per-channel tail run in their own kernels)."""
    s = rw.activation(node.args[0])
    g = rw.graph
    users = g.users(node.var)
    if s is None or s.nchw[2:] != (1, 1) or len(users) != 2 or same(g.output, node.var):
        return None
    mean = next((u for u in users if u.op == "relax.mean"), None)
    div = next((u for u in users if u.op == "relax.divide"), None)
    add = g.sole_user(mean.var) if mean is not None else None
    if div is None or add is None or add.op != "relax.add" or g.sole_user(add.var) is not div:
        return None
    axes = tuple(int(a) % 4 for a in mean.attrs.axis or ())
    eps = _scalar(add.args[1] if same(add.args[0], mean.var) else add.args[0])
    if axes != (1,) or not mean.attrs.keepdims or eps is None or not eps >= 0 or not same(div.args[0], node.var):
        return None
    shape5 = s.shape5
    scope = rw.scope_for(shape5)
    info = elementwise_info("grn_scale", [node, mean, add, div], [s.nchw], epsilon=eps)
    out = rw.emit_kernel(kernel(grn.grn_scale, shape5, s.channels, eps, scope=scope), [rw.blocked(s, scope)], shape5, op_info=info)
    mean.fused = add.fused = div.fused = True
    rw.define(div.var, out, scope, s.nchw)
    return out
