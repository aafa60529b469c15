"""The fusion stage: one module per fused pattern, in ONE ordered registry (:data:`PATTERNS`), tried
on each node before the single-op rules of ``passes.rules`` (as TFLite's special selectors run
before its per-op switch, and TVM's CLML pattern table before its lowering).

Each pattern (``base.Pattern``) matches a subgraph from its anchor op (``match(graph, node)``),
asks ``strategy/`` whether its fused plan runs (``plan(match, profile, records, precision)``) and
emits it (``emit(rewriter, plan)``); a pattern that declines leaves the node to the next pattern
for its op, then to the rules. Precedence is data: each pattern's ``before`` names the patterns
(and rules) it is tried before, :func:`base.ordered` checks that this order keeps every one, and
``tests/passes/test_patterns.py`` names every pair of patterns that share an anchor op.

| pattern | anchor ops | module | before (patterns) |
|---|---|---|---|
| ``pooled_excitation`` | mean, adaptive_avg_pool2d | ``excitation`` | head_gemv, pooled_pointwise |
| ``excitation`` | conv2d | ``excitation`` | head_gemv, depthwise_excitation, depthwise_pointwise |
| ``head_gemv`` | mean, adaptive_avg_pool2d, conv2d, matmul, layer_norm | ``head_gemv`` | pooled_pointwise, depthwise_excitation, depthwise_pointwise, layer_norm_conv, layer_norm_gemm, softmax_attention |
| ``pooled_pointwise`` | mean, adaptive_avg_pool2d | ``excitation`` | |
| ``depthwise_excitation`` | conv2d | ``depthwise_excitation`` | depthwise_pointwise |
| ``depthwise_pointwise`` | conv2d | ``depthwise_pointwise`` | |
| ``grn_gated_conv2d`` | multiply | ``grn`` | gated_conv2d, producer_gemm |
| ``gated_conv2d`` | multiply | ``gated_conv`` | producer_gemm |
| ``layer_norm_conv`` | layer_norm | ``layer_norm_conv`` | layer_norm_gemm |
| ``layer_norm_gemm`` | layer_norm | ``layer_norm_gemm`` | |
| ``group_norm_conv`` | reshape, group_norm | ``group_norm`` | group_norm, cross_covariance_attention, linear_attention |
| ``group_norm`` | reshape | ``group_norm`` | cross_covariance_attention, linear_attention |
| ``grn_scale`` | sqrt | ``grn`` | producer_gemm |
| ``cross_covariance_attention`` | reshape | ``cross_covariance_attention`` | linear_attention |
| ``linear_attention`` | reshape | ``linear_attention`` | |
| ``concat_linear_attention`` | concat | ``linear_attention`` | |
| ``split_depthwise`` | strided_slice | ``split_depthwise`` | |
| ``separable_attention`` | split | ``separable_attention`` | |
| ``softmax_attention`` | matmul | ``softmax_attention`` | |
| ``producer_gemm`` | the elementwise ops (``elementwise_chain.OPS``) | ``producer_gemm`` | |

Helpers the patterns share are modules of their own (``excite_parts``, ``base``; and below them
``passes.conv_emit``, ``passes.rules.common``): pattern modules never import each other.
"""

from tir_adreno.passes.patterns import (cross_covariance_attention, depthwise_excitation, depthwise_pointwise, excitation, gated_conv,
                                        grn, group_norm, head_gemv, layer_norm_conv, layer_norm_gemm, linear_attention, producer_gemm,
                                        separable_attention, softmax_attention, split_depthwise)
from tir_adreno.passes.patterns.base import Match, Pattern, Plan, ordered  # noqa: F401 (the pattern contract)
from tir_adreno.passes.rules import RULES

PATTERNS: tuple[Pattern, ...] = ordered((
    excitation.pooled_excitation,
    excitation.excitation,
    head_gemv.emit_head_gemv,
    excitation.pooled_pointwise,
    depthwise_excitation.depthwise_excitation,
    depthwise_pointwise.depthwise_pointwise,
    grn.grn_gated_conv2d,
    gated_conv.gated_conv2d,
    layer_norm_conv.layer_norm_conv,
    layer_norm_gemm.layer_norm_gemm,
    group_norm.group_norm_conv,
    group_norm.group_norm,
    grn.grn_scale,
    cross_covariance_attention.cross_covariance_attention,
    linear_attention.linear_attention,
    linear_attention.concat_linear_attention,
    split_depthwise.split_depthwise,
    separable_attention.separable_attention,
    softmax_attention.softmax_attention,
    producer_gemm.producer_gemm,
), {r.name for r in RULES})
