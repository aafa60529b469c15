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

An operand may also be a :class:`View`: a tensor of the output's shape read from the buffers
through ``primfuncs.gather`` sources (a slice, a split part, a transpose, a concat of slices:
MambaOut's ``gelu(g) * cat(i, c)`` reads ``g`` and ``i`` in the Linear's output and ``c`` in
the conv's), so the movement ops before an elementwise chain cost no launch of their own.

One work item owns ``v`` adjacent outputs along the last axis: ``v = 4`` when the last axis is
a multiple of 4 (every load along it, and the store, one vector access; a view's load where its
sources read 4 adjacent elements, else 4 scalar loads), else 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tvm.script import tirx as T

from . import epilogue_expr as ex
from . import gather
from ._common import ceildiv, check_dtype, select_params
from .epilogue import TirOps

#: The most tensor inputs one kernel reads (a longer chain is split by the rule).
MAX_INPUTS = 4
#: Work items per work group.
THREADS = 64


@dataclass(frozen=True)
class View:
    """An operand of the output's shape read through ``sources`` (``gather.Source`` s whose
    ``input`` is a buffer of the kernel), ``pad`` where none covers an element."""

    sources: tuple
    pad: float = 0.0


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
    return out_shape, shapes


def _check_broadcast(shape, out_shape) -> None:
    if not shape or len(shape) > len(out_shape) or any(d not in (1, o) for d, o in zip(shape[::-1], out_shape[::-1])):
        raise ValueError(f"input shape {shape} does not broadcast to {out_shape} (NumPy's rules: aligned at the last axis)")


def _check_operands(operands, shapes, out_shape) -> tuple:
    """``operands`` (None: one per buffer) as a checked tuple of buffer numbers and views."""
    if operands is None:
        operands = tuple(range(len(shapes)))
    operands, read = tuple(operands), set()
    if not 1 <= len(operands) <= MAX_INPUTS:
        raise ValueError(f"fused_elementwise takes 1 to {MAX_INPUTS} operands, got {len(operands)}")
    for op in operands:
        if isinstance(op, View):
            gather.check_sources(shapes, out_shape, tuple(op.sources))
            read.update(src.input for src in op.sources)
        elif isinstance(op, int) and 0 <= op < len(shapes):
            _check_broadcast(shapes[op], out_shape)
            read.add(op)
        else:
            raise ValueError(f"an operand is a buffer number below {len(shapes)} or a View, got {op!r}")
    if read != set(range(len(shapes))):
        raise ValueError(f"operands {operands} must read every one of the {len(shapes)} buffers, they read {sorted(read)}")
    return operands


def checked(out_shape, input_shapes, expr, operands=None) -> tuple:
    """(out_shape, input shapes, operands) of ``expr`` over ``operands`` of buffers ``input_shapes``
    computing a tensor of ``out_shape``, as tuples (``operands`` None: one per buffer); ValueError
    naming what is wrong (:func:`fused_elementwise`'s checks, a :class:`Producer`'s too)."""
    out_shape, shapes = _check_shapes(out_shape, input_shapes)
    operands = _check_operands(operands, shapes, out_shape)
    check_expr(expr, len(operands))
    return out_shape, shapes, operands


def _broadcast_index(shape, index) -> tuple:
    """The element of a buffer of ``shape`` (aligned at the output's last axis, an axis of extent 1
    read at 0) that element ``index`` of the output reads."""
    pad = len(index) - len(shape)
    return tuple(0 if d == 1 else i for d, i in zip(shape, index[pad:]))


@dataclass(frozen=True)
class Producer:
    """An operand that another kernel computes as it reads it: the body of a :func:`fused_elementwise`
    kernel (``expr`` over ``operands`` of buffers ``input_shapes``, the same meanings) evaluated at
    each element the reader loads, so the elementwise kernel is not launched and its output never
    stored (the GEMM's A: MambaOut's ``gelu(g) * cat(i, c)`` read by its second Linear)."""

    expr: object
    input_shapes: tuple
    operands: tuple | None = None

    def check(self, out_shape) -> Producer:
        """This producer, normalized (tuples), for an operand of ``out_shape``; ValueError as :func:`checked`'s."""
        _, shapes, operands = checked(out_shape, self.input_shapes, self.expr, self.operands)
        return Producer(self.expr, shapes, operands)

    def value(self, bufs, out_shape, index, dtype: str):
        """The expression's value at ``index`` of the operand (``out_shape``), its inputs read from
        ``bufs`` (one scalar load each: a view's through its sources)."""
        def operand(op):
            if isinstance(op, View):
                return gather.read_sources(bufs, op.sources, out_shape, index, T.FloatImm(dtype, float(op.pad)))
            return bufs[op][_broadcast_index(self.input_shapes[op], index)]

        return ex.evaluate(self.expr, TirOps(dtype), inputs=[operand(op) for op in self.operands])


def fused_elementwise(out_shape, input_shapes, expr, dtype: str = "float32", operands=None):
    """``Y = expr(operands)`` on plain buffers ``input_shapes`` (module docstring): expression input
    ``k`` is ``operands[k]``, a buffer's number (broadcast to ``out_shape``) or a :class:`View`;
    ``operands`` None: input ``k`` is buffer ``k``."""
    check_dtype(dtype)
    out_shape, shapes, operands = checked(out_shape, input_shapes, expr, operands)
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

    n_in = len(operands)
    vector_view = [isinstance(op, View) and v == 4 and all(gather.contiguous_last_axis(src, out_shape) for src in op.sources) for op in operands]

    def view_element(bufs, k, vi, lane, lanes=1):
        op = operands[k]
        return gather.read_sources(bufs, op.sources, out_shape, index(out_shape, vi, lane), T.FloatImm(dtype, float(op.pad)), lanes)

    @T.macro
    def load(X, k, A0, A1, A2, A3, vi):
        if isinstance(operands[k], int):
            for lane in T.vectorized(v):
                X[k, lane] = (A0, A1, A2, A3)[operands[k]][index(shapes[operands[k]], vi, lane)]
        elif vector_view[k]:
            X[k, T.Ramp(0, 1, 4)] = view_element((A0, A1, A2, A3), k, vi, 0, 4)
        else:
            for lane in T.unroll(v):
                X[k, lane] = view_element((A0, A1, A2, A3), k, vi, lane)

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
                    load(X, 0, A0, A1, A2, A3, vi)
                    if n_in > 1:
                        load(X, 1, A0, A1, A2, A3, vi)
                    if n_in > 2:
                        load(X, 2, A0, A1, A2, A3, vi)
                    if n_in > 3:
                        load(X, 3, A0, A1, A2, A3, vi)
                    for lane in T.vectorized(v):
                        Y[index(out_shape, vi, lane)] = ex.evaluate(expr, TirOps(dtype), inputs=[X[k, lane] for k in range(n_in)])

    return select_params(func, [f"A{i}" for i in range(len(shapes))] + ["Y"])
