"""Precisions (TVM's Adreno naming) and what a device must have to run them.

The strategy (``tir_adreno.strategy.conv``), the Relax pass, ``ops`` and the compiler ask here
which dtype the kernels are built for (:func:`kernel_dtype`), how float32 textures are stored
(:func:`half_storage`: images and, read with ``vload_half``, buffers) and whether a device runs a precision at all (:func:`check_precision`).
"""

from __future__ import annotations

from tir_adreno.runtime.errors import UserError
from tir_adreno.strategy.profile import DeviceProfile

#: Precisions as TVM's Adreno flow names them: "float32"; "float16_acc32" (every tensor of our
#: kernels, weights and Winograd intermediates included, stored in half: textures as RGBA half
#: images, ``read_imagef``/``write_imagef`` converting in the texture unit; buffers as half,
#: the float32 kernels built to read them with ``vload_half``/``vstore_half``); "float16" (the
#: factories' float16 kernels: half storage and half arithmetic).
PRECISIONS = ("float32", "float16_acc32", "float16")


class PrecisionError(UserError, ValueError):
    """The device cannot run the requested precision."""


def kernel_dtype(precision: str) -> str:
    """The dtype our kernels are built for: float16 only for ``"float16"``."""
    return "float16" if precision == "float16" else "float32"


#: Conv reduction lengths K = (C_in / groups) * kh * kw above which a float16 conv accumulates in
#: float32 (benchmarks/half_accumulation.py, docs/precision.md): a half sum's error is 2.5-5x the
#: output's own half rounding up to K = 32, 12x at 64 and 88x at 4608; a float32 sum of the half
#: products stays within 2x of it at every K. So depthwise convs (K = 9, 25) keep half's rate.
FLOAT_ACCUMULATION_MIN_K = 32


def conv_accumulator_dtype(precision: str, reduction_length: int) -> str:
    """The accumulator dtype of a conv kernel whose sums run over ``reduction_length`` products:
    float32 for a "float16" kernel with K above :data:`FLOAT_ACCUMULATION_MIN_K`, else the
    kernel's dtype (float32 kernels are unchanged)."""
    dtype = kernel_dtype(precision)
    return "float32" if dtype == "float16" and reduction_length > FLOAT_ACCUMULATION_MIN_K else dtype


def half_storage(precision: str) -> str | None:
    """The storage dtype of our kernels' float32 tensors (images and buffers): "float16" under
    ``"float16_acc32"``."""
    return "float16" if precision == "float16_acc32" else None


def check_precision(precision: str, profile: DeviceProfile) -> str:
    """``precision`` when ``profile`` can run it, else ValueError / :class:`PrecisionError`
    naming the device (``half_math`` comes from a probe kernel on live devices)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision == "float16_acc32" and not profile.half_images:
        raise PrecisionError(f"precision 'float16_acc32' needs RGBA half images, which {profile.name} lacks")
    if precision == "float16" and not profile.half_math:
        raise PrecisionError(f"precision 'float16' needs half arithmetic and half builtins, which {profile.name} "
                             "does not run (probe kernel); use 'float16_acc32' (half storage, float math)")
    return precision
