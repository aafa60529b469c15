"""Texture or buffer: the one placement rule for NCHW4c activations.

Every caller (the Relax pass for each kernel it emits, ``conv2d_plan`` and the fused
depthwise -> 1x1 plan, ``ops``, ``tune``'s pool candidates) asks :func:`activation_scope`.
A kernel takes all its activations in one scope, so the rule is over all of them: the
``placement`` asked for (a conv's choice: a tuning record, or ``default_choice``, whose
placement is :func:`conv_placement`: convs of ``profile.texture_min_macs`` multiply-adds
and more on textures), else the profile's ``activation_placement``; "texture" holds only
when every tensor fits the device's images, else the kernel runs on buffers, or, with
``allow_buffer=False``, :class:`~tir_adreno.runtime.texture.TextureLimitError` names the
limit. Packed weights go where :func:`weight_scope` says: the weight texture beside
texture activations where they fit, else buffers.
"""

from __future__ import annotations

from primfuncs._common import BUFFER, TEXTURE, TEXTURE_WEIGHT

from tir_adreno.runtime import texture
from tir_adreno.strategy.profile import DeviceProfile, check_placement


def conv_placement(macs: int, profile: DeviceProfile) -> str:
    """A conv's placement when no record sets it: "texture" from ``profile.texture_min_macs``
    multiply-adds up (0: never), else the profile's ``activation_placement``."""
    return "texture" if 0 < profile.texture_min_macs <= macs else profile.activation_placement


def activation_scope(shapes5, profile: DeviceProfile, placement: str | None = None, allow_buffer: bool = True) -> str:
    """The scope (``TEXTURE`` or ``BUFFER``) of a kernel's NCHW4c activations ``shapes5`` on
    ``profile``, in ``placement`` ("texture"/"buffer"; default: ``profile.activation_placement``)."""
    placement = check_placement(placement or profile.activation_placement)
    if placement == "buffer":
        return BUFFER
    if all(profile.limits.fits(s, TEXTURE) for s in shapes5):
        return TEXTURE
    if not allow_buffer:
        for s in shapes5:
            texture.place(s, TEXTURE, profile.limits, allow_buffer=False)  # raises, naming the limit
    return BUFFER


def weight_scope(weight_shapes, scope: str, profile: DeviceProfile, allow_buffer: bool = True) -> str:
    """Where a kernel whose activations are in ``scope`` keeps its packed weights (``weight_shapes``,
    each blocked; a kernel reads them all alike): the weight texture (``TEXTURE_WEIGHT``) when its
    activations are textures and every one fits the device's images, else buffers; with
    ``allow_buffer=False`` one that does not fit raises
    :class:`~tir_adreno.runtime.texture.TextureLimitError`. Every conv plan asks it: the direct
    conv's, Winograd's transformed weights and the fused depthwise -> 1x1 pair's."""
    if scope != TEXTURE:
        return BUFFER
    placed = {texture.place(w, TEXTURE_WEIGHT, profile.limits, allow_buffer) for w in weight_shapes}
    return TEXTURE_WEIGHT if placed == {TEXTURE_WEIGHT} else BUFFER
