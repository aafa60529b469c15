"""Group norm as ``torch.onnx.export`` writes it (timm's GroupNorm1: ``Reshape`` -> ONNX
``InstanceNormalization`` -> ``Reshape`` back -> per-channel ``Mul``/``Add``; :data:`group_norm`),
and either form (that one, or ``relax.nn.group_norm``) folded into the dense 1x1 conv that alone
reads it where the norm is split on a wide GPU (:data:`group_norm_conv`: ``group_norm_partials``
then the conv, ``strategy.fusion.can_fuse("group_norm", ...)``)."""

from __future__ import annotations

import numpy as np

from primfuncs import layernorm
from primfuncs.conv.norm import GroupNormFold

from tir_adreno.passes.affine import linear_step
from tir_adreno.passes.conv_emit import emit_conv2d
from tir_adreno.passes.convs import sole_conv_reader
from tir_adreno.passes.graph import Node, same, scalar, static_shape
from tir_adreno.passes.kernel_index import kernel
from tir_adreno.passes.op_info import elementwise_info
from tir_adreno.passes.patterns.base import GraphOnly, Match, Plan, pattern
from tir_adreno.passes.rewriter import Rewriter, Value, blocked_shape
from tir_adreno.passes.rules.common import affine_chain, emit_group_norm, group_norm_fits, group_norm_op_parts
from tir_adreno.strategy.fusion import can_fuse, folds_norms
from tir_adreno.strategy.norm import group_norm_schedule
from tir_adreno.strategy.width import is_wide


def _match(g, node: Node) -> Match | None:
    """``relax.nn.group_norm`` or the exported form (:func:`_exported_form`) of a static 4-d map
    (``nchw``): its ``groups``, ``eps`` and ``var`` (the norm's output, the per-group steps taken)."""
    nchw = static_shape(node.args[0])
    if nchw is None or len(nchw) != 4:
        return None
    if node.op == "relax.nn.group_norm":
        return Match(node, {"nchw": nchw, "groups": int(node.attrs.num_groups), "eps": float(node.attrs.epsilon), "var": node.var})
    form = _exported_form(g, node, nchw)
    return Match(node, {"nchw": nchw, "groups": form[0], "eps": form[1], "var": form[2]}) if form is not None else None


def _fold_match(g, node: Node) -> Match | None:
    """A group norm (:func:`_match`) whose per-channel steps (no activation) the dense 1x1 conv
    ``reader`` alone reads (:func:`_norm_reader`, from the graph)."""
    found = _match(g, node)
    reader = _norm_reader(GraphOnly(g), found.nchw, found.var) if found is not None else None
    return Match(node, found.parts | {"reader": reader}) if reader is not None else None


def _fold_plan(match: Match, profile, records, precision) -> Plan | None:
    """On a wide GPU where norms fold (``strategy.fusion.folds_norms``), the group norm split
    (``strategy.norm.group_norm_schedule``) and its reader folding it (``strategy.fusion.can_fuse("group_norm", ...)``):
    the ``GroupNormFold``, else None."""
    if not (is_wide(profile) and folds_norms(profile, precision)):
        return None
    split = group_norm_schedule(profile, blocked_shape(match.nchw), match.groups)
    fold = GroupNormFold(match.groups, split["slices"], match.eps) if split is not None else None
    if fold is None or can_fuse("group_norm", match.reader[1], profile, precision, records, fold=fold) is None:
        return None
    return Plan(match, fold)


def _split_plan(match: Match, profile, records, precision) -> Plan:
    """The group norm's split on a wide GPU (``strategy.norm.group_norm_schedule``), or None: the one kernel."""
    return Plan(match, group_norm_schedule(profile, blocked_shape(match.nchw), match.groups))


def _parts(rw: Rewriter, node: Node):
    return group_norm_op_parts(rw, node) if node.op == "relax.nn.group_norm" else _exported_parts(rw, node)


@pattern("relax.reshape", "relax.nn.group_norm", match=_fold_match, plan=_fold_plan,
         before=("group_norm", "cross_covariance_attention", "linear_attention", "reshape", "group_norm_op"))
def group_norm_conv(rw: Rewriter, plan: Plan):
    """A group norm folded into the conv that alone reads it (the module docstring), else None."""
    parts = _parts(rw, plan.match.anchor)
    return _fold_into_conv(rw, plan.decision, plan.match.reader[0], *parts) if parts is not None else None


@pattern("relax.reshape", match=_match, plan=_split_plan, before=("cross_covariance_attention", "linear_attention", "reshape"))
def group_norm(rw: Rewriter, plan: Plan):
    """The exported group norm (the module docstring) and what per-channel steps or activation
    follow: one ``group_norm`` kernel (split on a wide GPU), else None."""
    parts = _exported_parts(rw, plan.match.anchor)
    return emit_group_norm(rw, *parts, split=plan.decision) if parts is not None else None


def _norm_reader(rw, nchw, var):
    """The dense 1x1 conv that alone reads group norm output ``var`` (of a map of ``nchw``) after
    the per-channel steps (:func:`affine_chain`; no activation): (conv node, its geometry), else None."""
    c = nchw[1]
    *_, end, activation, _ = affine_chain(rw, Value(layout="NCHW", channels=c, nchw=nchw), var, np.ones(c), np.zeros(c), [])
    return sole_conv_reader(rw.graph, end, nchw) if activation is None else None


def _fold_into_conv(rw: Rewriter, fold: GroupNormFold, conv: Node, x: Value, groups: int, eps: float, var, scale, shift, nodes):
    """The group norm of ``nodes`` (ending at ``var``, the normalized ``x`` times per-channel ``scale``
    plus ``shift``; the per-channel steps after it taken, :func:`affine_chain`, and no activation)
    split as the plan's ``fold`` says, its ``group_norm_partials`` read by ``conv``, the dense 1x1
    conv that alone reads the norm and folds it: no ``group_norm_apply``. Else None, nothing
    emitted (the group norm's own kernels run)."""
    scale, shift, nodes, var, activation, bounds = affine_chain(rw, x, var, scale, shift, nodes)
    reader = sole_conv_reader(rw.graph, var, x.nchw) if activation is None else None
    if reader is None or reader[0] is not conv:  # not the planned reader
        return None
    shape5 = x.shape5
    scope = rw.scope_for(shape5)
    src = rw.blocked(x, scope)
    info = elementwise_info("group_norm", nodes, [x.nchw], groups=groups, epsilon=eps, activation=activation, bounds=bounds)
    partials = kernel(layernorm.group_norm_partials, shape5, x.channels, groups, fold.slices, scope=scope)
    stats = rw.emit_float32(partials, [src], (shape5[0] * groups, fold.slices, layernorm.PARTIAL_FIELDS), info)
    # the conv reads x normalized with the partials' statistics
    for m in (*nodes, conv):
        m.fused = True
    return emit_conv2d(rw, conv, x, norm=(fold, scale, shift), stats=stats)


def _exported_form(g, node: Node, nchw):
    """timm's GroupNorm1 (and any ``GroupNorm``) as ``torch.onnx.export`` writes it, from ``Reshape``
    ``node`` of a map of ``nchw`` to ``[N, G, C*H*W/G]``: ``InstanceNormalization`` (mean,
    subtract, variance, add eps, sqrt, divide, then its per-group scale and bias) -> ``Reshape``
    back -> per-channel ``Mul``/``Add``: (groups, epsilon, the output var, per-channel scale and
    shift, the nodes), else None."""
    r_shape = static_shape(node.var)
    if r_shape is None or len(r_shape) != 3:
        return None
    n, c, h, w = nchw
    groups = r_shape[1]
    if r_shape != (n, groups, c * h * w // groups):
        return None
    found = _instance_norm(g, node.var)
    if found is None:
        return None
    nodes, eps = found
    var, scale, shift = nodes[-1].var, np.ones(groups), np.zeros(groups)
    while (user := g.sole_user(var)) is not None and (step := linear_step(user, var, groups, "NCW")) is not None:
        scale, shift = scale * step[0], shift * step[0] + step[1]
        nodes, var = nodes + [user], user.var
    back = g.sole_user(var)
    if back is None or back.op != "relax.reshape" or static_shape(back.var) != tuple(nchw):
        return None
    per_group = c // groups
    return groups, eps, back.var, np.repeat(scale, per_group), np.repeat(shift, per_group), [node, *nodes, back]


def _exported_parts(rw: Rewriter, node: Node):
    """The exported group norm (:func:`_exported_form`) of an NCHW activation our kernel takes
    (``group_norm_fits``): (x, groups, epsilon, the output var, per-channel scale and shift, the
    nodes), else None."""
    x = rw.activation(node.args[0])
    form = _exported_form(rw.graph, node, x.nchw) if x is not None else None
    return (x, *form) if form is not None and group_norm_fits(x, form[0]) else None


def _reduces_last(node: Node | None, op: str, source) -> bool:
    """``node`` is ``op(source, axis=[2], keepdims=True)`` of a 3-d tensor."""
    return (node is not None and node.op == op and same(node.args[0], source) and node.attrs.keepdims
            and tuple(int(a) % 3 for a in node.attrs.axis or ()) == (2,))


def _instance_norm(g, r):
    """The nodes of TVM's ONNX ``InstanceNormalization`` over the last axis of ``r``
    (``[N, G, K]``): ``(r - mean(r)) / sqrt(variance(r) + eps)``; (nodes, eps), else None."""
    users = g.users(r)
    mean = next((u for u in users if u.op == "relax.mean"), None)
    var = next((u for u in users if u.op == "relax.variance"), None)
    sub = next((u for u in users if u.op == "relax.subtract"), None)
    if len(users) != 3 or not _reduces_last(mean, "relax.mean", r) or not _reduces_last(var, "relax.variance", r):
        return None
    if sub is None or not same(sub.args[0], r) or not same(sub.args[1], mean.var) or g.sole_user(mean.var) is not sub:
        return None
    add = g.sole_user(var.var)
    sqrt = g.sole_user(add.var) if add is not None and add.op == "relax.add" else None
    div = g.sole_user(sqrt.var) if sqrt is not None and sqrt.op == "relax.sqrt" else None
    if div is None or div.op != "relax.divide" or not same(div.args[0], sub.var) or not same(div.args[1], sqrt.var):
        return None
    eps = scalar(add.args[1] if same(add.args[0], var.var) else add.args[0])
    if eps is None or not eps >= 0 or g.sole_user(sub.var) is not div:
        return None
    return [mean, sub, var, add, sqrt, div], eps
