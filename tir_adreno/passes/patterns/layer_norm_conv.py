"""A layer norm over the channels folded into the dense 1x1 conv that alone reads it (ConvNeXt's and
EdgeNeXt's pwconv1, a Linear over the channels run as one): no kernel of its own, the conv reads x
and normalizes (``primfuncs.conv.norm``), where ``strategy.fusion.can_fuse("layer_norm", ...)``
says so; else the layer norm rule's kernel runs."""

from __future__ import annotations

import numpy as np

from tir_adreno.passes.conv_emit import emit_conv2d, tokens_as_nhwc
from tir_adreno.passes.convs import as_conv_node, conv_geometry, conv_operands, sole_conv_reader
from tir_adreno.passes.graph import TO_NCHW, Node, const, same
from tir_adreno.passes.patterns.base import Match, Plan, pattern
from tir_adreno.passes.rewriter import Rewriter, Value
from tir_adreno.passes.rules.common import layer_norm_operands
from tir_adreno.strategy.fusion import can_fuse, folds_norms


def _match(g, node: Node) -> Match | None:
    """A layer norm whose output one node reads (the reader and the norm's operands are checked in
    ``emit``: a token map's geometry is the rewriter's)."""
    return Match(node) if g.sole_user(node.var) is not None else None


def _plan(match: Match, profile, records, precision) -> Plan | None:
    """Where norms fold at all (``strategy.fusion.folds_norms``); the conv's own answer needs its
    geometry: ``emit`` asks ``can_fuse("layer_norm", ...)``."""
    return Plan(match) if folds_norms(profile, precision) else None


@pattern("relax.nn.layer_norm", match=_match, plan=_plan, before=("layer_norm",))
def layer_norm_conv(rw: Rewriter, plan: Plan):
    """The conv reading the layer norm of its input folded in, else None (the norm's kernel runs)."""
    node = plan.match.anchor
    found = layer_norm_operands(rw, node)
    if found is None:
        return None
    x, x_var, layout_, gamma, beta = found
    return _fold_into_conv(rw, node, x, x_var, layout_, gamma, beta)


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
    source = x_var if layout_ == "NHWC" else tokens_as_nhwc(rw, x)
    return as_conv_node(user, source, "NHWC", w.T[:, :, None, None]), [user]


def _fold_into_conv(rw: Rewriter, node: Node, x: Value, x_var, layout_: str, gamma, beta):
    """Layer norm ``node`` of ``x`` folded into the 1x1 conv that alone reads it (:func:`_norm_reader`)
    when ``strategy.fusion.can_fuse("layer_norm", ...)`` says so: the conv's output, else None (the norm's kernel runs)."""
    found = _norm_reader(rw, node, x, x_var, layout_)
    operands = conv_operands(found[0]) if found is not None else None
    if operands is None:
        return None
    conv, replaced = found
    try:
        geom = conv_geometry(conv, x.nchw, operands.weights.shape)
    except ValueError:
        return None
    if can_fuse("layer_norm", geom, rw.profile, rw.precision, rw.records) is None:
        return None
    for m in replaced:
        m.fused = True
    norm = (float(node.attrs.epsilon), np.asarray(gamma, np.float64).reshape(-1), np.asarray(beta, np.float64).reshape(-1))
    return emit_conv2d(rw, conv, x, norm=norm)
