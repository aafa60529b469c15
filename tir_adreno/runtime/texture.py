"""Texture conventions shared with TVM's OpenCL codegen.

A tensor ``[d0, ..., d(n-2), L]`` in a texture scope is an ``image2d_array``
whose pixel is the last axis (``L == 4`` lanes, RGBA). The scope decides where
the axes before it split into array layers (depth), rows (height) and columns
(width); the split must match ``TextureFlatten`` in TVM exactly, because the
kernels TVM emits index images that way.

This module has no TVM or OpenCL dependency: the runtime uses it on machines
without TVM.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: Scope -> separator ``s``: depth = d0..d(s-2), height = d(s-1), width = d(s)..d(n-2).
#: ``None`` means ``n - 2`` (activations: the last two axes before the pixel are H, W).
TEXTURE_SCOPES: dict[str, int | None] = {
    "global.texture": None,
    "global.texture-weight": 1,
    "global.texture-nhwc": 2,
}
BUFFER_SCOPE = "global"
#: Channels of an RGBA texel: the last axis of a texture tensor. The kernels' blocked layouts
#: (``primfuncs.lanes.LANES``) match it; the runtime may not import primfuncs (layer contract).
TEXEL_CHANNELS = 4

#: NumPy dtype -> (OpenCL channel type name, bytes per pixel).
IMAGE_FORMATS = {
    "float32": ("FLOAT", 16),
    "float16": ("HALF_FLOAT", 8),
}


class TextureLimitError(ValueError):
    """A tensor does not fit the device's image limits and buffers were forbidden."""


def is_texture_scope(scope: str) -> bool:
    return scope in TEXTURE_SCOPES


def _separator(scope: str, ndim: int) -> int:
    sep = TEXTURE_SCOPES[scope]
    return ndim - 2 if sep is None else sep


def texture_extent(shape, scope: str) -> tuple[int, int, int]:
    """(width, height, depth) in pixels of ``shape`` stored in ``scope``."""
    if scope not in TEXTURE_SCOPES:
        raise ValueError(f"scope {scope!r} is not a texture scope; expected one of {sorted(TEXTURE_SCOPES)}")
    shape = tuple(int(d) for d in shape)
    if len(shape) < 3 or shape[-1] != TEXEL_CHANNELS:
        raise ValueError(
            f"a texture tensor needs >= 3 axes and a last axis of {TEXEL_CHANNELS} lanes, got shape {shape}"
        )
    sep = _separator(scope, len(shape))
    if not 1 <= sep <= len(shape) - 2:
        raise ValueError(f"shape {shape} has too few axes for scope {scope!r}")
    depth = math.prod(shape[: sep - 1])
    height = shape[sep - 1]
    width = math.prod(shape[sep:-1])
    return width, height, depth


def image_format(dtype) -> tuple[str, int]:
    """(OpenCL channel type name, bytes per pixel) for ``dtype``."""
    name = np.dtype(dtype).name
    if name not in IMAGE_FORMATS:
        raise TypeError(f"dtype {name} has no texture format; supported: {sorted(IMAGE_FORMATS)}")
    return IMAGE_FORMATS[name]


@dataclass(frozen=True)
class DeviceLimits:
    """Image limits of a device (``CL_DEVICE_IMAGE2D_MAX_*``, ``CL_DEVICE_IMAGE_MAX_ARRAY_SIZE``)."""

    image2d_max_width: int
    image2d_max_height: int
    image_max_array_size: int
    image_support: bool = True

    def fits(self, shape, scope: str) -> bool:
        if not self.image_support:
            return False
        width, height, depth = texture_extent(shape, scope)
        return (
            width <= self.image2d_max_width
            and height <= self.image2d_max_height
            and depth <= self.image_max_array_size
        )


def place(shape, scope: str, limits: DeviceLimits, allow_buffer: bool = True) -> str:
    """The scope a tensor actually gets: ``scope`` when it fits, else a buffer.

    A texture that does not fit is never rejected unless ``allow_buffer`` is
    False, in which case :class:`TextureLimitError` names the limit.
    """
    if not is_texture_scope(scope) or limits.fits(shape, scope):
        return scope
    if allow_buffer:
        return BUFFER_SCOPE
    width, height, depth = texture_extent(shape, scope)
    raise TextureLimitError(
        f"tensor {tuple(shape)} in {scope} needs an image of {width} x {height} x {depth} "
        f"(width x height x layers); the device allows {limits.image2d_max_width} x "
        f"{limits.image2d_max_height} x {limits.image_max_array_size} "
        "(pass allow_buffer=True to place it in a buffer instead)"
    )
