"""Unary and binary ops on plain tensors (tokens ``[N, L, C]``, heads, channels-last maps, any
rank: the token layout of docs/design.md) as one ``fused_elementwise`` kernel of ours
(``primfuncs.plain_elementwise``) per chain.

Registered after the blocked pixelwise rules (``elementwise``, ``binary``, ``broadcast``): an op
they take on NCHW4c tensors stays theirs unless the layout planner (``passes.layout_plan``) plans
it plain. This rule takes the rest: ``add``/``subtract``/``multiply``/``divide``/``maximum``/
``minimum``/``power`` of tensors with NumPy broadcasting or by constants (scalars inline, other
constants read as buffers), and the unary ops (``sqrt``, ``exp``, ``log``, ``negative``, ``abs``,
``erf``, ``tanh``, ``clip``, ``rsqrt`` and the named activations). From the first op it follows
the chain: each next op the sole reader of the last, its other operands constants or tensors that
exist already, up to ``MAX_INPUTS`` tensors. A run of the chain that computes a named activation
however the importer wrote it (HardSwish as ``x * clip(x + 3, 0, 6) / 6``, GELU with its erf,
SiLU: ``passes.activations``) becomes that activation's formula, the rest the ops as written.
An operand that is blocked is read in its plain form (one layout transform, what upstream's op
would have needed too).
"""

from __future__ import annotations

import numpy as np
from tvm import relax

from primfuncs import epilogue_expr as ex
from primfuncs import plain_elementwise as kernels

from tir_adreno.passes.activations import clip_range, match_activation
from tir_adreno.passes.graph import Node, const, dtype, same, static_shape
from tir_adreno.passes.kernel_index import kernel
from tir_adreno.passes.op_info import node_info
from tir_adreno.passes.rewriter import Rewriter
from tir_adreno.passes.rules.base import rule

#: Relax ops -> the expression's op (``primfuncs.epilogue_expr``).
BINARY = {**{f"relax.{op}": op for op in ("add", "subtract", "multiply", "divide", "maximum", "minimum")}, "relax.power": "pow"}
UNARY = {**{f"relax.{op}": op for op in ("sqrt", "exp", "log", "abs", "erf", "tanh")}, "relax.negative": "neg"}
#: Relax activation ops -> the table's name.
ACTIVATION_OPS = {"relax.sigmoid": "sigmoid", "relax.nn.relu": "relu", "relax.nn.gelu": "gelu", "relax.nn.gelu_tanh": "gelu_tanh",
                  "relax.nn.silu": "silu", "relax.nn.leakyrelu": "leaky_relu"}
OPS = (*BINARY, *UNARY, *ACTIVATION_OPS, "relax.clip", "relax.rsqrt")


class _Chain:
    """The kernel being assembled: its tensor inputs (vars or constants), the nodes it computes."""

    def __init__(self, rw: Rewriter):
        self.rw = rw
        self.inputs: list = []  # relax.Var or np.ndarray (a non-scalar constant)
        self.nodes: list[Node] = []

    def operand(self, arg, out_rank: int):
        """The expression leaf of ``arg``: a scalar constant inline, else an input; None when
        ``arg`` is no float32 tensor of static shape that exists already, or one input too many."""
        data = const(arg)
        if data is not None:
            if data.dtype != np.float32 or data.ndim > out_rank:
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
        if shape is None or dtype(arg) != "float32" or len(shape) > out_rank or not shape:
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


def _step(chain: _Chain, node: Node, cur, expr, out_rank: int):
    """The expression of ``node`` applied to ``expr`` (the value of ``cur``, one of its operands;
    None: ``node`` is the chain's first op, every operand a leaf), else None (inputs restored)."""
    kept = list(chain.inputs)

    def leaf(arg):
        return expr if cur is not None and same(arg, cur) else chain.operand(arg, out_rank)

    found = _expression(node, leaf)
    if found is None:
        chain.inputs[:] = kept
    return found


def _expression(node: Node, leaf):
    op = node.op
    if op in BINARY and len(node.args) == 2:
        a, b = (leaf(x) for x in node.args)
        return None if a is None or b is None else ex.Binary(BINARY[op], a, b)
    x = leaf(node.args[0]) if node.args else None
    if x is None:
        return None
    if op in UNARY:
        return ex.Unary(UNARY[op], x)
    if op == "relax.rsqrt":
        return ex.Unary("reciprocal", ex.Unary("sqrt", x))
    if op == "relax.clip":
        bounds = clip_range(node)
        if bounds is None or not bounds[0] <= bounds[1]:
            return None
        return _clip(x, *(None if not np.isfinite(b) else b for b in bounds))  # an infinite bound: none
    if op in ACTIVATION_OPS:
        params = (("alpha", float(node.attrs.alpha)),) if op == "relax.nn.leakyrelu" else ()
        return ex.Unary(ACTIVATION_OPS[op], x, params)
    return None


def _clip(x, lo, hi):
    return ex.Unary("clip", x, (("lo", lo), ("hi", hi)))


def _activation(chain: _Chain, g, var, expr, first: Node | None, out_rank: int):
    """(expression, last node) of a named activation of ``var`` (value ``expr``; a var read
    as a fresh input when ``expr`` is None) starting at ``first`` (or its sole user), else None."""
    matched = match_activation(g, var, first=first)
    if matched is None:
        return None
    name, bounds, nodes = matched
    x = expr if expr is not None else chain.operand(var, out_rank)
    if x is None:
        return None
    act = _clip(x, *bounds) if name == "clip" else ex.Unary(name, x)
    chain.nodes += nodes
    return act, nodes[-1]


def _start(chain: _Chain, node: Node, out_rank: int):
    """The expression of the chain's first op (or of the activation it starts), and its last node."""
    for var in node.args[:2]:
        if isinstance(var, relax.Var) and (var in chain.rw.values or var in chain.rw.exprs):
            found = _activation(chain, chain.rw.graph, var, None, node, out_rank)
            if found is not None:
                return found
    expr = _step(chain, node, None, None, out_rank)
    if expr is None:
        return None
    chain.nodes.append(node)
    return expr, node


def _grow(chain: _Chain, expr, last: Node, out_rank: int):
    """Extend the chain past ``last`` while its sole reader is an op of ours on it."""
    g = chain.rw.graph
    while True:
        found = _activation(chain, g, last.var, expr, None, out_rank)
        if found is not None:
            expr, last = found
            continue
        user = g.sole_user(last.var)
        shape = static_shape(user.var) if user is not None else None
        if user is None or user.op not in OPS or shape is None or len(shape) != out_rank or dtype(user.var) != "float32":
            return expr, last
        step = _step(chain, user, last.var, expr, out_rank)
        if step is None:
            return expr, last
        chain.nodes.append(user)
        expr, last = step, user


@rule(*OPS)
def token_elementwise(rw: Rewriter, node: Node):
    """A chain of unary and binary ops on plain tensors (with broadcasting) as one kernel."""
    shape = static_shape(node.var)
    if shape is None or not shape or dtype(node.var) != "float32":
        return None
    chain = _Chain(rw)
    started = _start(chain, node, len(shape))
    if started is None or not chain.inputs:
        return None
    expr, last = _grow(chain, *started, len(shape))
    out_shape = static_shape(last.var)
    # float32 under every precision, like the GEMM's: plain tensors are upstream's side
    func = kernel(kernels.fused_elementwise, out_shape, chain.shapes(), expr, dtype="float32")
    args = [relax.const(np.ascontiguousarray(x)) if isinstance(x, np.ndarray) else rw.expr(x) for x in chain.inputs]
    info = node_info(last, expression=ex.describe(expr), nodes=",".join(m.var.name for m in chain.nodes))
    out = rw.emit_kernel(func, args, out_shape, dtype="float32", hint="elementwise_plain", op_info=info)
    for m in chain.nodes:
        m.fused = True
    if not same(last.var, node.var):
        rw.exprs[last.var] = out
    return out
