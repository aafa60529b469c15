"""Pixelwise ops on an activation no conv epilogue took: activations (however the importer
writes them), per-channel affine chains (``x * scale + shift``, batch norm after no conv, then an
activation) and binary ops of two activations (or a squeeze-excitation gate ``[N, C, 1, 1]``)."""

from __future__ import annotations

import numpy as np
from tvm import relax

from primfuncs import elementwise as kernels

from tir_adreno.passes.activations import clip_fields, match_activation
from tir_adreno.passes.affine import batch_norm_affine, batch_norm_output, linear_step
from tir_adreno.passes.graph import Node, const, static_shape
from tir_adreno.passes.kernel_index import kernel
from tir_adreno.passes.op_info import elementwise_info
from tir_adreno.passes.rewriter import MAP_LAYOUTS, Rewriter, Value

#: Layouts a pixelwise kernel takes as they are (the same NCHW4c tensor): maps, a classifier's
#: ``[N, C]`` and tokens. (NHWC maps are the conv rule's: their per-channel constants fold there.)
POINTWISE_LAYOUTS = ("NCHW", "NC", "NLC", "NCL")
from tir_adreno.passes.rules.base import rule
from tir_adreno.passes.rules.common import COMMUTATIVE, affine_chain, binary_operands, operand_value, read_in_place
from tir_adreno.strategy.packing import pack_bias, pack_nchw4c


def _emit_activation(rw: Rewriter, x: Value, matched):
    """The standalone kernel of a matched activation chain on ``x``; defines its last node."""
    name, bounds, nodes = matched
    shape5 = x.shape5
    scope = rw.scope_for(shape5)
    if name in ("relu", "relu6"):
        func = kernel(getattr(kernels, name), shape5, scope=scope)
    elif name == "clip":
        func = kernel(kernels.clip, shape5, *bounds, scope=scope)
    else:
        func = kernel(kernels.activation, shape5, name, scope=scope)
    out = rw.emit_kernel(func, [rw.blocked(x, scope)], shape5, op_info=elementwise_info("activation", nodes, [x.nchw], activation=name, bounds=bounds))
    for m in nodes:
        m.fused = True
    rw.define(nodes[-1].var, out, scope, x.nchw, x.layout)
    return out


def _emit_affine(rw: Rewriter, x: Value, var, scale, shift, nodes):
    """``act(x * scale + shift)`` per channel, extending ``nodes`` (already folded into
    ``scale``/``shift``, ending at ``var``) by further per-channel steps and an activation."""
    scale, shift, nodes, var, activation, bounds = affine_chain(rw, x, var, scale, shift, nodes)
    shape5 = x.shape5
    scope = rw.scope_for(shape5)
    func = kernel(kernels.affine, shape5, activation, scope=scope, **clip_fields(bounds))
    params = [relax.const(pack_bias(v.astype(rw.dtype))) for v in (scale, shift)]
    out = rw.emit_kernel(func, [rw.blocked(x, scope), *params], shape5, op_info=elementwise_info("affine", nodes, [x.nchw], activation=activation, bounds=bounds))
    for m in nodes:
        m.fused = True
    rw.define(var, out, scope, x.nchw, x.layout)
    return out


@rule("relax.nn.relu", "relax.clip", "relax.maximum", "relax.minimum", "relax.sigmoid", "relax.subtract", "relax.divide",
      "relax.add", "relax.multiply")
def elementwise(rw: Rewriter, node: Node):
    """An activation however the importer writes it (a chain of scalar ops, or the gated
    ``x * gate(x)``), else a per-channel affine chain (``x * scale + shift``, then an
    activation), on an activation that no conv epilogue took. Not where the layout planner runs it plain."""
    if rw.runs_plain(node):
        return None
    for var in node.args[:2]:
        x = operand_value(rw, var) if isinstance(var, relax.Var) else None
        if x is None or x.layout not in POINTWISE_LAYOUTS:
            continue
        matched = match_activation(rw.graph, var, first=node)
        if matched is not None:
            return _emit_activation(rw, x, matched)
        step = linear_step(node, var, x.channels, MAP_LAYOUTS.get(x.layout, x.layout))
        if step is not None:
            return _emit_affine(rw, x, node.var, *step, [node])
    return None


@rule("relax.nn.batch_norm")
def batch_norm(rw: Rewriter, node: Node):
    """Batch norm that follows no conv: one per-channel affine kernel (with what follows)."""
    x = rw.activation(node.args[0])
    getter = batch_norm_output(rw.graph, node)
    if x is None or x.layout != "NCHW" or int(node.attrs.axis) % 4 != 1 or bool(node.attrs.training) or getter is None:
        return None
    folded = batch_norm_affine(node)
    if folded is None:
        return None
    return _emit_affine(rw, x, getter.var, *folded, [node, getter])


#: Binary ops of two activations with a kernel; the commutative ones take a broadcast operand first too.
BINARY_OPS = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide")


def _constant_operand(rw: Rewriter, node: Node):
    """(a, the other operand as NCHW float32) of a binary op of an activation and a constant of
    the output's shape (a positional embedding of tokens; the constant second unless the op
    commutes), else None."""
    out_shape = static_shape(node.var)
    orders = (node.args, node.args[::-1]) if node.op in COMMUTATIVE else (node.args,)
    for var, other in orders:
        data = const(other)
        a = rw.values.get(var) if isinstance(var, relax.Var) else None
        if a is None or not a.blocked or data is None or data.dtype != np.float32 or static_shape(var) != out_shape or data.shape != out_shape:
            continue
        n, c, h, w = a.nchw
        as_nchw = {"NCHW": lambda d: d, "NCL": lambda d: d.reshape(n, c, h, w), "NHWC": lambda d: d.transpose(0, 3, 1, 2),
                   "NLC": lambda d: d.reshape(n, h, w, c).transpose(0, 3, 1, 2)}.get(a.layout)
        if as_nchw is not None:
            return a, as_nchw(data)
    return None


@rule(*BINARY_OPS)
def binary(rw: Rewriter, node: Node):
    """Two activations of one shape and layout; or one and a per-channel vector ``[N, C, 1, 1]``
    broadcast over H, W (a squeeze-excitation gate), either operand order where the op commutes;
    or an activation and a constant of its shape (packed NCHW4c at compile time). Per-channel
    constant forms are the elementwise rule's. Not where the layout planner runs it plain."""
    if rw.runs_plain(node):
        return None
    operands = binary_operands(rw, node)
    op = node.op.split(".")[-1]
    if operands is None:
        found = _constant_operand(rw, node)
        if found is None:
            return None
        a, data = found
        shape5 = a.shape5
        scope = rw.scope_for(shape5)
        channels = {"channels": a.channels} if op == "divide" else {}  # its padded lanes are 0 / 0
        func = kernel(kernels.binary, shape5, op, scope=scope, broadcast_channels=False, **channels)
        b = relax.const(pack_nchw4c(np.ascontiguousarray(data).astype(rw.dtype)))
        out = rw.emit_kernel(func, [rw.blocked(a, scope), b], shape5, op_info=elementwise_info(op, [node], [a.nchw, a.nchw]))
        rw.define(node.var, out, scope, a.nchw, a.layout)
        return out
    a, b, broadcast = operands
    # an operand held only plain (rules.common.read_in_place) is read in place as B; as A, swapped where the op commutes
    plain_b = not broadcast and read_in_place(rw, b)
    if not broadcast and not plain_b and node.op in COMMUTATIVE and read_in_place(rw, a):
        a, b, plain_b = b, a, True
    shape5 = a.shape5
    scope = rw.scope_for(shape5, b.shape5)
    channels = {"channels": a.channels} if op == "divide" or plain_b else {}  # its padded lanes are 0 / 0
    # a channel window of a wider map (a slice of whole blocks) is read in place: its slice kernel goes
    first, a_view = rw.blocked_view(a, scope)
    second, b_view = (b.plain, ()) if plain_b else rw.blocked_view(b, scope) if not broadcast else (rw.blocked(b, scope), ())
    options = {"plain_b": True} if plain_b else {}  # none: the kernel (and its cache key) as before
    options |= {name: view for name, view in (("a_view", a_view), ("b_view", b_view)) if view}
    func = kernel(kernels.binary, shape5, op, scope=scope, broadcast_channels=broadcast, **channels, **options)
    out = rw.emit_kernel(func, [first, second], shape5, op_info=elementwise_info(op, [node], [a.nchw, b.nchw]))
    rw.define(node.var, out, scope, a.nchw, a.layout)
    return out
