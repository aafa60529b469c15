"""EfficientViT's ReLU linear attention (LiteMLA) on a map as exported (the comment below):
:data:`linear_attention` from its reshape, and on a wide GPU :data:`concat_linear_attention` from
the channel concat of the maps it reads."""

from __future__ import annotations

from tvm import relax

from primfuncs import attention

from tir_adreno.passes.graph import Graph, Node, ints_of, permute_axes, same, scalar, static_shape
from tir_adreno.passes.kernel_index import kernel
from tir_adreno.passes.op_info import elementwise_info
from tir_adreno.passes.patterns.base import Match, Plan, pattern
from tir_adreno.passes.rewriter import Rewriter, blocked_shape
from tir_adreno.strategy import attention as attention_strategy  # read at call time: benchmarks switch it
from tir_adreno.strategy.attention import attention_schedule

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
# ``linear_attention`` (``strategy.attention.linear_attention_schedule``), which also reads the two maps
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
    if permute_axes(perm) != (0, 1, 3, 2):
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
    kv = g.sole_user(k_t.var) if permute_axes(k_t) == (0, 1, 3, 2) else None
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
    eps = scalar(den.args[1] if same(den.args[0], last.var) else den.args[0]) if den is not None and den.op == "relax.add" else None
    div = g.sole_user(num.var)
    if eps is None or not eps >= 0 or div is None or div.op != "relax.divide" or not same(div.args[0], num.var) or not same(div.args[1], den.var):
        return None
    nodes += [num, last, den, div]
    back = g.sole_user(_through_casts(g, div.var, nodes))
    flat = g.sole_user(back.var) if permute_axes(back) == (0, 1, 3, 2) else None
    if flat is None or flat.op != "relax.reshape" or static_shape(flat.var) is None or static_shape(flat.var)[:2] != (shape[0], heads * d):
        return None
    return heads, d, eps, nodes + [back, flat], first


def _linear_match(g: Graph, node: Node) -> Match | None:
    """The pattern (:func:`_match_linear`) from reshape ``node`` of a static NCHW map, its output the map's ``[N, heads * d, H, W]``."""
    shape = static_shape(node.args[0])
    if shape is None or len(shape) != 4:
        return None
    n, c, h, w = shape
    found = _match_linear(g, node, c, h * w)
    if found is None or static_shape(found[3][-1].var) != (n, found[0] * found[1], h, w):
        return None
    return Match(node, {"found": found})


def _linear_plan(match: Match, profile, records, precision) -> Plan:
    """One launch (``strategy.attention.linear_attention_schedule``), else the statistics split over
    token slices on a wide GPU (``attention_schedule``) or not."""
    n, _, h, w = static_shape(match.anchor.args[0])
    heads, d = match.found[:2]
    return Plan(match, {"one": attention_strategy.linear_attention_schedule(profile, d, h * w), "split": attention_schedule(profile, n * heads, h * w)})


def _concat_match(g: Graph, node: Node) -> Match | None:
    """A channel concat of static NCHW maps of one size, each holding whole heads, whose only
    reader is the pattern's reshape (:func:`_match_linear`)."""
    parts = node.args[0]
    if not isinstance(parts, relax.Tuple) or node.attrs.axis is None or int(node.attrs.axis) % 4 != 1:
        return None
    shapes = [static_shape(f) for f in parts.fields]
    if not 1 <= len(shapes) <= attention.LINEAR_ATTENTION_MAX_MAPS or any(s is None or len(s) != 4 for s in shapes):
        return None
    n, _, h, w = shapes[0]
    channels = sum(s[1] for s in shapes)
    reshape = g.sole_user(node.var)
    if any((s[0], *s[2:]) != (n, h, w) for s in shapes) or reshape is None or reshape.op != "relax.reshape":
        return None
    found = _match_linear(g, reshape, channels, h * w)
    if found is None:
        return None
    heads, d, _, nodes, _ = found
    if any(s[1] % (3 * d) for s in shapes) or static_shape(nodes[-1].var) != (n, heads * d, h, w):
        return None
    return Match(node, {"found": (reshape, found), "tokens": h * w})


def _concat_plan(match: Match, profile, records, precision) -> Plan | None:
    """The one-launch kernel (``strategy.attention.linear_attention_schedule``), else None."""
    one = attention_strategy.linear_attention_schedule(profile, match.found[1][1], match.tokens)
    return Plan(match, one) if one is not None else None


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


@pattern("relax.concat", match=_concat_match, plan=_concat_plan, before=("concat",))
def concat_linear_attention(rw: Rewriter, plan: Plan):
    """On a wide GPU (``strategy.attention.linear_attention_schedule``), EfficientViT's channel concat of
    the qkv conv's map and the multi-scale aggregation's whose only reader is ReLU linear attention
    (the comment above), each map holding whole heads: one ``linear_attention`` reading the maps
    (no concat launch), else None."""
    node, (reshape, (heads, d, eps, nodes, _)) = plan.match.anchor, plan.match.found
    maps = [rw.activation(f) for f in node.args[0].fields]
    if any(m is None or m.layout != "NCHW" for m in maps):
        return None
    return _one_launch(rw, maps, heads, d, eps, [node, reshape, *nodes], plan.decision["threads"])


@pattern("relax.reshape", match=_linear_match, plan=_linear_plan, before=("reshape",))
def linear_attention(rw: Rewriter, plan: Plan):
    """EfficientViT's ReLU linear attention on a map (the comment above): two kernels (three on a
    wide GPU, one where ``strategy.attention.linear_attention_schedule`` allows), else None."""
    node = plan.match.anchor
    x = rw.values.get(node.args[0]) if isinstance(node.args[0], relax.Var) else None
    if x is None or x.layout != "NCHW" or not x.blocked:
        return None
    n, c, h, w = x.nchw
    heads, d, eps, nodes, first = plan.match.found
    last = nodes[-1]
    out_nchw = (n, heads * d, h, w)
    one = plan.decision["one"]
    if one is not None:
        return _one_launch(rw, [x], heads, d, eps, [node, *nodes], one["threads"])
    scope = rw.scope_for(x.shape5)
    src = rw.blocked(x, scope)
    info = elementwise_info("linear_kv", [node, *nodes[:first]], [x.nchw], heads=heads, head_dim=d)
    info["output"] = [n, heads, d, d + 1]
    split = plan.decision["split"]
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
