"""ConvNeXt-V2's global response norm (GRN) as exported: its statistics and the conv that reads it
(:data:`grn_gated_conv2d`), or where that conv cannot read it, its scale step alone (:data:`grn_scale`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tvm import relax

from primfuncs import grn, reduce

from tir_adreno.passes.affine import linear_step
from tir_adreno.passes.conv_emit import emit_conv2d
from tir_adreno.passes.convs import sole_conv_reader
from tir_adreno.passes.graph import Node, same, scalar, static_shape
from tir_adreno.passes.kernel_index import kernel
from tir_adreno.passes.op_info import elementwise_info
from tir_adreno.passes.patterns.base import Match, Plan, no_question, pattern
from tir_adreno.passes.rewriter import Rewriter, Value, blocked_shape
from tir_adreno.strategy.fusion import can_fuse
from tir_adreno.strategy.norm import grn_threads
from tir_adreno.strategy.packing import pack_bias
from tir_adreno.strategy.pool import group_threshold


def _grn_match(g, node: Node) -> Match | None:
    """``x * x`` of a static 4-d float32 map through GRN to the conv after it (:func:`_grn_tail`)."""
    a, b = node.args
    nchw = static_shape(a) if same(a, b) else None
    total = _sum_squares_hw(g, node) if nchw is not None and len(nchw) == 4 else None
    sqrt = g.sole_user(total.var) if total is not None else None
    found = _grn_statistics(g, sqrt) if sqrt is not None and sqrt.op == "relax.sqrt" else None
    tail = _grn_tail(g, nchw, a, found[2]) if found is not None else None
    return Match(node, {"found": (total, sqrt, found, tail)}) if tail is not None else None


@dataclass(frozen=True)
class GrnPlan:
    """The device's answers for a GRN and its conv: whether the conv computes GRN's scale itself
    (``can_fuse("grn", ...)``), else the ``grn_scale`` kernel's work items (``strategy.norm.grn_threads``);
    the sums of squares' window grouping (``strategy.pool.group_threshold``)."""

    conv_computes_scale: bool
    scale_threads: int
    sums_threshold: int | None


def _grn_plan(match: Match, profile, records, precision) -> Plan | None:
    """The conv reads GRN's scale as its input gate (``can_fuse("gate", ...)``), and computes that
    scale itself where ``can_fuse("grn", ...)`` says so (:class:`GrnPlan`)."""
    geom = match.parts["found"][3][4]
    if can_fuse("gate", geom, profile, precision, records) is None:
        return None
    return Plan(match, GrnPlan(can_fuse("grn", geom, profile, precision, records) is not None, grn_threads(profile, geom.c4),
                               group_threshold(profile)))


def _scale_match(g, node: Node) -> Match | None:
    """``sqrt`` of GRN's sums of squares through ``Nx`` (:func:`_grn_statistics`)."""
    found = _grn_statistics(g, node)
    return Match(node, {"found": found}) if found is not None else None


@pattern("relax.multiply", match=_grn_match, plan=_grn_plan, before=("gated_conv2d", "producer_gemm", "binary", "elementwise", "broadcast_binary"))
def grn_gated_conv2d(rw: Rewriter, plan: Plan):
    """ConvNeXt-V2's GRN and the conv after it, as exported: ``x * x`` (``node``) -> ``sum`` over
    H, W -> ``sqrt`` -> Nx (:func:`_grn_statistics`) -> ``x * Nx`` -> ``gamma``, ``beta`` -> ``+ x``
    -> conv (:func:`_grn_tail`; ``can_fuse("gate", ...)`` asked). GRN is ``x * s + beta`` with ``s = 1 + gamma * Nx``: two kernels,
    ``sum_squares_hw`` (float32 sums of squares, kept float32 under half storage) and ``grn_scale``
    writing ``s`` (one work group per sample: ``strategy.norm.grn_threads``), then the conv reading
    ``x * s`` as its input gate with ``W . beta`` in its bias; or where that conv computes ``s``
    itself (``can_fuse("grn", ...)``: the tiled kernel, where norms fold) no ``grn_scale``: the
    conv reads the sums of squares and ``gamma`` (``primfuncs.conv.tiled``, ``grn_eps``).
    Else None: the multiply, the sum, :func:`grn_scale` and the per-channel kernels run apart."""
    node, (total, sqrt, found, tail) = plan.match.anchor, plan.match.parts["found"]
    a = node.args[0]
    x = rw.activation(a)
    if x is None or x.layout != "NCHW":
        return None
    mean, add, div, eps = found
    nodes, gamma, beta, conv, geom = tail
    n, c = x.nchw[:2]
    shape5 = blocked_shape((n, c, 1, 1))
    scope = rw.scope_for(x.shape5, shape5)
    info = elementwise_info("sum_squares", [node, total], [x.nchw], axis=(2, 3))
    decided = plan.decision
    sums = kernel(reduce.reduce, x.shape5, c, "sum", (2, 3), True, scope=scope, group_threshold=decided.sums_threshold,
                  square=True, out_dtype="float32")
    s = rw.emit_float32(sums, [rw.blocked(x, scope)], shape5, info, nchw=(n, c, 1, 1))
    for m in (total, sqrt, mean, add, div, *nodes, conv):
        m.fused = True
    if decided.conv_computes_scale:  # the conv computes s from the sums
        return emit_conv2d(rw, conv, x, Value(blocked={scope: s}, channels=c, nchw=(n, c, 1, 1)), input_shift=beta, grn=(eps, gamma))
    info = elementwise_info("grn_scale", [sqrt, mean, add, div, *nodes], [(n, c, 1, 1)], epsilon=eps, gamma=True)
    scale = rw.emit_kernel(kernel(grn.grn_scale, shape5, c, eps, scope=scope, gamma=True, threads=decided.scale_threads),
                           [s, relax.const(pack_bias(gamma.astype(rw.dtype)))], shape5, op_info=info)
    gate = Value(blocked={scope: scale}, channels=c, nchw=(n, c, 1, 1))
    return emit_conv2d(rw, conv, x, gate, input_shift=beta)


@pattern("relax.sqrt", match=_scale_match, plan=no_question, before=("producer_gemm",))
def grn_scale(rw: Rewriter, plan: Plan):
    """GRN's ``Nx = G / (mean_c G + eps)`` with ``G = sqrt(S)`` (``S = sum_hw x * x``, ``[N, C, 1, 1]``)
    as exported (:func:`_grn_statistics`): one ``grn_scale`` kernel (the square, the sum and GRN's
    per-channel tail run in their own kernels) where the ``grn_gated_conv2d`` pattern did not take the whole GRN."""
    node = plan.match.anchor
    s = rw.activation(node.args[0])
    if s is None or s.nchw[2:] != (1, 1):
        return None
    mean, add, div, eps = plan.match.found
    shape5 = s.shape5
    scope = rw.scope_for(shape5)
    info = elementwise_info("grn_scale", [node, mean, add, div], [s.nchw], epsilon=eps)
    out = rw.emit_kernel(kernel(grn.grn_scale, shape5, s.channels, eps, scope=scope), [rw.blocked(s, scope)], shape5, op_info=info)
    mean.fused = add.fused = div.fused = True
    rw.define(div.var, out, scope, s.nchw)
    return out


def _grn_statistics(g, sqrt: Node):
    """GRN's ``Nx = G / (mean_c G + eps)`` after ``sqrt`` (``G``) as exported: ``mean`` over C ->
    ``add`` eps -> ``divide(G, that)``, ``G`` used by nothing else: (mean, add, divide, eps), else None."""
    users = g.users(sqrt.var)
    if len(users) != 2 or same(g.output, sqrt.var):
        return None
    mean = next((u for u in users if u.op == "relax.mean"), None)
    div = next((u for u in users if u.op == "relax.divide"), None)
    add = g.sole_user(mean.var) if mean is not None else None
    if div is None or add is None or add.op != "relax.add" or g.sole_user(add.var) is not div:
        return None
    axes = tuple(int(a) % 4 for a in mean.attrs.axis or ())
    eps = scalar(add.args[1] if same(add.args[0], mean.var) else add.args[0])
    if axes != (1,) or not mean.attrs.keepdims or eps is None or not eps >= 0 or not same(div.args[0], sqrt.var):
        return None
    return mean, add, div, eps


def _sum_squares_hw(g, node: Node) -> Node | None:
    """The ``sum`` over H, W (dims kept) that is the only user of ``node`` (``x * x``), else None."""
    total = g.sole_user(node.var)
    if total is None or total.op != "relax.sum" or not total.attrs.keepdims:
        return None
    return total if sorted(int(a) % 4 for a in total.attrs.axis or ()) == [2, 3] else None


def _grn_tail(g, nchw, x_var, div: Node):
    """After ``Nx`` (``div``): ``x * Nx`` -> per-channel steps (``gamma * t``, ``t * 1``, ``beta + t``)
    -> ``x + that`` -> the conv that is its only user and may read ``x * s`` itself (dense and
    unpadded, so every tap reads a real pixel and the constant ``beta`` folds into the bias; whether
    it does is the plan's question): (nodes, gamma, beta, conv node, its geometry), else None."""
    channels = nchw[1]
    xn = g.sole_user(div.var)
    if xn is None or xn.op != "relax.multiply" or not any(same(a, x_var) for a in xn.args) or static_shape(xn.var) != nchw:
        return None
    gamma, beta, nodes, var = np.ones(channels), np.zeros(channels), [xn], xn.var
    while (user := g.sole_user(var)) is not None and (step := linear_step(user, var, channels)) is not None:
        gamma, beta = gamma * step[0], beta * step[0] + step[1]
        nodes, var = nodes + [user], user.var
    residual = g.sole_user(var)
    if residual is None or residual.op != "relax.add" or not any(same(a, x_var) for a in residual.args):
        return None
    reader = sole_conv_reader(g, residual.var, nchw)
    if reader is None:
        return None
    conv, geom = reader
    if any(geom.padding) or geom.groups != 1:
        return None
    return nodes + [residual], gamma, beta, conv, geom
