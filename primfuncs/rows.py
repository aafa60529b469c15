"""Row kernels on plain row-major tensors (the token layout): softmax, layer norm, RMS norm and
reductions over an axis, and a per-channel affine (batch norm on tokens).

A tensor of ``shape`` reduced over the consecutive axes ``[first, last]`` is a set of rows:
``outer = prod(shape[:first])`` x ``inner = prod(shape[last + 1:])`` rows of ``length =
prod(shape[first:last + 1])`` elements, element ``l`` of row ``(o, i)`` at flat offset
``(o * length + l) * inner + i`` (:class:`Rows`). A row of the last axis is contiguous
(``inner = 1``); over another axis its elements are ``inner`` apart (strided rows).

One work group of ``threads`` items per row: item ``t`` takes elements ``t, t + threads, ...``
(neighbouring items read neighbouring elements) into a float32 register, the items' partials go to
local memory and are combined in a two-level tree (``sqrt(threads)`` items each combine a chunk of
partials, then every item combines the chunks' results itself: two barriers, as the group
pooling of ``primfuncs.pool2d``). Statistics are float32 whatever the storage (docs/precision.md):
a float32 kernel on half buffers (float16_acc32) reads half and sums float32.

- :func:`softmax`: the row's max, then the sum of ``exp(x - max)``, then ``exp(x - max) / sum``
  (never overflows; a NaN in a row makes the row NaN, as onnxruntime does).
- :func:`layer_norm`: the mean, then the sum of squared deviations from it (two passes: no
  cancellation of ``E[x^2] - E[x]^2``), then ``(x - mean) / sqrt(var + eps) * gamma + beta``;
  ``rms=True``: ``x / sqrt(mean(x^2) + eps) * gamma`` (RMS norm, no beta).
- :func:`reduce`: sum, mean, max or min of each row, one value per row.
- :func:`channel_affine`: ``x * scale[c] + shift[c]`` along one axis, one work item per element.

Softmax, the norms and the reductions may read their input through a view (``x_view``: gather
steps, :func:`x_buffer`): a channel chunk of a Linear's output, a transposed or sliced tensor is
read in place, so no gather kernel runs before them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tvm.script import tirx as T

from ._common import ceildiv, check_dtype, check_epsilon, maximum, minimum, select_params, unravel
from .gather import read_view, through
from .epilogue import Epilogue, expression

#: Reductions :func:`reduce` computes.
ROW_OPS = ("sum", "mean", "max", "min")
#: Most work items per row (OpenCL's smallest CL_DEVICE_MAX_WORK_GROUP_SIZE on our devices).
MAX_THREADS = 256
F32 = "float32"


@dataclass(frozen=True)
class Rows:
    """``shape`` as rows over its consecutive axes ``first..last`` (the module docstring)."""

    shape: tuple
    first: int
    last: int

    @property
    def length(self) -> int:
        return math.prod(self.shape[self.first:self.last + 1])

    @property
    def outer(self) -> int:
        return math.prod(self.shape[:self.first])

    @property
    def inner(self) -> int:
        return math.prod(self.shape[self.last + 1:])

    @property
    def count(self) -> int:
        return self.outer * self.inner

    def at(self, row, element) -> tuple:
        """The index into ``shape`` of element ``element`` of row ``row``."""
        o, i = (row // self.inner, row % self.inner) if self.inner > 1 else (row, 0)
        return (*unravel(o, self.shape[:self.first]), *unravel(element, self.shape[self.first:self.last + 1]),
                *unravel(i, self.shape[self.last + 1:]))

    def reduced_shape(self, keepdims: bool) -> tuple:
        """The shape of one value per row: the row axes dropped, or kept as 1."""
        kept = (1,) * (self.last + 1 - self.first) if keepdims else ()
        return (*self.shape[:self.first], *kept, *self.shape[self.last + 1:])

    def at_reduced(self, row, keepdims: bool) -> tuple:
        """The index into :meth:`reduced_shape` of row ``row``'s value."""
        o, i = (row // self.inner, row % self.inner) if self.inner > 1 else (row, 0)
        kept = (0,) * (self.last + 1 - self.first) if keepdims else ()
        return (*unravel(o, self.shape[:self.first]), *kept, *unravel(i, self.shape[self.last + 1:]))


def rows_of(shape, axes) -> Rows:
    """The :class:`Rows` of ``shape`` (ints >= 1) over ``axes`` (an int or consecutive ints, negative
    counting from the end); ValueError naming what does not fit."""
    shape = tuple(int(d) for d in shape)
    if not shape or min(shape) < 1:
        raise ValueError(f"shape must have rank >= 1 and dims >= 1, got {shape}")
    axes = (axes,) if isinstance(axes, int) else tuple(axes)
    if not axes or any(not isinstance(a, int) or not -len(shape) <= a < len(shape) for a in axes):
        raise ValueError(f"axes {axes!r} are not axes of a rank-{len(shape)} tensor")
    norm = sorted(a % len(shape) for a in axes)
    if norm != list(range(norm[0], norm[0] + len(norm))):
        raise ValueError(f"axes {axes!r} must be distinct and consecutive")
    return Rows(shape, norm[0], norm[-1])


def check_threads(threads: int) -> int:
    if not isinstance(threads, int) or threads < 1 or threads > MAX_THREADS or threads & (threads - 1):
        raise ValueError(f"threads must be a power of two from 1 to {MAX_THREADS}, got {threads!r}")
    return threads


def x_buffer(shape, x_view) -> tuple:
    """(steps, buffer shape) of a row kernel's input ``X`` of ``shape`` read through ``x_view``
    (``primfuncs.gather`` steps from ``shape`` to the buffer: a slice, a transpose, a split part of
    another tensor read in place, so no gather kernel runs before the row kernel; None: as stored);
    ValueError for steps that do not fit ``shape`` or leave elements unread (``gather.read_view``)."""
    return read_view(shape, x_view, "x_view")


class _Tree:
    """A row kernel's work group over one row of ``rows``: ``rounds`` elements per item, the
    two-level combine's ``chunk`` (``sqrt(threads)`` rounded up to a power of two) and
    ``n_chunks``, and its macros (a fresh set per kernel: block names of a macro's second expansion
    get suffixes): ``each_row`` (a work group per row with its local memory), ``taps`` (item
    partials into local memory), ``chunks`` (the first level), ``total`` (the chunks' results
    combined in an item's registers), ``nothing`` (no step)."""

    def __init__(self, rows: Rows, threads: int, dtype: str, x_view=None):
        check_threads(threads)
        check_dtype(dtype)
        self.rows, self.threads = rows, threads
        self.x_view, self.x_shape = x_buffer(rows.shape, x_view)
        self.chunk = 1 << ceildiv(threads.bit_length() - 1, 2)
        self.n_chunks = threads // self.chunk
        self.rounds = ceildiv(rows.length, threads)
        self.dtype = dtype
        self.total, self.taps, self.chunks, self.nothing, self.each_row = _tree_macros(self)

    def read(self, X, vr, r, t):
        """Element ``r * threads + t`` of row ``vr`` in float32 (clamped inside the row: callers guard)."""
        x = X[through(self.x_view, self.rows.shape, self.rows.at(vr, T.min(r * self.threads + t, self.rows.length - 1)))]
        return x if self.dtype == F32 else T.Cast(F32, x)


def _tree_macros(tree: _Tree):
    th, chunk, n_chunks, rounds, length = tree.threads, tree.chunk, tree.n_chunks, tree.rounds, tree.rows.length

    @T.macro
    def total(st, slot, chunked, combine):
        # st[slot] = the row's total: the chunks' results combined in order
        st[slot] = chunked[0]
        for k in T.unroll(1, n_chunks):
            st[slot] = combine(st[slot], chunked[k])

    @T.macro
    def taps(X, partial, vr, init, combine, term, before):
        # item t: partial[t] = its elements' term(x, st) combined (``before(st)`` fills st first)
        for t in T.thread_binding(th, thread="threadIdx.x"):
            with T.sblock("taps"):
                st = T.sblock_alloc_buffer((2,), F32, scope="local")
                acc = T.sblock_alloc_buffer((1,), F32, scope="local")
                before(st)
                acc[0] = init
                for r in T.serial(rounds):
                    if r * th + t < length:
                        acc[0] = combine(acc[0], term(tree.read(X, vr, r, t), st))
                partial[t] = acc[0]

    @T.macro
    def chunks(partial, chunked, combine):
        # item t < n_chunks: chunked[t] = partials [t * chunk, (t + 1) * chunk) combined
        for t in T.thread_binding(th, thread="threadIdx.x"):
            with T.sblock("chunks"):
                if t < n_chunks:
                    acc = T.sblock_alloc_buffer((1,), F32, scope="local")
                    acc[0] = partial[t * chunk]
                    for k in T.unroll(1, chunk):
                        acc[0] = combine(acc[0], partial[t * chunk + k])
                    chunked[t] = acc[0]

    @T.macro
    def nothing(st):
        T.evaluate(0)

    @T.macro
    def each_row(body):
        # a work group per row vr: body(vr, partials, chunks' results, partials, chunks' results),
        # two statistics' local memory (a statistic read after the next is combined keeps its own)
        for b in T.thread_binding(tree.rows.count, thread="blockIdx.x"):
            with T.sblock("row"):
                vr = T.axis.spatial(tree.rows.count, b)
                partial_a = T.sblock_alloc_buffer((th,), F32, scope="shared")
                chunked_a = T.sblock_alloc_buffer((n_chunks,), F32, scope="shared")
                partial_b = T.sblock_alloc_buffer((th,), F32, scope="shared")
                chunked_b = T.sblock_alloc_buffer((n_chunks,), F32, scope="shared")
                body(vr, partial_a, chunked_a, partial_b, chunked_b)

    return total, taps, chunks, nothing, each_row


def _add(a, b):
    return a + b


def _narrow(v, dtype):
    return v if dtype == F32 else T.Cast(dtype, v)


def check_row_epilogue(epilogue, shape) -> Epilogue | None:
    """``epilogue`` when a row kernel of ``shape`` evaluates it: None, or an :class:`Epilogue` with
    only an expression (its per-channel constants along the last axis, its operand of the output's
    shape); ValueError for anything else."""
    if epilogue is None:
        return None
    if not isinstance(epilogue, Epilogue):
        raise TypeError(f"epilogue must be an Epilogue, got {type(epilogue).__name__}")
    if epilogue.expr is None or epilogue != Epilogue(expr=epilogue.expr):
        raise ValueError(f"a row kernel's epilogue is an expression alone (no bias, residual, activation or layout), got {epilogue!r}")
    if epilogue.operand_kinds not in ((), ("full",)):
        raise ValueError(f"a row kernel's expression reads one operand of the output's shape, got kinds {epilogue.operand_kinds!r}")
    return epilogue


def _row_epilogue(epilogue, v, Bias, Residual, index, dtype):
    """``v`` (float32, the kernel's value of element ``index`` of Y) through ``epilogue``'s
    expression: per-channel constant ``i`` is ``Bias``'s row ``i`` at ``index``'s last axis (packed
    ``(C/4, 4)`` a row, ``strategy.packing.pack_bias``), the operand ``Residual[index]``."""
    if epilogue is None:
        return v
    channel = index[-1]
    operands = (_wide(Residual[index], dtype),) if epilogue.operand_kinds else ()
    return expression(epilogue, v, operands, lambda i: _wide(Bias[channel // 4, i * 4 + channel % 4], dtype), F32)


def _wide(v, dtype):
    return v if dtype == F32 else T.Cast(F32, v)


def softmax(shape, axis: int = -1, threads: int = 64, dtype: str = "float32", epilogue: Epilogue | None = None, x_view=None):
    """``Y = exp(X - max) / sum(exp(X - max))`` over ``axis`` of the plain tensor ``shape``
    (``relax.nn.softmax``); ``threads`` items per row (a power of two). ``epilogue``: an elementwise
    chain after it (:func:`check_row_epilogue`; parameters ``X, [Bias], [Residual], Y``). ``x_view``:
    ``X`` read through gather steps (:func:`x_buffer`)."""
    rows = rows_of(shape, axis)
    epilogue = check_row_epilogue(epilogue, rows.shape)
    tree = _Tree(rows, threads, dtype, x_view)
    read, total, taps, chunks, nothing = tree.read, tree.total, tree.taps, tree.chunks, tree.nothing
    lowest, zero = T.FloatImm(F32, -math.inf), T.FloatImm(F32, 0.0)

    @T.macro
    def the_max(st, chunked_max):
        total(st, 0, chunked_max, maximum)

    @T.macro
    def write(X, Bias, Residual, Y, chunked_max, chunked_sum, vr):
        # item t writes exp(x - max) / sum of its elements
        for t in T.thread_binding(threads, thread="threadIdx.x"):
            with T.sblock("write"):
                st = T.sblock_alloc_buffer((2,), F32, scope="local")
                total(st, 0, chunked_max, maximum)
                total(st, 1, chunked_sum, _add)
                for r in T.serial(tree.rounds):
                    if r * threads + t < rows.length:
                        Y[rows.at(vr, r * threads + t)] = _narrow(_row_epilogue(
                            epilogue, T.exp(read(X, vr, r, t) - st[0]) / st[1], Bias, Residual, rows.at(vr, r * threads + t), dtype), dtype)

    @T.macro
    def row(X, Bias, Residual, Y, vr, partial_max, chunked_max, partial_sum, chunked_sum):
        # 1. the row's max
        taps(X, partial_max, vr, lowest, maximum, lambda v, st: v, nothing)
        chunks(partial_max, chunked_max, maximum)
        # 2. the sum of exp(x - max)
        taps(X, partial_sum, vr, zero, _add, lambda v, st: T.exp(v - st[0]), lambda st: the_max(st, chunked_max))
        chunks(partial_sum, chunked_sum, _add)
        # 3. the normalized row
        write(X, Bias, Residual, Y, chunked_max, chunked_sum, vr)

    @T.macro
    def body(X, Bias, Residual, Y):
        tree.each_row(lambda vr, partial_max, chunked_max, partial_sum, chunked_sum: row(
            X, Bias, Residual, Y, vr, partial_max, chunked_max, partial_sum, chunked_sum))

    if epilogue is not None:
        return _with_epilogue("softmax_rows", rows.shape, (1,), epilogue, dtype, tree.x_shape,
                              lambda X, Gamma, Beta, Bias, Residual, Y: body(X, Bias, Residual, Y))

    @T.prim_func(s_tir=True)
    def func(x: T.handle, y: T.handle):
        T.func_attr({"global_symbol": "softmax_rows", "tirx.noalias": True})
        X = T.match_buffer(x, tree.x_shape, dtype)
        Y = T.match_buffer(y, rows.shape, dtype)
        body(X, X, X, Y)

    return func


def layer_norm(shape, axis: int = -1, epsilon: float = 1e-5, threads: int = 64, dtype: str = "float32", rms: bool = False,
               epilogue: Epilogue | None = None, x_view=None):
    """``Y = (X - mean) / sqrt(var + epsilon) * Gamma + Beta`` over the axes from ``axis`` to the last
    of the plain tensor ``shape`` (ONNX ``LayerNormalization``'s ``axis``), ``Gamma``/``Beta`` of the
    normalized axes' shape; ``rms=True``: ``Y = X / sqrt(mean(X^2) + epsilon) * Gamma`` (no Beta
    parameter). Parameters ``X, Gamma, [Beta], Y``. ``epilogue``: an elementwise chain after the
    norm (:func:`check_row_epilogue`), evaluated in float32 on each value before it is stored; its
    ``Bias`` (per-channel constants along the last axis) and ``Residual`` (the operand) come before ``Y``.
    ``x_view``: ``X`` read through gather steps (:func:`x_buffer`)."""
    rank = len(tuple(shape))
    if not isinstance(axis, int) or not -rank <= axis < rank:
        raise ValueError(f"axis {axis!r} is not an axis of a rank-{rank} tensor")
    rows = rows_of(shape, tuple(range(axis % rank, rank)))
    check_epsilon(epsilon)
    epilogue = check_row_epilogue(epilogue, rows.shape)
    tree = _Tree(rows, threads, dtype, x_view)
    read, total, taps, chunks, nothing = tree.read, tree.total, tree.taps, tree.chunks, tree.nothing
    zero, one = T.FloatImm(F32, 0.0), T.FloatImm(F32, 1.0)
    count, eps = T.FloatImm(F32, float(rows.length)), T.FloatImm(F32, float(epsilon))
    param_shape = rows.shape[rows.first:]

    def param(P, element):
        v = P[unravel(element, param_shape)]
        return v if dtype == F32 else T.Cast(F32, v)

    @T.macro
    def the_mean(st, chunked_sum):
        total(st, 0, chunked_sum, _add)
        st[0] = st[0] / count

    @T.macro
    def write(X, Gamma, Beta, Bias, Residual, Y, chunked_sum, chunked_sq, vr):
        # item t writes its elements normalized (st: mean, then 1 / sqrt(var + eps))
        for t in T.thread_binding(threads, thread="threadIdx.x"):
            with T.sblock("write"):
                st = T.sblock_alloc_buffer((2,), F32, scope="local")
                if rms:
                    st[0] = zero
                else:
                    the_mean(st, chunked_sum)
                total(st, 1, chunked_sq, _add)
                st[1] = one / T.sqrt(st[1] / count + eps)
                for r in T.serial(tree.rounds):
                    if r * threads + t < rows.length:
                        Y[rows.at(vr, r * threads + t)] = _narrow(_row_epilogue(
                            epilogue, (read(X, vr, r, t) - st[0]) * st[1] * param(Gamma, r * threads + t)
                            + (zero if rms else param(Beta, r * threads + t)), Bias, Residual, rows.at(vr, r * threads + t), dtype), dtype)

    @T.macro
    def row(X, Gamma, Beta, Bias, Residual, Y, vr, partial_sum, chunked_sum, partial_sq, chunked_sq):
        if rms:
            # the sum of squares
            taps(X, partial_sq, vr, zero, _add, lambda v, st: v * v, nothing)
            chunks(partial_sq, chunked_sq, _add)
        else:
            # 1. the mean
            taps(X, partial_sum, vr, zero, _add, lambda v, st: v, nothing)
            chunks(partial_sum, chunked_sum, _add)
            # 2. the squared deviations from it
            taps(X, partial_sq, vr, zero, _add, lambda v, st: (v - st[0]) * (v - st[0]), lambda st: the_mean(st, chunked_sum))
            chunks(partial_sq, chunked_sq, _add)
        write(X, Gamma, Beta, Bias, Residual, Y, chunked_sum, chunked_sq, vr)

    @T.macro
    def body(X, Gamma, Beta, Bias, Residual, Y):
        tree.each_row(lambda vr, partial_sum, chunked_sum, partial_sq, chunked_sq: row(
            X, Gamma, Beta, Bias, Residual, Y, vr, partial_sum, chunked_sum, partial_sq, chunked_sq))

    if epilogue is not None:
        return _with_epilogue("rms_norm_rows" if rms else "layer_norm_rows", rows.shape, param_shape, epilogue, dtype, tree.x_shape,
                              lambda X, Gamma, Beta, Bias, Residual, Y: body(X, Gamma, Gamma if rms else Beta, Bias, Residual, Y),
                              1 if rms else 2)
    if rms:
        @T.prim_func(s_tir=True)
        def func(x: T.handle, gamma: T.handle, y: T.handle):
            T.func_attr({"global_symbol": "rms_norm_rows", "tirx.noalias": True})
            X = T.match_buffer(x, tree.x_shape, dtype)
            Gamma = T.match_buffer(gamma, param_shape, dtype)
            Y = T.match_buffer(y, rows.shape, dtype)
            body(X, Gamma, Gamma, Gamma, Gamma, Y)
    else:
        @T.prim_func(s_tir=True)
        def func(x: T.handle, gamma: T.handle, beta: T.handle, y: T.handle):
            T.func_attr({"global_symbol": "layer_norm_rows", "tirx.noalias": True})
            X = T.match_buffer(x, tree.x_shape, dtype)
            Gamma = T.match_buffer(gamma, param_shape, dtype)
            Beta = T.match_buffer(beta, param_shape, dtype)
            Y = T.match_buffer(y, rows.shape, dtype)
            body(X, Gamma, Beta, Gamma, Gamma, Y)

    return func


def _with_epilogue(name: str, shape, param_shape, epilogue: Epilogue, dtype: str, x_shape, body, params: int = 0):
    """The row kernel ``name`` with an expression epilogue: ``body(X, Gamma, Beta, Bias, Residual, Y)``
    over every buffer it may read (``Gamma``/``Beta``: the kernel's own affine parameters of
    ``param_shape``, float32 ``(C,)`` where ``param_shape`` is an int C; ``X`` of ``x_shape``), the unread ones dropped
    (``select_params``) but the first ``params`` of Gamma, Beta. A kernel without an epilogue keeps
    its own function (its source unchanged)."""
    channels = shape[-1]
    p_shape, p_dtype = ((param_shape,), F32) if isinstance(param_shape, int) else (param_shape, dtype)

    @T.prim_func(s_tir=True)
    def func(x: T.handle, gamma: T.handle, beta: T.handle, bias: T.handle, residual: T.handle, y: T.handle):
        T.func_attr({"global_symbol": name, "tirx.noalias": True})
        X = T.match_buffer(x, x_shape, dtype)
        Gamma = T.match_buffer(gamma, p_shape, p_dtype)
        Beta = T.match_buffer(beta, p_shape, p_dtype)
        Bias = T.match_buffer(bias, epilogue.bias_shape(ceildiv(channels, 4)), dtype)
        Residual = T.match_buffer(residual, shape, dtype)
        Y = T.match_buffer(y, shape, dtype)
        body(X, Gamma, Beta, Bias, Residual, Y)

    return select_params(func, epilogue.params(["X", *("Gamma", "Beta")[:params]], "Y"))


def reduce(shape, axes, op: str, keepdims: bool = True, threads: int = 64, dtype: str = "float32", x_view=None):
    """``op`` (sum, mean, max, min) over the consecutive ``axes`` of the plain tensor ``shape``:
    ``Y`` of :meth:`Rows.reduced_shape` (``relax.sum`` / ``mean`` / ``max`` / ``min``); max and min
    propagate NaN as NumPy does. ``x_view``: ``X`` read through gather steps (:func:`x_buffer`)."""
    rows = rows_of(shape, axes)
    if op not in ROW_OPS:
        raise ValueError(f"op must be one of {ROW_OPS}, got {op!r}")
    tree = _Tree(rows, threads, dtype, x_view)
    total, taps, chunks, nothing = tree.total, tree.taps, tree.chunks, tree.nothing
    combine = {"max": maximum, "min": minimum}.get(op, _add)
    init = T.FloatImm(F32, {"max": -math.inf, "min": math.inf}.get(op, 0.0))
    out_shape = rows.reduced_shape(keepdims)
    count = T.FloatImm(F32, float(rows.length))

    @T.macro
    def write(Y, chunked, vr):
        for t in T.thread_binding(threads, thread="threadIdx.x"):
            with T.sblock("write"):
                if t == 0:
                    st = T.sblock_alloc_buffer((2,), F32, scope="local")
                    total(st, 0, chunked, combine)
                    Y[rows.at_reduced(vr, keepdims)] = _narrow(st[0] / count if op == "mean" else st[0], dtype)

    @T.macro
    def row(X, Y, vr, partial, chunked):
        taps(X, partial, vr, init, combine, lambda v, st: v, nothing)
        chunks(partial, chunked, combine)
        write(Y, chunked, vr)

    @T.prim_func(s_tir=True)
    def func(x: T.handle, y: T.handle):
        T.func_attr({"global_symbol": f"{op}_rows", "tirx.noalias": True})
        X = T.match_buffer(x, tree.x_shape, dtype)
        Y = T.match_buffer(y, out_shape, dtype)
        tree.each_row(lambda vr, partial, chunked, _partial, _chunked: row(X, Y, vr, partial, chunked))

    return func


#: Work items per work group of :func:`channel_affine`.
AFFINE_GROUP = 64


def channel_affine(shape, axis: int, dtype: str = "float32", epilogue: Epilogue | None = None):
    """``Y = X * Scale[c] + Shift[c]`` with ``c`` the index along ``axis`` of the plain tensor
    ``shape`` (a batch norm on tokens: ``[L, C]`` axis 1, ``[N, C, L]`` axis 1); ``Scale``/``Shift``
    of ``(shape[axis],)``, float32 (``x * scale`` in float32). One work item per element.
    ``epilogue``: an elementwise chain after it (:func:`check_row_epilogue`; parameters
    ``X, Gamma, Beta, [Bias], [Residual], Y``, Gamma and Beta the scale and shift)."""
    rows = rows_of(shape, axis)
    check_dtype(dtype)
    epilogue = check_row_epilogue(epilogue, rows.shape)
    total_ = math.prod(rows.shape)
    channels, inner = rows.shape[rows.first], rows.inner
    groups = ceildiv(total_, AFFINE_GROUP)

    def wide(v):
        return v if dtype == F32 else T.Cast(F32, v)

    @T.macro
    def body(X, Scale, Shift, Bias, Residual, Y):
        for b in T.thread_binding(groups, thread="blockIdx.x"):
            for t in T.thread_binding(AFFINE_GROUP, thread="threadIdx.x"):
                with T.sblock("element"):
                    v = T.axis.spatial(groups * AFFINE_GROUP, b * AFFINE_GROUP + t)
                    T.where(b * AFFINE_GROUP + t < total_)
                    Y[unravel(v, rows.shape)] = _narrow(_row_epilogue(
                        epilogue, wide(X[unravel(v, rows.shape)]) * Scale[v // inner % channels] + Shift[v // inner % channels],
                        Bias, Residual, unravel(v, rows.shape), dtype), dtype)

    if epilogue is not None:
        return _with_epilogue("channel_affine", rows.shape, channels, epilogue, dtype, rows.shape, body, 2)

    @T.prim_func(s_tir=True)
    def func(x: T.handle, scale: T.handle, shift: T.handle, y: T.handle):
        T.func_attr({"global_symbol": "channel_affine", "tirx.noalias": True})
        X = T.match_buffer(x, rows.shape, dtype)
        Scale = T.match_buffer(scale, (channels,), F32)
        Shift = T.match_buffer(shift, (channels,), F32)
        Y = T.match_buffer(y, rows.shape, dtype)
        body(X, Scale, Shift, X, X, Y)

    return func


__all__ = ["ROW_OPS", "Rows", "channel_affine", "check_threads", "layer_norm", "reduce", "rows_of", "softmax"]
