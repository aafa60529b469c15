"""Elementwise kernels on plain row-major buffers (the token layout of docs/design.md: tokens
``[N, L, C]``, heads ``[B, heads, L, d]``, channels-last maps ``[N, H, W, C]``, any rank).

One factory, :func:`fused_elementwise`, computes one expression of up to :data:`MAX_INPUTS`
tensors with NumPy broadcasting, so a chain of unary and binary ops on one tensor (HardSwish as
the exporter writes it: ``x + 3``, ``clip``, ``/ 6``, ``* x``; a residual add then a scale) is one
kernel. The expression is a :mod:`primfuncs.epilogue_expr` tree (the anchors' epilogue
expressions, evaluated by the same formulas) whose leaves are :class:`~primfuncs.epilogue_expr.Input`
``i`` (input ``i``: its shape broadcasts to the output's by NumPy's rules, aligned at the last axis,
each dim 1 or the output's) and scalar :class:`~primfuncs.epilogue_expr.Const` s; its ops have
NumPy's semantics (NaN kept by maximum, minimum and clip; a clip bound None is no bound).

One work item owns ``v`` adjacent outputs along the last axis: ``v = 4`` when the last axis is
a multiple of 4 (every load along it, and the store, one vector access), else 1.
"""

from __future__ import annotations

import math

from tvm.script import tirx as T

from . import epilogue_expr as ex
from ._common import ceildiv, check_dtype, select_params
from .epilogue import TirOps

#: The most tensor inputs one kernel reads (a longer chain is split by the rule).
MAX_INPUTS = 4
#: Work items per work group.
THREADS = 64


def check_expr(expr, inputs: int) -> None:
    """ValueError naming what is wrong with ``expr`` as the body of a kernel of ``inputs`` inputs:
    a leaf other than inputs and constants, or not reading exactly inputs ``0..inputs-1``."""
    ex.check_leaves(expr, ex.PLAIN_LEAVES)
    read = ex.inputs_read(expr)
    if read != set(range(inputs)):
        raise ValueError(f"expression {ex.describe(expr)} must read every one of its {inputs} inputs "
                         f"(and no other), it reads {sorted(read)}")


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
    check_expr(expr, len(shapes))
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
                        Y[index(out_shape, vi, lane)] = ex.evaluate(expr, TirOps(dtype), inputs=[X[k, lane] for k in range(n_in)])

    return select_params(func, [f"A{i}" for i in range(len(shapes))] + ["Y"])
