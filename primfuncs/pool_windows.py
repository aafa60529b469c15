"""The windows of a pooling: which input positions each output index reduces along one axis
(:class:`Window`: sliding with stride, padding and dilation, adaptive, the whole axis, or the output
position itself), and the argument forms pooling takes (padding, pairs). ``primfuncs.pool2d`` turns
three windows and a reducer into a kernel (``window_reduce``)."""

from __future__ import annotations

import numbers
from dataclasses import dataclass

from tvm.script import tirx as T

from ._common import ceildiv, check_positive
from .elementwise import _check_nchw4c


@dataclass(frozen=True)
class Window:
    """The input positions that output index ``o`` reduces along one axis.

    Sliding: tap ``i`` (``0 <= i < taps``) is at ``o*stride - pad_before + i*dilation``;
    taps outside ``[0, extent)`` are padding. Adaptive (PyTorch): the window is
    ``[floor(o*extent/out), ceil((o+1)*extent/out))``, ``taps`` its largest size.
    """

    extent: int
    out: int
    taps: int
    stride: int = 1
    pad_before: int = 0
    pad_after: int = 0
    dilation: int = 1
    adaptive: bool = False

    @classmethod
    def point(cls, extent: int) -> "Window":
        """No reduction: output index ``o`` reads input index ``o``."""
        return cls(extent, extent, 1)

    @classmethod
    def whole(cls, extent: int) -> "Window":
        """The whole axis reduces to one output."""
        return cls(extent, 1, extent, adaptive=True)

    @classmethod
    def adaptive_window(cls, extent: int, out: int) -> "Window":
        taps = max(ceildiv((o + 1) * extent, out) - (o * extent) // out for o in range(out))
        return cls(extent, out, taps, adaptive=True)

    @classmethod
    def sliding(cls, extent, size, stride, pad_before, pad_after, dilation, ceil_mode) -> "Window":
        return cls(
            extent,
            sliding_output_size(extent, size, stride, pad_before, pad_after, dilation, ceil_mode),
            size,
            stride,
            pad_before,
            pad_after,
            dilation,
        )

    # -- TIR expressions of an output index ``o`` and a tap ``i`` -----------------------------
    def start(self, o):
        if self.adaptive:
            return (o * self.extent) // self.out
        return o * self.stride - self.pad_before

    def end(self, o):
        """One past the last position of an adaptive window."""
        return (o * self.extent + self.extent + self.out - 1) // self.out

    def position(self, o, i):
        if self.taps == 1:  # i is 0; saying so spares the group schedule's tap decomposition
            return self.start(o)
        return self.start(o) + i * self.dilation

    def _may_leave(self) -> bool:
        """Whether some tap can fall outside the input (padding, ceil_mode, ragged adaptive)."""
        if self.adaptive:
            return any(
                ceildiv((o + 1) * self.extent, self.out) - (o * self.extent) // self.out != self.taps
                for o in range(self.out)
            )
        last = (self.out - 1) * self.stride - self.pad_before + (self.taps - 1) * self.dilation
        return self.pad_before > 0 or last >= self.extent

    def inside(self, o, i):
        """Tap ``i`` of output ``o`` is a real input element (not padding)."""
        if not self._may_leave():
            return True
        if self.adaptive:
            return i < self.end(o) - self.start(o)
        p = self.position(o, i)
        return T.And(p >= 0, p < self.extent)

    def clamped(self, o, i):
        """The tap's position clamped into the input (a texture read is never out of range)."""
        if not self._may_leave():
            return self.position(o, i)
        return T.min(T.max(self.position(o, i), 0), self.extent - 1)

    def count(self, o, include_pad: bool = False):
        """Taps of output ``o`` that are real inputs; with ``include_pad`` also the padding
        taps inside ``[-pad_before, extent + pad_after)`` (PyTorch's ``count_include_pad``)."""
        if not self._may_leave():
            return self.taps
        if self.adaptive:
            return self.end(o) - self.start(o)
        s, d = self.start(o), self.dilation
        if include_pad:  # the window starts at or after -pad_before; it may run past the padding (ceil_mode)
            return T.min(self.taps, (self.extent + self.pad_after - s + d - 1) // d)
        first = T.max((d - 1 - s) // d, 0)
        last = T.min((self.extent - s + d - 1) // d, self.taps)
        return T.max(last - first, 0)


def sliding_output_size(extent, size, stride, pad_before, pad_after, dilation, ceil_mode) -> int:
    """Output length of a sliding window (PyTorch/Relax rule; with ``ceil_mode`` the last
    window must start inside the input or the left padding)."""
    span = (size - 1) * dilation + 1
    room = extent + pad_before + pad_after - span
    if room < 0:
        raise ValueError(
            f"the pooling window (size {size}, dilation {dilation}, span {span}) is larger than the "
            f"padded input ({extent} + {pad_before} + {pad_after})"
        )
    out = (ceildiv(room, stride) if ceil_mode else room // stride) + 1
    if ceil_mode and (out - 1) * stride >= extent + pad_before:
        out -= 1
    return out


def _ints(value, name) -> tuple[int, ...]:
    """``value`` (an int or a sequence of ints) as a tuple of ints."""
    if isinstance(value, numbers.Integral):
        return (int(value),)
    if isinstance(value, (tuple, list)) and all(isinstance(v, numbers.Integral) for v in value):
        return tuple(int(v) for v in value)
    raise TypeError(f"{name} must be an int or a tuple of ints, got {value!r}")


def _pair(value, name):
    value = _ints(value, name)
    value = value * 2 if len(value) == 1 else value
    if len(value) != 2:
        raise ValueError(f"{name} must be an int or a pair, got {value}")
    return value


def normalize_padding(padding):
    """Relax's padding: an int, (pad_h, pad_w) or (top, left, bottom, right)."""
    padding = _ints(padding, "padding")
    if len(padding) == 1:
        padding = padding * 4
    elif len(padding) == 2:
        padding = padding + padding
    elif len(padding) != 4:
        raise ValueError(f"padding must be an int, a pair or (top, left, bottom, right), got {padding}")
    if min(padding) < 0:
        raise ValueError(f"padding must be >= 0, got {padding}")
    return padding


def padding_past_half_window(pool_size, padding, dilation=1) -> str | None:
    """Which side pads more than half its window span (the kernels' limit, PyTorch's rule; ONNX
    allows up to the window size - 1, so a rule leaves such a pool upstream), else None."""
    (kh, kw), (dh, dw) = _pair(pool_size, "pool_size"), _pair(dilation, "dilation")
    top, left, bottom, right = normalize_padding(padding)
    for side, pad, k, d in (("top", top, kh, dh), ("bottom", bottom, kh, dh), ("left", left, kw, dw), ("right", right, kw, dw)):
        span = (k - 1) * d + 1
        if 2 * pad > span:
            return f"padding {side}={pad} is more than half of the window span {span}"
    return None


def pool_windows(shape, pool_size, strides=1, padding=0, dilation=1, ceil_mode=False):
    """Validated (rows, columns) :class:`Window` pair of a pool2d on the NCHW4c ``shape``."""
    _, _, h, w, _ = _check_nchw4c(shape)
    (kh, kw), (sh, sw), (dh, dw) = _pair(pool_size, "pool_size"), _pair(strides, "strides"), _pair(dilation, "dilation")
    check_positive(pool_size_h=kh, pool_size_w=kw, strides_h=sh, strides_w=sw, dilation_h=dh, dilation_w=dw)
    top, left, bottom, right = normalize_padding(padding)
    wide = padding_past_half_window(pool_size, padding, dilation)
    if wide is not None:  # PyTorch's rule; a window entirely in padding would be meaningless
        raise ValueError(wide)
    return (
        Window.sliding(h, kh, sh, top, bottom, dh, ceil_mode),
        Window.sliding(w, kw, sw, left, right, dw, ceil_mode),
    )
