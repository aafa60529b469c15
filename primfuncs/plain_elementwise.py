"""Elementwise kernels on plain row-major buffers (the token layout of docs/design.md: tokens
``[N, L, C]``, heads ``[B, heads, L, d]``, channels-last maps ``[N, H, W, C]``, any rank).

One factory, :func:`fused_elementwise`, computes one expression of up to :data:`MAX_INPUTS`
tensors with NumPy broadcasting, so a chain of unary and binary ops on one tensor (HardSwish as
the exporter writes it: ``x + 3``, ``clip``, ``/ 6``, ``* x``; a residual add then a scale) is one
kernel. The expression is plain data (nested tuples, a stable kernel key):

- ``("in", i)``: input ``i`` (its shape broadcasts to the output's by NumPy's rules: aligned at
  the last axis, each dim 1 or the output's);
- ``("const", v)``: a scalar constant;
- ``(op, a, b)`` with ``op`` in :data:`BINARY` (add, subtract, multiply, divide, maximum, minimum,
  power: NumPy's semantics, NaN kept by maximum/minimum);
- ``(op, a)`` with ``op`` in :data:`UNARY` (sqrt, exp, log, negative, abs, reciprocal, erf, tanh);
- ``("clip", lo, hi, a)`` (``np.clip``, None for no bound);
- ``("act", name, params, a)``: an entry of ``primfuncs.activation_table`` with its parameters
  (``params`` a tuple of (name, value) pairs; clip's are ``lo``, ``hi``).

One work item owns ``v`` adjacent outputs along the last axis: ``v = 4`` when the last axis is
a multiple of 4 (every load along it, and the store, one vector access), else 1.
"""

from __future__ import annotations

import math

from tvm import tirx
from tvm.script import tirx as T

from ._common import ceildiv, check_dtype, clamp, maximum, minimum, select_params
from .activation_table import TABLE
from .epilogue import activate

#: The most tensor inputs one kernel reads (a longer chain is split by the rule).
MAX_INPUTS = 4
#: Work items per work group.
THREADS = 64


def _power(a, b, dtype):
    """``a ** b``; a constant exponent of 1, 2, 3 or -1 as multiplications or a division (not 0.5 as
    sqrt: ``pow(-inf, 0.5)`` is inf, ``sqrt(-inf)`` NaN)."""
    exponent = float(b.value) if isinstance(b, tirx.FloatImm) else None
    if exponent == 1.0:
        return a
    if exponent == 2.0:
        return a * a
    if exponent == 3.0:
        return a * a * a
    if exponent == -1.0:
        return T.FloatImm(dtype, 1.0) / a
    return T.pow(a, b)


def _tanh(x, dtype):
    # 1 - 2 / (exp(2x) + 1): exact at +-inf and NaN-preserving (TVM's OpenCL tanh is approximate)
    one = T.FloatImm(dtype, 1.0)
    return one - T.FloatImm(dtype, 2.0) / (T.exp(x * T.FloatImm(dtype, 2.0)) + one)


BINARY = {
    "add": lambda a, b, d: a + b,
    "subtract": lambda a, b, d: a - b,
    "multiply": lambda a, b, d: a * b,
    "divide": lambda a, b, d: a / b,  # IEEE: x / 0 is +-inf, 0 / 0 NaN, as in NumPy
    "maximum": lambda a, b, d: maximum(a, b),
    "minimum": lambda a, b, d: minimum(a, b),
    "power": _power,
}
UNARY = {
    "sqrt": lambda x, d: T.sqrt(x),
    "exp": lambda x, d: T.exp(x),
    "log": lambda x, d: T.log(x),
    "negative": lambda x, d: -x,
    "abs": lambda x, d: T.fabs(x),
    "reciprocal": lambda x, d: T.FloatImm(d, 1.0) / x,
    "erf": lambda x, d: T.erf(x),
    "tanh": _tanh,
}


def check_expr(expr, inputs: int) -> set:
    """ValueError naming the first malformed part of ``expr``; the input indices it reads."""
    if not isinstance(expr, tuple) or not expr:
        raise ValueError(f"expression must be a non-empty tuple, got {expr!r}")
    op, *rest = expr
    if op == "in":
        if len(rest) != 1 or not isinstance(rest[0], int) or not 0 <= rest[0] < inputs:
            raise ValueError(f"('in', i) needs 0 <= i < {inputs}, got {expr!r}")
        return {rest[0]}
    if op == "const":
        if len(rest) != 1 or not isinstance(rest[0], (int, float)):
            raise ValueError(f"('const', v) needs a number, got {expr!r}")
        return set()
    if op in BINARY and len(rest) == 2:
        return check_expr(rest[0], inputs) | check_expr(rest[1], inputs)
    if op in UNARY and len(rest) == 1:
        return check_expr(rest[0], inputs)
    if op == "clip" and len(rest) == 3:
        lo, hi = rest[0], rest[1]
        if lo is not None and hi is not None and not lo <= hi:
            raise ValueError(f"clip needs lo <= hi, got {expr!r}")
        return check_expr(rest[2], inputs)
    if op == "act" and len(rest) == 3:
        name, params = rest[0], rest[1]
        if name not in TABLE:
            raise ValueError(f"unknown activation {name!r}; expected one of {sorted(TABLE)}")
        TABLE[name].check_params(dict(params))
        return check_expr(rest[2], inputs)
    raise ValueError(f"unknown or malformed expression node {expr!r}")


def _evaluate(expr, loads, dtype):
    """The TIR expression of ``expr``, ``loads[i]`` the value of input ``i``."""
    op, *rest = expr
    if op == "in":
        return loads[rest[0]]
    if op == "const":
        return T.FloatImm(dtype, float(rest[0]))
    if op in BINARY:
        return BINARY[op](_evaluate(rest[0], loads, dtype), _evaluate(rest[1], loads, dtype), dtype)
    if op in UNARY:
        return UNARY[op](_evaluate(rest[0], loads, dtype), dtype)
    if op == "clip":
        lo, hi, x = rest
        return clamp(_evaluate(x, loads, dtype), *(None if b is None else T.FloatImm(dtype, float(b)) for b in (lo, hi)))
    name, params, x = rest
    params = dict(params)
    bounds = {"clip_min": params.pop("lo", 0.0), "clip_max": params.pop("hi", 6.0)} if name == "clip" else {}
    return activate(_evaluate(x, loads, dtype), name, dtype, params=tuple(params.items()), **bounds)


def _check_shapes(out_shape, input_shapes):
    out_shape = tuple(int(d) for d in out_shape)
    if not out_shape or min(out_shape) < 1:
        raise ValueError(f"out_shape must have rank >= 1 and positive dims, got {out_shape}")
    shapes = tuple(tuple(int(d) for d in s) for s in input_shapes)
    if not 1 <= len(shapes) <= MAX_INPUTS:
        raise ValueError(f"fused_elementwise takes 1 to {MAX_INPUTS} inputs, got {len(shapes)}")
    for s in shapes:
        if not s or len(s) > len(out_shape) or any(d not in (1, o) for d, o in zip(s[::-1], out_shape[::-1])):
            raise ValueError(f"input shape {s} does not broadcast to {out_shape} (NumPy's rules: aligned at the last axis)")
    return out_shape, shapes


def fused_elementwise(out_shape, input_shapes, expr, dtype: str = "float32"):
    """``Y = expr(inputs)`` on plain buffers, inputs broadcast to ``out_shape`` (module docstring)."""
    out_shape, shapes = _check_shapes(out_shape, input_shapes)
    check_dtype(dtype)
    if check_expr(expr, len(shapes)) != set(range(len(shapes))):
        raise ValueError(f"expression {expr!r} must read every one of its {len(shapes)} inputs")
    rank, last = len(out_shape), out_shape[-1]
    v = 4 if last % 4 == 0 else 1
    items = math.prod(out_shape[:-1]) * (last // v)
    # row-major strides of the output's leading axes, in work items
    strides = [math.prod(out_shape[k + 1:-1]) * (last // v) for k in range(rank - 1)]
    padded = list(shapes) + [(1,)] * (MAX_INPUTS - len(shapes))
    blocks = ceildiv(items, THREADS)

    def index(shape, item, lane):
        # ``shape`` aligned with the output's trailing axes; an axis of extent 1 is read at 0
        pad = rank - len(shape)
        lead = [(item // strides[k]) % out_shape[k] if shape[k - pad] != 1 else 0 for k in range(pad, rank - 1)]
        col = (item % (last // v)) * v + lane if shape[-1] != 1 else 0
        return (*lead, col)

    n_in = len(shapes)

    @T.macro
    def load(X, k, A, vi):
        for lane in T.vectorized(v):
            X[k, lane] = A[index(shapes[k], vi, lane)]

    @T.prim_func(s_tir=True)
    def func(a0: T.handle, a1: T.handle, a2: T.handle, a3: T.handle, y: T.handle):
        T.func_attr({"global_symbol": "elementwise_plain", "tirx.noalias": True})
        A0 = T.match_buffer(a0, padded[0], dtype)
        A1 = T.match_buffer(a1, padded[1], dtype)
        A2 = T.match_buffer(a2, padded[2], dtype)
        A3 = T.match_buffer(a3, padded[3], dtype)
        Y = T.match_buffer(y, out_shape, dtype)
        for bx in T.thread_binding(blocks, thread="blockIdx.x"):
            for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
                with T.sblock("elementwise"):
                    vi = T.axis.spatial(items, bx * THREADS + tx)
                    T.where(bx * THREADS + tx < items)
                    # each input read once (one vector load along a contiguous last axis)
                    X = T.sblock_alloc_buffer((n_in, v), dtype, scope="local")
                    load(X, 0, A0, vi)
                    if n_in > 1:
                        load(X, 1, A1, vi)
                    if n_in > 2:
                        load(X, 2, A2, vi)
                    if n_in > 3:
                        load(X, 3, A3, vi)
                    for lane in T.vectorized(v):
                        Y[index(out_shape, vi, lane)] = _evaluate(expr, [X[k, lane] for k in range(n_in)], dtype)

    return select_params(func, [f"A{i}" for i in range(len(shapes))] + ["Y"])
