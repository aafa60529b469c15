"""Activations however the importer writes them: a chain of scalar elementwise nodes is
named by comparing its values with each activation's on dense samples (ReLU6 as
``clip(0, 6)`` or ``maximum``/``minimum``, HardSigmoid as ``clip(x/6 + 0.5)`` or
``relu6(x + 3) / 6``, ...), and the gated forms ``x * gate(x)`` (SiLU, HardSwish, GELU)."""

from __future__ import annotations

import functools
import math

import numpy as np

from primfuncs.activation_table import TABLE, numpy_activation

from tir_adreno.passes.affine import linear_step, other_operand
from tir_adreno.passes.graph import Graph, Node, const, same, static_shape

#: The activations named by their values alone, as float64 NumPy functions (the table's formulas,
#: parameters at their defaults), to recognize the importer's forms of them.
ACTIVATION_FUNCTIONS = {name: functools.partial(numpy_activation, name=name) for name, a in TABLE.items() if a.sampled}
#: The gated activations ``x * gate(x)`` by the name of their gate.
GATED = {a.gate: name for name, a in TABLE.items() if a.gate}
erf = np.vectorize(math.erf, otypes=[np.float64])

# Dense over the breakpoints of the piecewise-linear forms, plus far values (saturation, slope).
SAMPLES = np.concatenate([np.linspace(-10.0, 10.0, 4001), [-1e4, -100.0, 100.0, 1e4]])


def clip_range(node: Node):
    lo, hi = node.args[1], node.args[2]
    try:
        return float(lo.value), float(hi.value)
    except AttributeError:
        return None


def clip_fields(bounds) -> dict:
    """Epilogue / factory keywords of a clip's bounds (none for other activations)."""
    return {} if bounds is None else {"clip_min": bounds[0], "clip_max": bounds[1]}


def _unary_step(node: Node, var):
    """A float64 function of the unary ops that can be a step, else None."""
    if not same(node.args[0], var):
        return None
    if node.op == "relax.nn.relu":
        return ACTIVATION_FUNCTIONS["relu"]
    if node.op == "relax.sigmoid":
        return ACTIVATION_FUNCTIONS["sigmoid"]
    if node.op in ("relax.erf", "relax.tanh"):  # GELU's gate
        return erf if node.op == "relax.erf" else np.tanh
    bounds = clip_range(node) if node.op == "relax.clip" else None
    return None if bounds is None else (lambda x: np.clip(x, *bounds))


def scalar_step(node: Node, var):
    """``node`` as one step of an elementwise chain on ``var`` with scalar constants:
    a NumPy float64 function (for :func:`name_activation`), else None."""
    if node.op in ("relax.nn.relu", "relax.sigmoid", "relax.erf", "relax.tanh", "relax.clip"):
        return _unary_step(node, var)
    if node.op in ("relax.maximum", "relax.minimum") and len(node.args) == 2 and static_shape(node.var) == static_shape(var):
        c = const(other_operand(node, var)) if other_operand(node, var) is not None else None
        if c is None or c.size != 1:
            return None
        fn, bound = (np.maximum if node.op == "relax.maximum" else np.minimum), float(c.reshape(()))
        return lambda x: fn(x, bound)
    step = linear_step(node, var, 1)
    if step is None:
        return None
    scale, shift = float(step[0][0]), float(step[1][0])
    return lambda x: x * scale + shift


def _run(steps):
    y = SAMPLES
    for fn in steps:
        y = fn(y)
    return y


def gelu_gate_scale(steps, mul: Node, g: Graph):
    """GELU as torch exports it, ``x * (1 + erf(x / sqrt 2)) * 0.5``: when the gate chain
    ``steps`` computes ``r * Phi(x)`` (Phi the normal CDF), the nodes after ``mul`` that
    scale its result by ``1 / r`` (none when r = 1), else None."""
    y = _run(steps)
    phi = 0.5 * (1.0 + erf(SAMPLES / math.sqrt(2.0)))
    at = int(np.argmin(np.abs(SAMPLES - 1.0)))  # Phi(1) is well away from 0
    r = float(y[at] / phi[at])
    if not np.allclose(y, r * phi, rtol=1e-6, atol=1e-6):
        return None
    if abs(r - 1.0) < 1e-6:
        return []
    user = g.sole_user(mul.var)
    step = scalar_step(user, mul.var) if user is not None else None
    if step is None or abs(float(step(np.float64(0.0)))) > 1e-12 or abs(float(step(np.float64(r))) - 1.0) > 1e-6:
        return None
    return [user]


def name_activation(steps):
    """The activation (name, clip bounds) that the chain ``steps`` computes, else None.

    The importer writes one activation in several forms (ReLU6 as ``clip(0, 6)`` or as
    ``maximum(x, 0)`` then ``minimum(x, 6)``; HardSigmoid as ``clip(x/6 + 0.5, 0, 1)``
    or ``relu6(x + 3) / 6``); comparing the chain's values with each activation's on
    samples dense around their breakpoints names them all with one rule."""
    with np.errstate(over="ignore"):  # exp(-x) for x = -1e4 is inf: sigmoid 0, as it should
        y = _run(steps)
        for name, fn in ACTIVATION_FUNCTIONS.items():
            if np.allclose(y, fn(SAMPLES), rtol=1e-6, atol=1e-6):
                return name, None
    lo, hi = float(y.min()), float(y.max())
    saturates = np.count_nonzero(y == lo) > 1 and np.count_nonzero(y == hi) > 1
    if saturates and np.allclose(y, np.clip(SAMPLES, lo, hi), rtol=1e-6, atol=1e-6):
        return "clip", (lo, hi)  # a clamp whose both bounds lie inside the samples
    return None


def _gate_chain(g: Graph, var, start: Node, gate):
    """The scalar steps from ``start`` (reading ``var``) to ``gate``, whose only user must be
    the multiply: (nodes, steps), else None."""
    chain, steps, cur = [start], [scalar_step(start, var)], start.var
    while not same(cur, gate):
        nxt = g.sole_user(cur)
        step = scalar_step(nxt, cur) if nxt is not None else None
        if step is None:
            return None
        chain.append(nxt)
        steps.append(step)
        cur = nxt.var
    return chain, steps


def match_gated(g: Graph, var, first: Node | None = None):
    """``var * gate(var)`` with a named gate chain: SiLU (sigmoid gate), HardSwish (hardsigmoid
    gate) or GELU (``Phi`` gate, then its scale): (name, None, nodes), else None."""
    users = g.users(var)
    for start, mul in (users, users[::-1]) if len(users) == 2 and g.uses.get(var, 0) == 2 else ():
        if mul.op != "relax.multiply" or start is mul or (first is not None and first is not start and first is not mul):
            continue
        gate = other_operand(mul, var)
        found = _gate_chain(g, var, start, gate) if gate is not None and scalar_step(start, var) is not None else None
        if found is None or g.sole_user(gate) is not mul or static_shape(mul.var) != static_shape(var):
            continue
        chain, steps = found
        named = name_activation(steps)
        if named is not None and named[0] in GATED:
            return GATED[named[0]], None, [*chain, mul]
        gelu_tail = gelu_gate_scale(steps, mul, g) if named is None else None
        if gelu_tail is not None:
            return "gelu", None, [*chain, mul, *gelu_tail]
    return None


def match_activation(g: Graph, var, first: Node | None = None):
    """The longest chain of scalar elementwise nodes from ``var`` (starting with its sole
    user, or with ``first``) that computes a named activation, or the gated form
    ``var * gate(var)`` (:func:`match_gated`): (name, clip bounds, nodes), else None.
    Nothing is marked fused."""
    gated = match_gated(g, var, first)
    if gated is not None:
        return gated
    found = None  # the longest named prefix
    chain, steps, cur = [], [], var
    user = first if first is not None else g.sole_user(var)
    while user is not None:
        step = scalar_step(user, cur)
        if step is None:
            break
        chain.append(user)
        steps.append(step)
        named = name_activation(steps)
        if named is not None:
            found = (named[0], named[1], list(chain))
        cur = user.var
        user = g.sole_user(cur)
    return found


def fuse_activation(g: Graph, var):
    """:func:`match_activation` from ``var``, its nodes marked fused: (name, clip bounds, the last
    node), else None (nothing marked)."""
    matched = match_activation(g, var)
    if matched is None:
        return None
    name, bounds, nodes = matched
    for m in nodes:
        m.fused = True
    return name, bounds, nodes[-1]
