"""``x @ W`` with a constant ``W``: run as a conv (the conv strategy and epilogue)."""

from __future__ import annotations

import numpy as np
from tvm import relax

from tir_adreno.passes.convs import as_conv_node
from tir_adreno.passes.graph import Node, const, dtype, static_shape
from tir_adreno.passes.rewriter import Rewriter, Value, blocked_shape
from tir_adreno.passes.rules import conv, excite
from tir_adreno.passes.rules.base import rule
from tir_adreno.strategy import pool as pool_strategy


def _nc_value(rw: Rewriter, var) -> Value | None:
    """The :class:`Value` of a 2-d float32 ``[N, C]`` activation (a classifier's), else None."""
    if not isinstance(var, relax.Var):
        return None
    if var in rw.values:
        return rw.values[var] if rw.values[var].layout == "NC" else None
    shape = static_shape(var)
    if shape is None or len(shape) != 2 or dtype(var) != "float32":
        return None
    rw.values[var] = Value(plain=rw.exprs[var], layout="NC", channels=shape[1], nchw=(*shape, 1, 1))
    return rw.values[var]


def _nc_as_nchw(rw: Rewriter, v: Value, a_shape) -> relax.Var:
    """A stand-in variable for ``[N, K]`` value ``v`` seen as ``[N, K, 1, 1]`` (blocked first)."""
    x_var = relax.Var("flat_nchw", relax.TensorType([*a_shape, 1, 1], "float32"))
    if rw.alias(x_var, v, "NCHW", v.nchw) is None:
        rw.blocked(v, rw.scope_for(blocked_shape(v.nchw)))
        rw.alias(x_var, v, "NCHW", v.nchw)
    return x_var


def _tokens_as_nhwc(rw: Rewriter, v: Value) -> relax.Var:
    """A stand-in variable for tokens ``[N, L, C]`` ``v`` seen as their map ``[N, H, W, C]``."""
    n, c, h, w = v.nchw
    x_var = relax.Var("tokens_nhwc", relax.TensorType([n, h, w, c], "float32"))
    rw.alias(x_var, v, "NHWC", v.nchw)
    return x_var


def _as_conv_operands(rw: Rewriter, node: Node, w: np.ndarray, a_shape):
    """(input var, data layout, OIHW weights) of the conv that computes matmul ``node``, else None."""
    a = node.args[0]
    k, m = w.shape
    src = rw.graph.by_var.get(a)
    flat = rw.activation(src.args[0]) if src is not None and src.op == "relax.reshape" and len(a_shape) == 2 else None
    if len(a_shape) == 4 and a_shape[3] == k and a in rw.values and rw.activation(a, "NHWC") is not None:
        return a, "NHWC", w.T[:, :, None, None]
    tokens = rw.values.get(a) if len(a_shape) == 3 and a_shape[2] == k else None
    if tokens is not None and tokens.layout == "NLC" and tokens.blocked:
        return _tokens_as_nhwc(rw, tokens), "NHWC", w.T[:, :, None, None]
    if flat is not None and flat.layout == "NCHW" and a_shape == (flat.nchw[0], k) and int(np.prod(flat.nchw[1:])) == k and flat.nchw[2:] != (1, 1):
        return src.args[0], "NCHW", w.T.reshape(m, *flat.nchw[1:])
    if len(a_shape) == 2 and a_shape[1] == k and _nc_value(rw, a) is not None:
        return _nc_as_nchw(rw, _nc_value(rw, a), a_shape), "NCHW", w.T[:, :, None, None]
    return None


@rule("relax.matmul")
def matmul(rw: Rewriter, node: Node):
    """``x @ W`` with a constant ``W [K, M]`` as a conv, through the conv rule (the
    conv strategy and epilogue: bias, activation): over the channels of an NHWC activation
    (ConvNeXt's Linear between permutes), of tokens ``[N, L, K]`` (a transformer's Linear) or of
    ``[N, K]`` (a classifier), or, when ``x`` is
    the flatten of ``[N, C, H, W]`` (VGG), as an HxW conv over that activation."""
    a, w_expr = node.args
    w = const(w_expr)
    a_shape = static_shape(a)
    if w is None or w.dtype != np.float32 or w.ndim != 2 or a_shape is None or dtype(a) != "float32":
        return None
    vector = _nc_value(rw, a) if len(a_shape) == 2 and pool_strategy.is_wide(rw.profile) else None
    out = excite.head_gemv(rw, vector, a, []) if vector is not None else None  # a wide GPU's classifier GEMV
    if out is not None:
        return out
    found = _as_conv_operands(rw, node, w, a_shape)
    if found is None:
        return None
    conv_node = as_conv_node(node, *found)
    del w, found  # the conv node holds the weights; these copies go before the conv packs its own (VGG-19: 400 MB each)
    return conv.conv2d.apply(rw, conv_node)
