"""A conv2d's sizes and where its taps read: the facts every conv kernel family shares.

:class:`ConvGeometry` (validated logical NCHW / OIHW sizes, by :func:`conv2d_geometry`),
:class:`ConvWindow` (the input coordinates a tile's taps read and the guards they need) and
:class:`InputLayout` (how a kernel reads X: blocked, or a plain NCHW or NHWC buffer).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import tvm
from tvm import sym
from tvm.script import tirx as T

from .. import gather
from ..lanes import LANES, blocked


def _ints(value, name, what):
    """``value`` (an int or a sequence of ints) as a tuple of Python ints."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return (int(value),)
    try:
        items = tuple(value)
    except TypeError:
        items = None
    if items is None or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in items):
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return tuple(int(v) for v in items)


def _pair(value, name):
    value = _ints(value, name, "an int or a pair of ints")
    if len(value) not in (1, 2):
        raise ValueError(f"{name} must be an int or a pair of ints, got {value!r}")
    return value * 2 if len(value) == 1 else value


def _padding(padding):
    """int, (pad_h, pad_w) or (top, left, bottom, right) -> (top, left, bottom, right)."""
    what = "an int, a pair or (top, left, bottom, right)"
    padding = _ints(padding, "padding", what)
    if len(padding) not in (1, 2, 4):
        raise ValueError(f"padding must be {what}, got {padding!r}")
    padding = padding * (4 // len(padding))
    if min(padding) < 0:
        raise ValueError(f"padding must be >= 0, got {padding}")
    return padding


@dataclass(frozen=True)
class ConvGeometry:
    """A conv2d's logical sizes (NCHW / OIHW), validated, with its output size."""

    n: int
    c: int
    h: int
    w: int
    o: int
    kh: int
    kw: int
    strides: tuple[int, int]
    padding: tuple[int, int, int, int]  # top, left, bottom, right
    dilation: tuple[int, int]
    groups: int

    @property
    def oh(self) -> int:
        pt, _, pb, _ = self.padding
        return (self.h + pt + pb - self.dilation[0] * (self.kh - 1) - 1) // self.strides[0] + 1

    @property
    def ow(self) -> int:
        _, pl, _, pr = self.padding
        return (self.w + pl + pr - self.dilation[1] * (self.kw - 1) - 1) // self.strides[1] + 1

    @property
    def c4(self) -> int:
        return blocked(self.c)

    @property
    def o4(self) -> int:
        return blocked(self.o)

    @property
    def cg(self) -> int:
        """Input channels per group."""
        return self.c // self.groups

    @property
    def og(self) -> int:
        """Output channels per group."""
        return self.o // self.groups

    @property
    def reduction_length(self) -> int:
        """Products summed into one output: K = (C / groups) * KH * KW."""
        return self.cg * self.kh * self.kw

    @property
    def is_depthwise(self) -> bool:
        """One input channel per group (``groups == C > 1``); O = C x multiplier."""
        return self.groups > 1 and self.groups == self.c

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.o, self.oh, self.ow)

    @property
    def flops(self) -> int:
        """Multiply-adds x 2 of the logical conv (padding channels not counted)."""
        return 2 * self.n * self.o * self.oh * self.ow * self.cg * self.kh * self.kw


def conv2d_geometry(
    data_shape, weight_shape, strides=1, padding=0, dilation=1, groups=1, names=("data_shape", "weight_shape")
) -> ConvGeometry:
    """Validate a conv2d's NCHW data / OIHW weight shapes and attributes.

    Raises ValueError naming the culprit; ``names`` are what the caller calls
    the data and weight (``ops.conv2d`` passes ``("x", "w")``).
    """
    dname, wname = names
    data_shape = tuple(int(d) for d in data_shape)
    weight_shape = tuple(int(d) for d in weight_shape)
    if len(data_shape) != 4:
        raise ValueError(f"{dname} must be NCHW (4-d), got {data_shape}")
    if len(weight_shape) != 4:
        raise ValueError(f"{wname} must be OIHW (4-d), got {weight_shape}")
    n, c, h, w = data_shape
    o, i, kh, kw = weight_shape
    if min(data_shape) < 1 or min(weight_shape) < 1:
        raise ValueError(f"empty axis: {dname} {data_shape}, {wname} {weight_shape}")
    stride, dilation = _pair(strides, "strides"), _pair(dilation, "dilation")
    if min(stride) < 1 or min(dilation) < 1:
        raise ValueError(f"strides and dilation must be >= 1, got strides {stride}, dilation {dilation}")
    if not isinstance(groups, numbers.Integral) or isinstance(groups, bool) or groups < 1:
        raise ValueError(f"groups must be a positive int, got {groups!r}")
    if c % groups or o % groups:
        raise ValueError(
            f"groups={groups} must divide the input channels ({dname} C={c}) and output channels ({wname} O={o})"
        )
    if i != c // groups:
        raise ValueError(
            f"{wname} {weight_shape} has {i} input channels per group; {dname} has C={c} in "
            f"groups={groups}, so it needs C/groups = {c // groups}"
        )
    geom = ConvGeometry(n, c, h, w, o, kh, kw, stride, _padding(padding), dilation, int(groups))
    if geom.oh < 1 or geom.ow < 1:
        raise ValueError(
            f"empty output: {dname} {h}x{w} with padding {geom.padding} is smaller than the "
            f"dilated kernel {dilation[0] * (kh - 1) + 1}x{dilation[1] * (kw - 1) + 1}"
        )
    return geom


def all_of(conds):
    """Conjunction of TIR conditions; ``True`` for none (the simplifier drops it)."""
    out = None
    for cond in conds:
        out = cond if out is None else T.And(out, cond)
    return T.bool(True) if out is None else out


class ConvWindow:
    """Where the taps of a tile of ``wb`` output columns read a conv's input, and which of
    those reads need guards: zeroing only where a stored output reads padding; clamps also
    where an overhanging tile column reads past W. ``span``: input columns under a tile's
    columns and the window's width (``register_window``)."""

    def __init__(self, geom: ConvGeometry, wt: int, wb: int):
        self.h, self.w, self.kh, self.kw = geom.h, geom.w, geom.kh, geom.kw
        (self.sh, self.sw), (self.dh, self.dw) = geom.strides, geom.dilation
        self.pt, self.pl, _, _ = geom.padding
        self.zero_top, self.zero_left = self.pt > 0, self.pl > 0
        self.zero_bottom = (geom.oh - 1) * self.sh - self.pt + (self.kh - 1) * self.dh > self.h - 1
        self.zero_right = (geom.ow - 1) * self.sw - self.pl + (self.kw - 1) * self.dw > self.w - 1
        self.clamp_right = (wt * wb - 1) * self.sw - self.pl + (self.kw - 1) * self.dw > self.w - 1
        self.span = (wb - 1) * self.sw + (self.kw - 1) * self.dw + 1

    def inside(self, ih, iw):
        conds = []
        if self.zero_top:
            conds.append(ih >= 0)
        if self.zero_bottom:
            conds.append(ih < self.h)
        if self.zero_left:
            conds.append(iw >= 0)
        if self.zero_right:
            conds.append(iw < self.w)
        return all_of(conds)

    def clamp_row(self, ih):
        if self.zero_top:
            ih = T.max(ih, 0)
        if self.zero_bottom:
            ih = T.min(ih, self.h - 1)
        return ih

    def clamp_col(self, iw):
        if self.zero_left:
            iw = T.max(iw, 0)
        if self.zero_right or self.clamp_right:
            iw = T.min(iw, self.w - 1)
        return iw

    def raw_row(self, r, k):
        return r * self.sh - self.pt + k * self.dh

    def raw_col(self, x, k):
        return x * self.sw - self.pl + k * self.dw



def _aligned_channels(view, logical, buffer) -> bool:
    """Whether an NHWC input read through ``view`` keeps each pixel's channels contiguous on the
    buffer's last axis, from a multiple of 4, in rows of a multiple of 4 (a 16-byte aligned vector)."""
    if not gather.contiguous_last_axis(gather.Source(0, view), logical) or buffer[-1] % LANES:
        return False
    first = gather.through(view, logical, (0,) * len(logical))[-1]
    first = first if isinstance(first, int) else sym.Analyzer().simplify(first)
    return isinstance(first, (int, tvm.tirx.IntImm)) and int(first) % LANES == 0


#: How a conv kernel reads X: blocked ``[N, C/4, H, W, 4]``, or a plain buffer: ``[N, C, H, W]`` (a
#: model's input read by its first conv) or channels-last ``[N, H, W, C]`` (tokens ``[N, H * W, C]``
#: read as their map): no layout kernel before it.
DATA_LAYOUTS = ("NCHW4c", "NCHW", "NHWC")


class InputLayout:
    """How the kernels of ``geom`` read input lane ``lane`` of block ``cb``: one vector read of a
    blocked pixel, or (``data_layout`` "NCHW" or "NHWC", a buffer) channel ``cb * 4 + lane`` of a
    plain input, clamped to the last channel and zeroed past it (:meth:`lane_guard`). ``refused``:
    why the kernel cannot read a plain input (None: it can). ``view``: X read through
    :mod:`primfuncs.gather` steps from its logical shape (blocked ``[N, C/4, H, W, 4]`` or plain) to
    the buffer's: a channel slice of a Linear's plain output, a window of whole channel blocks of
    a wider blocked map (its 4 lanes kept together)."""

    def __init__(self, geom: ConvGeometry, data_layout: str, scope: str, refused: str | None = None, view=()):
        if data_layout not in DATA_LAYOUTS:
            raise ValueError(f"data_layout must be one of {DATA_LAYOUTS}, got {data_layout!r}")
        self.plain, self.nhwc, self.c = data_layout != "NCHW4c", data_layout == "NHWC", geom.c
        self.logical = (geom.n, geom.h, geom.w, geom.c) if self.nhwc else (geom.n, geom.c, geom.h, geom.w) if self.plain \
            else (geom.n, geom.c4, geom.h, geom.w, LANES)
        self.view, self.buffer = (gather.read_view if self.plain else gather.read_blocked_view)(self.logical, view, "x_view")
        # NHWC with whole blocks: a block's 4 channels are adjacent and 16-byte aligned, one vector read
        # (through a view: where it keeps the channels contiguous, at a multiple of 4 in a buffer whose rows are)
        self.vector = self.nhwc and geom.c % LANES == 0 and (not self.view or _aligned_channels(self.view, self.logical, self.buffer))
        if self.plain and scope != "global":
            raise ValueError(f"data_layout={data_layout!r} reads X from a buffer (scope 'global'), got scope={scope!r}")
        if self.plain and refused:
            raise ValueError(f"data_layout={data_layout!r}: {refused}")

    def shape(self, geom: ConvGeometry, h: int, w: int) -> tuple:
        """X's shape for an input window of ``h`` x ``w`` pixels (through a view: its buffer's)."""
        if self.view:
            return self.buffer
        if self.nhwc:
            return (geom.n, h, w, geom.c)
        return (geom.n, geom.c, h, w) if self.plain else (geom.n, geom.c4, h, w, LANES)

    def at(self, index, lane=None):
        """The stored index of a plain input's element ``index`` (NCHW or NHWC), through the view;
        ``lane`` added on the buffer's last axis (a vector's)."""
        return gather.through(self.view, self.logical, index, lane)

    def lane(self, X, nn, cb, row, col, lane):
        """The read of lane ``lane`` of input block ``cb`` at (``row``, ``col``)."""
        if self.nhwc:
            return X[self.at((nn, row, col, T.min(cb * LANES + lane, self.c - 1)))]
        return X[self.at((nn, T.min(cb * LANES + lane, self.c - 1), row, col))] if self.plain else self.block(X, nn, cb, row, col, lane)

    def block(self, X, nn, cb, row, col, lane):
        """Lane ``lane`` of blocked pixel (``row``, ``col``) of block ``cb`` (through the view)."""
        return X[self.at((nn, cb, row, col, 0), lane)]

    def lane_guard(self, cb, lane) -> list:
        """The condition that the lane holds a channel, where one is needed (a plain input's last
        block may hold fewer than 4): a list for :func:`all_of`."""
        return [cb * LANES + lane < self.c] if self.plain and self.c % LANES else []
