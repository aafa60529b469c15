"""The single-op rewrite rules, one module per op family, in ONE ordered registry (:data:`RULES`).

A rule lowers one op (with what folds into its kernel: a conv's epilogue, an activation chain) and
returns None when it does not apply; for each node the fusion patterns (``passes.patterns``) are
tried first, then the first rule of its op that applies wins (``binary`` before ``elementwise``: an
add, subtract, multiply or divide of two activations is one binary kernel, else it may be an
activation chain or a per-channel affine step; on plain tensors ``token_elementwise`` after them), and an op no rule takes is left to upstream
(``LegalizeOps`` and dlight). The ``rows`` rules (ops on plain tensors) come before the map rules of
their ops and decline a blocked input. Rule modules never import each other (an import-linter contract):
what several share lives in ``rules.common`` and ``passes.conv_emit``."""

from tir_adreno.passes.rules import broadcast, concat, conv, elementwise, gemm, layer_norm, layout, matmul, patches, pool, rows, token_elementwise, token_layout
from tir_adreno.passes.rules.base import Rule, by_op, rule  # noqa: F401 (the rule contract)

RULES: tuple[Rule, ...] = (
    conv.conv2d,
    matmul.matmul,
    gemm.gemm,
    elementwise.binary,
    elementwise.elementwise,
    broadcast.broadcast_binary,
    broadcast.broadcast_to,
    rows.rms_norm_rows,  # an RMS norm's Pow before a chain of plain elementwise ops
    token_elementwise.token_elementwise,
    rows.batch_norm_rows,
    elementwise.batch_norm,
    pool.pool,
    rows.reduction_rows,
    pool.reduction,
    rows.softmax_rows,
    pool.softmax,
    concat.concat,
    layout.resize2d,
    layout.permute,
    layout.strided_slice,
    layout.split,
    layout.reshape,
    patches.patch_unfold,
    rows.layer_norm_rows,
    layer_norm.layer_norm,
    layer_norm.group_norm_op,
    token_layout.view,
    token_layout.move,
    token_layout.split_plain,
    token_layout.concat_plain,
)
