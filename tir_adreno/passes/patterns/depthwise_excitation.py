"""On a wide GPU the depthwise conv whose output a squeeze-excitation block pools computes the pool
and the excitation too (:data:`depthwise_excitation`: one launch writes the depthwise output and
the gate, ``primfuncs.excite.depthwise_excitation``), so the SE block adds no launch; the gate
multiply is left to the ``gated_conv`` pattern, which finds both values defined."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from tvm import relax

from primfuncs import excite
from primfuncs._common import BUFFER

from tir_adreno.passes.conv_emit import conv_tail
from tir_adreno.passes.convs import conv_layer, conv_operands
from tir_adreno.passes.graph import Graph, Node, same
from tir_adreno.passes.kernel_index import kernel
from tir_adreno.passes.map_boundary import plain_input, plain_input_expr
from tir_adreno.passes.op_info import FLOAT32_ATTR, elementwise_info, epilogue_info
from tir_adreno.passes.patterns.base import Match, Plan, graph_only, pattern
from tir_adreno.passes.patterns.excite_parts import (Sizes, clip_bounds, excite_constants, excite_tails, global_average,
                                                     split_scratch, vector_pointwise)
from tir_adreno.passes.rewriter import Rewriter, blocked_shape
from tir_adreno.strategy import excite as excite_strategy
from tir_adreno.strategy.fusion import fuses
from tir_adreno.strategy.packing import pack_bias, pack_oihw4o
from tir_adreno.strategy.precision import kernel_dtype
from tir_adreno.strategy.width import is_wide


def _match(g, node: Node) -> Match | None:
    """A depthwise conv with multiplier 1 on an NCHW activation, its tail (folding into the conv) and
    the SE block after it (:func:`_se_block`, from the graph), with the excitation's ``sizes``."""
    try:
        geom = conv_layer(node) if str(node.attrs.data_layout) == "NCHW" else None
    except ValueError:  # a conv our kernels do not take: the conv rule reports or leaves it
        return None
    if geom is None or not geom.is_depthwise or geom.o != geom.c:
        return None
    found = graph_only(g, _se_block, node, conv_operands(node).weights)
    return Match(node, {"geometry": geom, "sizes": Sizes.of(geom.out_shape, found[3])}) if found is not None else None


def _plan(match: Match, profile, records, precision) -> Plan | None:
    """Wide GPUs, fusion on, float32 kernels (float32 and float16_acc32), where
    ``strategy.excite.depthwise_excitation_schedule`` gives the fused kernel's keywords, else None."""
    if not (fuses(profile) and is_wide(profile) and kernel_dtype(precision) == "float32"):
        return None
    s = match.sizes
    schedule = excite_strategy.depthwise_excitation_schedule(profile, s.macs, s.channels, s.pixels, s.hidden, s.out_channels)
    return Plan(match, schedule) if schedule is not None else None


def _se_block(rw: Rewriter, node: Node, w):
    """The tail of depthwise conv ``node`` (weights ``w``) with no residual, the global average
    pool among its value's users and the excitation tails of the 1x1 conv that alone reads the
    pool (:func:`excite_tails`): (tail, pool, fc1 node, (fc1, fc2)), else None. Marks what it takes
    but the pool and fc1 fused."""
    tail = conv_tail(rw, node, w, "NCHW")
    pool = global_pool_of(rw.graph, tail.last.var) if tail.residual is None else None
    fc1 = rw.graph.sole_user(pool.var) if pool is not None else None
    w1 = vector_pointwise(fc1, pool.var) if fc1 is not None else None
    tails = excite_tails(rw, fc1, w1) if w1 is not None else None
    return (tail, pool, fc1, tails) if tails is not None else None


@pattern("relax.nn.conv2d", match=_match, plan=_plan, before=("depthwise_pointwise", "conv2d"))
def depthwise_excitation(rw: Rewriter, plan: Plan):
    """A depthwise conv (multiplier 1; its tail: bias, batch norm, activation) whose value a global
    average pool reads that fc1 -> act -> fc2 -> gate follow: one kernel writing the depthwise
    output and the gate with the plan's schedule (``strategy.excite.depthwise_excitation_schedule``:
    wide GPUs, float32 kernels: float32 and float16_acc32), else None with nothing fused (the conv
    rule's: the depthwise kernel, the pool's excitation pattern after it)."""
    node, geom, schedule = plan.match.anchor, plan.match.geometry, plan.decision
    x = rw.activation(node.args[0])
    if x is None or x.layout != "NCHW":
        return None
    fused_before = rw.graph.fused_marks()
    found = _se_block(rw, node, conv_operands(node).weights)
    if found is None:  # a residual: the conv rule finds the tail again
        rw.graph.restore_fused(fused_before)
        return None
    tail, pool, fc1, tails = found
    n, c, oh, ow = geom.out_shape
    pool.fused = fc1.fused = True
    fc1, fc2 = tails
    hidden, out_channels = int(fc1.w.shape[0]), int(fc2.w.shape[0])
    d5, g5 = blocked_shape(geom.out_shape), blocked_shape((n, out_channels, 1, 1))
    out_scope = rw.scope_for(d5, g5)  # where the excitation kernel would read the map
    # a map the depthwise conv alone would read in place (held plain: a gather's map, tokens seen
    # as their map) is read so here too (its kernel reads X as the direct depthwise conv does): no pack
    plain = plain_input(rw, node)
    scope = BUFFER if plain is not None else rw.input_scope(x, out_scope)
    dw_epilogue = replace(tail.epilogue, bias=True)  # the kernel always adds its Bias_dw
    func = kernel(excite.depthwise_excitation, x.nchw, tuple(tail.w.shape), hidden, out_channels, strides=geom.strides,
                  padding=geom.padding, dilation=geom.dilation, dw_epilogue=dw_epilogue, activation=fc1.activation,
                  gate=fc2.activation, scope=scope, out_scope=out_scope, **clip_bounds(fc1, fc2), **schedule,
                  **({} if plain is None else {"data_layout": plain[0]}))
    consts = [relax.const(pack_oihw4o(tail.w.astype(np.float32))), relax.const(pack_bias(tail.bias.astype(np.float32))),
              *excite_constants(fc1, fc2, d5[1], g5[1])]
    func = func.with_attr(FLOAT32_ATTR, (len(consts) + 1,))  # the partial sums (after X and the constants)
    consts += split_scratch(n, d5[1], oh * ow, hidden, schedule)
    info = elementwise_info("depthwise_excitation", [node, tail.last, fc2.last], [x.nchw], hidden=hidden,
                            strides=geom.strides, padding=geom.padding, dilation=geom.dilation,
                            depthwise={"weight": [c, 1, geom.kh, geom.kw], "epilogue": epilogue_info(dw_epilogue)},
                            fc1=epilogue_info(fc1.epilogue), fc2=epilogue_info(fc2.epilogue))
    info["output"] = [list(geom.out_shape), [n, out_channels, 1, 1]]
    x_arg = plain_input_expr(rw, plain) if plain is not None else rw.blocked(x, scope)
    d, g = rw.emit_kernel_outputs(func, [x_arg, *consts], [d5, g5], op_info=info)
    rw.define(tail.last.var, d, out_scope, geom.out_shape)
    rw.define(fc2.last.var, g, out_scope, (n, out_channels, 1, 1))
    return d


def global_pool_of(g: Graph, var) -> Node | None:
    """The global average pool (:func:`global_average`) among ``var``'s users, else None."""
    return next((u for u in g.users(var) if u.op in ("relax.mean", "relax.nn.adaptive_avg_pool2d")
                 and same(u.args[0], var) and global_average(u)), None)
