"""The Relax pass: a CNN's ops -> ``call_tir`` of our texture PrimFuncs (``dispatch_to_textures``;
the module map is in ``passes.dispatch``)."""

from tir_adreno.passes.dispatch import DispatchToTextures, dispatch_to_textures
from tir_adreno.passes.op_info import CONFIG_ATTR, CONV_STAGES, FLOAT32_ATTR, OP_ATTR, OURS_ATTR, SOURCE_ATTR

__all__ = ["CONFIG_ATTR", "CONV_STAGES", "DispatchToTextures", "FLOAT32_ATTR", "OP_ATTR", "OURS_ATTR", "SOURCE_ATTR", "dispatch_to_textures"]
