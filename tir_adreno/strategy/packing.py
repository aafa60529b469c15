"""Blocked layouts on the host (NumPy): the reference the layout kernels must match.

Used to pack constant weights at compile time (the Relax pass), to prepare
benchmark and test inputs, and as the exact reference of the layout tests.
TVM-free.
"""

from __future__ import annotations

import numpy as np

from primfuncs.lanes import LANES, blocked


def pack_nchw4c(x: np.ndarray, pad_value=0.0) -> np.ndarray:
    """NCHW -> ``(N, ceil(C/4), H, W, 4)``; the lanes past C hold ``pad_value``."""
    n, c, h, w = x.shape
    c4 = blocked(c)
    padded = np.full((n, c4 * LANES, h, w), pad_value, x.dtype)
    padded[:, :c] = x
    return np.ascontiguousarray(padded.reshape(n, c4, LANES, h, w).transpose(0, 1, 3, 4, 2))


def unpack_nchw4c(y: np.ndarray, channels: int) -> np.ndarray:
    """``(N, C4, H, W, 4)`` -> NCHW with ``channels`` channels."""
    n, c4, h, w, _ = y.shape
    return np.ascontiguousarray(y.transpose(0, 1, 4, 2, 3).reshape(n, c4 * LANES, h, w)[:, :channels])


def pack_oihw4o(w: np.ndarray) -> np.ndarray:
    """OIHW -> ``(ceil(O/4), I, KH, KW, 4)``: a pixel holds 4 output channels; padding zero."""
    o, i, kh, kw = w.shape
    o4 = blocked(o)
    padded = w
    if o4 * LANES != o:  # a padded copy only when O is not whole pixels (a classifier's weights are large)
        padded = np.zeros((o4 * LANES, i, kh, kw), w.dtype)
        padded[:o] = w
    return np.ascontiguousarray(padded.reshape(o4, LANES, i, kh, kw).transpose(0, 2, 3, 4, 1))


def pack_bias(bias: np.ndarray) -> np.ndarray:
    """``(C,)`` -> ``(ceil(C/4), 4)``, zero padded."""
    out = np.zeros((blocked(bias.size) * LANES,), bias.dtype)
    out[: bias.size] = bias
    return out.reshape(-1, LANES)


def pack_channel_range(values: np.ndarray, channels: int, begin: int) -> np.ndarray:
    """Per-channel values ``(width, *rest)`` of channels ``[begin, begin + width)`` of a
    ``channels``-channel map as ``(ceil(channels/4), *rest, 4)``: channel ``c`` at
    ``[c // 4, ..., c % 4]``, zero outside the range (``primfuncs.hierarchical``'s ``W`` from
    depthwise weights ``w[:, 0]`` and its ``Bias``)."""
    width, rest = values.shape[0], values.shape[1:]
    c4 = blocked(channels)
    full = np.zeros((c4 * LANES, *rest), values.dtype)
    full[begin : begin + width] = values
    return np.ascontiguousarray(np.moveaxis(full.reshape(c4, LANES, *rest), 1, -1))
