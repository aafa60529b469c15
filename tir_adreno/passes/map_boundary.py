"""Where a conv meets tokens (issue 35, the token layout of docs/kernels.md): the decisions that let
a conv write its output as the plain buffer its token readers want, and read its input in place
from plain tokens, so no layout kernel runs at the boundary between maps and tokens.

- :func:`token_output`: a conv's value read only through token views (``reshape`` to
  ``[N, C, H * W]`` + ``permute(0, 2, 1)``, or ``permute(0, 2, 3, 1)``: channels-last, "NHWC"; any
  other ``reshape``: its own NCHW order, "NCHW") by ops that read plain tensors (our GEMM, ops left
  to upstream), or whose token region wants it plain (:func:`token_region`: the tokens' readers
  followed through the ops with a kernel in either form, a layer norm, a Linear, pixelwise ops, to
  the ops that want one form): the conv writes that plain buffer and each view is a
  ``memory.view`` of it. A dense or depthwise conv that reads the plain NCHW buffer in place is a
  reader of either form (the other readers decide; :func:`_shared_input` reads it), and a Linear
  run as a 1x1 conv on blocked tokens writes its value plain when its region wants it
  (:func:`_linear_output`).
- :func:`plain_input`: a conv's input that is plain tokens seen as a map (``permute(0, 2, 1)`` +
  ``reshape`` to ``[N, C, H, W]``, or ``permute(0, 3, 1, 2)`` of ``[N, H, W, C]``: read "NHWC"), a
  reshape of a plain tensor, or a plain NCHW tensor (a model's input: read "NCHW"): the conv reads
  it in place.

Both only decide from the graph (and which ops a rule of ours takes); whether the kernel can is the
strategy's (``strategy.conv.plain_io_plan``), which ``passes.conv_emit`` asks with these layouts.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import relax

from primfuncs.gather import view_buffer

from tir_adreno.passes import channel_groups, movement
from tir_adreno.passes.graph import SWAP_TOKENS, TO_NCHW, TO_NHWC, Node, const, dtype, ints_of, permute_axes, same, static_shape
from tir_adreno.passes.layout_plan import FLEXIBLE
from tir_adreno.passes.rewriter import Rewriter, Value
from tir_adreno.passes.token_chain import ends_plain


@dataclass(frozen=True)
class PlainOutput:
    """How a conv writes a value its token readers take plain: ``layout`` ("NHWC" or "NCHW") and
    the view nodes ``(node, shape)`` whose value is a view of that buffer (``shape`` None: a node
    only another view reads, never materialized)."""

    layout: str
    views: tuple


def _swaps_last_two(node: Node | None) -> bool:
    axes = permute_axes(node)
    return axes is not None and len(axes) >= 2 and axes == (*range(len(axes) - 2), len(axes) - 1, len(axes) - 2)


def reads_plain(rw: Rewriter, node: Node) -> bool:
    """Whether ``node`` reads its (non-map) operand in plain form: a ``matmul`` (the gemm rule), a
    transpose of the last two axes that only matmuls read (folded into the GEMM's read), a concat
    of tokens or of channels-last maps (our map concat takes channels: axis 1 of a 4-d tensor; one
    of a channel group, ``channel_groups.concat_plain``, runs plain), a split or a pixelwise op by constants the layout planner runs plain (``LayoutPlan.split_plain``,
    ``flexible_plain``) or an op no pattern or rule of ours takes."""
    if node.op == "relax.matmul" or node.op not in rw.rules:
        return node.op not in ("tuple", "tuple_get_item", "other")
    if node.op == "relax.concat":  # a channel concat runs plain in a channel group (passes.channel_groups)
        return not _on_channels(node) or channel_groups.concat_plain(rw, node)
    if node.op == "relax.split":  # the layout planner's choices (passes.layout_plan, passes.channel_groups)
        return channel_groups.split_plain(rw, node)
    if node.op in FLEXIBLE:
        return rw.plan is not None and rw.plan.flexible_plain(node)
    if _swaps_last_two(node):
        users = rw.graph.users(node.var)
        return bool(users) and rw.graph.uses.get(node.var, 0) == 1 and all(u.op == "relax.matmul" for u in users)
    return False


def _on_channels(node: Node) -> bool:
    """Whether ``node`` (a concat, split or slice) works on axis 1 of a 4-d tensor (a map's channels)."""
    rank = len(static_shape(node.var if node.op == "relax.concat" else node.args[0]) or ())
    if node.op == "relax.strided_slice":
        axis = (ints_of(node.args[1]) or (None,))[0] if len(node.args) > 1 else None
    else:
        axis = node.attrs.axis
    return rank == 4 and axis is not None and int(axis) % 4 == 1


#: Pixelwise ops: a kernel on either form (the blocked elementwise rules; ``token_elementwise``).
PIXELWISE = FLEXIBLE | {f"relax.{op}" for op in ("power", "sqrt", "exp", "log", "negative", "abs", "erf", "tanh", "rsqrt",
                                                  "nn.gelu", "nn.gelu_tanh", "nn.silu", "nn.leakyrelu")}
#: How many readers :func:`token_region` looks at before it stops (what lies further decides there).
REGION_BUDGET = 256
PLAIN, BLOCKED, FOLLOW = "plain", "blocked", "follow"


def _blocked_view(node: Node) -> bool:
    """Whether view ``node`` (a permute or reshape) is a view of a blocked value too (NCHW <-> NHWC,
    tokens <-> their map, the token swap): then its readers decide; else only the plain form has it."""
    if node.op == "relax.permute_dims":
        return permute_axes(node) in (TO_NHWC, TO_NCHW, SWAP_TOKENS)
    src, dst = static_shape(node.args[0]), static_shape(node.var)
    return src is not None and dst is not None and {len(src), len(dst)} <= {3, 4} and src[0] == dst[0]


def _reads_in_place(rw: Rewriter, conv: Node, var) -> bool:
    """Whether ``conv`` reads ``var`` (its input: a permute or reshape of plain tokens, which
    :func:`plain_input` reads through) as the plain buffer in place (``strategy.conv.plain_io_plan``)."""
    if rw.graph.sole_user(var) is not conv:
        return False
    src = rw.graph.by_var.get(var)
    if permute_axes(src) != TO_NCHW and (src is None or src.op != "relax.reshape"):
        return False
    return _plan_reads_plain(rw, conv, var, "NHWC")


def _plan_reads_plain(rw: Rewriter, conv: Node, var, layout: str) -> bool:
    """Whether ``conv`` (NCHW) has ``var`` as its input and its strategy plan can read it as a plain
    buffer in ``layout`` ("NHWC", "NCHW": ``strategy.conv.plain_io_plan``): a dense or depthwise
    direct conv in float32."""
    return channel_groups.conv_plain_plan(rw, conv, var, layout)


def _permute_want(rw: Rewriter, node: Node) -> str | None:
    """What a permute in the region wants: one only the plain form has, or one the GEMM folds into
    its read, PLAIN; one a conv after it reads through in place (alone, or with the reshape back to
    the map), neither; any other NCHW <-> NHWC or token swap BLOCKED (a view of the blocked form,
    a gather kernel on the plain one)."""
    if not _blocked_view(node) or reads_plain(rw, node):
        return PLAIN
    reader = rw.graph.sole_user(node.var)
    if reader is not None and reader.op == "relax.reshape":
        reader = rw.graph.sole_user(reader.var)
    if reader is not None and reader.op == "relax.nn.conv2d" and _reads_in_place(rw, reader, reader.args[0]):
        return None
    return BLOCKED


def _pattern_reads_blocked(rw: Rewriter, node: Node) -> bool:
    """Whether a fusion pattern whose kernels read NCHW4c maps (``passes.patterns``; not one that
    reads plain tensors: ``Pattern.reads_plain``) takes ``node`` as its anchor on this device: its
    ``match`` (from the graph alone) and ``plan`` both answer."""
    for candidate in rw.rules.get(node.op, ()):
        if getattr(candidate, "reads_plain", False):
            continue
        match = getattr(candidate, "match", None)  # patterns have one, single-op rules not
        found = match(rw.graph, node) if match is not None else None
        if found is not None and candidate.plan(found, rw.profile, rw.records, rw.precision) is not None:
            return True
    return False


def _form_now(rw: Rewriter, var) -> str | None:
    """The one form the rewriter holds ``var`` in now (PLAIN, BLOCKED), or None (both, or not
    computed yet); not computed yet but a view only the plain form has (:func:`_blocked_view`: a
    window reverse, a reshape out of heads) or computed from plain values only
    (``LayoutPlan.plain_to_come``), PLAIN: it will exist only plain."""
    v = rw.values.get(var)
    if v is None:
        src = rw.graph.by_var.get(var)
        plain_view = src is not None and src.op in ("relax.reshape", "relax.permute_dims") and not _blocked_view(src)
        return PLAIN if var in rw.exprs or plain_view or rw.plan.plain_to_come(rw, var) else None
    return None if v.blocked and v.plain is not None else BLOCKED if v.blocked else PLAIN


def _reader_want(rw: Rewriter, var, node: Node) -> str | None:
    """What reader ``node`` of ``var`` wants: PLAIN, BLOCKED, None (either, at no cost) or FOLLOW (an
    op with a kernel on either form, whose own readers decide: a pixelwise op, a layer norm over
    the last axis, a Linear by a constant, a view the blocked form has too)."""
    op, rank = node.op, len(static_shape(var) or ())
    if op == "relax.nn.layer_norm" and _over_last_axis(node, rank):
        # its kernel runs on either form: on plain tokens the row kernel, then the Linear after it
        # reads them plain, as many launches as the conv folding it (``layer_norm_conv``: blocked
        # input only) and no layout kernel
        return FOLLOW
    if _pattern_reads_blocked(rw, node):
        return BLOCKED
    if op in PIXELWISE:  # an operand computed already in one form only: the other form costs its transform
        forms = {_form_now(rw, a) for a in node.args if isinstance(a, relax.Var) and not same(a, var)} - {None}
        return BLOCKED if BLOCKED in forms else PLAIN if forms else FOLLOW
    if op == "relax.nn.layer_norm":
        return BLOCKED
    if op == "relax.matmul":
        weight = const(node.args[1]) if same(node.args[0], var) else None
        return FOLLOW if weight is not None and weight.ndim == 2 else PLAIN
    if op == "relax.reshape":
        return FOLLOW if _blocked_view(node) else PLAIN
    if op == "relax.permute_dims":
        return _permute_want(rw, node)
    if op in ("relax.concat", "relax.split", "relax.strided_slice"):
        return BLOCKED if _on_channels(node) else PLAIN
    if op == "relax.nn.conv2d":
        return None if _reads_in_place(rw, node, var) else BLOCKED
    if op in ("relax.nn.softmax", "relax.mean", "relax.sum", "relax.max", "relax.min", "relax.broadcast_to"):
        return FOLLOW if rank == 4 else PLAIN  # the plain form's kernels take any rank, the blocked one's maps
    if op == "relax.nn.batch_norm":
        return BLOCKED if rank == 4 and int(node.attrs.axis) % 4 == 1 else PLAIN
    if op in ("relax.squeeze", "relax.expand_dims", "relax.flatten"):
        return PLAIN
    return PLAIN if reads_plain(rw, node) else BLOCKED


def _over_last_axis(node: Node, rank: int) -> bool:
    """Whether layer norm ``node`` of a rank ``rank`` tensor normalizes its last axis only (tokens, channels-last maps)."""
    return rank > 2 and [int(a) % rank for a in node.attrs.axes] == [rank - 1]


def token_region(rw: Rewriter, var) -> dict:
    """How many values ``var``'s readers, followed through the ops that run in either form
    (:func:`_reader_want`), want PLAIN and how many BLOCKED (each such value would cost a layout
    transform in the other form), up to :data:`REGION_BUDGET` readers; a model output wants PLAIN."""
    wanted, todo, seen = {PLAIN: set(), BLOCKED: set()}, [var], 0
    while todo and seen < REGION_BUDGET:
        v = todo.pop()
        readers = rw.plan.readers(v)
        seen += len(readers)
        wants = [_reader_want(rw, v, reader) for reader in readers]
        if rw.plan.is_output(v):
            wants.append(PLAIN)
        # a value some reader wants blocked costs one transform if the region is plain (its packing),
        # and its readers that run in either form are followed on: their plain readers count too
        for form in (BLOCKED, PLAIN):
            if form in wants:
                wanted[form].add(v)
        todo += [reader.var for reader, want in zip(readers, wants) if want == FOLLOW]
    return {form: len(values) for form, values in wanted.items()}


def _read_plain_only(rw: Rewriter, var, region: bool = True) -> bool:
    """``var`` has readers and is no model output, and they all read plain (:func:`reads_plain`), or
    (``region``: ``var`` is the tokens or channels-last view of a conv's map) the ops reading it,
    followed through those that run in either form (:func:`token_region`), want it plain more
    often than blocked (fewer layout transforms when the conv writes it plain)."""
    users = rw.graph.users(var)
    if not users or len(users) != rw.graph.uses.get(var, 0) or same(rw.graph.output, var):
        return False
    if all(reads_plain(rw, u) for u in users):
        return True
    if not region:
        return False
    wanted = token_region(rw, var)
    return wanted[PLAIN] > wanted[BLOCKED]


def _ends_plain(rw: Rewriter, var, region: bool = True) -> bool:
    """``var`` is read only by plain readers, or its token region wants it plain
    (:func:`_read_plain_only`), or it reaches plain readers through token chains (``passes.token_chain``)."""
    return _read_plain_only(rw, var, region) or ends_plain(rw, var, reads_plain)


def _view(rw: Rewriter, user: Node, nchw) -> tuple[str, tuple] | None:
    """(layout, views) when conv value reader ``user`` is a token view that plain readers read."""
    n, c, h, w = nchw
    if permute_axes(user) == TO_NHWC and _ends_plain(rw, user.var):
        return "NHWC", ((user, (n, h, w, c)),)
    if user.op != "relax.reshape" or static_shape(user.var) is None:
        return None
    shape = static_shape(user.var)
    swap = rw.graph.sole_user(user.var) if shape == (n, c, h * w) else None
    if swap is not None and permute_axes(swap) == SWAP_TOKENS and _ends_plain(rw, swap.var):
        return "NHWC", ((user, None), (swap, (n, h * w, c)))
    # a flatten to [N, C*H*W] is a classifier's: the matmul rule runs its Gemm as an HxW conv on the map;
    # a reshape into heads that token ops move before a matmul reads it is plain too (passes.token_chain);
    # any other reshape of the map gets no token region (patches, a group norm as exported and a
    # channel shuffle start so, and their patterns and rules take the blocked map)
    return ("NCHW", ((user, shape),)) if len(shape) > 2 and _ends_plain(rw, user.var, region=False) else None


def _reader(rw: Rewriter, user: Node, nchw) -> tuple[str, tuple] | None:
    """(layout, views) for conv value reader ``user``: a token view (:func:`_view`), or a plain
    reader of the map itself (a MatMul on ``[N, C, H, W]``: EfficientFormerV2's talking head), "NCHW"."""
    if user.op == "relax.reshape" or permute_axes(user) == TO_NHWC:
        return _view(rw, user, nchw)
    return ("NCHW", ()) if reads_plain(rw, user) else None


def token_output(rw: Rewriter, var, nchw, layout: str = "NCHW") -> PlainOutput | None:
    """The plain layout a conv writes its value ``var`` (NCHW ``nchw``; ``layout``: the value's, only
    "NCHW" is taken: a Linear run as a 1x1 conv on blocked tokens keeps them blocked) in, with the views that become
    free, when every reader takes it through a token view read by plain readers (or reads it plain
    itself) and they agree on one layout; else None (the conv writes NCHW4c). The layout planner's
    question for a conv's output (docs/kernels.md, convs at the boundary with tokens)."""
    n, c, h, w = nchw
    shape = static_shape(var)
    if not (rw.fuses and rw.allow_buffer) or rw.dtype != "float32" or same(rw.graph.output, var):
        return None
    if layout == "NHWC":
        return _linear_output(rw, var, nchw)
    if layout != "NCHW":
        return None
    users = rw.graph.users(var)
    if shape != tuple(nchw) or not users or len(users) != rw.graph.uses.get(var, 0):
        return None
    # a conv that reads the plain NCHW buffer in place takes either form: the other readers decide
    found = [_reader(rw, u, nchw) for u in users if not _plan_reads_plain(rw, u, var, "NCHW")]
    layouts = {f[0] for f in found if f is not None}
    if None in found or len(layouts) != 1 or (len(found) < len(users) and layouts != {"NCHW"}):
        return None
    return PlainOutput(layouts.pop(), tuple(v for f in found for v in f[1]))


def _linear_output(rw: Rewriter, var, nchw) -> PlainOutput | None:
    """A Linear run as a 1x1 conv on blocked tokens ``[N, L, C]`` or a channels-last map (its value
    ``var``: ``[N, L, M]`` or ``[N, H, W, M]``) writes that value plain ("NHWC", no view) when its
    token region (:func:`token_region`, followed through the ops that run in either form) wants it
    plain more often than blocked: the conv reads either form, so the side that costs fewer
    transforms pays (else it stays blocked and each plain reader unpacks it). Only the region
    decides: a Linear reading the value (another 1x1 conv) takes either form, not plain only."""
    n, m, h, w = nchw
    users = rw.graph.users(var)
    if static_shape(var) not in ((n, h * w, m), (n, h, w, m)) or not users or len(users) != rw.graph.uses.get(var, 0):
        return None
    wanted = token_region(rw, var)
    return PlainOutput("NHWC", ()) if wanted[PLAIN] > wanted[BLOCKED] else None


def define_plain_output(rw: Rewriter, var, out, nchw, plain: PlainOutput) -> None:
    """``out`` (the conv's plain buffer in ``plain.layout``) as ``var``'s value and each view's:
    the views are marked fused, their values ``memory.view`` s of ``out`` (no kernel)."""
    if plain.layout == "NCHW":
        rw.values[var] = Value(plain=out, layout="NCHW", channels=nchw[1], nchw=tuple(nchw))
    elif not plain.views:  # a Linear's tokens or channels-last map (_linear_output), seen in their own shape
        shape = static_shape(var)
        view = rw.bb.emit(relax.op.memory.view(out, relax.ShapeExpr(list(shape)))) if len(shape) == 3 else out
        rw.values[var] = Value(plain=view, layout="NLC" if len(shape) == 3 else "NHWC", channels=nchw[1], nchw=tuple(nchw))
    for node, shape in plain.views:
        node.fused = True
        if shape is not None:
            rw.exprs[node.var] = rw.bb.emit(relax.op.memory.view(out, relax.ShapeExpr(list(shape))))


def _plain_expr(rw: Rewriter, var):
    """The plain expression of float32 ``var`` when it is not held blocked (its readers would read
    that copy), else None."""
    if not isinstance(var, relax.Var) or dtype(var) != "float32":
        return None
    v = rw.values.get(var)
    if v is not None:
        return v.plain if not v.blocked else None
    return rw.exprs.get(var)


def plain_input(rw: Rewriter, node: Node, views: bool = False) -> tuple[str, relax.Expr, tuple | None, tuple] | None:
    """(data layout, plain expression, the map shape to view it in or None, gather steps) when conv
    ``node`` can read its input in place: tokens ``[N, H * W, C]`` through ``permute(0, 2, 1)`` +
    ``reshape`` (or channels-last ``[N, H, W, C]`` through ``permute(0, 3, 1, 2)``): "NHWC"; a
    reshape of any plain tensor, or a plain NCHW tensor (a model's input): "NCHW". With ``views``
    (the kernel takes ``x_view``), that NHWC or NCHW tensor may itself be movement ops that only it
    reads of a plain tensor (a channel slice of a Linear's output: ``movement.read_through``), read
    through the steps. The conv must be the views' only reader (others would pack the map anyway),
    or read a plain NCHW value beside the plain readers it was written for (:func:`_shared_input`);
    else None. Nothing is emitted here (:func:`plain_input_expr` does, once the strategy agrees)."""
    var = node.args[0]
    nchw = static_shape(var)
    if not (rw.fuses and rw.allow_buffer) or nchw is None or len(nchw) != 4:
        return None
    v = rw.values.get(var)
    if v is not None and v.blocked:
        return None
    if rw.graph.sole_user(var) is not node:
        found = _shared_input(rw, node, v)
        return None if found is None else (*found, ())
    n, c, h, w = nchw
    src = rw.graph.by_var.get(var)
    if permute_axes(src) == TO_NCHW:
        viewed = _viewed(rw, src.args[0], (n, h, w, c)) if views else None
        if viewed is not None:
            return ("NHWC", *viewed)
        if _plain_expr(rw, src.args[0]) is not None:
            return "NHWC", _plain_expr(rw, src.args[0]), None, ()
    found = _stored_input(rw, var, src, nchw)
    viewed = _viewed(rw, var, nchw) if views and found is None else None
    if viewed is not None:  # before a plain value the movement ops would be gathered into
        return ("NCHW", *viewed)
    x = rw.activation(var) if found is None else None
    return ("NCHW", x.plain, None, ()) if x is not None and rw.reads_plain(x, node) else found


def _viewed(rw: Rewriter, var, shape) -> tuple | None:
    """(plain expression of the root, None, steps) when ``var`` is movement ops that only it reads of
    a plain float32 tensor (``movement.read_through``) and more than reshapes (those the map shape
    of :func:`_stored_input` reads), else None."""
    root, steps = movement.read_through(rw, var, shape)
    steps = view_buffer(shape, steps)[0]
    expr = _plain_expr(rw, root) if steps else None
    return None if expr is None else (expr, None, steps)


def _stored_input(rw: Rewriter, var, src, nchw) -> tuple | None:
    """:func:`plain_input`'s reads of a tensor as stored through reshapes: tokens seen as their map, a reshape of a plain tensor."""
    n, c, h, w = nchw
    inner = rw.graph.by_var.get(src.args[0]) if src is not None and src.op == "relax.reshape" else None
    if (permute_axes(inner) == SWAP_TOKENS and rw.graph.sole_user(inner.var) is src
            and static_shape(inner.args[0]) == (n, h * w, c) and _plain_expr(rw, inner.args[0]) is not None):
        return "NHWC", _plain_expr(rw, inner.args[0]), (n, h, w, c), ()
    if src is not None and src.op == "relax.reshape" and _plain_expr(rw, src.args[0]) is not None:
        return "NCHW", _plain_expr(rw, src.args[0]), (n, c, h, w), ()
    return None


def _shared_input(rw: Rewriter, node: Node, v: Value | None) -> tuple | None:
    """("NCHW", plain buffer, None) when conv ``node`` reads its input ``v`` in place beside other
    readers: ``v`` is a plain NCHW value (or a plain expression: a gather's map) its writer wrote
    plain for them (:func:`token_output`: every other reader reads it plain or through a token view,
    or adds it to a map of its shape (:func:`_adds_to_map`: read in place too), and one at least is
    such a reader, a view it fused or one still to come: not a model input only convs read), and the
    conv's plan can; else None."""
    var = node.args[0]
    if v is None and var in rw.exprs and dtype(var) == "float32":  # a plain expression, a Value once the conv reads it
        v = Value(plain=rw.exprs[var], layout="NCHW", channels=static_shape(var)[1], nchw=static_shape(var))
    if v is None or v.layout != "NCHW" or v.plain is None or not _plan_reads_plain(rw, node, var, "NCHW"):
        return None
    users = rw.graph.users(var)
    others = [u for u in users if u is not node and not _plan_reads_plain(rw, u, var, "NCHW")]
    viewed = rw.graph.uses.get(var, 0) > len(users)  # a token view fused into the writer read it
    # a model input's add is left to the planner (packed once at the input, the add blocked): read
    # in place, the add of it and a blocked map ran plain between an unpack and a pack
    in_place_adds = not any(same(var, p) for p in rw.graph.func.params)
    if not (others or viewed) or any(_reader(rw, u, v.nchw) is None for u in others if not (in_place_adds and _adds_to_map(u, var))):
        return None
    if var not in rw.values:
        rw.values[var] = v
    return "NCHW", v.plain, None


def _adds_to_map(node: Node, var) -> bool:
    """``node`` adds ``var`` to another activation of its shape: a conv's residual or a binary op
    of two maps, both of which read a plain NCHW operand in place (``Epilogue.residual_layout``,
    ``binary(plain_b=True)``)."""
    shape = static_shape(var)
    return (node.op == "relax.add" and len(node.args) == 2 and all(isinstance(a, relax.Var) for a in node.args)
            and all(static_shape(a) == shape for a in node.args))


def plain_input_expr(rw: Rewriter, found: tuple) -> relax.Expr:
    """The kernel argument of a :func:`plain_input` result: the plain tensor, viewed as its map."""
    _, expr, shape, _ = found
    return expr if shape is None else rw.bb.emit(relax.op.memory.view(expr, relax.ShapeExpr(list(shape))))
