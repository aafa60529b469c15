"""Helpers several rule and pattern modules share (not a rule: rule modules never import each other):
the operands of a binary op of two activations, which operand a blocked kernel reads from its plain
buffer, a per-channel affine chain with its activation, the operands of a layer norm over the
channels, the group norm kernels, and a map anchor's chain (a pool's, a resize's, a concat's)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from tvm import relax

from primfuncs import layernorm

from tir_adreno.passes.activations import clip_fields, match_activation
from tir_adreno.passes.affine import linear_step
from tir_adreno.passes.epilogue_chain import chain_only, pool_chain
from tir_adreno.passes.graph import Node, const, dtype, static_shape
from tir_adreno.passes.kernel_index import kernel
from tir_adreno.passes.layout_plan import COMMUTATIVE
from tir_adreno.passes.op_info import elementwise_info, epilogue_info
from tir_adreno.passes.rewriter import MAP_LAYOUTS, Rewriter, Value
from tir_adreno.strategy.packing import pack_bias


def read_in_place(rw: Rewriter, v: Value) -> bool:
    """Whether a blocked kernel that takes either form of an operand (the channel concat, a binary op
    of two maps) reads ``v`` from its plain NCHW buffer instead of packing it: ``v`` is held plain only
    (a GEMM's result seen as a map; a blocked copy, when there is one, is read as before), float32
    like the kernel, buffers are allowed and kernels fuse."""
    shape = static_shape(v.plain) if v.plain is not None else None
    return (rw.fuses and rw.allow_buffer and rw.dtype == "float32" and not v.blocked and v.layout == "NCHW"
            and shape == tuple(v.nchw) and dtype(v.plain) == "float32")


def operand_value(rw: Rewriter, var) -> Value | None:
    """The :class:`Value` of ``var`` in whatever layout it has (a new one: NCHW), else None."""
    return rw.values.get(var) if isinstance(var, relax.Var) and var in rw.values else rw.activation(var)


def binary_operands(rw: Rewriter, node: Node):
    """(a, b, b is a per-channel vector ``[N, C, 1, 1]`` broadcast over H, W) of a binary op of two
    activations of one layout and shape (any layout, tokens too), or of an NCHW one and such a
    vector, else None. ``a op b`` must be the node's value: a broadcast operand comes first only
    in a commutative op (``gate - x`` stays upstream)."""
    out_shape = static_shape(node.var)
    if len(node.args) != 2 or out_shape is None:
        return None
    first, second = node.args
    if static_shape(first) == static_shape(second) == out_shape:
        a, b, broadcast = operand_value(rw, first), operand_value(rw, second), False
    else:
        vector = (*out_shape[:2], 1, 1) if len(out_shape) == 4 else None
        pairs = [(first, second)] + ([(second, first)] if node.op in COMMUTATIVE else [])
        found = next(((x, v) for x, v in pairs if static_shape(x) == out_shape and static_shape(v) == vector), None)
        if found is None:
            return None
        a, b, broadcast = rw.activation(found[0]), rw.activation(found[1]), True
    if a is None or b is None or a.layout != b.layout or (broadcast and a.layout != "NCHW") or (not broadcast and a.nchw != b.nchw):
        return None
    return a, b, broadcast


def affine_chain(rw: Rewriter, x: Value, var, scale, shift, nodes):
    """Extend the affine chain ``nodes`` (folded into ``scale``/``shift``, ending at ``var``) by
    further per-channel steps and an activation: (scale, shift, nodes, last var, activation, bounds)."""
    g = rw.graph
    while True:
        user = g.sole_user(var)
        step = linear_step(user, var, x.channels, MAP_LAYOUTS.get(x.layout, x.layout)) if user is not None else None
        if step is None:
            break
        scale, shift = scale * step[0], shift * step[0] + step[1]
        nodes, var = nodes + [user], user.var
    matched = match_activation(g, var)
    if matched is None:
        return scale, shift, nodes, var, None, None
    activation, bounds, tail = matched
    return scale, shift, nodes + tail, tail[-1].var, activation, bounds


def layer_norm_operands(rw: Rewriter, node: Node):
    """(x, its var, its layout, gamma, beta) of layer norm ``node`` over the channels: the last axis
    of an NHWC activation or of tokens ``[N, L, C]``, or axis 1 of an NCHW one or of a classifier's
    ``[N, C]``, with constant gamma and beta; else None."""
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
    return x, x_var, layout_, g, b


def group_norm_fits(x: Value | None, groups: int) -> bool:
    """Our kernel takes ``groups`` of ``x``: each group whole 4-channel blocks, or one group."""
    if x is None or x.layout != "NCHW" or groups < 1 or x.channels % groups:
        return False
    return groups == 1 or (x.channels // groups) % 4 == 0


def group_norm_op_parts(rw: Rewriter, node: Node):
    """(x, groups, epsilon, the output var, per-channel scale and shift, the nodes) of
    ``relax.nn.group_norm`` over H, W of an NCHW activation (ONNX ``GroupNormalization``) with
    constant per-channel gamma and beta, else None."""
    x_var, gamma, beta = node.args
    a = node.attrs
    x = rw.activation(x_var)
    groups = int(a.num_groups)
    if not group_norm_fits(x, groups) or int(a.channel_axis) % 4 != 1 or sorted(int(v) % 4 for v in a.axes) != [2, 3]:
        return None
    c = x.channels
    gm = const(gamma) if bool(a.scale) else np.ones(c)
    bt = const(beta) if bool(a.center) else np.zeros(c)
    if gm is None or bt is None or gm.size != c or bt.size != c:
        return None
    eps = float(a.epsilon)
    return x, groups, eps, node.var, gm.reshape(c).astype(np.float64), bt.reshape(c).astype(np.float64), [node]



def emit_group_norm(rw: Rewriter, x: Value, groups: int, eps: float, var, scale, shift, nodes, split: dict | None):
    """The group norm of ``nodes`` (ending at ``var``, the normalized ``x`` times per-channel
    ``scale`` plus ``shift``), extended by the per-channel steps and the activation that follow
    (:func:`affine_chain`): one ``group_norm`` kernel (``split`` None), or on a wide GPU its split form
    (``split``: ``strategy.norm.group_norm_schedule``'s, asked by the caller): ``group_norm_partials`` (float32 partial statistics
    per pixel slice, kept float32 under half storage) then ``group_norm_apply`` (where a dense
    1x1 conv alone reads the norm and folds it, the ``group_norm_conv`` pattern's, tried first:
    that conv reading the partials, no ``group_norm_apply``). The elementwise chain after an NCHW
    map's norm is its epilogue (:func:`emit_with_chain`)."""
    scale, shift, nodes, var, activation, bounds = affine_chain(rw, x, var, scale, shift, nodes)
    shape5 = x.shape5
    scope = rw.scope_for(shape5)
    src = rw.blocked(x, scope)
    params = [relax.const(pack_bias(v.astype(rw.dtype))) for v in (scale, shift)]
    info = elementwise_info("group_norm", nodes, [x.nchw], groups=groups, epsilon=eps, activation=activation, bounds=bounds)
    if split is None:
        args, inputs = (layernorm.group_norm, shape5, x.channels, groups, eps, activation), [src, *params]
    else:
        slices = split["slices"]
        partials = kernel(layernorm.group_norm_partials, shape5, x.channels, groups, slices, scope=scope)
        stats = rw.emit_float32(partials, [src], (shape5[0] * groups, slices, layernorm.PARTIAL_FIELDS), info)
        args, inputs = (layernorm.group_norm_apply, shape5, x.channels, groups, slices, eps, activation), [src, stats, *params]
    for m in nodes:
        m.fused = True
    return emit_with_chain(rw, rw.graph.by_var[var], with_epilogue(*args, scope=scope, **clip_fields(bounds)), shape5, scope,
                           x.nchw, inputs, info, fuse_chain=is_nchw_map(var, x))


def with_epilogue(factory, *args, **kwargs):
    """``make(**fused)`` for :func:`emit_with_chain` of a kernel whose factory takes its channel
    count already (a norm's): ``kernel(factory, *args, **kwargs)``, with the chain's epilogue when one fuses."""
    return lambda epilogue=None, channels=None: kernel(factory, *args, **kwargs, **({} if epilogue is None else {"epilogue": epilogue}))


def is_nchw_map(var, x: Value) -> bool:
    """``var`` is an NCHW map of ``x``'s layout (where a map anchor's chain may follow: its constants
    and operands broadcast as NCHW)."""
    return x.layout == "NCHW" and len(static_shape(var) or ()) == 4


def emit_with_chain(rw: Rewriter, node: Node, make, out5, scope: str, nchw, inputs: list, info: dict, fuse_chain: bool = True):
    """``make(**fused)`` (the kernel of an NCHW map anchor: a pool, a resize, a concat, a norm;
    ``fused``: its ``epilogue`` and ``channels``, none without a chain) on ``inputs`` writing
    ``node``'s value, with the elementwise chain after ``node`` as its epilogue where one fuses
    (``fuse_chain``; its per-channel constants and operand the kernel's ``Bias`` and ``Residual``;
    the operand read where it already is)."""
    found = pool_chain(rw, node, nchw[1]) if fuse_chain else None
    fused = {}
    last = node
    if found is not None:
        chain, operands = found
        operand = operands[0] if operands else None  # a pool reads one (its anchor's)
        epilogue, rows = chain_only(chain)
        inputs = inputs + ([relax.const(rows)] if rows is not None else [])
        if operand is not None:
            operand_scope = rw.input_scope(operand, scope)
            epilogue = replace(epilogue, residual_scope=None if operand_scope == scope else operand_scope)
            inputs.append(rw.blocked(operand, operand_scope))
        fused = dict(epilogue=epilogue, channels=nchw[1])
        info = dict(info, epilogue=epilogue_info(epilogue))
        last = chain.last
    out = rw.emit_kernel(make(**fused), inputs, out5, op_info=info)
    rw.define(last.var, out, scope, nchw)
    return out
