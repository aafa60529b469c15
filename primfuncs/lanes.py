"""The pixel of every blocked layout: 4 lanes (NCHW4c, OIHW4o; one RGBA texel).

TVM-free, so the runtime, the host-side packing and the NumPy Winograd transforms share
these with the kernels on machines without TVM (``primfuncs._common`` re-exports them).
"""

from __future__ import annotations

#: Channels per pixel of a blocked tensor (the last axis of ``[N, C/4, H, W, 4]``).
LANES = 4


def ceildiv(a: int, b: int) -> int:
    return -(-a // b)


def blocked(channels: int) -> int:
    """Number of 4-channel blocks holding ``channels`` channels."""
    return ceildiv(channels, LANES)
