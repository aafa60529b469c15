"""A layer norm over the channels folded into the dense 1x1 conv that alone reads it (ConvNeXt's and
EdgeNeXt's pwconv1, a Linear over the channels run as one): no kernel of its own, the conv reads x
and normalizes (``primfuncs.conv.norm``), where ``strategy.fusion.can_fuse("layer_norm", ...)``
says so; else the layer norm rule's kernel runs."""

from __future__ import annotations

import numpy as np
from tvm import relax

from tir_adreno.passes.conv_emit import emit_conv2d, tokens_as_nhwc
from tir_adreno.passes.convs import as_conv_node, conv_geometry, conv_operands, sole_conv_reader
from tir_adreno.passes.graph import TO_NCHW, Node, const, same, static_shape
from tir_adreno.passes.patterns.base import Match, Plan, pattern
from tir_adreno.passes.rewriter import Rewriter, Value
from tir_adreno.passes.rules.common import layer_norm_operands
from tir_adreno.strategy.fusion import can_fuse, folds_norms


#: The layer norm's layouts over the channels (``rules.common.layer_norm_operands``' own) that a 1x1 conv may read.
_LAYOUTS = {(4, (3,)): "NHWC", (4, (1,)): "NCHW", (3, (2,)): "NLC"}


def _maps(shape, layout_: str) -> tuple:
    """The NCHW shapes the norm's input may be as a map: its own for NCHW and NHWC; for tokens
    ``[N, L, C]`` each ``(N, C, H, W)`` with ``H * W = L`` (which one is the rewriter's: the map
    the tokens were made from)."""
    if layout_ == "NCHW":
        return (shape,)
    if layout_ == "NHWC":
        return ((shape[0], shape[3], shape[1], shape[2]),)
    n, tokens, c = shape
    return tuple((n, c, h, tokens // h) for h in range(1, tokens + 1) if tokens % h == 0)


def _match(g, node: Node) -> Match | None:
    """A layer norm over the channels whose output the 1x1 conv ``reader`` (:func:`_norm_reader`)
    alone reads, with the ``maps`` its input may be."""
    shape = static_shape(node.args[0])
    layout_ = _LAYOUTS.get((len(shape), tuple(int(a) % len(shape) for a in node.attrs.axes))) if shape is not None else None
    if layout_ is None or g.sole_user(node.var) is None:
        return None
    maps = _maps(shape, layout_)
    # the conv's input: for tokens a stand-in of their map (here only the conv's attributes are read of it)
    stand_in = relax.Var("tokens_nhwc", relax.TensorType([shape[0], 1, *shape[1:]], "float32")) if layout_ == "NLC" else node.args[0]
    found = _norm_reader(g, node, maps[0], lambda: stand_in, layout_)
    operands = conv_operands(found[0]) if found is not None else None
    return Match(node, {"reader": found[0], "weights": operands.weights.shape, "maps": maps}) if operands is not None else None


def _plan(match: Match, profile, records, precision) -> Plan | None:
    """Where norms fold at all (``strategy.fusion.folds_norms``): the maps among the input's on
    which the reader folds the norm (``strategy.fusion.can_fuse("layer_norm", ...)``), else None."""
    if not folds_norms(profile, precision):
        return None
    return Plan(match, frozenset(nchw for nchw in match.maps if _folds(match, nchw, profile, precision, records)))


def _folds(match: Match, nchw, profile, precision, records) -> bool:
    try:
        geom = conv_geometry(match.reader, nchw, match.weights)
    except ValueError:
        return False
    return can_fuse("layer_norm", geom, profile, precision, records) is not None


@pattern("relax.nn.layer_norm", match=_match, plan=_plan, before=("layer_norm_gemm", "layer_norm"))
def layer_norm_conv(rw: Rewriter, plan: Plan):
    """The conv reading the layer norm of its input folded in, else None (the norm's kernel runs)."""
    node = plan.match.anchor
    found = layer_norm_operands(rw, node)
    if found is None:
        return None
    x, x_var, layout_, gamma, beta = found
    return _fold_into_conv(rw, node, x, x_var, layout_, gamma, beta, plan.decision)


def _norm_reader(g, node: Node, nchw, source, layout_: str):
    """The conv that alone reads layer norm ``node``'s output over the channels of a map of
    ``nchw``, as a conv node on ``source`` (its input), and the graph nodes it replaces: a conv
    after a permute back to NCHW (ConvNeXt), or on NCHW directly, or a Linear over the channels of
    NHWC or of tokens (a matmul with a constant ``[C, M]``: EdgeNeXt's pwconv1 and attention input)
    run as :func:`matmul` runs it, reading ``source()`` (asked only then); (conv node, replaced nodes), else None."""
    user = g.sole_user(node.var)
    if user is None:
        return None
    if layout_ == "NCHW" or (layout_ == "NHWC" and user.op == "relax.permute_dims"
                             and tuple(int(a) for a in user.attrs.axes or ()) == TO_NCHW):
        views = [] if layout_ == "NCHW" else [user]
        found = sole_conv_reader(g, views[-1].var if views else node.var, nchw)
        return (found[0], [*views, found[0]]) if found is not None else None
    w = const(user.args[1]) if user.op == "relax.matmul" and same(user.args[0], node.var) else None
    if layout_ not in ("NHWC", "NLC") or w is None or w.dtype != np.float32 or w.ndim != 2 or w.shape[0] != nchw[1]:
        return None
    return as_conv_node(user, source(), "NHWC", w.T[:, :, None, None]), [user]


def _fold_into_conv(rw: Rewriter, node: Node, x: Value, x_var, layout_: str, gamma, beta, folding: frozenset):
    """Layer norm ``node`` of ``x`` folded into the 1x1 conv that alone reads it (:func:`_norm_reader`)
    when ``x``'s map is one the plan found it folds on (``folding``): the conv's output, else None
    (the norm's kernel runs). Tokens or a channels-last map ``x`` held plain only (their token
    region wanted them plain: ``map_boundary.token_region``) read by a Linear keep the norm's row
    kernel, and the Linear reads its plain output: folding would cost a layout kernel for the same
    launches (a conv after a permute back to NCHW still folds: unfolded, the permute would be a gather)."""
    found = _norm_reader(rw.graph, node, x.nchw, lambda: x_var if layout_ == "NHWC" else tokens_as_nhwc(rw, x), layout_)
    operands = conv_operands(found[0]) if found is not None else None
    if operands is None or tuple(x.nchw) not in folding:
        return None
    conv, replaced = found
    if not x.blocked and replaced[0].op == "relax.matmul":
        return None
    for m in replaced:
        m.fused = True
    norm = (float(node.attrs.epsilon), np.asarray(gamma, np.float64).reshape(-1), np.asarray(beta, np.float64).reshape(-1))
    return emit_conv2d(rw, conv, x, norm=norm)
