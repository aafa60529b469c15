"""An elementwise chain as a small expression: an anchor kernel's epilogue ``expr``, and the
whole body of a plain-buffer elementwise kernel (``primfuncs.plain_elementwise``).

A frozen, hashable tree (so an :class:`~primfuncs.epilogue.Epilogue` holding one, or a factory
taking one, keys a kernel like any other argument) whose nodes are :class:`Unary` (every entry of
:data:`primfuncs.activation_table.TABLE` with its parameters, plus :data:`UNARY`) and
:class:`Binary` (:data:`BINARY`), and whose leaves are scalar constants :class:`Const` and, by
the kernel that reads the tree:

- an anchor's epilogue (:data:`LANE_LEAVES`, evaluated per lane): the kernel's value :class:`X`,
  per-output-channel constants :class:`Channel` (their values live outside the tree: the kernel
  reads row ``index`` of its packed constants) and up to :data:`MAX_OPERANDS` other activations
  :class:`Operand` (number ``index``; each the output's shape, or broadcast per channel
  ``[N, C, 1, 1]`` or per pixel ``[N, 1, H, W]``);
  ``pow``'s exponent is a constant there;
- a plain elementwise kernel (:data:`PLAIN_LEAVES`): its tensor inputs :class:`Input`, each
  broadcast to the output by NumPy's rules.

Every op is written once, as a formula over an ops namespace (the activation table's convention):
:func:`evaluate` walks the tree with the kernels' TIR namespace (``primfuncs.epilogue.TirOps``:
per lane in the anchors' epilogues, per element of plain buffers in ``plain_elementwise``) or with
the float64 NumPy one (:func:`numpy_evaluate`, the references and tests). Like the activation
table, this module imports nothing of TVM.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .activation_table import NUMPY, TABLE

#: Unary ops beside the named activations: formulas over an ops namespace.
UNARY = {
    "neg": lambda o, x: -x,
    "abs": lambda o, x: o.abs(x),
    "exp": lambda o, x: o.exp(x),
    "sqrt": lambda o, x: o.sqrt(x),
    "log": lambda o, x: o.log(x),
    "tanh": lambda o, x: o.tanh(x),
    "erf": lambda o, x: o.erf(x),
    "reciprocal": lambda o, x: o.divide(o.const(1), x),
}
#: Binary ops (``pow``: the exponent is a :class:`Const`, or in a plain kernel any expression of its inputs).
BINARY = {
    "add": lambda o, a, b: a + b,
    "subtract": lambda o, a, b: a - b,
    "multiply": lambda o, a, b: a * b,
    "divide": lambda o, a, b: o.divide(a, b),
    "maximum": lambda o, a, b: o.maximum(a, b),
    "minimum": lambda o, a, b: o.minimum(a, b),
    "pow": lambda o, a, b: o.power(a, b),
}
#: How an :class:`Operand` broadcasts onto the output ``[N, C, H, W]``.
OPERAND_KINDS = ("full", "channel", "pixel")
#: How many other activations an expression reads at most (the conv's direct kernel and the GEMM
#: read two; the other anchors one: ``Epilogue.extra_kinds`` and the factories' checks).
MAX_OPERANDS = 2


@dataclass(frozen=True)
class X:
    """The kernel's value (after its bias, residual and named activation)."""


@dataclass(frozen=True)
class Const:
    value: float

    def __post_init__(self):
        if not isinstance(self.value, float):
            object.__setattr__(self, "value", float(self.value))


@dataclass(frozen=True)
class Channel:
    """Per-output-channel constant number ``index`` (packed like the bias: ``(C/4, 4)`` a row)."""

    index: int


@dataclass(frozen=True)
class Operand:
    """Other activation number ``index`` the kernel reads (a buffer after its residual:
    ``Epilogue.extra_kinds``), broadcast as ``kind`` says."""

    kind: str = "full"
    index: int = 0

    def __post_init__(self):
        if self.kind not in OPERAND_KINDS:
            raise ValueError(f"operand kind must be one of {OPERAND_KINDS}, got {self.kind!r}")
        if self.index not in range(MAX_OPERANDS):
            raise ValueError(f"operand index must be below {MAX_OPERANDS}, got {self.index!r}")


@dataclass(frozen=True)
class Input:
    """Tensor input ``index`` of a plain elementwise kernel, broadcast to its output by NumPy's rules."""

    index: int


#: The leaves an anchor's per-lane epilogue reads, and those a plain elementwise kernel reads.
LANE_LEAVES = (X, Const, Channel, Operand)
PLAIN_LEAVES = (Input, Const)


@dataclass(frozen=True)
class Unary:
    """``op(arg)``: a name of :data:`UNARY` or an activation of the table, ``params`` its
    parameters as ``((name, value), ...)``."""

    op: str
    arg: object
    params: tuple = ()

    def __post_init__(self):
        if self.op in TABLE:
            TABLE[self.op].check_params(dict(self.params))
        elif self.op not in UNARY or self.params:
            raise ValueError(f"unary op must be one of {sorted(UNARY)} (no parameters) or an activation {sorted(TABLE)}, "
                             f"got {self.op!r} {self.params!r} (an unknown activation or op)")
        if self.op == "clip":  # None: no bound (np.clip's)
            lo, hi = (dict(self.params).get(k, TABLE["clip"].params[k]) for k in ("lo", "hi"))
            if lo is not None and hi is not None and not lo <= hi:
                raise ValueError(f"clip needs lo <= hi, got {lo} > {hi}")


@dataclass(frozen=True)
class Binary:
    op: str
    a: object
    b: object

    def __post_init__(self):
        if self.op not in BINARY:
            raise ValueError(f"binary op must be one of {sorted(BINARY)}, got {self.op!r}")
        if self.op == "pow" and not exponent_allowed(self.b):
            raise ValueError(f"pow takes a constant exponent (or a plain kernel's inputs), got {self.b!r}")


def exponent_allowed(e) -> bool:
    """Whether ``e`` may be ``pow``'s exponent: a constant, or in a plain kernel an expression of its
    inputs (a per-lane epilogue raises only to constant powers)."""
    return all(isinstance(leaf, PLAIN_LEAVES) for leaf in leaves(e))


def leaves(e):
    """Every leaf of ``e``, depth first."""
    if isinstance(e, Unary):
        return leaves(e.arg)
    if isinstance(e, Binary):
        return leaves(e.a) + leaves(e.b)
    return (e,)


def check_leaves(e, allowed: tuple) -> None:
    """ValueError naming the first leaf of ``e`` that is no node of this module or not one of the
    ``allowed`` leaf types (:data:`LANE_LEAVES`, :data:`PLAIN_LEAVES`)."""
    for leaf in leaves(e):
        if not isinstance(leaf, allowed):
            known = isinstance(leaf, (X, Const, Channel, Operand, Input))
            raise ValueError(f"{'a leaf this kernel does not read' if known else 'unknown or malformed expression node'} "
                             f"{leaf!r} (it reads {', '.join(t.__name__ for t in allowed)})")


def inputs_read(e) -> set:
    """The indices of the plain kernel's inputs ``e`` reads (its :class:`Input` leaves)."""
    return {leaf.index for leaf in leaves(e) if isinstance(leaf, Input)}


def operand_kinds(e) -> tuple:
    """The kinds of ``e``'s operands by index (``()`` without one): indices 0..n-1, one kind each."""
    found = {}
    for leaf in leaves(e):
        if isinstance(leaf, Operand) and found.setdefault(leaf.index, leaf.kind) != leaf.kind:
            raise ValueError(f"operand {leaf.index} is read with kinds {found[leaf.index]!r} and {leaf.kind!r}")
    if sorted(found) != list(range(len(found))):
        raise ValueError(f"an expression's operands are numbered from 0 without gaps, got {sorted(found)}")
    return tuple(found[i] for i in range(len(found)))


def channel_count(e) -> int:
    """How many per-channel constants ``e`` reads (its :class:`Channel` indices are 0..count-1)."""
    return max((leaf.index + 1 for leaf in leaves(e) if isinstance(leaf, Channel)), default=0)


def evaluate(e, ops, x=None, operands=(), channel=None, inputs=()):
    """``e`` over the ops namespace ``ops``: ``x`` the kernel's value, ``operands[i]`` operand ``i``'s,
    ``channel(i)`` per-channel constant ``i``, ``inputs[i]`` a plain kernel's input ``i`` (all
    already broadcast to the element or lane being computed)."""

    def walk(node):
        if isinstance(node, Unary):
            arg = walk(node.arg)
            return TABLE[node.op](ops, arg, **dict(node.params)) if node.op in TABLE else UNARY[node.op](ops, arg)
        if isinstance(node, Binary):
            return BINARY[node.op](ops, walk(node.a), walk(node.b))
        if isinstance(node, X):
            return x
        if isinstance(node, Const):
            return ops.const(node.value)
        if isinstance(node, Channel):
            return channel(node.index)
        if isinstance(node, Operand):
            return operands[node.index]
        if isinstance(node, Input):
            return inputs[node.index]
        raise TypeError(f"not an expression node: {node!r}")

    return walk(e)


def numpy_evaluate(e, x, operands=(), channels=(), channel_axis: int = 1) -> np.ndarray:
    """float64 ``e`` of NCHW (or any rank) ``x``: ``operands`` (by index) broadcast by NumPy's rules,
    ``channels`` one vector per :class:`Channel` along ``channel_axis`` of ``x``."""
    x = np.asarray(x, np.float64)
    axis = channel_axis % x.ndim

    def channel(i):
        shape = [1] * x.ndim
        shape[axis] = -1
        return np.asarray(channels[i], np.float64).reshape(shape)

    ops = [np.asarray(op, np.float64) for op in operands]
    with np.errstate(all="ignore"):
        return np.asarray(np.broadcast_to(evaluate(e, NUMPY, x, ops, channel), x.shape), np.float64)


def describe(e) -> str:
    """``e`` as one readable line (op_info, profiles): ``relu(x * c0 + 0.5)``."""
    if isinstance(e, X):
        return "x"
    if isinstance(e, Const):
        return repr(e.value)
    if isinstance(e, Channel):
        return f"c{e.index}"
    if isinstance(e, Operand):
        name = "operand" if e.index == 0 else f"operand{e.index}"
        return name if e.kind == "full" else f"{name}[{e.kind}]"
    if isinstance(e, Input):
        return f"in{e.index}"
    if isinstance(e, Unary):
        params = "".join(f", {k}={v!r}" for k, v in e.params)
        return f"{e.op}({describe(e.arg)}{params})"
    return f"{e.op}({describe(e.a)}, {describe(e.b)})"
