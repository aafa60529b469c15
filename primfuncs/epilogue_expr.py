"""An elementwise chain after an anchor kernel as a small expression: the epilogue's ``expr``.

A frozen, hashable tree (so an :class:`~primfuncs.epilogue.Epilogue` holding one keys a kernel
like any other argument) whose leaves are the kernel's value :class:`X`, scalar constants
:class:`Const`, per-output-channel constants :class:`Channel` (their values live outside the tree:
the kernel reads row ``index`` of its packed constants) and one other activation :class:`Operand`
(same shape as the output, or broadcast per channel ``[N, C, 1, 1]`` or per pixel ``[N, 1, H, W]``),
and whose nodes are :class:`Unary` (every entry of :data:`primfuncs.activation_table.TABLE` with its
parameters, plus :data:`UNARY`) and :class:`Binary` (:data:`BINARY`; ``pow`` by a constant).

Every op is written once, as a formula over an ops namespace (the activation table's convention):
:func:`evaluate` walks the tree with the kernels' TIR namespace (``primfuncs.epilogue.TirOps``, per
lane) or with the float64 NumPy one (:func:`numpy_evaluate`, the references and tests). Like the
activation table, this module imports nothing of TVM.
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
    "tanh": lambda o, x: o.tanh(x),
    "erf": lambda o, x: o.erf(x),
    "reciprocal": lambda o, x: o.const(1) / x,
}
#: Binary ops (``pow``: the exponent is a :class:`Const`).
BINARY = {
    "add": lambda o, a, b: a + b,
    "subtract": lambda o, a, b: a - b,
    "multiply": lambda o, a, b: a * b,
    "divide": lambda o, a, b: a / b,
    "maximum": lambda o, a, b: o.maximum(a, b),
    "minimum": lambda o, a, b: o.minimum(a, b),
    "pow": lambda o, a, b: o.power(a, b),
}
#: How an :class:`Operand` broadcasts onto the output ``[N, C, H, W]``.
OPERAND_KINDS = ("full", "channel", "pixel")


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
    """The other activation the kernel reads (its ``Residual`` buffer), broadcast as ``kind`` says."""

    kind: str = "full"

    def __post_init__(self):
        if self.kind not in OPERAND_KINDS:
            raise ValueError(f"operand kind must be one of {OPERAND_KINDS}, got {self.kind!r}")


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
                             f"got {self.op!r} {self.params!r}")


@dataclass(frozen=True)
class Binary:
    op: str
    a: object
    b: object

    def __post_init__(self):
        if self.op not in BINARY:
            raise ValueError(f"binary op must be one of {sorted(BINARY)}, got {self.op!r}")
        if self.op == "pow" and not isinstance(self.b, Const):
            raise ValueError(f"pow takes a constant exponent, got {self.b!r}")


def leaves(e):
    """Every leaf of ``e``, depth first."""
    if isinstance(e, Unary):
        return leaves(e.arg)
    if isinstance(e, Binary):
        return leaves(e.a) + leaves(e.b)
    return (e,)


def operand_kind(e) -> str | None:
    """The kind of ``e``'s :class:`Operand` (one at most), None without one."""
    kinds = {leaf.kind for leaf in leaves(e) if isinstance(leaf, Operand)}
    if len(kinds) > 1:
        raise ValueError(f"an expression epilogue reads one operand, got kinds {sorted(kinds)}")
    return next(iter(kinds), None)


def channel_count(e) -> int:
    """How many per-channel constants ``e`` reads (its :class:`Channel` indices are 0..count-1)."""
    return max((leaf.index + 1 for leaf in leaves(e) if isinstance(leaf, Channel)), default=0)


def evaluate(e, ops, x, operand=None, channel=None):
    """``e`` over the ops namespace ``ops``: ``x`` the kernel's value, ``operand`` the operand's,
    ``channel(i)`` per-channel constant ``i`` (all already broadcast to ``x``'s shape or lane)."""
    if isinstance(e, X):
        return x
    if isinstance(e, Const):
        return ops.const(e.value)
    if isinstance(e, Channel):
        return channel(e.index)
    if isinstance(e, Operand):
        return operand
    if isinstance(e, Unary):
        arg = evaluate(e.arg, ops, x, operand, channel)
        return TABLE[e.op](ops, arg, **dict(e.params)) if e.op in TABLE else UNARY[e.op](ops, arg)
    if isinstance(e, Binary):
        return BINARY[e.op](ops, evaluate(e.a, ops, x, operand, channel), evaluate(e.b, ops, x, operand, channel))
    raise TypeError(f"not an expression node: {e!r}")


def numpy_evaluate(e, x, operand=None, channels=(), channel_axis: int = 1) -> np.ndarray:
    """float64 ``e`` of NCHW (or any rank) ``x``: ``operand`` broadcast by NumPy's rules,
    ``channels`` one vector per :class:`Channel` along ``channel_axis`` of ``x``."""
    x = np.asarray(x, np.float64)
    axis = channel_axis % x.ndim

    def channel(i):
        shape = [1] * x.ndim
        shape[axis] = -1
        return np.asarray(channels[i], np.float64).reshape(shape)

    op = None if operand is None else np.asarray(operand, np.float64)
    with np.errstate(all="ignore"):
        return np.asarray(np.broadcast_to(evaluate(e, NUMPY, x, op, channel), x.shape), np.float64)


def describe(e) -> str:
    """``e`` as one readable line (op_info, profiles): ``relu(x * c0 + 0.5)``."""
    if isinstance(e, X):
        return "x"
    if isinstance(e, Const):
        return repr(e.value)
    if isinstance(e, Channel):
        return f"c{e.index}"
    if isinstance(e, Operand):
        return "operand" if e.kind == "full" else f"operand[{e.kind}]"
    if isinstance(e, Unary):
        params = "".join(f", {k}={v!r}" for k, v in e.params)
        return f"{e.op}({describe(e.arg)}{params})"
    return f"{e.op}({describe(e.a)}, {describe(e.b)})"
