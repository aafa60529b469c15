"""A wide GPU's classifier head as one ``pooled_pointwise`` launch (``strategy.excite.head_gemv_schedule``):
the ``[N, C]`` vector, from a global average pool of a map, a 1x1 conv's vector input, an ``[N, C]``
matmul input or a layer norm over a vector's channels, through views (reshape, permute) and at
most one layer norm over its channels with its activation, to the 1x1 conv or Linear that reads
it, with that conv's tail (bias, activation). Tried on each of those anchors after the
excitation patterns (a pool read by an SE block is theirs) and before ``pooled_pointwise`` and the
single-op rules (matmul, layer norm, conv)."""

from __future__ import annotations

import numpy as np
from tvm import relax

from primfuncs import excite

from tir_adreno.passes.activations import clip_fields, match_activation
from tir_adreno.passes.affine import linear_step
from tir_adreno.passes.conv_emit import conv_tail, nc_value
from tir_adreno.passes.convs import as_conv_node
from tir_adreno.passes.graph import Graph, Node, const, dtype, same, static_shape
from tir_adreno.passes.kernel_index import kernel
from tir_adreno.passes.op_info import elementwise_info, epilogue_info
from tir_adreno.passes.patterns.base import Match, Plan, pattern
from tir_adreno.passes.patterns.excite_parts import global_average, padded, vector_pointwise
from tir_adreno.passes.rewriter import Rewriter, Value, blocked_shape
from tir_adreno.passes.rules.common import layer_norm_operands
from tir_adreno.strategy import excite as excite_strategy


def _matmul_vector(node: Node) -> bool:
    """Whether matmul ``node`` is ``[N, K] @ W`` with a constant float32 ``W [K, M]``."""
    a, w_expr = node.args
    w = const(w_expr)
    a_shape = static_shape(a)
    if w is None or w.dtype != np.float32 or w.ndim != 2 or a_shape is None or dtype(a) != "float32":
        return False
    return len(a_shape) == 2


def _vector_source(node: Node):
    """(the ``[N, C]`` vector's var, ``(N, C, H, W)`` of the map or vector the kernel reads) of head
    anchor ``node`` from the graph: a global average pool, a plain 1x1 conv on a vector, an
    ``[N, K]`` matmul with constant weights, or a layer norm over a vector's channels; else None."""
    if node.op in ("relax.mean", "relax.nn.adaptive_avg_pool2d"):
        shape = static_shape(node.args[0]) if global_average(node) else None
        return (node.var, shape) if shape is not None and len(shape) == 4 else None
    if node.op == "relax.nn.conv2d":
        return (node.args[0], static_shape(node.args[0])) if vector_pointwise(node, node.args[0]) is not None else None
    if node.op == "relax.matmul":
        return (node.args[0], (*static_shape(node.args[0]), 1, 1)) if _matmul_vector(node) else None
    shape = static_shape(node.args[0])  # a layer norm over the channels (layer_norm_operands' NC, NCHW, NHWC)
    if shape is None:
        return None
    form = (len(shape), tuple(int(a) % len(shape) for a in node.attrs.axes))
    nchw = {(2, (1,)): (*shape, 1, 1), (4, (1,)): shape, (4, (3,)): (shape[0], shape[-1], *shape[1:3])}.get(form)
    return (node.args[0], nchw) if nchw is not None and nchw[2:] == (1, 1) else None


def _match(g, node: Node) -> Match | None:
    """A head (:func:`head_chain`) from its anchor (:func:`_vector_source`): the ``chain``, the
    ``nchw`` the kernel reads."""
    source = _vector_source(node)
    if source is None:
        return None
    var, nchw = source
    chain = head_chain(g, var, *nchw[:2])
    return Match(node, {"chain": chain, "nchw": nchw}) if chain is not None else None


def _plan(match: Match, profile, records, precision) -> Plan | None:
    """The kernel's keywords (``strategy.excite.head_gemv_schedule``: wide GPUs only), else None."""
    n, c, h, w = match.nchw
    schedule = excite_strategy.head_gemv_schedule(profile, c, h * w, int(match.chain[3].shape[0]))
    return Plan(match, schedule) if schedule is not None else None


def _source(rw: Rewriter, node: Node):
    """(the map or vector :class:`Value`, the ``[N, C]`` vector's var, the nodes taken before it) of
    head anchor ``node``, else None."""
    if node.op in ("relax.mean", "relax.nn.adaptive_avg_pool2d", "relax.nn.conv2d"):
        var = node.var if node.op != "relax.nn.conv2d" else node.args[0]
        x = rw.activation(node.args[0])
        if x is None or x.layout != "NCHW":
            return None
        return x, var, [node] if node.op != "relax.nn.conv2d" else []
    if node.op == "relax.matmul":
        vector = nc_value(rw, node.args[0])
        return (vector, node.args[0], []) if vector is not None else None
    found = layer_norm_operands(rw, node)
    if found is None or found[0].nchw[2:] != (1, 1):  # a classifier's norm: in its head GEMV
        return None
    return found[0], found[1], []


@pattern("relax.mean", "relax.nn.adaptive_avg_pool2d", "relax.nn.conv2d", "relax.matmul", "relax.nn.layer_norm", match=_match,
         plan=_plan, before=("pooled_pointwise", "depthwise_excitation", "depthwise_pointwise", "layer_norm_conv", "layer_norm_gemm",
                             "softmax_attention", "conv2d", "matmul", "layer_norm", "pool", "reduction"), name="head_gemv")
def emit_head_gemv(rw: Rewriter, plan: Plan):
    found = _source(rw, plan.match.anchor)
    if found is None or found[0].nchw != tuple(plan.match.nchw):  # the planned shape, else no plan for it
        return None
    if not found[0].blocked and found[0].plain is not None:
        # held plain only: the kernel reads NCHW4c, so it would pack the vector or map (and a plain
        # reader of its output unpack that); the plain kernels read it in place (the GEMM on an
        # ``[N, K]``, through a class token's gather too; a row mean then the GEMM on a map)
        return None
    return head_gemv(rw, *found, plan.match.chain, plan.decision)


def vector_form(shape, n: int, c: int) -> int | None:
    """The channel axis of ``shape`` when it is the ``[N, C]`` vector as ``[N, C, 1, 1]``,
    ``[N, C]`` or ``[N, 1, 1, C]`` (the same NCHW4c tensor), else None."""
    return {(n, c, 1, 1): 1, (n, c): 1, (n, 1, 1, c): 3}.get(tuple(shape or ()))


def head_chain(g: Graph, var, n: int, c: int):
    """What follows the ``[N, C]`` vector ``var`` up to the classifier's 1x1 conv or Linear that
    reads it, through views (reshape, permute) of the vector, at most one layer norm over its
    channels (constant gamma and beta) with the per-channel steps and the activation after it:
    (nodes taken, ``(epsilon, scale, shift, activation, bounds)`` or None, the consumer as a 1x1
    conv node on an ``[N, C, 1, 1]`` stand-in var, its OIHW weights), else None."""
    nodes, norm = [], None
    while (user := g.sole_user(var)) is not None:
        axis = vector_form(static_shape(var), n, c)
        if axis is None or dtype(var) != "float32":
            return None
        if user.op in ("relax.reshape", "relax.permute_dims") and vector_form(static_shape(user.var), n, c) is not None:
            nodes, var = nodes + [user], user.var
            continue
        if user.op == "relax.nn.layer_norm" and norm is None and same(user.args[0], var):
            rank = len(static_shape(var))
            gamma = const(user.args[1]) if bool(user.attrs.scale) else np.ones(c)
            beta = const(user.args[2]) if bool(user.attrs.center) else np.zeros(c)
            if (tuple(int(a) % rank for a in user.attrs.axes) != (axis,) or gamma is None or beta is None
                    or gamma.size != c or beta.size != c):
                return None
            scale, shift, taken, last = np.asarray(gamma, np.float64).reshape(c), np.asarray(beta, np.float64).reshape(c), [user], user.var
            while (step_node := g.sole_user(last)) is not None and (step := linear_step(step_node, last, c, "NC" if rank == 2 else "NCHW")) is not None:
                scale, shift, taken, last = scale * step[0], shift * step[0] + step[1], taken + [step_node], step_node.var
            matched = match_activation(g, last)
            activation, bounds = (matched[0], matched[1]) if matched is not None else (None, None)
            taken += matched[2] if matched is not None else []
            norm = (float(user.attrs.epsilon), scale, shift, activation, bounds)
            nodes, var = nodes + taken, taken[-1].var
            continue
        stand_in = relax.Var("head_vector", relax.TensorType([n, c, 1, 1], "float32"))
        if user.op == "relax.matmul" and same(user.args[0], var) and axis == 1 and len(static_shape(var)) == 2:
            w = const(user.args[1])
            if w is None or w.dtype != np.float32 or w.ndim != 2 or w.shape[0] != c:
                return None
            conv_node = as_conv_node(user, stand_in, "NCHW", w.T[:, :, None, None])
            return nodes + [user], norm, conv_node, np.ascontiguousarray(w.T[:, :, None, None])
        w = vector_pointwise(user, var)
        if w is None:
            return None
        return nodes + [user], norm, user, w
    return None


def head_gemv(rw: Rewriter, x: Value, var, taken: list, chain, schedule: dict) -> relax.Var | None:
    """A wide GPU's classifier head as one ``pooled_pointwise`` kernel with the plan's ``schedule``
    (``strategy.excite.head_gemv_schedule``): ``var`` (the mean of the map ``x``, or ``x``'s own
    ``[N, C]`` vector) through ``chain`` (:func:`head_chain`: views, a layer norm with its
    activation) to the 1x1 conv or Linear that reads it, with that conv's tail (bias, activation);
    ``taken``: the nodes ``var`` came from (the pool), marked fused with the rest. Else None with
    nothing fused (a residual)."""
    n, c, h, wd = x.nchw
    nodes, norm, conv, w = chain
    fused_before = rw.graph.fused_marks()
    tail = conv_tail(rw, conv, w, "NCHW")
    out_channels = int(w.shape[0])
    if tail.residual is not None:
        rw.graph.restore_fused(fused_before)
        return None
    for m in (*taken, *nodes):
        m.fused = True
    out5 = blocked_shape((n, out_channels, 1, 1))
    scope = rw.scope_for(x.shape5, out5)
    one = clip_fields(tail.clip_bounds)
    vnorm = None
    consts = []
    if norm is not None:
        eps, scale, shift, activation, bounds = norm
        b = clip_fields(bounds)
        vnorm = excite.VectorNorm(eps, activation, (b.get("clip_min", 0.0), b.get("clip_max", 6.0)))
        consts = [relax.const(padded(v.astype(np.float32)[None], 1, 4 * x.shape5[1])[0]) for v in (scale, shift)]
    func = kernel(excite.pooled_pointwise, x.shape5, c, out_channels, activation=tail.activation, scope=scope,
                  bounds=(one.get("clip_min", 0.0), one.get("clip_max", 6.0)), norm=vnorm, **schedule)
    info = elementwise_info("pooled_pointwise", [*taken, *nodes, tail.last], [x.nchw], fc=epilogue_info(tail.epilogue),
                            **({} if vnorm is None else {"norm": {"epsilon": vnorm.epsilon, "activation": vnorm.activation}}))
    info["output"] = [n, out_channels, 1, 1]
    consts += [relax.const(padded(tail.w[:, :, 0, 0], 4 * out5[1], 4 * x.shape5[1])),
               relax.const(padded(tail.bias.astype(np.float32)[None], 1, 4 * out5[1])[0])]
    out = rw.emit_kernel(func, [rw.blocked(x, scope), *consts], out5, op_info=info)
    rw.define(tail.last.var, out, scope, (n, out_channels, 1, 1), tail.layout)
    return out
