"""Binary ops of two activations where one broadcasts over some of C, H, W (NumPy rules), beyond
the per-channel gate ``[N, C, 1, 1]`` of the ``binary`` rule: MobileViT-v2's attention scores
``[N, 1, P, T]`` times its keys ``[N, C, P, T]``, and its context ``[N, C, P, 1]``, expanded with
``broadcast_to``, times its values. One ``broadcast_binary`` kernel each; ``broadcast_to`` is
read in place by the binary op that is its only user."""

from __future__ import annotations

from tvm import relax

from primfuncs import elementwise as kernels

from tir_adreno.passes.graph import Node, same, static_shape
from tir_adreno.passes.kernel_index import kernel
from tir_adreno.passes.op_info import elementwise_info
from tir_adreno.passes.rewriter import Rewriter, Value
from tir_adreno.passes.rules.base import rule

BINARY_OPS = ("relax.add", "relax.multiply", "relax.subtract", "relax.divide")


def broadcast_axes(small, full) -> str | None:
    """The NCHW axes (of "chw") along which 4-d shape ``small`` broadcasts to ``full``: "" when
    equal, None when it does not broadcast (or broadcasts the batch)."""
    if small is None or full is None or len(small) != 4 or len(full) != 4 or small[0] != full[0]:
        return None
    if any(s not in (1, f) for s, f in zip(small[1:], full[1:])):
        return None
    return "".join(a for a, s, f in zip("chw", small[1:], full[1:]) if s != f)


def _available(rw: Rewriter, var) -> bool:
    """``var`` already has a rewritten value (it is defined before the node being rewritten)."""
    return isinstance(var, relax.Var) and (var in rw.values or var in rw.exprs)


def _emit(rw: Rewriter, op_node: Node, nodes, a: Value, b: Value, axes: str, reverse: bool):
    """``a op b`` (``b op a`` with ``reverse``), ``b`` broadcast over ``axes``; defines ``op_node``."""
    op = op_node.op.split(".")[-1]
    shape5 = a.shape5
    scope = rw.scope_for(shape5, b.shape5)
    func = kernel(kernels.broadcast_binary, shape5, a.channels, op, axes, reverse, scope=scope)
    info = elementwise_info(op, nodes, [a.nchw, b.nchw], broadcast=axes)
    out = rw.emit_kernel(func, [rw.blocked(a, scope), rw.blocked(b, scope)], shape5, op_info=info)
    rw.define(op_node.var, out, scope, a.nchw)
    return out


def _operands(rw: Rewriter, node: Node, full_var, small_var, small_shape):
    """(a, b, axes, reverse) of binary ``node`` reading ``full_var`` (the output's shape) and
    ``small_var`` (seen as ``small_shape``, broadcast), else None."""
    out_shape = static_shape(node.var)
    axes = broadcast_axes(small_shape, out_shape)
    if not axes or static_shape(full_var) != out_shape or node.op.split(".")[-1] not in kernels.BINARY_OPS:
        return None
    a, b = rw.activation(full_var), rw.activation(small_var)
    if a is None or b is None or a.layout != "NCHW" or b.layout != "NCHW":
        return None
    return a, b, axes, same(node.args[0], small_var)


@rule(*BINARY_OPS)
def broadcast_binary(rw: Rewriter, node: Node):
    """``a op b`` of two NCHW activations, one of them broadcast over some of C, H, W (not where the
    layout planner runs it plain)."""
    if rw.runs_plain(node) or len(node.args) != 2 or not all(isinstance(v, relax.Var) for v in node.args):
        return None
    first, second = node.args
    for full, small in ((first, second), (second, first)):
        found = _operands(rw, node, full, small, static_shape(small))
        if found is not None:
            return _emit(rw, node, [node], *found)
    return None


@rule("relax.broadcast_to")
def broadcast_to(rw: Rewriter, node: Node):
    """``broadcast_to`` of an activation whose only user is a binary op with an activation of the
    broadcast shape: that op as one ``broadcast_binary`` kernel reading the source in place."""
    user = rw.graph.sole_user(node.var)
    if user is None or user.op not in BINARY_OPS or len(user.args) != 2 or rw.runs_plain(user):
        return None
    other = user.args[1] if same(user.args[0], node.var) else user.args[0]
    if same(other, node.var) or not _available(rw, other):
        return None
    found = _operands(rw, user, other, node.args[0], static_shape(node.args[0]))
    if found is None or static_shape(node.var) != static_shape(user.var):
        return None
    user.fused = True
    return _emit(rw, user, [node, user], *found[:3], same(user.args[0], node.var))
