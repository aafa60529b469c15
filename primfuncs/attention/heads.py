"""The heads of an attention map: channel ranges of one NCHW4c map, checked, and the pixels they span."""

from __future__ import annotations

from .._common import (LANES, ceildiv, check_channels, check_positive, nchw4c)


def check_heads(shape, channels: int, heads: int, head_dim: int, offsets: dict, head_stride: int | None = None) -> tuple[int, int, int, int]:
    shape = nchw4c(shape)
    n, c4, h, w, _ = shape
    stride = head_dim if head_stride is None else head_stride
    check_positive(N=n, C4=c4, H=h, W=w, heads=heads, head_dim=head_dim)
    check_channels(c4, channels)
    if stride < head_dim:
        raise ValueError(f"head_stride={stride} must be >= head_dim={head_dim}")
    for name, offset in offsets.items():
        if not 0 <= offset <= channels - (heads - 1) * stride - head_dim:
            raise ValueError(f"{name}={offset}: the heads' channels [{name} + t * {stride}, ... + {head_dim}) must lie in [0, {channels})")
    return n, c4, h, w


def pixels_spanned(channels: int, aligned: bool = False) -> int:
    """How many 4-lane pixels a range of ``channels`` consecutive channels may overlap (``aligned``:
    the range starts on a pixel)."""
    return ceildiv(channels, LANES) if aligned else (channels + 2) // LANES + 1
