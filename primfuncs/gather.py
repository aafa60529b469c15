"""Data movement on plain row-major buffers (the token layout of docs/design.md) as ONE gather
family: output element ``Y[i]`` = an input's element at an index map of ``i`` fixed at compile
time, or a constant where no input covers ``i``.

The map of each :class:`Source` is a chain of steps from the output's index back to its input's
index, applied in order (the graph's ops read backwards), each step one of:

- :class:`Reshape` (``reshape``/``squeeze``/``expand_dims``/``flatten``: the row-major flat index
  is kept, the tensor before it had ``shape``);
- :class:`Permute` (``transpose``: output axis ``a`` is axis ``axes[a]`` of the tensor before);
- :class:`Affine` (per axis ``before = begin + step * after``: ``strided_slice``, a ``split``
  part, ``take`` of an arithmetic run of indices, ``pad`` (negative ``begin``), a concat input
  (``begin`` minus its offset), broadcast (``step`` 0 on a dim of 1); an index that falls outside
  ``shape``, the tensor before, makes the source not cover that element);
- :class:`Tile` (``tile``: ``before = after % shape``).

An output element takes the first source that covers it (a concat's inputs cover disjoint
ranges), else ``pad_value``. So a transpose of any rank, a slice or split part on any axis, a pad,
a broadcast or tile, a concat of up to :data:`MAX_INPUTS` inputs along any axis, and any chain of
them composed, are one launch.

One work item per 4 adjacent elements of the output's last axis. When every source reads those
4 elements contiguously from its input (:func:`contiguous_last_axis`: the last axis maps to the
input's last axis with step 1, 4-aligned) they are one vector load and one vector store; else 4
scalar loads (guarded at the edge of the last axis).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tvm.script import tirx as T

from ._common import BUFFER, LANES, PixelGrid, ceildiv, check_dtype, pixel_launch, select_params, unravel, whole

#: Inputs one gather launch reads (a concat of more is left to the rule's caller).
MAX_INPUTS = 4
_NAMES = ("A", "B", "C", "D")
#: Most work items per work group.
_GROUP = 64


@dataclass(frozen=True)
class Reshape:
    """The tensor before this step had ``shape`` (same elements, same row-major order)."""

    shape: tuple


@dataclass(frozen=True)
class Permute:
    """Axis ``a`` after this step is axis ``axes[a]`` before it."""

    axes: tuple


@dataclass(frozen=True)
class Affine:
    """Per axis, index before = ``begin + step * index after``; the tensor before had ``shape``
    (an index outside it: the source does not cover the element)."""

    shape: tuple
    begin: tuple
    step: tuple


@dataclass(frozen=True)
class Tile:
    """Per axis, index before = index after ``% shape`` (the tensor before had ``shape``)."""

    shape: tuple


@dataclass(frozen=True)
class Source:
    """Input number ``input`` read through ``steps`` (from the output's index to the input's)."""

    input: int
    steps: tuple = ()


def _ints(values) -> tuple:
    return tuple(int(v) for v in values)


def step_before(step, after: tuple) -> tuple:
    """The shape before ``step`` given the shape after it; ValueError when they do not fit."""
    if isinstance(step, Permute):
        axes = _ints(step.axes)
        if sorted(axes) != list(range(len(after))):
            raise ValueError(f"Permute axes {axes} are no permutation of {len(after)} axes")
        before = [0] * len(after)
        for a, src in enumerate(axes):
            before[src] = after[a]
        return tuple(before)
    before = _ints(step.shape)
    if isinstance(step, Reshape) and math.prod(before) != math.prod(after):
        raise ValueError(f"Reshape from {before} to {after} changes the element count")
    if isinstance(step, (Affine, Tile)) and len(before) != len(after):
        raise ValueError(f"{type(step).__name__} from {before} to {after} changes the rank")
    if isinstance(step, Affine) and not len(step.begin) == len(step.step) == len(after):
        raise ValueError(f"Affine begin {step.begin} and step {step.step} need {len(after)} entries")
    if not isinstance(step, (Reshape, Affine, Tile)):
        raise TypeError(f"a gather step is Reshape, Permute, Affine or Tile, got {type(step).__name__}")
    return before


def source_shape(source: Source, out_shape) -> tuple:
    """The shape of the input ``source`` reads, as its steps say."""
    shape = _ints(out_shape)
    for step in source.steps:
        shape = step_before(step, shape)
    return shape


def contiguous_last_axis(source: Source, out_shape) -> bool:
    """Whether 4 adjacent output elements ``[..., 4 j : 4 j + 4]`` are 4 adjacent input elements,
    4-aligned, and covered all or none (then one vector load reads them)."""
    shape = _ints(out_shape)
    if shape[-1] % LANES:
        return False
    for step in source.steps:
        before = step_before(step, shape)
        if isinstance(step, Permute) and int(step.axes[-1]) != len(shape) - 1:
            return False
        if isinstance(step, Affine) and (int(step.step[-1]) != 1 or int(step.begin[-1]) % LANES):
            return False
        if before[-1] % LANES:
            return False
        shape = before
    return True


def _ravel(index, shape):
    flat = 0
    for i, d in zip(index, shape):
        flat = flat * d + i
    return flat


def _reshaped(index, ranges, after, before, reversed_run: bool) -> tuple:
    """(index into ``before``, its ranges) of ``index`` into ``after`` (same elements, row-major;
    ``ranges``: each index's (low, high)): dims of 1 inserted or dropped only (squeeze,
    expand_dims) move the other indices, no division. ``reversed_run``: an index may decrease
    with the output's (a step < 0 before): divided as :func:`_nonneg_mod` says."""
    if [d for d in after if d != 1] == [d for d in before if d != 1]:
        kept = [(i, r) for i, r, d in zip(index, ranges, after) if d != 1]
        moved = [(0, (0, 0)) if d == 1 else kept.pop(0) for d in before]
        return tuple(i for i, _ in moved), tuple(r for _, r in moved)
    strides = [math.prod(after[a + 1:]) for a in range(len(after))]
    low = sum(lo * st for (lo, _), st in zip(ranges, strides))
    high = sum(hi * st for (_, hi), st in zip(ranges, strides))
    first_stride = math.prod(before[1:])
    ranges = ((low // first_stride, high // first_stride), *((0, d - 1) for d in before[1:]))
    if not reversed_run:
        return unravel(_ravel(index, after), before), ranges
    # divide the flat index shifted by whole tensors to >= 0: floor and trunc agree (see _nonneg_mod)
    shift = _shifts_to_nonneg(low, math.prod(before))
    first, *rest = unravel(_ravel(index, after) + shift * math.prod(before), before, T.truncmod, T.truncdiv)
    return (first if before[0] == 1 else first - shift * before[0], *rest), ranges


def _shifts_to_nonneg(low: int, m: int) -> int:
    """How many ``m`` an index >= ``low`` needs added to be >= 0."""
    return ceildiv(-low, m) if low < 0 else 0


def _nonneg_mod(i, low: int, m: int):
    """``i`` mod ``m`` (floor) for an index ``i`` >= ``low``, as the truncating ``%`` of ``i`` shifted
    to >= 0. TVM 0.27's ``FlattenBuffer`` turns ``floormod(c - t, m)`` of a thread index ``t`` into
    ``floormod(-t, m)`` (``c`` dropped by ``iter_map_simplify``: docs/upstream/defect21), and a
    reversed slice (step < 0) before a tile or a reshape makes exactly such an index; other views
    keep floor division, which TVM simplifies further (shifts, masks)."""
    return T.truncmod(i + _shifts_to_nonneg(low, m) * m, m)


def covers_all(source: Source, out_shape) -> bool:
    """Whether ``source`` reads an input element for every output element (no index leaves a
    tensor: no pad, no concat offset)."""
    shape = _ints(out_shape)
    for step in source.steps:
        before = step_before(step, shape)
        if isinstance(step, Affine):
            for after, b, s, d in zip(shape, _ints(step.begin), _ints(step.step), before):
                if min(b, b + s * (after - 1)) < 0 or max(b, b + s * (after - 1)) >= d:
                    return False
        shape = before
    return True


def index_map(source: Source, out_shape, index):
    """(input index, condition or None) of output element ``index`` through ``source``'s steps."""
    shape, cond = _ints(out_shape), None
    ranges = tuple((0, d - 1) for d in shape)  # each index's (low, high) over every output element
    reversed_run = False  # a step < 0 so far: an index may have a negative coefficient
    for step in source.steps:
        before = step_before(step, shape)
        if isinstance(step, Reshape):
            index, ranges = _reshaped(index, ranges, shape, before, reversed_run)
        elif isinstance(step, Permute):
            moved = [None] * len(index)
            for a, src in enumerate(_ints(step.axes)):
                moved[src] = (index[a], ranges[a])
            index, ranges = tuple(i for i, _ in moved), tuple(r for _, r in moved)
        elif isinstance(step, Tile):
            tiled = [(i, r) if b == a else (_nonneg_mod(i, r[0], b) if reversed_run else i % b, (0, b - 1))
                     for i, r, a, b in zip(index, ranges, shape, before)]
            index, ranges = tuple(i for i, _ in tiled), tuple(r for _, r in tiled)
        else:
            moved, moved_ranges = [], []
            for i, (low, high), after, b, s, d in zip(index, ranges, shape, _ints(step.begin), _ints(step.step), before):
                j = i * s + b if (s, b) != (1, 0) else i
                moved.append(j)
                moved_ranges.append((min(b + s * low, b + s * high), max(b + s * low, b + s * high)))
                lo, hi = min(b, b + s * (after - 1)), max(b, b + s * (after - 1))
                if lo < 0 or hi >= d:  # only where the index can leave the tensor before
                    inside = T.And(j >= 0, j < d) if lo < 0 and hi >= d else (j >= 0 if lo < 0 else j < d)
                    cond = inside if cond is None else T.And(cond, inside)
            index, ranges = tuple(moved), tuple(moved_ranges)
            reversed_run = reversed_run or any(s < 0 for s in _ints(step.step))
        shape = before
    return index, cond


def view_buffer(shape, view) -> tuple:
    """(steps, buffer shape) of an operand of stored shape ``shape`` read through ``view`` (this
    module's steps, :class:`Source`); trailing reshapes are dropped: a buffer is the same in any shape."""
    steps = tuple(view or ())
    while steps and isinstance(steps[-1], Reshape):
        steps = steps[:-1]
    return steps, source_shape(Source(0, steps), shape)


def read_view(shape, view, what: str) -> tuple:
    """:func:`view_buffer` of a tensor of ``shape`` a kernel reads through ``view``; ValueError naming
    ``what`` for a view that leaves elements unread (a pad: there is no value to read there)."""
    steps, buffer = view_buffer(shape, view)
    if steps and not covers_all(Source(0, steps), shape):
        raise ValueError(f"{what} {steps} leaves elements of {shape} unread (a pad)")
    return steps, buffer


def read_blocked_view(shape, view, what: str) -> tuple:
    """:func:`read_view` of an NCHW4c tensor of ``shape`` (a window of whole channel blocks of a
    wider map); ValueError also for a view that moves a pixel's 4 lanes apart (one vector read)."""
    steps, buffer = read_view(shape, view, what)
    if steps and not contiguous_last_axis(Source(0, steps), shape):
        raise ValueError(f"{what} {steps} moves a blocked pixel's 4 lanes apart")
    return steps, buffer


def through(view, shape, index, lane=None):
    """``index`` into ``shape`` read through ``view`` (None: as stored), plus ``lane`` on the last
    axis (None: nothing added). A vector's lanes are added after the map: a view that keeps the
    last axis contiguous (:func:`contiguous_last_axis`) moves 4 aligned elements together."""
    if view:
        index = index_map(Source(0, view), shape, index)[0]
    return index if lane is None else (*index[:-1], index[-1] + lane)


def read_sources(bufs, sources, out_shape, index, pad, lanes: int = 1):
    """The element at ``index`` of the tensor of ``out_shape`` that ``sources`` read from buffers
    ``bufs`` (the first that covers it, else ``pad``, a FloatImm); ``lanes`` 4: the vector of 4 from
    ``index`` along the last axis (every source :func:`contiguous_last_axis`)."""
    value = pad if lanes == 1 else T.Broadcast(pad, lanes)
    for s in reversed(sources):  # the first source that covers the element wins
        at, cond = index_map(s, out_shape, index)
        if lanes > 1:
            at = (*at[:-1], T.Ramp(at[-1], 1, lanes))
        load = bufs[s.input][at]
        value = load if cond is None else T.if_then_else(cond, load, value)
    return value


def check_sources(in_shapes, out_shape, sources) -> None:
    """ValueError unless every one of ``sources`` reads one of ``in_shapes`` as its steps say."""
    if not sources or not all(isinstance(s, Source) for s in sources):
        raise TypeError(f"sources must be a non-empty tuple of Source, got {sources!r}")
    for s in sources:
        if not 0 <= s.input < len(in_shapes):
            raise ValueError(f"Source input {s.input} is not one of the {len(in_shapes)} inputs")
        if source_shape(s, out_shape) != in_shapes[s.input]:
            raise ValueError(f"Source {s} reads shape {source_shape(s, out_shape)}, input {s.input} is {in_shapes[s.input]}")


def _check(in_shapes, out_shape, sources, dtype):
    check_dtype(dtype)
    if not out_shape or min(out_shape) < 1:
        raise ValueError(f"gather output shape must have rank >= 1 and dims >= 1, got {out_shape}")
    if not 1 <= len(in_shapes) <= MAX_INPUTS:
        raise ValueError(f"gather reads 1..{MAX_INPUTS} inputs, got {len(in_shapes)}")
    check_sources(in_shapes, out_shape, sources)


def gather(in_shapes, out_shape, sources, pad_value: float = 0.0, dtype: str = "float32"):
    """``Y[i]`` = the first of ``sources`` that covers ``i`` (its input at its index map), else
    ``pad_value``; plain row-major buffers ``in_shapes`` (parameters in order) and ``out_shape``."""
    in_shapes, out_shape = tuple(_ints(s) for s in in_shapes), _ints(out_shape)
    sources = tuple(sources)
    _check(in_shapes, out_shape, sources, dtype)
    width = out_shape[-1]
    rows, pixels = math.prod(out_shape[:-1]), ceildiv(width, LANES)
    vector = all(contiguous_last_axis(s, out_shape) for s in sources)
    tx = min(_GROUP, 1 << (pixels - 1).bit_length())
    grid = PixelGrid(1, rows, pixels, max(1, min(_GROUP // tx, 1 << (rows - 1).bit_length())), tx)
    shapes = list(in_shapes) + [(1,)] * (MAX_INPUTS - len(in_shapes))  # unused inputs: dropped below
    pad = T.FloatImm(dtype, float(pad_value))
    launch = pixel_launch()

    def element(bufs, row, col, lanes: int = 1):
        """The output element ``(row, col)`` (``lanes`` 4: the vector of 4 from ``col``)."""
        return read_sources(bufs, sources, out_shape, (*unravel(row, out_shape[:-1]), col), pad, lanes)

    @T.macro
    def copy(A, B, C, D, Y, vr, vc):
        # whole inputs: an inferred region prints as TVMScript that parses back reordered (upstream defect 16)
        T.reads([whole(x) for x in (A, B, C, D)[: len(in_shapes)]])
        if vector:
            Y[(*unravel(vr, out_shape[:-1]), T.Ramp(vc * 4, 1, 4))] = element((A, B, C, D), vr, vc * 4, 4)
        else:
            for lane in T.unroll(4):
                if vc * 4 + lane < width:
                    Y[(*unravel(vr, out_shape[:-1]), vc * 4 + lane)] = element((A, B, C, D), vr, vc * 4 + lane)

    @T.prim_func(s_tir=True)
    def func(a: T.handle, b: T.handle, c: T.handle, d: T.handle, y: T.handle):
        T.func_attr({"global_symbol": "gather", "tirx.noalias": True})
        A = T.match_buffer(a, shapes[0], dtype, scope=BUFFER)
        B = T.match_buffer(b, shapes[1], dtype, scope=BUFFER)
        C = T.match_buffer(c, shapes[2], dtype, scope=BUFFER)
        D = T.match_buffer(d, shapes[3], dtype, scope=BUFFER)
        Y = T.match_buffer(y, out_shape, dtype, scope=BUFFER)
        launch(grid, rows, pixels, "gather", lambda vz, vr, vc: copy(A, B, C, D, Y, vr, vc))

    return select_params(func, [*_NAMES[: len(in_shapes)], "Y"])


__all__ = ["MAX_INPUTS", "Affine", "Permute", "Reshape", "Source", "Tile", "check_sources", "contiguous_last_axis", "covers_all", "gather", "index_map",
           "read_sources", "source_shape"]
