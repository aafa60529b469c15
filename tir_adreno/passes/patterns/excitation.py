"""Squeeze-excitation: the global average pool of a feature map and the two 1x1 convs on the pooled
``[N, C, 1, 1]`` vector (each with its bias, folded linear steps and activation: ``act`` after the
first, the ``sigmoid``/``hardsigmoid`` gate after the second) as one ``excitation`` kernel instead
of three launches. The pool is taken when the pooled vector's only user is the first conv
(:data:`pooled_excitation`); else the two convs alone (:data:`excitation`). A pool whose only user
is a 1x1 conv too big for one work group (a classifier head's) is one ``pooled_pointwise`` kernel
with that conv (:data:`pooled_pointwise`), spread over work groups that each pool the small map.
Schedules: ``strategy.excite``. The gate multiply is the ``gated_conv`` pattern's, the depthwise conv
computing the pool too ``depthwise_excitation``'s, a wide GPU's classifier head ``head_gemv``'s."""

from __future__ import annotations

import numpy as np
from tvm import relax

from primfuncs import excite

from tir_adreno.passes.activations import clip_fields
from tir_adreno.passes.conv_emit import conv_tail
from tir_adreno.passes.graph import Node, static_shape
from tir_adreno.passes.kernel_index import kernel
from tir_adreno.passes.op_info import FLOAT32_ATTR, elementwise_info, epilogue_info
from tir_adreno.passes.patterns.base import Match, Plan, graph_only, pattern
from tir_adreno.passes.patterns.excite_parts import (Sizes, clip_bounds, excite_constants, excite_tails, global_average,
                                                     padded, split_scratch, vector_pointwise)
from tir_adreno.passes.rewriter import Rewriter, Value, blocked_shape
from tir_adreno.strategy import excite as excite_strategy
from tir_adreno.strategy.fusion import fuses


def _pooled_conv(g, node: Node) -> Match | None:
    """A global average pool of a static map (``nchw``) whose only user is a plain 1x1 conv on the
    pooled vector (``fc1``, its ``weights``)."""
    nchw = static_shape(node.args[0]) if global_average(node) else None
    fc1 = g.sole_user(node.var) if nchw is not None and len(nchw) == 4 else None
    w1 = vector_pointwise(fc1, node.var) if fc1 is not None else None
    return Match(node, {"fc1": fc1, "weights": w1, "nchw": nchw}) if w1 is not None else None


def _with_sizes(g, match: Match | None) -> Match | None:
    """``match`` with the ``sizes`` of the excitation from its ``fc1`` (:func:`excite_tails`, from the graph), else None."""
    tails = graph_only(g, excite_tails, match.fc1, match.weights) if match is not None else None
    return Match(match.anchor, match.parts | {"sizes": Sizes.of(match.nchw, tails)}) if tails is not None else None


def _pooled_excitation(g, node: Node) -> Match | None:
    """The pool (:func:`_pooled_conv`) and fc1 -> act -> fc2 after it."""
    return _with_sizes(g, _pooled_conv(g, node))


def _vector_excitation(g, node: Node) -> Match | None:
    """fc1 -> act -> fc2 from a plain 1x1 conv on an NCHW ``[N, C, 1, 1]`` vector (the anchor)."""
    w1 = vector_pointwise(node, node.args[0])
    return _with_sizes(g, Match(node, {"fc1": node, "weights": w1, "nchw": static_shape(node.args[0])}) if w1 is not None else None)


def _excitation_plan(match: Match, profile, records, precision) -> Plan | None:
    """The excitation kernel's keywords (``strategy.excite.excitation_schedule``) with kernel
    fusion on (``strategy.fusion.fuses``), else None."""
    s = match.sizes
    schedule = excite_strategy.excitation_schedule(profile, s.macs, s.channels, s.pixels, s.hidden, s.out_channels) if fuses(profile) else None
    return Plan(match, schedule) if schedule is not None else None


def _pooled_pointwise_plan(match: Match, profile, records, precision) -> Plan | None:
    """``pooled_pointwise``'s keywords (``strategy.excite.pooled_conv_schedule``) for a pool of a
    map (not of a vector) with kernel fusion on, else None."""
    n, c, h, w = match.nchw
    if (h, w) == (1, 1) or not fuses(profile):
        return None
    schedule = excite_strategy.pooled_conv_schedule(profile, c, h * w, int(match.weights.shape[0]))
    return Plan(match, schedule) if schedule is not None else None


def _emit_pooled(rw: Rewriter, plan: Plan, emit):
    """``emit(rw, x, conv, vector, schedule)`` of the NCHW map ``x`` the matched pool reads, its mean
    ``vector`` and the conv that reads it, that conv marked fused when it emits; else None."""
    node, conv = plan.match.anchor, plan.match.fc1
    x = rw.activation(node.args[0])
    out = emit(rw, x, conv, node.var, plan.decision) if x is not None and x.layout == "NCHW" else None
    if out is not None:
        conv.fused = True
    return out


@pattern("relax.mean", "relax.nn.adaptive_avg_pool2d", match=_pooled_excitation, plan=_excitation_plan,
         before=("head_gemv", "pooled_pointwise", "pool", "reduction"))
def pooled_excitation(rw: Rewriter, plan: Plan):
    """A global average pool whose only user is fc1 -> act -> fc2 -> gate: one kernel, else None."""
    return _emit_pooled(rw, plan, emit_excitation)


@pattern("relax.nn.conv2d", match=_vector_excitation, plan=_excitation_plan, before=("head_gemv", "depthwise_excitation", "depthwise_pointwise", "conv2d"))
def excitation(rw: Rewriter, plan: Plan):
    """fc1 (the anchor) -> act -> fc2 -> gate on a pooled vector: one kernel, else None (the conv rule's)."""
    node = plan.match.anchor
    # The input's Value is made on first use in the layout asked for: look only at NCHW vectors.
    x = rw.activation(node.args[0])
    if x is None or x.layout != "NCHW":
        return None
    return emit_excitation(rw, x, node, node.args[0], plan.decision)


@pattern("relax.mean", "relax.nn.adaptive_avg_pool2d", match=_pooled_conv, plan=_pooled_pointwise_plan, before=("pool", "reduction"))
def pooled_pointwise(rw: Rewriter, plan: Plan):
    """A global average pool whose only user is a 1x1 conv (no excitation after it): one
    ``pooled_pointwise`` kernel where ``strategy.excite.pooled_conv_schedule`` said so, else None."""
    return _emit_pooled(rw, plan, emit_pooled_pointwise)


def emit_excitation(rw: Rewriter, x: Value, fc1_node: Node | None, vector, schedule: dict) -> relax.Var | None:
    """The excitation kernel on ``x`` (a feature map, or the ``[N, C, 1, 1]`` vector itself) of the
    convs from ``fc1_node`` on ``vector`` (the mean of ``x``) with the plan's ``schedule``, else
    None with nothing fused (a tail with a residual)."""
    w1 = vector_pointwise(fc1_node, vector)
    if w1 is None:
        return None
    fused_before = rw.graph.fused_marks()
    tails = excite_tails(rw, fc1_node, w1)
    n, c, h, w = x.nchw
    if tails is None:  # the conv rule finds the tails again: un-fuse what the search took
        rw.graph.restore_fused(fused_before)
        return None
    fc1, fc2 = tails
    out_channels = fc2.w.shape[0]
    out5 = blocked_shape((n, out_channels, 1, 1))
    scope = rw.scope_for(x.shape5, out5)
    split = "channel_blocks" in schedule  # a wide GPU's: spread over work groups, with scratch
    func = kernel(excite.excitation_split if split else excite.excitation, x.shape5, c, fc1.w.shape[0], out_channels,
                  activation=fc1.activation, gate=fc2.activation, scope=scope, **clip_bounds(fc1, fc2), **schedule)
    info = elementwise_info("excitation", [fc1_node, fc2.last], [x.nchw], hidden=int(fc1.w.shape[0]),
                            fc1=epilogue_info(fc1.epilogue), fc2=epilogue_info(fc2.epilogue))
    info["output"] = [n, int(out_channels), 1, 1]
    consts = excite_constants(fc1, fc2, x.shape5[1], out5[1])
    if split:
        func, consts = func.with_attr(FLOAT32_ATTR, (len(consts) + 1,)), consts + split_scratch(n, x.shape5[1], h * w, fc1.w.shape[0], schedule)
    out = rw.emit_kernel(func, [rw.blocked(x, scope), *consts], out5, op_info=info)
    rw.define(fc2.last.var, out, scope, (n, out_channels, 1, 1))
    return out


def emit_pooled_pointwise(rw: Rewriter, x: Value, conv: Node | None, vector, schedule: dict) -> relax.Var | None:
    """The ``pooled_pointwise`` kernel with the plan's ``schedule``: the pool of the map ``x`` and
    ``conv`` (a 1x1 conv on its mean ``vector``, with its tail, no residual); else None with nothing fused."""
    w = vector_pointwise(conv, vector)
    if w is None:
        return None
    fused_before = rw.graph.fused_marks()
    tail = conv_tail(rw, conv, w, "NCHW")
    n, c, h, wd = x.nchw
    out_channels = int(w.shape[0])
    if tail.residual is not None:  # the conv rule finds the tail again
        rw.graph.restore_fused(fused_before)
        return None
    out5 = blocked_shape((n, out_channels, 1, 1))
    scope = rw.scope_for(x.shape5, out5)
    one = clip_fields(tail.clip_bounds)
    func = kernel(excite.pooled_pointwise, x.shape5, c, out_channels, activation=tail.activation, scope=scope,
                  bounds=(one.get("clip_min", 0.0), one.get("clip_max", 6.0)), **schedule)
    info = elementwise_info("pooled_pointwise", [conv, tail.last], [x.nchw], fc=epilogue_info(tail.epilogue))
    info["output"] = [n, out_channels, 1, 1]
    consts = [relax.const(padded(tail.w[:, :, 0, 0], 4 * out5[1], 4 * x.shape5[1])),
              relax.const(padded(tail.bias.astype(np.float32)[None], 1, 4 * out5[1])[0])]
    out = rw.emit_kernel(func, [rw.blocked(x, scope), *consts], out5, op_info=info)
    rw.define(tail.last.var, out, scope, (n, out_channels, 1, 1))
    return out
