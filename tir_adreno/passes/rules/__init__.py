"""The rewrite rules, one module per op family, in ONE ordered registry (:data:`RULES`).

A rule returns None when it does not apply; for each node the first rule of its op that
applies wins (``excitation``, a pool and two 1x1 convs, before ``pool`` and ``conv2d``, and
``depthwise_excitation``, a depthwise conv and the SE block pooling its output, before ``conv2d``;
``grn_gated_conv2d``, ConvNeXt-V2's GRN from its ``x * x`` to the conv that reads it, and ``gated_conv2d``, a
squeeze-excitation multiply read by the conv after it, before ``binary``; ``binary``
before ``elementwise``: an add, subtract, multiply or divide of two activations is one binary kernel, else it may
be an activation chain or a per-channel affine step; ``separable_attention``, MobileViT-v2's attention from its
``Split`` to ``relu(v) * ctx``, before ``split``; ``split_depthwise``, EdgeNeXt's hierarchical split depthwise
convs from their channel slices to the concat, before ``strided_slice``; ``concat_linear_attention``, on a
wide GPU EfficientViT's concat of the maps its linear attention reads, before ``concat``), and
an op no rule takes is left to upstream (``LegalizeOps`` and dlight)."""

from tir_adreno.passes.rules import attention, broadcast, concat, conv, elementwise, excite, gemm, hierarchical, layer_norm, layout, matmul, patches, pool
from tir_adreno.passes.rules.base import Rule, by_op, rule  # noqa: F401 (the rule contract)

RULES: tuple[Rule, ...] = (
    excite.pooled_excitation,
    excite.excitation,
    excite.depthwise_excitation,
    conv.conv2d,
    matmul.matmul,
    gemm.gemm,
    layer_norm.grn_gated_conv2d,
    excite.gated_conv2d,
    elementwise.binary,
    elementwise.elementwise,
    broadcast.broadcast_binary,
    broadcast.broadcast_to,
    elementwise.batch_norm,
    pool.pool,
    pool.reduction,
    pool.softmax,
    attention.concat_linear_attention,
    concat.concat,
    layout.resize2d,
    layout.permute,
    hierarchical.split_depthwise,
    layout.strided_slice,
    attention.separable_attention,
    layout.split,
    layer_norm.group_norm,
    attention.cross_covariance_attention,
    attention.linear_attention,
    layout.reshape,
    patches.patch_unfold,
    layer_norm.layer_norm,
    layer_norm.group_norm_op,
    layer_norm.grn_scale,
)
