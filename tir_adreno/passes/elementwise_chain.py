"""The walk along a single-reader elementwise chain that builds its :mod:`primfuncs.epilogue_expr`
tree: shared by the anchors' expression epilogues (``passes.epilogue_chain``) and the chains on
plain tensors (``rules.token_elementwise``).

From a value it follows the chain while each next node is the only reader of the value before it:
a run of nodes computing a named activation however the importer wrote it
(``passes.activations``) becomes that activation, a unary or binary Relax op of :data:`UNARY_OPS`,
:data:`BINARY_OPS`, ``clip``, ``leakyrelu`` or ``rsqrt`` its node of the tree, an inference
batch norm (with its output's ``TupleGetItem``) ``x * scale + shift`` by per-channel constants.
What the walk may take depends on the kernel it builds, a :class:`Leaves` policy: which next node
it follows (its shape and dtype), and what another operand of a binary op becomes (a scalar, a
per-channel constant, the epilogue's operand, a plain kernel's input) or a batch norm's constants
along its axis, recorded on the policy and undone when the step is refused. Nothing is marked
fused here: the caller marks the nodes it takes.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from primfuncs import epilogue_expr as ex

from tir_adreno.passes.activations import clip_range, match_activation
from tir_adreno.passes.affine import batch_norm_affine, batch_norm_output
from tir_adreno.passes.graph import Graph, Node, same, static_shape

#: Relax unary ops and their expression op (the activations' names are the table's).
UNARY_OPS = {"relax.negative": "neg", "relax.abs": "abs", "relax.exp": "exp", "relax.sqrt": "sqrt", "relax.log": "log",
             "relax.tanh": "tanh", "relax.erf": "erf", "relax.sigmoid": "sigmoid", "relax.nn.relu": "relu",
             "relax.nn.silu": "silu", "relax.nn.gelu": "gelu", "relax.nn.gelu_tanh": "gelu_tanh"}
#: Relax binary ops and their expression op.
BINARY_OPS = {"relax.add": "add", "relax.subtract": "subtract", "relax.multiply": "multiply", "relax.divide": "divide",
              "relax.maximum": "maximum", "relax.minimum": "minimum", "relax.power": "pow"}
#: Every op a step may be.
OPS = (*UNARY_OPS, *BINARY_OPS, "relax.nn.leakyrelu", "relax.clip", "relax.rsqrt")


class Leaves(Protocol):
    """What a kernel reads besides the chain's value (a per-anchor policy)."""

    def follows(self, node: Node) -> bool:
        """Whether the chain may go on into ``node`` (its shape and dtype are the kernel's)."""

    def leaf(self, arg):
        """``arg`` (an operand other than the chain's value) as a leaf, recorded; None when unread."""

    def axis_constant(self, values, axis: int):
        """Float64 ``values``, one per element along ``axis`` of the chain's value (a batch norm's),
        as a leaf, recorded; None when the kernel cannot read them so."""

    def save(self):
        """The recorded leaves' state, for :meth:`restore`."""

    def restore(self, state) -> None:
        """Forget what was recorded since :meth:`save` returned ``state``."""


def clip(x, lo, hi):
    """``clip(x, lo, hi)`` as a tree node (a bound None: none)."""
    return ex.Unary("clip", x, (("lo", lo), ("hi", hi)))


def _op(node: Node, leaf):
    """``node`` over the leaves ``leaf(arg)`` gives its operands, else None."""
    op = node.op
    if op in BINARY_OPS and len(node.args) == 2:
        a, b = (leaf(x) for x in node.args)
        if a is None or b is None or (BINARY_OPS[op] == "pow" and not ex.exponent_allowed(b)):
            return None
        return ex.Binary(BINARY_OPS[op], a, b)
    x = leaf(node.args[0]) if node.args and op in OPS else None
    if x is None:
        return None
    if op in UNARY_OPS:
        return ex.Unary(UNARY_OPS[op], x)
    if op == "relax.nn.leakyrelu":
        return ex.Unary("leaky_relu", x, (("alpha", float(node.attrs.alpha)),))
    if op == "relax.rsqrt":
        return ex.Unary("reciprocal", ex.Unary("sqrt", x))
    bounds = clip_range(node) if op == "relax.clip" else None
    if bounds is None or not bounds[0] <= bounds[1]:
        return None
    return clip(x, *(b if np.isfinite(b) else None for b in bounds))  # an infinite bound: none


def node_expression(node: Node, var, expr, leaves: Leaves):
    """``node`` as a tree node: an operand that is ``var`` (None: none is) reads ``expr``, the others
    ``leaves.leaf``; None when ``node`` is no step (nothing recorded on ``leaves`` then)."""
    state = leaves.save()
    found = _op(node, lambda arg: expr if var is not None and same(arg, var) else leaves.leaf(arg))
    if found is None:
        leaves.restore(state)
    return found


def batch_norm(g: Graph, node: Node, var, expr, leaves: Leaves):
    """(tree, nodes) of inference batch norm ``node`` of ``var`` (value ``expr``) and the
    ``TupleGetItem`` of its output: ``expr * scale + shift``, else None (nothing recorded)."""
    if node.op != "relax.nn.batch_norm" or not same(node.args[0], var):
        return None
    getter, folded = batch_norm_output(g, node), batch_norm_affine(node)
    rank = len(static_shape(var) or ())
    if getter is None or folded is None or not rank or not leaves.follows(getter):
        return None
    state = leaves.save()
    scale, shift = (leaves.axis_constant(v, int(node.attrs.axis) % rank) for v in folded)
    if scale is None or shift is None:
        leaves.restore(state)
        return None
    return ex.Binary("add", ex.Binary("multiply", expr, scale), shift), [node, getter]


def activation(g: Graph, var, x, first: Node | None = None):
    """(tree, nodes) of the named activation that starts at ``first`` (or at ``var``'s sole reader)
    and reads ``var`` (its value ``x``), else None."""
    matched = match_activation(g, var, first=first)
    if matched is None:
        return None
    name, bounds, nodes = matched
    return (clip(x, *bounds) if name == "clip" else ex.Unary(name, x)), nodes


def walk(g: Graph, expr, last: Node, leaves: Leaves):
    """The chain past ``last`` (whose value is ``expr``) while each next node is the sole reader of
    the last one's value and a step: (tree, last node, the nodes taken)."""
    nodes = []
    while True:
        found = activation(g, last.var, expr)
        user = g.sole_user(last.var) if found is None else None
        if found is None and user is not None:
            found = batch_norm(g, user, last.var, expr, leaves)
        if found is None:
            step = node_expression(user, last.var, expr, leaves) if user is not None and leaves.follows(user) else None
            if step is None:
                return expr, last, nodes
            found = step, [user]
        expr, taken = found
        nodes += taken
        last = taken[-1]
