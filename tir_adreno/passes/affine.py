"""Per-channel affine steps ``y = x * scale + shift``: a bias add, a constant multiply/add/
subtract/divide, inference batch norm. A conv folds them into its weights and bias; after
no conv they become one affine kernel."""

from __future__ import annotations

import numpy as np

from tir_adreno.passes.graph import Node, const, same, static_shape


def channel_vector(expr, channels: int, layout: str = "NCHW"):
    """A float32 constant broadcasting along the channels of an activation in ``layout``
    (a scalar, or shape (1,C,1,1) / (C,1,1) in NCHW, (1,C,1) / (C,1) in NCW) as a flat float64
    vector, else None."""
    data = const(expr)
    if data is None or data.dtype != np.float32:
        return None
    if data.size == 1 and data.ndim <= 4:
        return np.full(channels, float(data.reshape(())), np.float64)
    if layout == "NCHW" and data.shape in ((1, channels, 1, 1), (channels, 1, 1)):
        return data.reshape(channels).astype(np.float64)
    if layout in ("NHWC", "NC") and data.shape in ((channels,), (1, channels), (1, 1, 1, channels), (1, 1, channels)):
        return data.reshape(channels).astype(np.float64)
    if layout == "NCW" and data.shape in ((1, channels, 1), (channels, 1)):  # [N, groups, C*H*W/groups] of a group norm
        return data.reshape(channels).astype(np.float64)
    return None


def other_operand(node: Node, var):
    """The argument of binary ``node`` that is not ``var`` (None when ``var`` is neither)."""
    a, b = node.args
    return b if same(a, var) else a if same(b, var) else None


def linear_step(node: Node, var, channels: int, layout: str = "NCHW"):
    """``node`` as ``y = var * scale + shift`` with per-channel (or scalar) constants:
    (scale, shift) float64 vectors, else None. Batch norm as Caffe/TF exporters write
    it (Mul then Add by [1,C,1,1]) and HardSigmoid's ``alpha * x + beta`` are such steps."""
    if node.op not in ("relax.add", "relax.subtract", "relax.multiply", "relax.divide") or len(node.args) != 2:
        return None
    if static_shape(node.var) != static_shape(var):
        return None  # the constant must not broadcast the activation itself
    if len(static_shape(var) or ()) == 2:
        layout = "NC"
    other = other_operand(node, var)
    if node.op in ("relax.subtract", "relax.divide") and not same(node.args[0], var):
        return None  # c - x and c / x are not linear in x with a per-channel scale
    c = channel_vector(other, channels, layout) if other is not None else None
    if c is None:
        return None
    ones, zeros = np.ones(channels), np.zeros(channels)
    if node.op == "relax.divide":  # only here: 1 / c of a multiply's zero constant would warn for nothing
        with np.errstate(divide="ignore"):  # x / 0 is inf, as in NumPy
            return 1.0 / c, zeros
    return {"relax.add": (ones, c), "relax.subtract": (ones, -c), "relax.multiply": (c, zeros)}[node.op]


def batch_norm_affine(node: Node):
    """Inference ``nn.batch_norm`` as per-channel (scale, shift) float64 vectors, else None."""
    gamma, beta, mean, var = (const(a) for a in node.args[1:5])
    if any(p is None for p in (gamma, beta, mean, var)):
        return None
    inv_std = 1.0 / np.sqrt(var.astype(np.float64) + float(node.attrs.epsilon))
    scale = gamma.astype(np.float64) * inv_std if bool(node.attrs.scale) else inv_std
    shift = (beta.astype(np.float64) if bool(node.attrs.center) else 0.0) - mean.astype(np.float64) * scale
    return scale, shift


def batch_norm_output(g, node: Node) -> Node | None:
    """The ``tuple_get_item(bn, 0)`` that is inference batch norm ``node``'s only use (its
    normalized tensor), else None."""
    getter = g.sole_user(node.var)
    return getter if getter is not None and getter.op == "tuple_get_item" and getter.index == 0 else None
