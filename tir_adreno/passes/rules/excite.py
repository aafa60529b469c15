"""Squeeze-excitation: the global average pool of a feature map and the two 1x1 convs on the pooled
``[N, C, 1, 1]`` vector (each with its bias, folded linear steps and activation: ``act`` after the
first, the ``sigmoid``/``hardsigmoid`` gate after the second) as one ``excitation`` kernel instead
of three launches. The pool is taken when the pooled vector's only user is the first conv
(:func:`pooled_excitation`); else the two convs alone (:func:`excitation`). A pool whose only user
is a 1x1 conv too big for one work group (a classifier head's) is one ``pooled_pointwise`` kernel
with that conv, spread over work groups that each pool the small map. The gate multiply
``x * gate[n, c]`` goes into the conv that is its only user (:func:`gated_conv2d`: the projection
conv reads its input times the gate), so an SE block adds one launch to the network. On a wide GPU
the depthwise conv whose output the SE block pools computes it too (:func:`depthwise_excitation`:
one launch writes the depthwise output and the gate), so the SE block adds none."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from tvm import relax

from primfuncs import excite

from tir_adreno.passes.activations import clip_fields, match_activation
from tir_adreno.passes.affine import linear_step
from tir_adreno.passes.convs import as_conv_node, conv_geometry, conv_layer, conv_operands, sole_conv_reader
from tir_adreno.passes.graph import Node, const, dtype, same, static_shape
from tir_adreno.passes.kernel_index import kernel
from tir_adreno.passes.op_info import FLOAT32_ATTR, elementwise_info, epilogue_info
from tir_adreno.passes.rewriter import Rewriter, Value, blocked_shape
from tir_adreno.passes.rules.base import rule
from tir_adreno.passes.rules.conv import Tail, conv_tail, emit_conv2d
from tir_adreno.passes.rules.elementwise import binary_operands
from tir_adreno.strategy import conv as conv_strategy
from tir_adreno.strategy import pool as pool_strategy
from tir_adreno.strategy.packing import pack_bias, pack_oihw4o


def _vector_pointwise(node: Node | None, var) -> np.ndarray | None:
    """The OIHW weights of ``node`` when it is a plain 1x1 conv (no groups, and no padding) on
    ``var``, an NCHW ``[N, C, 1, 1]`` float32 tensor; else None."""
    operands = conv_operands(node) if node is not None and node.op == "relax.nn.conv2d" else None
    shape = static_shape(var) if operands is not None and operands.layout == "NCHW" and same(node.args[0], var) else None
    if shape is None or len(shape) != 4 or dtype(var) != "float32":
        return None
    g = conv_geometry(node, shape, operands.weights.shape)
    if (g.h, g.w, g.kh, g.kw, g.groups, g.oh, g.ow) != (1, 1, 1, 1, 1, 1, 1):
        return None
    return operands.weights


def _padded(w: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """The 2-d float32 ``w`` zero padded to ``(rows, cols)``."""
    out = np.zeros((rows, cols), np.float32)
    out[: w.shape[0], : w.shape[1]] = w
    return out


def _constants(fc1: Tail, fc2: Tail, c4: int, o4: int) -> list:
    """The kernel's weight and bias arguments (``primfuncs.excite``'s layouts)."""
    hidden = fc1.w.shape[0]
    return [relax.const(_padded(fc1.w[:, :, 0, 0], hidden, 4 * c4)), relax.const(fc1.bias.astype(np.float32)),
            relax.const(_padded(fc2.w[:, :, 0, 0].T, hidden, 4 * o4)), relax.const(pack_bias(fc2.bias.astype(np.float32)))]


def _scratch(n: int, c4: int, pixels: int, hidden: int, schedule: dict) -> list:
    """``excitation_split``'s scratch arguments, constants each call owns: the work groups'
    partial sums (float32 even in half storage: pinned by ``FLOAT32_ATTR``), filled with
    ``excite.PARTIAL_SENTINEL``, and the tickets, zero (each launch leaves them so for the next)."""
    slices = excite.split_slices(c4, pixels, schedule["channel_blocks"], schedule["pixel_slices"])
    unwritten = np.full((n, slices, hidden), excite.PARTIAL_SENTINEL, np.int32).view(np.float32)
    return [relax.const(unwritten), relax.const(np.zeros((n,), np.int32))]


@rule("relax.mean", "relax.nn.adaptive_avg_pool2d")
def pooled_excitation(rw: Rewriter, node: Node):
    """A global average pool whose only user is fc1 -> act -> fc2 -> gate: one kernel, else None."""
    x = rw.activation(node.args[0]) if _global_average(node) else None
    if x is None or x.layout != "NCHW":
        return None
    fc1 = rw.graph.sole_user(node.var)
    out = _excite(rw, x, fc1, node.var)
    if out is None and pool_strategy.is_wide(rw.profile):  # a classifier head: its GEMV pools the map
        out = head_gemv(rw, x, node.var, [node])
    if out is None:
        out = _pooled_pointwise(rw, x, fc1, node.var)
    if out is not None:
        fc1.fused = True
    return out


@rule("relax.nn.conv2d")
def excitation(rw: Rewriter, node: Node):
    """fc1 (``node``) -> act -> fc2 -> gate on a pooled vector: one kernel, else None (the conv rule's)."""
    # The input's Value is made on first use in the layout asked for: look only at NCHW vectors.
    x = rw.activation(node.args[0]) if _vector_pointwise(node, node.args[0]) is not None else None
    if x is None or x.layout != "NCHW":
        return None
    out = _excite(rw, x, node, node.args[0])
    if out is None and pool_strategy.is_wide(rw.profile):  # a classifier's conv on the vector: the head GEMV
        out = head_gemv(rw, x, node.args[0], [])
    return out


@rule("relax.nn.conv2d")
def depthwise_excitation(rw: Rewriter, node: Node):
    """A depthwise conv (multiplier 1; its tail: bias, batch norm, activation) whose value a global
    average pool reads that fc1 -> act -> fc2 -> gate follow: one kernel writing the depthwise
    output and the gate where ``strategy.pool.depthwise_excitation_schedule`` says so (wide GPUs,
    float32 kernels: float32 and float16_acc32), else None with nothing fused (the conv rule's:
    the depthwise kernel, the pool rule's excitation after it). The gate multiply is left to
    :func:`gated_conv2d`, which finds both values defined."""
    try:
        geom = conv_layer(node) if rw.dtype == "float32" and str(node.attrs.data_layout) == "NCHW" else None
    except ValueError:  # a conv our kernels do not take: the conv rule reports or leaves it
        return None
    if geom is None or not geom.is_depthwise or geom.o != geom.c:
        return None
    operands = conv_operands(node)
    x = rw.activation(node.args[0])
    if x is None or x.layout != "NCHW":
        return None
    fused_before = rw.graph.fused_marks()
    tail = conv_tail(rw, node, operands.weights, "NCHW")
    pool = _global_pool_of(rw, tail.last.var) if tail.residual is None else None
    fc1 = rw.graph.sole_user(pool.var) if pool is not None else None
    w1 = _vector_pointwise(fc1, pool.var) if fc1 is not None else None
    tails = _tails(rw, fc1, w1) if w1 is not None else None
    n, c, oh, ow = geom.out_shape
    schedule = (pool_strategy.depthwise_excitation_schedule(rw.profile, _macs(tails), c, oh * ow, tails[0].w.shape[0], tails[1].w.shape[0])
                if tails is not None else None)
    if schedule is None:  # the conv rule finds the tail again
        rw.graph.restore_fused(fused_before)
        return None
    pool.fused = fc1.fused = True
    fc1, fc2 = tails
    hidden, out_channels = int(fc1.w.shape[0]), int(fc2.w.shape[0])
    d5, g5 = blocked_shape(geom.out_shape), blocked_shape((n, out_channels, 1, 1))
    out_scope = rw.scope_for(d5, g5)  # where the excitation kernel would read the map
    scope = rw.input_scope(x, out_scope)
    dw_epilogue = replace(tail.epilogue, bias=True)  # the kernel always adds its Bias_dw
    func = kernel(excite.depthwise_excitation, x.nchw, tuple(tail.w.shape), hidden, out_channels, strides=geom.strides,
                  padding=geom.padding, dilation=geom.dilation, dw_epilogue=dw_epilogue, activation=fc1.activation,
                  gate=fc2.activation, scope=scope, out_scope=out_scope, **_bounds(fc1, fc2), **schedule)
    consts = [relax.const(pack_oihw4o(tail.w.astype(np.float32))), relax.const(pack_bias(tail.bias.astype(np.float32))),
              *_constants(fc1, fc2, d5[1], g5[1])]
    func = func.with_attr(FLOAT32_ATTR, (len(consts) + 1,))  # the partial sums (after X and the constants)
    consts += _scratch(n, d5[1], oh * ow, hidden, schedule)
    info = elementwise_info("depthwise_excitation", [node, tail.last, fc2.last], [x.nchw], hidden=hidden,
                            strides=geom.strides, padding=geom.padding, dilation=geom.dilation,
                            depthwise={"weight": [c, 1, geom.kh, geom.kw], "epilogue": epilogue_info(dw_epilogue)},
                            fc1=epilogue_info(fc1.epilogue), fc2=epilogue_info(fc2.epilogue))
    info["output"] = [list(geom.out_shape), [n, out_channels, 1, 1]]
    d, g = rw.emit_kernel_outputs(func, [rw.blocked(x, scope), *consts], [d5, g5], op_info=info)
    rw.define(tail.last.var, d, out_scope, geom.out_shape)
    rw.define(fc2.last.var, g, out_scope, (n, out_channels, 1, 1))
    return d


def _global_pool_of(rw: Rewriter, var) -> Node | None:
    """The global average pool (:func:`_global_average`) among ``var``'s users, else None."""
    return next((u for u in rw.graph.users(var) if u.op in ("relax.mean", "relax.nn.adaptive_avg_pool2d")
                 and same(u.args[0], var) and _global_average(u)), None)


def _global_average(node: Node) -> bool:
    """Whether ``node`` is the mean over H and W of an NCHW tensor, keeping the dims."""
    shape = static_shape(node.var)
    if shape is None or len(shape) != 4 or shape[2:] != (1, 1):
        return False
    a = node.attrs
    if node.op == "relax.mean":
        return a.axis is not None and sorted(int(i) % 4 for i in a.axis) == [2, 3] and bool(a.keepdims)
    return str(a.layout) == "NCHW" and (not a.out_layout or str(a.out_layout) == "NCHW")


def _excite(rw: Rewriter, x: Value, fc1_node: Node | None, vector) -> relax.Var | None:
    """The excitation kernel on ``x`` (a feature map, or the ``[N, C, 1, 1]`` vector itself) of the
    convs from ``fc1_node`` on ``vector`` (the mean of ``x``), else None with nothing fused."""
    w1 = _vector_pointwise(fc1_node, vector)
    if w1 is None:
        return None
    fused_before = rw.graph.fused_marks()
    tails = _tails(rw, fc1_node, w1)
    n, c, h, w = x.nchw
    schedule = (pool_strategy.excitation_schedule(rw.profile, _macs(tails), c, h * w, tails[0].w.shape[0], tails[1].w.shape[0])
                if tails is not None else None)
    if schedule is None:  # the conv rule finds the tails again: un-fuse what the search took
        rw.graph.restore_fused(fused_before)
        return None
    fc1, fc2 = tails
    out_channels = fc2.w.shape[0]
    out5 = blocked_shape((n, out_channels, 1, 1))
    scope = rw.scope_for(x.shape5, out5)
    split = "channel_blocks" in schedule  # a wide GPU's: spread over work groups, with scratch
    func = kernel(excite.excitation_split if split else excite.excitation, x.shape5, c, fc1.w.shape[0], out_channels,
                  activation=fc1.activation, gate=fc2.activation, scope=scope, **_bounds(fc1, fc2), **schedule)
    info = elementwise_info("excitation", [fc1_node, fc2.last], [x.nchw], hidden=int(fc1.w.shape[0]),
                            fc1=epilogue_info(fc1.epilogue), fc2=epilogue_info(fc2.epilogue))
    info["output"] = [n, int(out_channels), 1, 1]
    consts = _constants(fc1, fc2, x.shape5[1], out5[1])
    if split:
        func, consts = func.with_attr(FLOAT32_ATTR, (len(consts) + 1,)), consts + _scratch(n, x.shape5[1], h * w, fc1.w.shape[0], schedule)
    out = rw.emit_kernel(func, [rw.blocked(x, scope), *consts], out5, op_info=info)
    rw.define(fc2.last.var, out, scope, (n, out_channels, 1, 1))
    return out


def _pooled_pointwise(rw: Rewriter, x: Value, conv: Node | None, vector) -> relax.Var | None:
    """The ``pooled_pointwise`` kernel: the pool of the map ``x`` and ``conv`` (a 1x1 conv on its
    mean ``vector``, with its tail, no residual) where ``strategy.pool.pooled_conv_schedule`` says
    so; else None with nothing fused."""
    w = _vector_pointwise(conv, vector)
    if w is None or x.nchw[2:] == (1, 1):
        return None
    fused_before = rw.graph.fused_marks()
    tail = conv_tail(rw, conv, w, "NCHW")
    n, c, h, wd = x.nchw
    out_channels = int(w.shape[0])
    schedule = pool_strategy.pooled_conv_schedule(rw.profile, c, h * wd, out_channels) if tail.residual is None else None
    if schedule is None:  # the conv rule finds the tail again
        rw.graph.restore_fused(fused_before)
        return None
    out5 = blocked_shape((n, out_channels, 1, 1))
    scope = rw.scope_for(x.shape5, out5)
    one = clip_fields(tail.clip_bounds)
    func = kernel(excite.pooled_pointwise, x.shape5, c, out_channels, activation=tail.activation, scope=scope,
                  bounds=(one.get("clip_min", 0.0), one.get("clip_max", 6.0)), **schedule)
    info = elementwise_info("pooled_pointwise", [conv, tail.last], [x.nchw], fc=epilogue_info(tail.epilogue))
    info["output"] = [n, out_channels, 1, 1]
    consts = [relax.const(_padded(tail.w[:, :, 0, 0], 4 * out5[1], 4 * x.shape5[1])),
              relax.const(_padded(tail.bias.astype(np.float32)[None], 1, 4 * out5[1])[0])]
    out = rw.emit_kernel(func, [rw.blocked(x, scope), *consts], out5, op_info=info)
    rw.define(tail.last.var, out, scope, (n, out_channels, 1, 1))
    return out


def _vector_form(shape, n: int, c: int) -> int | None:
    """The channel axis of ``shape`` when it is the ``[N, C]`` vector as ``[N, C, 1, 1]``,
    ``[N, C]`` or ``[N, 1, 1, C]`` (the same NCHW4c tensor), else None."""
    return {(n, c, 1, 1): 1, (n, c): 1, (n, 1, 1, c): 3}.get(tuple(shape or ()))


def _head_chain(rw: Rewriter, var, n: int, c: int):
    """What follows the ``[N, C]`` vector ``var`` up to the classifier's 1x1 conv or Linear that
    reads it, through views (reshape, permute) of the vector, at most one layer norm over its
    channels (constant gamma and beta) with the per-channel steps and the activation after it:
    (nodes taken, ``(epsilon, scale, shift, activation, bounds)`` or None, the consumer as a 1x1
    conv node on an ``[N, C, 1, 1]`` stand-in var, its OIHW weights), else None."""
    g, nodes, norm = rw.graph, [], None
    while (user := g.sole_user(var)) is not None:
        axis = _vector_form(static_shape(var), n, c)
        if axis is None or dtype(var) != "float32":
            return None
        if user.op in ("relax.reshape", "relax.permute_dims") and _vector_form(static_shape(user.var), n, c) is not None:
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
        w = _vector_pointwise(user, var)
        if w is None:
            return None
        return nodes + [user], norm, user, w
    return None


def head_gemv(rw: Rewriter, x: Value, var, taken: list) -> relax.Var | None:
    """A wide GPU's classifier head as one ``pooled_pointwise`` kernel (``strategy.pool.head_gemv_schedule``):
    ``var`` (the mean of the map ``x``, or ``x``'s own ``[N, C]`` vector) through the chain of
    :func:`_head_chain` (views, a layer norm with its activation) to the 1x1 conv or Linear that
    reads it, with that conv's tail (bias, activation); ``taken``: the nodes ``var`` came from
    (the pool), marked fused with the rest. Else None with nothing fused."""
    n, c, h, wd = x.nchw
    found = _head_chain(rw, var, n, c)
    if found is None:
        return None
    nodes, norm, conv, w = found
    fused_before = rw.graph.fused_marks()
    tail = conv_tail(rw, conv, w, "NCHW")
    out_channels = int(w.shape[0])
    schedule = pool_strategy.head_gemv_schedule(rw.profile, c, h * wd, out_channels) if tail.residual is None else None
    if schedule is None:
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
        consts = [relax.const(_padded(v.astype(np.float32)[None], 1, 4 * x.shape5[1])[0]) for v in (scale, shift)]
    func = kernel(excite.pooled_pointwise, x.shape5, c, out_channels, activation=tail.activation, scope=scope,
                  bounds=(one.get("clip_min", 0.0), one.get("clip_max", 6.0)), norm=vnorm, **schedule)
    info = elementwise_info("pooled_pointwise", [*taken, *nodes, tail.last], [x.nchw], fc=epilogue_info(tail.epilogue),
                            **({} if vnorm is None else {"norm": {"epsilon": vnorm.epsilon, "activation": vnorm.activation}}))
    info["output"] = [n, out_channels, 1, 1]
    consts += [relax.const(_padded(tail.w[:, :, 0, 0], 4 * out5[1], 4 * x.shape5[1])),
               relax.const(_padded(tail.bias.astype(np.float32)[None], 1, 4 * out5[1])[0])]
    out = rw.emit_kernel(func, [rw.blocked(x, scope), *consts], out5, op_info=info)
    rw.define(tail.last.var, out, scope, (n, out_channels, 1, 1), tail.layout)
    return out


def _tails(rw: Rewriter, node: Node, w1: np.ndarray) -> tuple[Tail, Tail] | None:
    """The tails of fc1 (``node``) and of the 1x1 conv that is its value's only user (marked fused),
    neither with a residual; else None."""
    fc1 = conv_tail(rw, node, w1, "NCHW")
    fc2_node = rw.graph.sole_user(fc1.last.var) if fc1.residual is None else None
    w2 = _vector_pointwise(fc2_node, fc1.last.var)
    if w2 is None:
        return None
    fc2_node.fused = True
    fc2 = conv_tail(rw, fc2_node, w2, "NCHW")
    return None if fc2.residual is not None else (fc1, fc2)


def _macs(tails: tuple[Tail, Tail]) -> int:
    """The multiply-adds of the two 1x1 convs per sample."""
    return int(sum(t.w.shape[0] * t.w.shape[1] for t in tails))


def _bounds(fc1: Tail, fc2: Tail) -> dict:
    """The factory's clip bounds of the two activations (the defaults where one is no clip)."""
    one, two = (clip_fields(t.clip_bounds) for t in (fc1, fc2))
    return dict(bounds=(one.get("clip_min", 0.0), one.get("clip_max", 6.0)),
                gate_bounds=(two.get("clip_min", 0.0), two.get("clip_max", 6.0)))


@rule("relax.multiply")
def gated_conv2d(rw: Rewriter, node: Node):
    """``x * gate`` (``gate`` a per-channel ``[N, C, 1, 1]`` activation, either operand order) whose
    only user is a conv our conv rule takes as the kernel that reads the gate
    (``strategy.conv.fuse_gate``): that conv, reading ``x * gate`` itself; else None (the
    multiply runs apart, ``elementwise.binary``). The multiply's value never exists: its only
    reader is the conv, marked fused here."""
    operands = binary_operands(rw, node)
    if operands is None or not operands[2]:
        return None
    x, gate, _ = operands
    reader = sole_conv_reader(rw.graph, node.var, x.nchw)
    if reader is None:
        return None
    conv, geom = reader
    if not conv_strategy.fuse_gate(geom, rw.precision, rw.profile, rw.records):
        return None
    conv.fused = True
    return emit_conv2d(rw, conv, x, gate)
