"""A patchify conv (kernel = stride, no padding or dilation: the patch embedding of ViT-style
stems, MLP-Mixer's, PVT-v2's spatial-reduction convs) that reads a plain input and writes its
output plain for token readers, as ONE GEMM: each output pixel's patch is a row of A, read through
a view of the plain input (reshape, permute, reshape: no im2col kernel), times the weights as
``B [kh kw C, O]`` (or ``[C kh kw, O]`` from NCHW); the product ``[N, OH, OW, O]`` is the output
in NHWC, the layout ``map_boundary.token_output`` asked for, with the conv's bias and activation
in the GEMM's epilogue.

Match (:func:`patch_gemm_operands`), plan (``strategy.gemm.patch_as_gemm`` and the GEMM's
config rule, which takes the split or tiled kernel for these long reductions) and emit
(:func:`emit_patch_gemm`) live here; ``conv_emit.emit_conv2d`` asks before planning a direct conv.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tvm import relax

from primfuncs import gather as G
from primfuncs import gemm as gemm_kernels
from primfuncs.conv import ConvGeometry

from tir_adreno.passes.epilogue_chain import pack_rows
from tir_adreno.passes.graph import Node, static_shape
from tir_adreno.passes.kernel_index import kernel
from tir_adreno.passes.op_info import epilogue_info, node_info
from tir_adreno.passes.rewriter import Rewriter
from tir_adreno.strategy import gemm as strategy
from tir_adreno.strategy.packing import pack_bias


@dataclass(frozen=True)
class PatchGemm:
    """The GEMM of a patchify conv: A's shape and its view of the plain input, B's shape."""

    a_shape: tuple
    a_view: tuple
    b_shape: tuple
    data_layout: str


def is_patchify(geom: ConvGeometry) -> bool:
    """Kernel = stride, more than one pixel (a 1x1 conv is the conv rule's, with its own tiled
    kernel on plain buffers), unpadded, undilated, dense, and the map an exact number of patches."""
    return ((geom.kh, geom.kw) == tuple(geom.strides) and geom.kh * geom.kw > 1 and not any(geom.padding) and tuple(geom.dilation) == (1, 1)
            and geom.groups == 1 and geom.h == geom.oh * geom.kh and geom.w == geom.ow * geom.kw)


def patch_view(geom: ConvGeometry, data_layout: str, stored_shape) -> tuple:
    """Gather steps from A ``[N, OH, OW, K]`` (a patch per row) back to the plain input as stored:
    K in ``(kh, kw, C)`` order from NHWC, ``(C, kh, kw)`` from NCHW (each the order the patch's
    elements lie in, so NHWC reads 4 channels as one vector)."""
    n, c, oh, ow, kh, kw = geom.n, geom.c, geom.oh, geom.ow, geom.kh, geom.kw
    if data_layout == "NHWC":  # [N, OH, kh, OW, kw, C] -> [N, OH, OW, kh, kw, C]
        patches, axes = (n, oh, ow, kh, kw, c), (0, 1, 3, 2, 4, 5)
    else:  # [N, C, OH, kh, OW, kw] -> [N, OH, OW, C, kh, kw]
        patches, axes = (n, oh, ow, c, kh, kw), (0, 2, 4, 1, 3, 5)
    return (G.Reshape(patches), G.Permute(axes), G.Reshape(tuple(stored_shape)))


def patch_weights(w_oihw: np.ndarray, data_layout: str) -> np.ndarray:
    """B ``[K, O]`` float32, K in :func:`patch_view`'s order."""
    order = (2, 3, 1, 0) if data_layout == "NHWC" else (1, 2, 3, 0)
    w = np.transpose(np.asarray(w_oihw), order)
    return np.ascontiguousarray(w.reshape(-1, w.shape[-1]), np.float32)


def patch_gemm_operands(rw: Rewriter, geom: ConvGeometry, tail, plain_in, plain_out) -> PatchGemm | None:
    """The GEMM of conv ``geom`` reading ``plain_in`` (``map_boundary.plain_input``) and writing
    ``plain_out`` (``map_boundary.token_output``), when the profile runs patchify convs as GEMMs,
    the conv is one, its output goes plain in NHWC and its epilogue reads nothing but constants."""
    if plain_in is None or plain_out is None or plain_out.layout != "NHWC" or tail.extra_inputs:
        return None
    if not (strategy.patch_as_gemm(rw.profile) and is_patchify(geom)):
        return None
    data_layout, expr, _, view = plain_in
    if view:  # a patchify GEMM reads its input as stored
        return None
    stored = static_shape(expr)
    if stored is None or int(np.prod(stored)) != geom.n * geom.c * geom.h * geom.w:
        return None
    k = geom.c * geom.kh * geom.kw
    return PatchGemm((geom.n, geom.oh, geom.ow, k), patch_view(geom, data_layout, stored), (k, geom.o), data_layout)


def emit_patch_gemm(rw: Rewriter, node: Node, geom: ConvGeometry, tail, plain_in, patch: PatchGemm):
    """The GEMM kernel of conv ``node`` (``patch`` from :func:`patch_gemm_operands`) on the plain
    input of ``plain_in``: its output, ``[N, OH, OW, O]``."""
    epilogue = tail.epilogue
    product = gemm_kernels.gemm_geometry(patch.a_shape, patch.b_shape)
    config = strategy.gemm_kwargs(product, "float32", rw.profile)["config"]
    func = kernel(gemm_kernels.gemm, patch.a_shape, patch.b_shape, config=config, epilogue=epilogue, a_view=patch.a_view)
    args = [plain_in[1], relax.const(patch_weights(tail.w, patch.data_layout))]
    rows = pack_rows(tail.bias if epilogue.bias else None, tail.chain, lambda r: pack_bias(r.astype(np.float32)))
    if rows is not None:
        args.append(relax.const(rows))
    info = node_info(node, config=str(config), patches=f"{geom.kh}x{geom.kw} from {patch.data_layout}")
    info["attrs"]["epilogue"] = epilogue_info(epilogue)
    info["gemm"] = {"a_shape": list(patch.a_shape), "b_shape": list(patch.b_shape), "trans_a": False, "trans_b": False,
                    "alpha": 1.0, "views": True}
    return rw.emit_kernel(func, args, product.out_shape, dtype="float32", hint="gemm", op_info=info)
