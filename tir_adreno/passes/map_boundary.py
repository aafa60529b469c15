"""Where a conv meets tokens (issue 35, the token layout of docs/kernels.md): the decisions that let
a conv write its output as the plain buffer its token readers want, and read its input in place
from plain tokens, so no layout kernel runs at the boundary between maps and tokens.

- :func:`token_output`: a conv's value read only through token views (``reshape`` to
  ``[N, C, H * W]`` + ``permute(0, 2, 1)``, or ``permute(0, 2, 3, 1)``: channels-last, "NHWC"; any
  other ``reshape``: its own NCHW order, "NCHW") by ops that read plain tensors (our GEMM, ops left
  to upstream): the conv writes that plain buffer and each view is a ``memory.view`` of it.
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

from tir_adreno.passes.graph import SWAP_TOKENS, TO_NCHW, TO_NHWC, Node, dtype, permute_axes, same, static_shape
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
    of tokens (our concat takes channels of maps), a split or a pixelwise op by constants the
    layout planner runs plain (``LayoutPlan.split_plain``, ``flexible_plain``) or an op no pattern
    or rule of ours takes."""
    if node.op == "relax.matmul" or node.op not in rw.rules:
        return node.op not in ("tuple", "tuple_get_item", "other")
    if node.op == "relax.concat":
        return len(static_shape(node.var) or ()) != 4
    if node.op == "relax.split":  # the layout planner's choices (passes.layout_plan)
        return rw.plan is not None and rw.plan.split_plain(rw, node)
    if node.op in FLEXIBLE:
        return rw.plan is not None and rw.plan.flexible_plain(node)
    if _swaps_last_two(node):
        users = rw.graph.users(node.var)
        return bool(users) and rw.graph.uses.get(node.var, 0) == 1 and all(u.op == "relax.matmul" for u in users)
    return False


def _read_plain_only(rw: Rewriter, var) -> bool:
    """``var`` has readers, all of them plain readers (:func:`reads_plain`), and is no model output."""
    users = rw.graph.users(var)
    return bool(users) and len(users) == rw.graph.uses.get(var, 0) and not same(rw.graph.output, var) and all(
        reads_plain(rw, u) for u in users)


def _ends_plain(rw: Rewriter, var) -> bool:
    """``var`` is read only by plain readers (:func:`_read_plain_only`), or through token chains
    that end in them (``passes.token_chain``)."""
    return _read_plain_only(rw, var) or ends_plain(rw, var, reads_plain)


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
    # a reshape into heads that token ops move before a matmul reads it is plain too (passes.token_chain)
    return ("NCHW", ((user, shape),)) if len(shape) > 2 and _ends_plain(rw, user.var) else None


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
    if not (rw.fuses and rw.allow_buffer) or rw.dtype != "float32" or same(rw.graph.output, var) or layout != "NCHW":
        return None
    users = rw.graph.users(var)
    if shape != tuple(nchw) or not users or len(users) != rw.graph.uses.get(var, 0):
        return None
    found = [_reader(rw, u, nchw) for u in users]
    layouts = {f[0] for f in found if f is not None}
    if None in found or len(layouts) != 1:
        return None
    return PlainOutput(layouts.pop(), tuple(v for f in found for v in f[1]))


def define_plain_output(rw: Rewriter, var, out, nchw, plain: PlainOutput) -> None:
    """``out`` (the conv's plain buffer in ``plain.layout``) as ``var``'s value and each view's:
    the views are marked fused, their values ``memory.view`` s of ``out`` (no kernel)."""
    if plain.layout == "NCHW":
        rw.values[var] = Value(plain=out, layout="NCHW", channels=nchw[1], nchw=tuple(nchw))
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


def plain_input(rw: Rewriter, node: Node) -> tuple[str, relax.Expr, tuple | None] | None:
    """(data layout, plain expression, the map shape to view it in or None) when conv ``node`` can
    read its input in place: tokens ``[N, H * W, C]`` through ``permute(0, 2, 1)`` + ``reshape`` (or
    channels-last ``[N, H, W, C]`` through ``permute(0, 3, 1, 2)``): "NHWC"; a reshape of any plain
    tensor, or a plain NCHW tensor (a model's input): "NCHW". The conv must be the views' only
    reader (others would pack the map anyway); else None. Nothing is emitted here
    (:func:`plain_input_expr` does, once the strategy agrees)."""
    var = node.args[0]
    nchw = static_shape(var)
    if not (rw.fuses and rw.allow_buffer) or nchw is None or len(nchw) != 4 or rw.graph.sole_user(var) is not node:
        return None
    v = rw.values.get(var)
    if v is not None and v.blocked:
        return None
    n, c, h, w = nchw
    src = rw.graph.by_var.get(var)
    if permute_axes(src) == TO_NCHW and _plain_expr(rw, src.args[0]) is not None:
        return "NHWC", _plain_expr(rw, src.args[0]), None
    inner = rw.graph.by_var.get(src.args[0]) if src is not None and src.op == "relax.reshape" else None
    if (permute_axes(inner) == SWAP_TOKENS and rw.graph.sole_user(inner.var) is src
            and static_shape(inner.args[0]) == (n, h * w, c) and _plain_expr(rw, inner.args[0]) is not None):
        return "NHWC", _plain_expr(rw, inner.args[0]), (n, h, w, c)
    if src is not None and src.op == "relax.reshape" and _plain_expr(rw, src.args[0]) is not None:
        return "NCHW", _plain_expr(rw, src.args[0]), (n, c, h, w)
    x = rw.activation(var)
    return ("NCHW", x.plain, None) if x is not None and rw.reads_plain(x, node) else None


def plain_input_expr(rw: Rewriter, found: tuple) -> relax.Expr:
    """The kernel argument of a :func:`plain_input` result: the plain tensor, viewed as its map."""
    _, expr, shape = found
    return expr if shape is None else rw.bb.emit(relax.op.memory.view(expr, relax.ShapeExpr(list(shape))))
