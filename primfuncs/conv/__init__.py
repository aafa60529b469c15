"""Conv2d on NCHW4c tensors: the kernel factories of three families.

- :mod:`.direct`: dense, grouped and depthwise direct convs and the fused depthwise -> 1x1
  conv (tiling in :mod:`.direct_tiling`, macros in :mod:`.direct_body`);
- :mod:`.tiled`: dense convs as a local-memory tiled implicit GEMM (``ConvConfig.tiled``);
- :mod:`.winograd`: Winograd F(2x2, 3x3) / F(4x4, 3x3) (host-side math in :mod:`.winograd_math`);
- :mod:`.prologue`: the input side every factory takes as one ``Prologue`` (gate, folded norms, layout, scopes);

on the shared :mod:`.geometry` (sizes, window guards) and :mod:`.config` (``ConvConfig``,
argument checks, work-group helpers). Which config a device gets is not decided here
(``tir_adreno.strategy.defaults``).

The names below load their module on first use (PEP 562), so ``primfuncs.conv.winograd_math``
stays NumPy-only on a host without TVM.
"""

from __future__ import annotations

import importlib

#: Public name -> the module of this package that defines it.
_EXPORTS = {
    "ConvGeometry": "geometry",
    "conv2d_geometry": "geometry",
    "ConvConfig": "config",
    "fill_work_group": "config",
    "direct_extents": "config",
    "direct_work_items": "config",
    "conv2d_nchw4c": "direct",
    "depthwise_conv2d_nchw4c": "direct",
    "depthwise_pointwise_nchw4c": "direct",
    "depthwise_pointwise_geometry": "direct",
    "DepthwisePrologue": "direct",
    "Prologue": "prologue",
    "blocked_path": "direct",
    "blocked_oc_block": "direct_tiling",
    "conv2d_tiled_nchw4c": "tiled",
    "conv2d_winograd_nchw4c": "winograd",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
