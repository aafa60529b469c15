"""MobileViT-v2's separable self-attention (LinearSelfAttention) after its qkv conv as exported (the
comment below): one ``separable_attention`` kernel."""

from __future__ import annotations

from primfuncs import attention

from tir_adreno.passes.graph import Graph, Node, reduce_axes, same, split_parts, static_shape
from tir_adreno.passes.kernel_index import kernel
from tir_adreno.passes.op_info import elementwise_info
from tir_adreno.passes.patterns.base import Match, Plan, no_question, pattern
from tir_adreno.passes.rewriter import Rewriter, blocked_shape

# -- separable self-attention (MobileViT-v2's LinearSelfAttention) ---------------------------------
#
# From the qkv conv's map ``x`` ``[B, 1 + 2 d, P, N]`` as exported (opset 17):
#
#     split [1, d, d] along channels -> q, k, v;  scores = softmax(q, axis=-1)
#     ctx = sum(k * scores, axis=-1, keepdims)       (the multiply in either order)
#     out = relu(v) * broadcast_to(ctx, v.shape)     (or the multiply broadcasting ctx itself)
#
# runs as one ``separable_attention`` kernel reading ``x``; every other spelling (another user of
# q, k, v, the scores or ctx; no relu; other split sizes) stays with the split, softmax and
# broadcast rules.


def _binary_with(g: Graph, node: Node | None, op: str, var) -> Node | None:
    """``node`` when it is ``op`` of ``var`` and one other value (either order), else None."""
    if node is None or node.op != op or len(node.args) != 2 or not any(same(a, var) for a in node.args):
        return None
    return node


def _other(node: Node, var):
    return node.args[1] if same(node.args[0], var) else node.args[0]


def _match_separable(g: Graph, node: Node, nchw):
    """The separable attention pattern from split ``node`` of the map ``nchw``: (d, nodes), the
    last node the output, else None."""
    sizes = split_parts(node, nchw)
    users = g.users(node.var)
    if sizes is None or len(sizes) != 3 or sizes[0] != 1 or sizes[1] != sizes[2] or len(users) != 3:
        return None
    parts = {u.index: u for u in users if u.op == "tuple_get_item"}
    if sorted(parts) != [0, 1, 2]:
        return None
    d = sizes[1]
    q, k, v = parts[0], parts[1], parts[2]
    soft = g.sole_user(q.var)
    if soft is None or soft.op != "relax.nn.softmax" or int(soft.attrs.axis) % 4 != 3:
        return None
    weighted = _binary_with(g, g.sole_user(soft.var), "relax.multiply", soft.var)
    if weighted is None or not same(_other(weighted, soft.var), k.var) or g.sole_user(k.var) is not weighted:
        return None
    total = g.sole_user(weighted.var)
    if total is None or total.op != "relax.sum" or not total.attrs.keepdims or reduce_axes(total) != (3,):
        return None
    relu = g.sole_user(v.var)
    if relu is None or relu.op != "relax.nn.relu":
        return None
    nodes = [q, k, v, soft, weighted, total, relu]
    ctx = total.var
    spread = g.sole_user(total.var)
    if spread is not None and spread.op == "relax.broadcast_to" and static_shape(spread.var) == static_shape(v.var):
        nodes.append(spread)
        ctx = spread.var
    out = _binary_with(g, g.sole_user(ctx), "relax.multiply", ctx)
    if out is None or not same(_other(out, ctx), relu.var) or g.sole_user(relu.var) is not out or static_shape(out.var) != (nchw[0], d, *nchw[2:]):
        return None
    return d, nodes + [out]


def _match(g: Graph, node: Node) -> Match | None:
    """The pattern (:func:`_match_separable`) from split ``node`` of a static NCHW map."""
    nchw = static_shape(node.args[0])
    found = _match_separable(g, node, nchw) if nchw is not None and len(nchw) == 4 else None
    return Match(node, {"found": found}) if found is not None else None


@pattern("relax.split", match=_match, plan=no_question, before=("split",))
def separable_attention(rw: Rewriter, plan: Plan):
    """MobileViT-v2's separable self-attention after its qkv conv (the comment above): one
    kernel, else None."""
    node = plan.match.anchor
    x = rw.activation(node.args[0])
    if x is None or x.layout != "NCHW":
        return None
    d, nodes = plan.match.found
    n, c, h, w = x.nchw
    out_nchw = (n, d, h, w)
    out5 = blocked_shape(out_nchw)
    scope = rw.scope_for(x.shape5, out5)
    func = kernel(attention.separable_attention, x.shape5, c, d, 0, 1, 1 + d, scope=scope)
    info = elementwise_info("separable_attention", [node, *nodes], [x.nchw], head_dim=d)
    info["output"] = list(out_nchw)
    out = rw.emit_kernel(func, [rw.blocked(x, scope)], out5, op_info=info)
    for m in nodes:
        m.fused = True
    rw.define(nodes[-1].var, out, scope, out_nchw)
    return out

