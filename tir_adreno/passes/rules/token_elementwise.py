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
would have needed too). An operand of the output's shape made by movement ops that only it reads
(a slice or split part, a transpose, a concat of them: ``passes.movement.view_sources``) is read
through them from the tensors before them (``plain_elementwise.View``): their gathers go unread
and dead-code elimination drops them (MambaOut's ``gelu(g) * cat(i, c)``: 3 launches were 1).
"""

from __future__ import annotations

import numpy as np
from tvm import relax

from primfuncs import epilogue_expr as ex
from primfuncs import gather
from primfuncs import plain_elementwise as kernels

from tir_adreno.passes.elementwise_chain import OPS, activation, node_expression, walk
from tir_adreno.passes.graph import Node, const, dtype, same, static_shape
from tir_adreno.passes.movement import view_sources
from tir_adreno.passes.kernel_index import kernel
from tir_adreno.passes.op_info import node_info
from tir_adreno.passes.rewriter import Rewriter
from tir_adreno.passes.rules.base import rule


class _Chain:
    """The kernel being assembled, the walk's leaf policy (``elementwise_chain.Leaves``): its tensor
    inputs (vars or constants) for an output of rank ``out_rank``."""

    def __init__(self, rw: Rewriter, out_shape: tuple, views: bool = True):
        self.rw = rw
        self.out_rank = len(out_shape)
        self.out_shape = out_shape
        self.views = views  # operands of ``out_shape`` may be read through movement ops
        self.inputs: list = []  # the kernel's buffers: relax.Var or np.ndarray (a non-scalar constant)
        self.operands: list = []  # per expression input: a buffer's number or a kernels.View

    def follows(self, node: Node) -> bool:
        shape = static_shape(node.var)
        if self.rw.plan is not None and self.rw.plan.ends_plain_chain(self.rw, node):
            return False  # a blocked binary op that reads the chain's value in place (passes.layout_plan)
        return shape is not None and len(shape) == self.out_rank and dtype(node.var) == "float32"

    def save(self):
        return list(self.inputs), list(self.operands)

    def restore(self, state) -> None:
        self.inputs[:], self.operands[:] = state

    def leaf(self, arg):
        """The expression leaf of ``arg``: a scalar constant inline, else an input; None when
        ``arg`` is no float32 tensor of static shape that exists already, or one input too many."""
        data = const(arg)
        if data is not None:
            return self._constant(data)
        arg = self._through_broadcast(arg)
        view = self._view(arg)
        if view is not None:
            return view
        if not isinstance(arg, relax.Var) or (arg not in self.rw.values and arg not in self.rw.exprs):
            return None
        shape = static_shape(arg)
        if shape is None or dtype(arg) != "float32" or len(shape) > self.out_rank or not shape:
            return None
        return self._operand(self._buffer(arg))

    def _view(self, arg):
        """``arg`` read through the movement ops before it (an operand of the output's shape), else None."""
        if not self.views or not isinstance(arg, relax.Var) or static_shape(arg) != self.out_shape or dtype(arg) != "float32":
            return None
        found = view_sources(self.rw, arg)
        if found is None or not all(r in self.rw.values or r in self.rw.exprs for r in found[0]):
            return None
        roots, sources, pad = found
        state = self.save()
        numbers = [self._buffer(r) for r in roots]
        if None in numbers:
            self.restore(state)
            return None
        sources = tuple(gather.Source(numbers[src.input], src.steps) for src in sources)
        return self._operand(kernels.View(sources, 0.0 if pad is None else pad))

    def _through_broadcast(self, arg):
        """The source of ``arg`` when it is a ``broadcast_to`` read only here (ONNX Max/Min and
        Expand write one): the kernel broadcasts as it reads, and the unread op is dropped."""
        src = self.rw.graph.by_var.get(arg) if isinstance(arg, relax.Var) else None
        if src is None or src.op != "relax.broadcast_to" or self.rw.graph.uses.get(arg, 0) != 1:
            return arg
        return src.args[0]

    def axis_constant(self, values, axis: int):
        """A batch norm's ``values`` along ``axis``: a constant input broadcast along the others."""
        shape = [1] * self.out_rank
        shape[axis] = len(values)
        return self._constant(np.asarray(values, np.float32).reshape(shape))

    def _constant(self, data: np.ndarray):
        """A constant's leaf: a scalar inline, else an input (one buffer per distinct array)."""
        if data.dtype != np.float32 or data.ndim > self.out_rank:
            return None
        if data.size == 1 or np.all(data == data.reshape(-1)[0]):
            return ex.Const(float(data.reshape(-1)[0]))
        for k, x in enumerate(self.inputs):
            if isinstance(x, np.ndarray) and x.shape == data.shape and np.array_equal(x, data):
                return self._operand(k)
        return self._operand(self._buffer(data))

    def _buffer(self, x):
        """The number of buffer ``x`` (a var or a constant array), added if new; None when full."""
        for k, b in enumerate(self.inputs):
            if b is x or (isinstance(b, relax.Var) and isinstance(x, relax.Var) and same(b, x)):
                return k
        if len(self.inputs) == kernels.MAX_INPUTS:
            return None
        self.inputs.append(x)
        return len(self.inputs) - 1

    def _operand(self, operand):
        """The expression input reading ``operand`` (a buffer's number or a view), added if new."""
        if operand is None:
            return None
        if operand in self.operands:
            return ex.Input(self.operands.index(operand))
        if len(self.operands) == kernels.MAX_INPUTS:
            return None
        self.operands.append(operand)
        return ex.Input(len(self.operands) - 1)

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


def _chain(rw: Rewriter, node: Node, shape: tuple, views: bool):
    """(chain, expression, last node, nodes taken) from ``node``, else None."""
    chain = _Chain(rw, shape, views)
    started = _start(chain, node)
    if started is None or not chain.inputs:
        return None
    expr, first = started
    expr, last, more = walk(rw.graph, expr, first[-1], chain)
    return chain, expr, last, first + more


def plain_chain(rw: Rewriter, node: Node):
    """The chain of elementwise ops on plain float32 tensors from ``node`` (walked as the rule
    walks it: operands of the output's shape read through their movement ops where the output
    keeps that shape): ``(producer, inputs, last node, nodes taken)``, the producer a
    ``plain_elementwise.Producer`` for the last node's shape over ``inputs`` (vars, or
    constant arrays), else None."""
    shape = static_shape(node.var)
    if shape is None or not shape or dtype(node.var) != "float32":
        return None
    found = _chain(rw, node, shape, views=True)
    if found is not None and any(isinstance(op, kernels.View) for op in found[0].operands) and static_shape(found[2].var) != shape:
        found = _chain(rw, node, shape, views=False)  # the output broadcast past the views' shape
    if found is None:
        return None
    chain, expr, last, nodes = found
    operands = None if chain.operands == list(range(len(chain.inputs))) else tuple(chain.operands)
    return kernels.Producer(expr, chain.shapes(), operands), chain.inputs, last, nodes


def chain_args(rw: Rewriter, inputs) -> list:
    """The kernel arguments of a chain's inputs: a constant array as a ``relax.const``, a var as the rewriter holds it (plain)."""
    return [relax.const(np.ascontiguousarray(x)) if isinstance(x, np.ndarray) else rw.expr(x) for x in inputs]


@rule(*OPS)
def token_elementwise(rw: Rewriter, node: Node):
    """A chain of unary and binary ops on plain tensors (with broadcasting) as one kernel."""
    found = plain_chain(rw, node)
    if found is None:
        return None
    producer, inputs, last, nodes = found
    expr, operands = producer.expr, producer.operands
    out_shape = static_shape(last.var)
    # float32 under every precision, like the GEMM's: plain tensors are upstream's side
    func = kernel(kernels.fused_elementwise, out_shape, producer.input_shapes, expr, dtype="float32", operands=operands)
    args = chain_args(rw, inputs)
    info = node_info(last, expression=ex.describe(expr), nodes=",".join(m.var.name for m in nodes))
    out = rw.emit_kernel(func, args, out_shape, dtype="float32", hint="elementwise_plain", op_info=info)
    for m in nodes:
        m.fused = True
    if not same(last.var, node.var):
        rw.exprs[last.var] = out
    return out
