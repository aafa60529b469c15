"""Per-sample norms: layer norm over the channels of an activation, group norm over (C / groups,
H, W) (timm's GroupNorm1 as exported, and ``relax.nn.group_norm``), and ConvNeXt-V2's global
response norm (GRN): its statistics in two kernels and its application read by the conv after it,
or (where that conv cannot read it) its statistics step alone."""

from __future__ import annotations

import numpy as np
from tvm import relax

from primfuncs import grn, layernorm, reduce
from primfuncs.conv.norm import GroupNormFold

from tir_adreno.passes.activations import clip_fields
from tir_adreno.passes.affine import linear_step
from tir_adreno.passes.convs import conv_geometry, conv_operands, sole_conv_reader
from tir_adreno.passes.graph import Node, const, same, static_shape
from tir_adreno.passes.kernel_index import kernel
from tir_adreno.passes.op_info import elementwise_info, node_info
from tir_adreno.passes.rewriter import Rewriter, Value, blocked_shape
from tir_adreno.passes.rules.base import rule
from tir_adreno.passes.rules.conv import emit_conv2d
from tir_adreno.passes.rules.elementwise import affine_chain
from tir_adreno.passes.rules.excite import head_gemv
from tir_adreno.passes.rules.layout import TO_NCHW
from tir_adreno.passes.rules.matmul import _tokens_as_nhwc, as_conv_node
from tir_adreno.strategy import conv as conv_strategy
from tir_adreno.strategy import pool as pool_strategy
from tir_adreno.strategy.packing import pack_bias


@rule("relax.nn.layer_norm")
def layer_norm(rw: Rewriter, node: Node):
    """Layer norm over the channels: the last axis of an NHWC activation (ConvNeXt, between
    permutes) or of tokens ``[N, L, C]`` (a transformer block on a map's tokens), or axis 1 of an
    NCHW one or of a classifier's ``[N, C]`` (EfficientViT's head), with constant gamma and beta: one
    ``layer_norm_channels`` kernel, or on a wide GPU for a small map of many channels
    ``layer_norm_channels_wide`` (``strategy.pool.layer_norm_schedule``); or, where the norm's
    output is read only by a dense 1x1 conv (ConvNeXt's and EdgeNeXt's pwconv1, a Linear over the
    channels run as one) that folds it (``strategy.conv.fold_norm``), no kernel of its own: the conv
    reads x and normalizes (:func:`_fold_into_conv`)."""
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
    if x.nchw[2:] == (1, 1) and pool_strategy.is_wide(rw.profile):  # a classifier's norm: in its head GEMV
        out = head_gemv(rw, x, x_var, [])
        if out is not None:
            return out
    folded = _fold_into_conv(rw, node, x, x_var, layout_, g, b)
    if folded is not None:
        return folded
    shape5 = x.shape5
    scope = rw.scope_for(shape5)
    wide = pool_strategy.layer_norm_schedule(rw.profile, shape5)  # None: one work item per pixel
    if wide is None:
        func = kernel(layernorm.layer_norm_channels, shape5, c, float(node.attrs.epsilon), scope=scope)
    else:
        func = kernel(layernorm.layer_norm_channels_wide, shape5, c, float(node.attrs.epsilon), scope=scope, **wide)
    params = [relax.const(pack_bias(v.reshape(c).astype(rw.dtype))) for v in (g, b)]
    out = rw.emit_kernel(func, [rw.blocked(x, scope), *params], shape5, op_info=node_info(node, epsilon=float(node.attrs.epsilon)))
    rw.define(node.var, out, scope, x.nchw, x.layout)
    return out


def _norm_reader(rw: Rewriter, node: Node, x: Value, x_var, layout_: str):
    """The conv that alone reads layer norm ``node``'s output over the channels, as a conv node on
    ``x`` (its input), and the graph nodes it replaces: a conv after a permute back to NCHW
    (ConvNeXt), or on NCHW directly, or a Linear over the channels of NHWC or of tokens (a matmul
    with a constant ``[C, M]``: EdgeNeXt's pwconv1 and attention input) run as :func:`matmul` runs
    it; (conv node, replaced nodes), else None."""
    g = rw.graph
    user = g.sole_user(node.var)
    if user is None:
        return None
    if layout_ == "NCHW" or (layout_ == "NHWC" and user.op == "relax.permute_dims"
                             and tuple(int(a) for a in user.attrs.axes or ()) == TO_NCHW):
        views = [] if layout_ == "NCHW" else [user]
        found = sole_conv_reader(g, views[-1].var if views else node.var, x.nchw)
        return (found[0], [*views, found[0]]) if found is not None else None
    w = const(user.args[1]) if user.op == "relax.matmul" and same(user.args[0], node.var) else None
    if layout_ not in ("NHWC", "NLC") or w is None or w.dtype != np.float32 or w.ndim != 2 or w.shape[0] != x.channels:
        return None
    source = x_var if layout_ == "NHWC" else _tokens_as_nhwc(rw, x)
    return as_conv_node(user, source, "NHWC", w.T[:, :, None, None]), [user]


def _fold_into_conv(rw: Rewriter, node: Node, x: Value, x_var, layout_: str, gamma, beta):
    """Layer norm ``node`` of ``x`` folded into the 1x1 conv that alone reads it (:func:`_norm_reader`)
    when ``strategy.conv.fold_norm`` says so: the conv's output, else None (the norm's kernel runs)."""
    found = _norm_reader(rw, node, x, x_var, layout_)
    operands = conv_operands(found[0]) if found is not None else None
    if operands is None:
        return None
    conv, replaced = found
    try:
        geom = conv_geometry(conv, x.nchw, operands.weights.shape)
    except ValueError:
        return None
    if not conv_strategy.fold_norm(geom, rw.precision, rw.profile, rw.records):
        return None
    for m in replaced:
        m.fused = True
    norm = (float(node.attrs.epsilon), np.asarray(gamma, np.float64).reshape(-1), np.asarray(beta, np.float64).reshape(-1))
    return emit_conv2d(rw, conv, x, norm=norm)


def _scalar(expr) -> float | None:
    value = const(expr)
    return float(value.reshape(())) if value is not None and value.size == 1 else None


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
    eps = _scalar(add.args[1] if same(add.args[0], mean.var) else add.args[0])
    if axes != (1,) or not mean.attrs.keepdims or eps is None or not eps >= 0 or not same(div.args[0], sqrt.var):
        return None
    return mean, add, div, eps


@rule("relax.sqrt")
def grn_scale(rw: Rewriter, node: Node):
    """GRN's ``Nx = G / (mean_c G + eps)`` with ``G = sqrt(S)`` (``S = sum_hw x * x``, ``[N, C, 1, 1]``)
    as exported (:func:`_grn_statistics`): one ``grn_scale`` kernel (the square, the sum and GRN's
    per-channel tail run in their own kernels) where :func:`grn_gated_conv2d` did not take the whole GRN."""
    s = rw.activation(node.args[0])
    found = _grn_statistics(rw.graph, node) if s is not None and s.nchw[2:] == (1, 1) else None
    if found is None:
        return None
    mean, add, div, eps = found
    shape5 = s.shape5
    scope = rw.scope_for(shape5)
    info = elementwise_info("grn_scale", [node, mean, add, div], [s.nchw], epsilon=eps)
    out = rw.emit_kernel(kernel(grn.grn_scale, shape5, s.channels, eps, scope=scope), [rw.blocked(s, scope)], shape5, op_info=info)
    mean.fused = add.fused = div.fused = True
    rw.define(div.var, out, scope, s.nchw)
    return out


def _sum_squares_hw(g, node: Node) -> Node | None:
    """The ``sum`` over H, W (dims kept) that is the only user of ``node`` (``x * x``), else None."""
    total = g.sole_user(node.var)
    if total is None or total.op != "relax.sum" or not total.attrs.keepdims:
        return None
    return total if sorted(int(a) % 4 for a in total.attrs.axis or ()) == [2, 3] else None


def _grn_tail(rw: Rewriter, x: Value, x_var, div: Node):
    """After ``Nx`` (``div``): ``x * Nx`` -> per-channel steps (``gamma * t``, ``t * 1``, ``beta + t``)
    -> ``x + that`` -> the conv that is its only user and may read ``x * s`` itself (dense and
    unpadded, so every tap reads a real pixel and the constant ``beta`` folds into the bias; the
    strategy's :func:`strategy.conv.fuse_gate`): (nodes, gamma, beta, conv node, its geometry), else None."""
    g = rw.graph
    xn = g.sole_user(div.var)
    if xn is None or xn.op != "relax.multiply" or not any(same(a, x_var) for a in xn.args) or static_shape(xn.var) != x.nchw:
        return None
    gamma, beta, nodes, var = np.ones(x.channels), np.zeros(x.channels), [xn], xn.var
    while (user := g.sole_user(var)) is not None and (step := linear_step(user, var, x.channels)) is not None:
        gamma, beta = gamma * step[0], beta * step[0] + step[1]
        nodes, var = nodes + [user], user.var
    residual = g.sole_user(var)
    if residual is None or residual.op != "relax.add" or not any(same(a, x_var) for a in residual.args):
        return None
    reader = sole_conv_reader(g, residual.var, x.nchw)
    if reader is None:
        return None
    conv, geom = reader
    if any(geom.padding) or geom.groups != 1 or not conv_strategy.fuse_gate(geom, rw.precision, rw.profile, rw.records):
        return None
    return nodes + [residual], gamma, beta, conv, geom


@rule("relax.multiply")
def grn_gated_conv2d(rw: Rewriter, node: Node):
    """ConvNeXt-V2's GRN and the conv after it, as exported: ``x * x`` (``node``) -> ``sum`` over
    H, W -> ``sqrt`` -> Nx (:func:`_grn_statistics`) -> ``x * Nx`` -> ``gamma``, ``beta`` -> ``+ x``
    -> conv (:func:`_grn_tail`). GRN is ``x * s + beta`` with ``s = 1 + gamma * Nx``: two kernels,
    ``sum_squares_hw`` (float32 sums of squares, kept float32 under half storage) and ``grn_scale``
    writing ``s`` (one work group per sample: ``strategy.pool.grn_threads``), then the conv reading
    ``x * s`` as its input gate with ``W . beta`` in its bias; or where that conv computes ``s``
    itself (``strategy.conv.fold_grn``: the tiled kernel, where norms fold) no ``grn_scale``: the
    conv reads the sums of squares and ``gamma`` (``primfuncs.conv.tiled``, ``grn_eps``).
    Else None: the multiply, the sum, :func:`grn_scale` and the per-channel kernels run apart."""
    a, b = node.args
    x = rw.activation(a) if same(a, b) else None
    g = rw.graph
    total = _sum_squares_hw(g, node) if x is not None and x.layout == "NCHW" else None
    sqrt = g.sole_user(total.var) if total is not None else None
    found = _grn_statistics(g, sqrt) if sqrt is not None and sqrt.op == "relax.sqrt" else None
    tail = _grn_tail(rw, x, a, found[2]) if found is not None else None
    if tail is None:
        return None
    mean, add, div, eps = found
    nodes, gamma, beta, conv, geom = tail
    n, c = x.nchw[:2]
    shape5 = blocked_shape((n, c, 1, 1))
    scope = rw.scope_for(x.shape5, shape5)
    info = elementwise_info("sum_squares", [node, total], [x.nchw], axis=(2, 3))
    sums = kernel(reduce.reduce, x.shape5, c, "sum", (2, 3), True, scope=scope, group_threshold=pool_strategy.group_threshold(rw.profile),
                  square=True, out_dtype="float32")
    s = rw.emit_float32(sums, [rw.blocked(x, scope)], shape5, info, nchw=(n, c, 1, 1))
    for m in (total, sqrt, mean, add, div, *nodes, conv):
        m.fused = True
    if conv_strategy.fold_grn(geom, rw.precision, rw.profile, rw.records):  # the conv computes s from the sums
        return emit_conv2d(rw, conv, x, Value(blocked={scope: s}, channels=c, nchw=(n, c, 1, 1)), input_shift=beta, grn=(eps, gamma))
    info = elementwise_info("grn_scale", [sqrt, mean, add, div, *nodes], [(n, c, 1, 1)], epsilon=eps, gamma=True)
    threads = pool_strategy.grn_threads(rw.profile, shape5[1])
    scale = rw.emit_kernel(kernel(grn.grn_scale, shape5, c, eps, scope=scope, gamma=True, threads=threads),
                           [s, relax.const(pack_bias(gamma.astype(rw.dtype)))], shape5, op_info=info)
    gate = Value(blocked={scope: scale}, channels=c, nchw=(n, c, 1, 1))
    return emit_conv2d(rw, conv, x, gate, input_shift=beta)


def _emit_group_norm(rw: Rewriter, x: Value, groups: int, eps: float, var, scale, shift, nodes):
    """The group norm of ``nodes`` (ending at ``var``, the normalized ``x`` times per-channel
    ``scale`` plus ``shift``), extended by the per-channel steps and the activation that follow
    (:func:`affine_chain`): one ``group_norm`` kernel, or on a wide GPU its split form
    (``strategy.pool.group_norm_schedule``): ``group_norm_partials`` (float32 partial statistics
    per pixel slice, kept float32 under half storage) then ``group_norm_apply``, or where a dense
    1x1 conv alone reads the norm and folds it (:func:`_group_norm_reader`) that conv reading the
    partials: no ``group_norm_apply``."""
    scale, shift, nodes, var, activation, bounds = affine_chain(rw, x, var, scale, shift, nodes)
    shape5 = x.shape5
    scope = rw.scope_for(shape5)
    src = rw.blocked(x, scope)
    params = [relax.const(pack_bias(v.astype(rw.dtype))) for v in (scale, shift)]
    info = elementwise_info("group_norm", nodes, [x.nchw], groups=groups, epsilon=eps, activation=activation, bounds=bounds)
    split = pool_strategy.group_norm_schedule(rw.profile, shape5, groups)
    if split is None:
        func = kernel(layernorm.group_norm, shape5, x.channels, groups, eps, activation, scope=scope, **clip_fields(bounds))
        out = rw.emit_kernel(func, [src, *params], shape5, op_info=info)
    else:
        slices = split["slices"]
        reader = _group_norm_reader(rw, x, var, GroupNormFold(groups, slices, eps)) if activation is None else None
        partials = kernel(layernorm.group_norm_partials, shape5, x.channels, groups, slices, scope=scope)
        stats = rw.emit_float32(partials, [src], (shape5[0] * groups, slices, layernorm.PARTIAL_FIELDS), info)
        if reader is not None:  # the conv reads x normalized with the partials' statistics
            for m in (*nodes, reader[0]):
                m.fused = True
            return emit_conv2d(rw, reader[0], x, norm=(reader[1], scale, shift), stats=stats)
        func = kernel(layernorm.group_norm_apply, shape5, x.channels, groups, slices, eps, activation, scope=scope, **clip_fields(bounds))
        out = rw.emit_kernel(func, [src, stats, *params], shape5, op_info=info)
    for m in nodes:
        m.fused = True
    rw.define(var, out, scope, x.nchw)
    return out


def _group_norm_reader(rw: Rewriter, x: Value, var, fold: GroupNormFold):
    """The conv that alone reads the group norm's output ``var`` (of ``x``) as its input and folds
    it (``strategy.conv.fold_group_norm``): (conv node, ``fold``), else None (``group_norm_apply`` runs)."""
    found = sole_conv_reader(rw.graph, var, x.nchw)
    if found is None or not conv_strategy.fold_group_norm(found[1], fold, rw.precision, rw.profile, rw.records):
        return None
    return found[0], fold


def _group_norm_fits(x: Value | None, groups: int) -> bool:
    """Our kernel takes ``groups`` of ``x``: each group whole 4-channel blocks, or one group."""
    if x is None or x.layout != "NCHW" or groups < 1 or x.channels % groups:
        return False
    return groups == 1 or (x.channels // groups) % 4 == 0


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
    eps = _scalar(add.args[1] if same(add.args[0], var.var) else add.args[0])
    if eps is None or not eps >= 0 or g.sole_user(sub.var) is not div:
        return None
    return [mean, sub, var, add, sqrt, div], eps


@rule("relax.reshape")
def group_norm(rw: Rewriter, node: Node):
    """timm's GroupNorm1 (and any ``GroupNorm``) as ``torch.onnx.export`` writes it: ``Reshape`` to
    ``[N, G, C*H*W/G]`` -> ``InstanceNormalization`` (mean, subtract, variance, add eps, sqrt,
    divide, then its per-group scale and bias) -> ``Reshape`` back -> per-channel ``Mul``/``Add``
    (and what per-channel steps or activation follow): one ``group_norm`` kernel."""
    x = rw.activation(node.args[0])
    r_shape = static_shape(node.var)
    if x is None or r_shape is None or len(r_shape) != 3:
        return None
    n, c, h, w = x.nchw
    groups = r_shape[1]
    if r_shape != (n, groups, c * h * w // groups) or not _group_norm_fits(x, groups):
        return None
    g = rw.graph
    found = _instance_norm(g, node.var)
    if found is None:
        return None
    nodes, eps = found
    var, scale, shift = nodes[-1].var, np.ones(groups), np.zeros(groups)
    while (user := g.sole_user(var)) is not None and (step := linear_step(user, var, groups, "NCW")) is not None:
        scale, shift = scale * step[0], shift * step[0] + step[1]
        nodes, var = nodes + [user], user.var
    back = g.sole_user(var)
    if back is None or back.op != "relax.reshape" or static_shape(back.var) != x.nchw:
        return None
    per_group = c // groups
    return _emit_group_norm(rw, x, groups, eps, back.var, np.repeat(scale, per_group), np.repeat(shift, per_group), [node, *nodes, back])


@rule("relax.nn.group_norm")
def group_norm_op(rw: Rewriter, node: Node):
    """``relax.nn.group_norm`` over H, W of an NCHW activation (ONNX ``GroupNormalization``) with
    constant per-channel gamma and beta: one ``group_norm`` kernel (and what follows)."""
    x_var, gamma, beta = node.args
    a = node.attrs
    x = rw.activation(x_var)
    groups = int(a.num_groups)
    if not _group_norm_fits(x, groups) or int(a.channel_axis) % 4 != 1 or sorted(int(v) % 4 for v in a.axes) != [2, 3]:
        return None
    c = x.channels
    gm = const(gamma) if bool(a.scale) else np.ones(c)
    bt = const(beta) if bool(a.center) else np.zeros(c)
    if gm is None or bt is None or gm.size != c or bt.size != c:
        return None
    eps = float(a.epsilon)
    return _emit_group_norm(rw, x, groups, eps, node.var, gm.reshape(c).astype(np.float64), bt.reshape(c).astype(np.float64), [node])
