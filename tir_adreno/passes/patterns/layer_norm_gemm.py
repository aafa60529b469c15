"""A layer norm over the last axis of plain tokens folded into the Linear by a constant that alone
reads it (a transformer's pre-norm ``LN -> fc1`` / ``LN -> qkv``: gMLP's channel MLP, MambaOut's
gated MLP): no ``layer_norm_rows`` kernel, the tiled GEMM reads the raw tokens and normalizes each
row in its accumulators (``primfuncs.gemm(norm_eps=)``, the shifted statistics of
``primfuncs.conv.norm``), where ``strategy.fusion.can_fuse("layer_norm_gemm", ...)`` says so;
else the layer norm's row kernel runs and the GEMM rule takes the Linear.

``(x_hat gamma + beta) @ W + ... = x_hat @ (diag(gamma) W) + beta W + ...``: the GEMM rule's tail
(``rules.gemm.gemm_tail``: bias, per-column linear steps, residual, activation, chain) starts from
the weight ``diag(gamma) W`` and the bias ``beta W`` (float64), and the kernel's ``WeightSum`` is the
column sums of the final weight (``rules.gemm._emit``). The norm's input held blocked (a map's
channels read by a Linear) is ``layer_norm_conv``'s, tried before: this pattern declines it."""

from __future__ import annotations

import numpy as np

from tir_adreno.passes.graph import Node, const, dtype, same, static_shape
from tir_adreno.passes.patterns.base import Match, Plan, pattern
from tir_adreno.passes.rewriter import Rewriter
from tir_adreno.passes.rules.gemm import _viewed, _weight, emit_linear, linear_geometry
from tir_adreno.passes.rules.rows import plain_input
from tir_adreno.strategy.fusion import can_fuse


def _match(g, node: Node) -> Match | None:
    """A layer norm over the last axis of a rank >= 2 float32 tensor whose output only a
    ``matmul`` by a constant ``[C, N]`` float32 reads, with that product's geometry."""
    x_var = node.args[0]
    shape = static_shape(x_var)
    if shape is None or len(shape) < 2 or dtype(x_var) != "float32" or node.attrs.axes is None:
        return None
    if [int(a) % len(shape) for a in node.attrs.axes] != [len(shape) - 1]:
        return None
    user = g.sole_user(node.var)
    if user is None or user.op != "relax.matmul" or not same(user.args[0], node.var):
        return None
    geom = linear_geometry(user, shape)
    return None if geom is None else Match(node, {"reader": user, "geometry": geom})


def _plan(match: Match, profile, records, precision) -> Plan | None:
    """The fold where ``strategy.fusion.can_fuse("layer_norm_gemm", ...)`` says yes, else None."""
    fusion = can_fuse("layer_norm_gemm", match.geometry, profile, precision, records)
    return Plan(match, fusion) if fusion is not None else None


def _affine(node: Node, c: int):
    """The norm's (gamma, beta) as float64 ``[C]`` (ones, zeros without scale, center), else None."""
    _, gamma, beta = node.args
    g = const(gamma) if bool(node.attrs.scale) else np.ones(c)
    b = const(beta) if bool(node.attrs.center) else np.zeros(c)
    if g is None or b is None or g.size != c or b.size != c:
        return None
    return np.asarray(g, np.float64).reshape(-1), np.asarray(b, np.float64).reshape(-1)


@pattern("relax.nn.layer_norm", match=_match, plan=_plan, before=("layer_norm",))
def layer_norm_gemm(rw: Rewriter, plan: Plan):
    """The Linear reading the layer norm of its plain input folded in (the GEMM's output, the norm
    and the product marked fused), else None (a blocked input: ``layer_norm_conv``'s; the norm's
    kernel runs)."""
    node, user, geom = plan.match.anchor, plan.match.reader, plan.match.geometry
    x_var = node.args[0]
    shape = plain_input(rw, x_var)
    affine = _affine(node, geom.k) if shape is not None else None
    if affine is None:
        return None
    gamma, beta = affine
    weight = _weight(user.args[1], geom.k)
    a = _viewed(rw, x_var, shape)  # read as stored: a scale or a transpose does not commute with the norm
    node.fused = True
    return emit_linear(rw, user, a, geom, gamma[:, None] * weight, bias=beta @ weight, norm=float(node.attrs.epsilon))
