"""Unary and binary ops on plain tensors (tokens ``[N, L, C]``, heads, channels-last maps, any
rank: the token layout of docs/design.md) as one ``fused_elementwise`` kernel of ours
(``primfuncs.plain_elementwise``) per chain.

Registered after the blocked pixelwise rules (``elementwise``, ``binary``, ``broadcast``): an op
they take on NCHW4c tensors stays theirs unless the layout planner (``passes.layout_plan``) plans
it plain. This rule takes the rest: ``add``/``subtract``/``multiply``/``divide``/``maximum``/
``minimum``/``power`` of tensors with NumPy broadcasting or by constants (scalars inline, other
constants read as buffers), and the unary ops (``sqrt``, ``exp``, ``log``, ``negative``, ``abs``,
``erf``, ``tanh``, ``clip``, ``rsqrt`` and the named activations). From the first op it follows
the chain (``passes.elementwise_chain``, the walk the anchors' epilogues take too): each next op
the sole reader of the last, its other operands constants or tensors that exist already, up to
``MAX_INPUTS`` tensors. A run of the chain that computes a named activation however the importer
wrote it (HardSwish as ``x * clip(x + 3, 0, 6) / 6``, GELU with its erf, SiLU:
``passes.activations``) becomes that activation's formula, the rest the ops as written.
An operand that is blocked is read in its plain form (one layout transform, what upstream's op
would have needed too).
"""

from __future__ import annotations

import numpy as np
from tvm import relax

from primfuncs import epilogue_expr as ex
from primfuncs import plain_elementwise as kernels

from tir_adreno.passes.elementwise_chain import OPS, activation, node_expression, walk
from tir_adreno.passes.graph import Node, const, dtype, same, static_shape
from tir_adreno.passes.kernel_index import kernel
from tir_adreno.passes.op_info import node_info
from tir_adreno.passes.rewriter import Rewriter
from tir_adreno.passes.rules.base import rule


class _Chain:
    """The kernel being assembled, the walk's leaf policy (``elementwise_chain.Leaves``): its tensor
    inputs (vars or constants) for an output of rank ``out_rank``."""

    def __init__(self, rw: Rewriter, out_rank: int):
        self.rw = rw
        self.out_rank = out_rank
        self.inputs: list = []  # relax.Var or np.ndarray (a non-scalar constant)

    def follows(self, node: Node) -> bool:
        shape = static_shape(node.var)
        if self.rw.plan is not None and self.rw.plan.ends_plain_chain(self.rw, node):
            return False  # a blocked binary op that reads the chain's value in place (passes.layout_plan)
        return shape is not None and len(shape) == self.out_rank and dtype(node.var) == "float32"

    def save(self):
        return list(self.inputs)

    def restore(self, state) -> None:
        self.inputs[:] = state

    def leaf(self, arg):
        """The expression leaf of ``arg``: a scalar constant inline, else an input; None when
        ``arg`` is no float32 tensor of static shape that exists already, or one input too many."""
        data = const(arg)
        if data is not None:
            if data.dtype != np.float32 or data.ndim > self.out_rank:
                return None
            if data.size == 1 or np.all(data == data.reshape(-1)[0]):
                return ex.Const(float(data.reshape(-1)[0]))
            for k, x in enumerate(self.inputs):
                if isinstance(x, np.ndarray) and x.shape == data.shape and np.array_equal(x, data):
                    return ex.Input(k)
            return self._add(data)
        arg = self._through_broadcast(arg)
        if not isinstance(arg, relax.Var) or (arg not in self.rw.values and arg not in self.rw.exprs):
            return None
        shape = static_shape(arg)
        if shape is None or dtype(arg) != "float32" or len(shape) > self.out_rank or not shape:
            return None
        for k, x in enumerate(self.inputs):
            if isinstance(x, relax.Var) and same(x, arg):
                return ex.Input(k)
        return self._add(arg)

    def _through_broadcast(self, arg):
        """The source of ``arg`` when it is a ``broadcast_to`` read only here (ONNX Max/Min and
        Expand write one): the kernel broadcasts as it reads, and the unread op is dropped."""
        src = self.rw.graph.by_var.get(arg) if isinstance(arg, relax.Var) else None
        if src is None or src.op != "relax.broadcast_to" or self.rw.graph.uses.get(arg, 0) != 1:
            return arg
        return src.args[0]

    def _add(self, x):
        if len(self.inputs) == kernels.MAX_INPUTS:
            return None
        self.inputs.append(x)
        return ex.Input(len(self.inputs) - 1)

    def shapes(self):
        return tuple(tuple(x.shape) if isinstance(x, np.ndarray) else static_shape(x) for x in self.inputs)


def _start(chain: _Chain, node: Node):
    """(expression, nodes) of the chain's first op, or of the named activation it starts on one of
    its operands (read as an input), else None."""
    g = chain.rw.graph
    for var in node.args[:2]:
        if isinstance(var, relax.Var) and (var in chain.rw.values or var in chain.rw.exprs):
            state = chain.save()
            x = chain.leaf(var)
            found = activation(g, var, x, first=node) if x is not None else None
            if found is not None:
                return found
            chain.restore(state)
    expr = node_expression(node, None, None, chain)
    return None if expr is None else (expr, [node])


@rule(*OPS)
def token_elementwise(rw: Rewriter, node: Node):
    """A chain of unary and binary ops on plain tensors (with broadcasting) as one kernel."""
    shape = static_shape(node.var)
    if shape is None or not shape or dtype(node.var) != "float32":
        return None
    chain = _Chain(rw, len(shape))
    started = _start(chain, node)
    if started is None or not chain.inputs:
        return None
    expr, first = started
    expr, last, more = walk(rw.graph, expr, first[-1], chain)
    nodes = first + more
    out_shape = static_shape(last.var)
    # float32 under every precision, like the GEMM's: plain tensors are upstream's side
    func = kernel(kernels.fused_elementwise, out_shape, chain.shapes(), expr, dtype="float32")
    args = [relax.const(np.ascontiguousarray(x)) if isinstance(x, np.ndarray) else rw.expr(x) for x in chain.inputs]
    info = node_info(last, expression=ex.describe(expr), nodes=",".join(m.var.name for m in nodes))
    out = rw.emit_kernel(func, args, out_shape, dtype="float32", hint="elementwise_plain", op_info=info)
    for m in nodes:
        m.fused = True
    if not same(last.var, node.var):
        rw.exprs[last.var] = out
    return out
