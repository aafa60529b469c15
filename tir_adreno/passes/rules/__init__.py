"""The single-op rewrite rules, one module per op family, in ONE ordered registry (:data:`RULES`).

A rule lowers one op (with what folds into its kernel: a conv's epilogue, an activation chain) and
returns None when it does not apply; for each node the fusion patterns (``passes.patterns``) are
tried first, then the first rule of its op that applies wins (``binary`` before ``elementwise``: an
add, subtract, multiply or divide of two activations is one binary kernel, else it may be an
activation chain or a per-channel affine step), and an op no rule takes is left to upstream
(``LegalizeOps`` and dlight). Rule modules never import each other (an import-linter contract):
what several share lives in ``rules.common`` and ``passes.conv_emit``."""

from tir_adreno.passes.rules import broadcast, concat, conv, elementwise, gemm, layer_norm, layout, matmul, patches, pool, token_layout
from tir_adreno.passes.rules.base import Rule, by_op, rule  # noqa: F401 (the rule contract)

RULES: tuple[Rule, ...] = (
    conv.conv2d,
    matmul.matmul,
    gemm.gemm,
    elementwise.binary,
    elementwise.elementwise,
    broadcast.broadcast_binary,
    broadcast.broadcast_to,
    elementwise.batch_norm,
    pool.pool,
    pool.reduction,
    pool.softmax,
    concat.concat,
    layout.resize2d,
    layout.permute,
    layout.strided_slice,
    layout.split,
    layout.reshape,
    patches.patch_unfold,
    layer_norm.layer_norm,
    layer_norm.group_norm_op,
    token_layout.view,
    token_layout.move,
    token_layout.split,
    token_layout.concat,
)
