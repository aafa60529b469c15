"""Attention on a map's tokens as exported: EdgeNeXt's transposed (cross-covariance) attention,
EfficientViT's ReLU linear attention (:func:`linear_attention`, below) and MobileViT-v2's separable
self-attention (:func:`separable_attention`, at the end).

From the ``qkv`` Linear's output, tokens ``[B, L, 3 * heads * d]`` (NCHW4c of the map):

    reshape [B, L, 3, heads, d] -> permute_dims (2, 0, 3, 4, 1) -> split 3 along axis 0 -> squeeze:
    q, k, v [B, heads, d, L]; q and k L2-normalized along L (x / max(sqrt(sum(x * x)), eps));
    attn = softmax((q @ permute(k, (0, 1, 3, 2))) * temperature[heads, 1, 1], axis=-1)
    out = permute_dims(attn @ v, (0, 3, 1, 2)) -> reshape [B, L, heads * d]

runs as two kernels (:mod:`primfuncs.attention`) on the ``qkv`` map itself: ``xca_weights`` (the
normalized ``q.k^T``, temperature and softmax: a ``[B, heads, d, d]`` buffer) and ``xca_apply``
(``attn @ v`` written as the NCHW4c map of ``out``). The reshapes, permutes, split and squeezes are
views of channel ranges, planned away; every other spelling stays with the generic rules. On a
wide GPU (``strategy.pool.attention_schedule``) the statistics kernel (``xca_weights``,
``linear_kv``) is split in two: partial sums over token slices on many work groups (a float32
buffer), then a kernel adding them in slice order.
"""

from __future__ import annotations

from tvm import relax

from primfuncs import attention

from tir_adreno.passes.graph import Graph, Node, const, ints_of, same, split_parts, static_shape
from tir_adreno.passes.kernel_index import kernel
from tir_adreno.passes.op_info import elementwise_info
from tir_adreno.passes.rewriter import Rewriter, blocked_shape
from tir_adreno.passes.rules.base import rule
from tir_adreno.strategy import pool as pool_strategy


def _axes(node: Node | None, op: str = "relax.permute_dims") -> tuple[int, ...] | None:
    if node is None or node.op != op or node.attrs.axes is None:
        return None
    return tuple(int(a) for a in node.attrs.axes)


def _scalar(expr) -> float | None:
    value = const(expr)
    return float(value.reshape(())) if value is not None and value.size == 1 else None


def _l2_normalized(g: Graph, var) -> tuple[Node, float, list[Node]] | None:
    """``var / broadcast(max(sqrt(sum(var * var, axis=-1, keepdims)), eps))`` (``F.normalize`` along
    the last axis as exported): (the divide, eps, the nodes), else None."""
    users = list({id(u): u for u in g.users(var)}.values())  # x * x uses x twice
    square = next((u for u in users if u.op == "relax.multiply" and all(same(a, var) for a in u.args)), None)
    div = next((u for u in users if u.op == "relax.divide" and same(u.args[0], var)), None)
    if len(users) != 2 or square is None or div is None:
        return None
    total = g.sole_user(square.var)
    if total is None or total.op != "relax.sum" or not total.attrs.keepdims or _axis_of(total) != (len(static_shape(var)) - 1,):
        return None
    root = g.sole_user(total.var)
    bound = g.sole_user(root.var) if root is not None and root.op == "relax.sqrt" else None
    if bound is None or bound.op != "relax.maximum" or not same(bound.args[0], root.var):
        return None
    eps = _scalar(bound.args[1])
    nodes = [square, total, root, bound]
    denominator = bound
    spread = g.sole_user(bound.var)
    if spread is not None and spread.op == "relax.broadcast_to":
        nodes.append(spread)
        denominator = spread
    if eps is None or not eps >= 0 or not same(div.args[1], denominator.var):
        return None
    return div, eps, nodes + [div]


def _axis_of(node: Node) -> tuple[int, ...] | None:
    """The non-negative axes of a reduction or squeeze ``node`` (``attrs.axis``), else None."""
    rank = len(static_shape(node.args[0]) or ())
    return tuple(int(a) % rank for a in node.attrs.axis) if node.attrs.axis is not None and rank else None


def _match(g: Graph, node: Node, channels: int, tokens: int):
    """The XCA pattern from reshape ``node``: (heads, d, eps, temperature, nodes, where xca_apply's
    nodes start), the last node the output, else None."""
    shape = static_shape(node.var)
    if shape is None or len(shape) != 5 or shape[1] != tokens or shape[2] != 3 or 3 * shape[3] * shape[4] != channels:
        return None
    heads, d = shape[3], shape[4]
    perm = g.sole_user(node.var)
    split = g.sole_user(perm.var) if _axes(perm) == (2, 0, 3, 4, 1) else None
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
        if squeeze is None or squeeze.op != "relax.squeeze" or _axis_of(squeeze) != (0,):
            return None
        qkv[getter.index] = (getter, squeeze)
    if sorted(qkv) != [0, 1, 2]:
        return None
    q, k = (_l2_normalized(g, qkv[i][1].var) for i in (0, 1))
    if q is None or k is None or q[1] != k[1]:
        return None
    k_t = g.sole_user(k[0].var)
    scores = g.sole_user(k_t.var) if _axes(k_t) == (0, 1, 3, 2) else None
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
    out = g.sole_user(back.var) if _axes(back) == (0, 3, 1, 2) else None
    if out is None or out.op != "relax.reshape" or static_shape(out.var) != (shape[0], tokens, heads * d):
        return None
    nodes = [perm, split, *[n for pair in qkv.values() for n in pair], *q[2], *k[2], k_t, scores, scaled, soft, mixed, back, out]
    return heads, d, q[1], temperature, nodes, len(nodes) - 3  # the last 3: xca_apply's


@rule("relax.reshape")
def cross_covariance_attention(rw: Rewriter, node: Node):
    """EdgeNeXt's XCA on tokens ``[B, L, C]`` of a map (the module docstring): two kernels (three on
    a wide GPU), else None."""
    x = rw.values.get(node.args[0]) if isinstance(node.args[0], relax.Var) else None
    if x is None or x.layout != "NLC" or not x.blocked:
        return None
    n, c, h, w = x.nchw
    found = _match(rw.graph, node, c, h * w)
    if found is None:
        return None
    heads, d, eps, temperature, nodes, first = found
    scope = rw.scope_for(x.shape5)
    src = rw.blocked(x, scope)
    temps = relax.const(temperature.reshape(-1).repeat(heads // temperature.size).astype(rw.dtype))
    info = elementwise_info("xca_weights", [node, *nodes[:first]], [x.nchw], heads=heads, head_dim=d, epsilon=eps)
    info["output"] = [n, heads, d, d]
    split = pool_strategy.attention_schedule(rw.profile, n * heads, h * w)
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


# -- ReLU linear attention (EfficientViT's LiteMLA) ----------------------------------------------
#
# From the map ``[B, G * 3 * d, H, W]`` of the qkv convs (each head's q, k, v consecutive):
#
#     reshape [B, G, 3 * d, L] -> permute_dims (0, 1, 3, 2) -> strided_slice (axis 3) q, k, v;
#     q, k relu'd; v padded with a column of ones (``pad``, value 1); astype (no-op casts);
#     kv = permute(k, (0, 1, 3, 2)) @ v;  out = q @ kv;  out[..., :d] / (out[..., d:] + eps)
#     -> astype -> permute_dims (0, 1, 3, 2) -> reshape [B, G * d, H, W]
#
# runs as ``linear_kv`` + ``linear_apply`` on the map (head_stride = 3 * d); on a wide GPU as one
# ``linear_attention`` (``strategy.pool.linear_attention_schedule``), which also reads the two maps
# of the channel concat before it (the qkv conv's and the multi-scale aggregation's) itself.


def _last_axis_range(node: Node | None, size: int) -> tuple[int, int] | None:
    """[begin, end) of a ``strided_slice`` of the last of 4 axes with stride 1, clamped, else None."""
    if node is None or node.op != "relax.strided_slice" or len(node.args) < 4:
        return None
    axes, begin, end = (ints_of(a) for a in node.args[1:4])
    strides = ints_of(node.args[4]) if len(node.args) > 4 else (1,)
    if axes not in ((3,), (-1,)) or strides != (1,) or begin is None or end is None:
        return None
    b = begin[0] + size if begin[0] < 0 else begin[0]
    e = min(end[0] + size if end[0] < 0 else end[0], size)
    return (b, e) if 0 <= b < e else None


def _through_casts(g: Graph, var, nodes: list):
    """The value after the no-op ``astype``s that are ``var``'s only users in a chain (appended to ``nodes``)."""
    while True:
        user = g.sole_user(var)
        if user is None or user.op != "relax.astype" or str(user.attrs.dtype) != "float32":
            return var
        nodes.append(user)
        var = user.var


def _is_pad_with_ones(g: Graph, node: Node | None, var, d: int) -> bool:
    """Whether ``node`` is the importer's ``pad`` PrimFunc appending one column of 1.0 to ``var``."""
    if node is None or node.op != "relax.call_tir" or not isinstance(node.args[1], relax.Tuple):
        return False
    fields = node.args[1].fields
    shape = static_shape(var)
    if len(fields) != 1 or not same(fields[0], var) or static_shape(node.var) != (*shape[:3], d + 1):
        return False
    prim = g.mod[node.args[0]] if g.mod is not None else None
    script = prim.script() if prim is not None else ""
    return node.args[0].name_hint.startswith("pad") and "T.float32(1.0)" in script and f"< T.int64({d})" in script


def _match_linear(g: Graph, node: Node, channels: int, tokens: int):
    """The LiteMLA pattern from reshape ``node``: (heads, d, eps, nodes, where linear_apply's nodes
    start), the last node the output, else None."""
    shape = static_shape(node.var)
    if shape is None or len(shape) != 4 or shape[3] != tokens or shape[1] * shape[2] != channels or shape[2] % 3:
        return None
    heads, d = shape[1], shape[2] // 3
    perm = g.sole_user(node.var)
    if _axes(perm) != (0, 1, 3, 2):
        return None
    parts = {}
    for u in g.users(perm.var):
        found = _last_axis_range(u, 3 * d)
        if found not in ((0, d), (d, 2 * d), (2 * d, 3 * d)):
            return None
        parts[found[0] // d] = u
    if sorted(parts) != [0, 1, 2]:
        return None
    nodes = [perm, *parts.values()]
    q_relu, k_relu = g.sole_user(parts[0].var), g.sole_user(parts[1].var)
    if q_relu is None or k_relu is None or q_relu.op != "relax.nn.relu" or k_relu.op != "relax.nn.relu":
        return None
    pad = g.sole_user(parts[2].var)
    if not _is_pad_with_ones(g, pad, parts[2].var, d):
        return None
    nodes += [q_relu, k_relu, pad]
    q, k, v = (_through_casts(g, n.var, nodes) for n in (q_relu, k_relu, pad))
    k_t = g.sole_user(k)
    kv = g.sole_user(k_t.var) if _axes(k_t) == (0, 1, 3, 2) else None
    if kv is None or kv.op != "relax.matmul" or not same(kv.args[0], k_t.var) or not same(kv.args[1], v):
        return None
    out = g.sole_user(kv.var)
    if out is None or out.op != "relax.matmul" or not same(out.args[0], q) or not same(out.args[1], kv.var):
        return None
    nodes += [k_t, kv]
    first = len(nodes)  # the nodes from here on are linear_apply's
    nodes.append(out)
    slices = {_last_axis_range(u, d + 1): u for u in g.users(out.var)}
    if set(slices) != {(0, d), (d, d + 1)}:
        return None
    num, last = slices[(0, d)], slices[(d, d + 1)]
    den = g.sole_user(last.var)
    eps = _scalar(den.args[1] if same(den.args[0], last.var) else den.args[0]) if den is not None and den.op == "relax.add" else None
    div = g.sole_user(num.var)
    if eps is None or not eps >= 0 or div is None or div.op != "relax.divide" or not same(div.args[0], num.var) or not same(div.args[1], den.var):
        return None
    nodes += [num, last, den, div]
    back = g.sole_user(_through_casts(g, div.var, nodes))
    flat = g.sole_user(back.var) if _axes(back) == (0, 1, 3, 2) else None
    if flat is None or flat.op != "relax.reshape" or static_shape(flat.var) is None or static_shape(flat.var)[:2] != (shape[0], heads * d):
        return None
    return heads, d, eps, nodes + [back, flat], first


def _one_launch(rw: Rewriter, maps: list, heads: int, d: int, eps: float, nodes: list, threads: int):
    """``linear_attention`` on ``maps`` (NCHW :class:`Value` objects, whole heads each, in order)
    standing for ``nodes`` (the last the output)."""
    n, _, h, w = maps[0].nchw
    out_nchw = (n, heads * d, h, w)
    out5 = blocked_shape(out_nchw)
    scope = rw.scope_for(*[m.shape5 for m in maps], out5)
    func = kernel(attention.linear_attention, tuple(m.shape5 for m in maps), tuple(m.channels for m in maps),
                  tuple(m.channels // (3 * d) for m in maps), d, 0, d, 2 * d, 3 * d, eps, threads=threads, scope=scope)
    info = elementwise_info("linear_attention", nodes, [m.nchw for m in maps], heads=heads, head_dim=d, epsilon=eps)
    info["output"] = list(out_nchw)
    out = rw.emit_kernel(func, [rw.blocked(m, scope) for m in maps], out5, op_info=info)
    for m in nodes:
        m.fused = True
    rw.define(nodes[-1].var, out, scope, out_nchw)
    return out


@rule("relax.concat")
def concat_linear_attention(rw: Rewriter, node: Node):
    """On a wide GPU (``strategy.pool.linear_attention_schedule``), EfficientViT's channel concat of
    the qkv conv's map and the multi-scale aggregation's whose only reader is ReLU linear attention
    (the comment above), each map holding whole heads: one ``linear_attention`` reading the maps
    (no concat launch), else None."""
    parts = node.args[0]
    if not isinstance(parts, relax.Tuple) or node.attrs.axis is None or int(node.attrs.axis) % 4 != 1:
        return None
    maps = [rw.activation(f) for f in parts.fields]
    if not 1 <= len(maps) <= attention.LINEAR_ATTENTION_MAX_MAPS or any(m is None or m.layout != "NCHW" for m in maps):
        return None
    n, _, h, w = maps[0].nchw
    channels = sum(m.channels for m in maps)
    reshape = rw.graph.sole_user(node.var)
    if any((m.nchw[0], *m.nchw[2:]) != (n, h, w) for m in maps) or reshape is None or reshape.op != "relax.reshape":
        return None
    found = _match_linear(rw.graph, reshape, channels, h * w)
    if found is None:
        return None
    heads, d, eps, nodes, _ = found
    one = pool_strategy.linear_attention_schedule(rw.profile, d, h * w)
    if one is None or any(m.channels % (3 * d) for m in maps) or static_shape(nodes[-1].var) != (n, heads * d, h, w):
        return None
    return _one_launch(rw, maps, heads, d, eps, [node, reshape, *nodes], one["threads"])


@rule("relax.reshape")
def linear_attention(rw: Rewriter, node: Node):
    """EfficientViT's ReLU linear attention on a map (the comment above): two kernels (three on a
    wide GPU, one where ``strategy.pool.linear_attention_schedule`` allows), else None."""
    x = rw.values.get(node.args[0]) if isinstance(node.args[0], relax.Var) else None
    if x is None or x.layout != "NCHW" or not x.blocked:
        return None
    n, c, h, w = x.nchw
    found = _match_linear(rw.graph, node, c, h * w)
    if found is None:
        return None
    heads, d, eps, nodes, first = found
    last = nodes[-1]
    out_nchw = (n, heads * d, h, w)
    if static_shape(last.var) != out_nchw:
        return None
    one = pool_strategy.linear_attention_schedule(rw.profile, d, h * w)
    if one is not None:
        return _one_launch(rw, [x], heads, d, eps, [node, *nodes], one["threads"])
    scope = rw.scope_for(x.shape5)
    src = rw.blocked(x, scope)
    info = elementwise_info("linear_kv", [node, *nodes[:first]], [x.nchw], heads=heads, head_dim=d)
    info["output"] = [n, heads, d, d + 1]
    split = pool_strategy.attention_schedule(rw.profile, n * heads, h * w)
    if split is None:
        kv = rw.emit_kernel(kernel(attention.linear_kv, x.shape5, c, heads, d, d, 2 * d, 3 * d, scope=scope), [src], (n, heads, d, d + 1),
                            op_info=info)
    else:  # a wide GPU: partial sums over token slices (float32 whatever the storage), then their sum
        k = split["slices"]
        partials = kernel(attention.linear_kv_partials, x.shape5, c, heads, d, d, 2 * d, k, 3 * d, scope=scope)
        p = rw.emit_float32(partials, [src], (n * heads, k, d, d + 1), info)
        kv = rw.emit_kernel(kernel(attention.linear_kv_finish, n, heads, d, k), [p], (n, heads, d, d + 1), op_info=info)
    out5 = blocked_shape(out_nchw)
    apply = kernel(attention.linear_apply, x.shape5, c, heads, d, 0, 3 * d, eps, scope=scope)
    info = elementwise_info("linear_apply", nodes[first:], [x.nchw], heads=heads, head_dim=d, epsilon=eps)
    info["output"] = list(out_nchw)
    out = rw.emit_kernel(apply, [src, kv], out5, op_info=info)
    for m in nodes:
        m.fused = True
    rw.define(last.var, out, scope, out_nchw)
    return out


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
    if total is None or total.op != "relax.sum" or not total.attrs.keepdims or _axis_of(total) != (3,):
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


@rule("relax.split")
def separable_attention(rw: Rewriter, node: Node):
    """MobileViT-v2's separable self-attention after its qkv conv (the comment above): one
    kernel, else None."""
    x = rw.activation(node.args[0])
    if x is None or x.layout != "NCHW":
        return None
    found = _match_separable(rw.graph, node, x.nchw)
    if found is None:
        return None
    d, nodes = found
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
