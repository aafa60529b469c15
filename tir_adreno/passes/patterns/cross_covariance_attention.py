"""Attention on a map's tokens as exported: EdgeNeXt's transposed (cross-covariance) attention,
EfficientViT's ReLU linear attention (``patterns.linear_attention``) and MobileViT-v2's separable
self-attention (``patterns.separable_attention``).

From the ``qkv`` Linear's output, tokens ``[B, L, 3 * heads * d]`` (NCHW4c of the map):

    reshape [B, L, 3, heads, d] -> permute_dims (2, 0, 3, 4, 1) -> split 3 along axis 0 -> squeeze:
    q, k, v [B, heads, d, L]; q and k L2-normalized along L (x / max(sqrt(sum(x * x)), eps));
    attn = softmax((q @ permute(k, (0, 1, 3, 2))) * temperature[heads, 1, 1], axis=-1)
    out = permute_dims(attn @ v, (0, 3, 1, 2)) -> reshape [B, L, heads * d]

runs as two kernels (:mod:`primfuncs.attention`) on the ``qkv`` map itself: ``xca_weights`` (the
normalized ``q.k^T``, temperature and softmax: a ``[B, heads, d, d]`` buffer) and ``xca_apply``
(``attn @ v`` written as the NCHW4c map of ``out``). The reshapes, permutes, split and squeezes are
views of channel ranges, planned away; every other spelling stays with the generic rules. On a
wide GPU (``strategy.attention.attention_schedule``) the statistics kernel (``xca_weights``,
``linear_kv``) is split in two: partial sums over token slices on many work groups (a float32
buffer), then a kernel adding them in slice order.
"""

from __future__ import annotations

from tvm import relax

from primfuncs import attention

from tir_adreno.passes.graph import Graph, Node, const, permute_axes, reduce_axes, same, scalar, static_shape
from tir_adreno.passes.kernel_index import kernel
from tir_adreno.passes.op_info import elementwise_info
from tir_adreno.passes.patterns.base import Match, Plan, pattern
from tir_adreno.passes.rewriter import Rewriter, blocked_shape
from tir_adreno.strategy.attention import attention_schedule


def _xca_match(g: Graph, node: Node) -> Match | None:
    """The XCA pattern (:func:`_match`) from reshape ``node`` of tokens ``[B, L, C]``."""
    shape = static_shape(node.args[0])
    found = _match(g, node, shape[2], shape[1]) if shape is not None and len(shape) == 3 else None
    return Match(node, {"found": found, "batch": shape[0]}) if found is not None else None


def _xca_plan(match: Match, profile, records, precision) -> Plan:
    """The statistics kernel split over token slices on a wide GPU (``strategy.attention.attention_schedule``), or not."""
    tokens = static_shape(match.anchor.args[0])[1]
    return Plan(match, {"split": attention_schedule(profile, match.batch * match.found[0], tokens)})


def _l2_normalized(g: Graph, var) -> tuple[Node, float, list[Node]] | None:
    """``var / broadcast(max(sqrt(sum(var * var, axis=-1, keepdims)), eps))`` (``F.normalize`` along
    the last axis as exported): (the divide, eps, the nodes), else None."""
    users = list({id(u): u for u in g.users(var)}.values())  # x * x uses x twice
    square = next((u for u in users if u.op == "relax.multiply" and all(same(a, var) for a in u.args)), None)
    div = next((u for u in users if u.op == "relax.divide" and same(u.args[0], var)), None)
    if len(users) != 2 or square is None or div is None:
        return None
    total = g.sole_user(square.var)
    if total is None or total.op != "relax.sum" or not total.attrs.keepdims or reduce_axes(total) != (len(static_shape(var)) - 1,):
        return None
    root = g.sole_user(total.var)
    bound = g.sole_user(root.var) if root is not None and root.op == "relax.sqrt" else None
    if bound is None or bound.op != "relax.maximum" or not same(bound.args[0], root.var):
        return None
    eps = scalar(bound.args[1])
    nodes = [square, total, root, bound]
    denominator = bound
    spread = g.sole_user(bound.var)
    if spread is not None and spread.op == "relax.broadcast_to":
        nodes.append(spread)
        denominator = spread
    if eps is None or not eps >= 0 or not same(div.args[1], denominator.var):
        return None
    return div, eps, nodes + [div]


def _match(g: Graph, node: Node, channels: int, tokens: int):
    """The XCA pattern from reshape ``node``: (heads, d, eps, temperature, nodes, where xca_apply's
    nodes start), the last node the output, else None."""
    shape = static_shape(node.var)
    if shape is None or len(shape) != 5 or shape[1] != tokens or shape[2] != 3 or 3 * shape[3] * shape[4] != channels:
        return None
    heads, d = shape[3], shape[4]
    perm = g.sole_user(node.var)
    split = g.sole_user(perm.var) if permute_axes(perm) == (2, 0, 3, 4, 1) else None
    if split is None or split.op != "relax.split" or int(split.attrs.axis) != 0:
        return None
    fields = getattr(split.var.ty, "fields", None) or []  # three parts of one q, k or v each
    part_shapes = [static_shape(relax.Var("part", ty)) for ty in fields]
    getters = g.users(split.var)
    if part_shapes != [(1, shape[0], heads, d, tokens)] * 3 or len(getters) != 3 or any(u.op != "tuple_get_item" for u in getters):
        return None
    qkv = {}
    for getter in getters:
        squeeze = g.sole_user(getter.var)
        if squeeze is None or squeeze.op != "relax.squeeze" or reduce_axes(squeeze) != (0,):
            return None
        qkv[getter.index] = (getter, squeeze)
    if sorted(qkv) != [0, 1, 2]:
        return None
    q, k = (_l2_normalized(g, qkv[i][1].var) for i in (0, 1))
    if q is None or k is None or q[1] != k[1]:
        return None
    k_t = g.sole_user(k[0].var)
    scores = g.sole_user(k_t.var) if permute_axes(k_t) == (0, 1, 3, 2) else None
    if scores is None or scores.op != "relax.matmul" or not same(scores.args[0], q[0].var) or not same(scores.args[1], k_t.var):
        return None
    scaled = g.sole_user(scores.var)
    temperature = const(scaled.args[1] if same(scaled.args[0], scores.var) else scaled.args[0]) if scaled is not None and scaled.op == "relax.multiply" else None
    if temperature is None or temperature.size not in (1, heads) or temperature.shape not in ((), (1,), (heads, 1, 1), (1, heads, 1, 1)):
        return None
    soft = g.sole_user(scaled.var)
    if soft is None or soft.op != "relax.nn.softmax" or int(soft.attrs.axis) % 4 != 3:
        return None
    mixed = g.sole_user(soft.var)
    v = qkv[2][1]
    if mixed is None or mixed.op != "relax.matmul" or not same(mixed.args[0], soft.var) or not same(mixed.args[1], v.var):
        return None
    back = g.sole_user(mixed.var)
    out = g.sole_user(back.var) if permute_axes(back) == (0, 3, 1, 2) else None
    if out is None or out.op != "relax.reshape" or static_shape(out.var) != (shape[0], tokens, heads * d):
        return None
    nodes = [perm, split, *[n for pair in qkv.values() for n in pair], *q[2], *k[2], k_t, scores, scaled, soft, mixed, back, out]
    return heads, d, q[1], temperature, nodes, len(nodes) - 3  # the last 3: xca_apply's


@pattern("relax.reshape", match=_xca_match, plan=_xca_plan, before=("linear_attention", "reshape"))
def cross_covariance_attention(rw: Rewriter, plan: Plan):
    """EdgeNeXt's XCA on tokens ``[B, L, C]`` of a map (the module docstring): two kernels (three on
    a wide GPU), else None."""
    node = plan.match.anchor
    x = rw.values.get(node.args[0]) if isinstance(node.args[0], relax.Var) else None
    if x is None or x.layout != "NLC" or not x.blocked:
        return None
    n, c, h, w = x.nchw
    heads, d, eps, temperature, nodes, first = plan.match.found
    scope = rw.scope_for(x.shape5)
    src = rw.blocked(x, scope)
    temps = relax.const(temperature.reshape(-1).repeat(heads // temperature.size).astype(rw.dtype))
    info = elementwise_info("xca_weights", [node, *nodes[:first]], [x.nchw], heads=heads, head_dim=d, epsilon=eps)
    info["output"] = [n, heads, d, d]
    split = plan.decision["split"]
    if split is None:
        weights = kernel(attention.xca_weights, x.shape5, c, heads, d, 0, heads * d, eps, scope=scope)
        attn = rw.emit_kernel(weights, [src, temps], (n, heads, d, d), op_info=info)
    else:  # a wide GPU: partial sums over token slices (float32 whatever the storage), then the softmax
        k = split["slices"]
        partials = kernel(attention.xca_partials, x.shape5, c, heads, d, 0, heads * d, k, scope=scope)
        p = rw.emit_float32(partials, [src], (n * heads, k, d, 2 * d + 1), info)
        attn = rw.emit_kernel(kernel(attention.xca_finish, n, heads, d, k, eps), [p, temps], (n, heads, d, d), op_info=info)
    out_nchw = (n, heads * d, h, w)
    out5 = blocked_shape(out_nchw)
    apply = kernel(attention.xca_apply, x.shape5, c, heads, d, 2 * heads * d, scope=scope)
    info = elementwise_info("xca_apply", nodes[first:], [x.nchw], heads=heads, head_dim=d)
    info["output"] = list(out_nchw)
    out = rw.emit_kernel(apply, [src, attn], out5, op_info=info)
    for m in nodes:
        m.fused = True
    rw.define(nodes[-1].var, out, scope, out_nchw, "NLC")
    return out
