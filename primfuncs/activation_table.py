"""Every named activation, written once: a formula over an ops namespace, parameters included.

One formula serves the three readers an activation has: the kernels (``primfuncs.epilogue.TirOps``:
TIR expressions of one dtype), the float64 NumPy reference (:data:`NUMPY`, which
``tir_adreno.reference`` and the tests compare with) and the graph's recognizer
(``tir_adreno.passes.activations``, which names an importer's chain of elementwise nodes by
comparing its values on samples with each formula's under :data:`NUMPY`). Adding an activation,
parametrized or not, is one entry of :data:`TABLE`.

An ops namespace has ``const(v)`` (a constant of the arithmetic's type), ``clip(x, lo, hi)``
(``np.clip`` with constant bounds, None for no bound; NaN stays NaN), ``select(cond, a, b)``,
``exp``, ``erf`` (and for ``primfuncs.epilogue_expr``: ``abs``, ``sqrt``, ``log``, ``tanh``,
``maximum``, ``minimum``, ``power``); ``+ - * /``, unary ``-`` and ``<`` are the values' own operators.

This module imports nothing of the project and no TVM (the layer contracts let
``tir_adreno.reference`` read it although it lives among the kernels: it is their definition).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Activation:
    """A named activation: ``formula(ops, x, **params)``, its parameters' defaults, and how the
    recognizer finds it (``sampled``: by its values alone; ``gate``: it is ``x * gate(x)``)."""

    name: str
    formula: Callable
    params: dict = field(default_factory=dict)
    sampled: bool = False
    gate: str | None = None

    def check_params(self, params: dict) -> None:
        """ValueError naming any of ``params`` this activation does not have."""
        unknown = set(params) - set(self.params)
        if unknown:
            raise ValueError(f"activation {self.name!r} has no parameter(s) {sorted(unknown)} (it has {sorted(self.params)})")

    def __call__(self, ops, x, **params):
        self.check_params(params)
        return self.formula(ops, x, **{**self.params, **params})


def _sigmoid(o, x):
    return o.const(1) / (o.const(1) + o.exp(-x))  # exp overflow gives 0, as NumPy


def _hardsigmoid(o, x, alpha, beta):
    # clip(alpha x + beta, 0, 1) written as clip(x + beta / alpha, 0, 1 / alpha) / (1 / alpha):
    # PyTorch's relu6(x + 3) / 6 exactly for its alpha = 1/6, beta = 1/2 (the kernels' form since
    # before the table: the same OpenCL).
    scale = 1.0 / alpha
    return o.clip(x + o.const(beta * scale), o.const(0), o.const(scale)) / o.const(scale)


def _gelu(o, x):
    # as written (not fused into x * Phi(x)), so -inf gives NaN like PyTorch's formula
    return x * o.const(0.5) * (o.const(1) + o.erf(x * o.const(0.5**0.5)))


def _gelu_tanh(o, x):
    # 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)): TVM's OpenCL tanh is approximate
    u = o.const(2 * (2 / math.pi) ** 0.5) * (x + o.const(0.044715) * x * x * x)
    return x / (o.const(1) + o.exp(-u))


def _bound(o, v):
    return None if v is None else o.const(v)  # clip's None: no bound (np.clip's)


def _leaky_relu(o, x, alpha):
    return o.select(x < o.const(0), x * o.const(alpha), x)  # NaN: the comparison is false, x stays


#: The activations by name (names as in PyTorch / Relax). ``hardsigmoid`` is ONNX's
#: ``clip(alpha x + beta, 0, 1)`` with PyTorch's defaults, ``hardswish`` ``x * hardsigmoid(x)``,
#: ``silu`` ``x * sigmoid(x)``; ``gelu`` the erf form, ``gelu_tanh`` PyTorch's ``approximate="tanh"``.
TABLE = {a.name: a for a in (
    Activation("relu", lambda o, x: o.clip(x, o.const(0), None), sampled=True),
    Activation("relu6", lambda o, x: o.clip(x, o.const(0), o.const(6)), sampled=True),
    Activation("clip", lambda o, x, lo, hi: o.clip(x, _bound(o, lo), _bound(o, hi)), {"lo": 0.0, "hi": 6.0}),
    Activation("sigmoid", _sigmoid, sampled=True),
    Activation("silu", lambda o, x: x * _sigmoid(o, x), gate="sigmoid"),
    Activation("hardsigmoid", _hardsigmoid, {"alpha": 1.0 / 6.0, "beta": 0.5}, sampled=True),
    Activation("hardswish", lambda o, x: x * _hardsigmoid(o, x, 1.0 / 6.0, 0.5), gate="hardsigmoid"),
    Activation("gelu", _gelu),
    Activation("gelu_tanh", _gelu_tanh),
    Activation("leaky_relu", _leaky_relu, {"alpha": 0.01}),
)}
#: The names an epilogue or an activation kernel accepts (None: identity).
NAMES = (None, *TABLE)


def activation(name: str) -> Activation:
    """The table's entry ``name``, ValueError naming the known ones."""
    if name not in TABLE:
        raise ValueError(f"activation must be one of {NAMES}, got {name!r}")
    return TABLE[name]


class NumpyOps:
    """The ops namespace of the float64 NumPy references (NaN and Inf as NumPy has them)."""

    @staticmethod
    def const(v):
        return np.float64(v)

    @staticmethod
    def clip(x, lo, hi):
        x = x if lo is None else np.maximum(x, lo)
        return x if hi is None else np.minimum(x, hi)

    select = staticmethod(np.where)
    exp = staticmethod(np.exp)
    erf = staticmethod(np.vectorize(math.erf, otypes=[np.float64]))
    # the expression epilogue's other ops (primfuncs.epilogue_expr)
    abs = staticmethod(np.abs)
    sqrt = staticmethod(np.sqrt)
    log = staticmethod(np.log)
    tanh = staticmethod(np.tanh)
    maximum = staticmethod(np.maximum)
    minimum = staticmethod(np.minimum)
    power = staticmethod(np.power)
    divide = staticmethod(np.divide)


NUMPY = NumpyOps()


def numpy_activation(x, name: str | None, **params) -> np.ndarray:
    """float64 ``name`` (None: identity) of ``x``, NaN propagated, overflow silent (sigmoid of
    -inf-ish is 0, as the kernels have it)."""
    x = np.asarray(x, np.float64)
    if name is None:
        return x
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(activation(name)(NUMPY, x, **params), np.float64)
