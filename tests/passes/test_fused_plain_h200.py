"""The nvidia-h200 profile's fused kernels on maps and vectors held plain (GCViT's stage norms,
XCiT's class token), compiled for that profile and run here against onnxruntime (random input and
weights), no layout kernel:

- ``depthwise_excitation`` reads a plain map in place where the depthwise conv alone would
  (``map_boundary.plain_input``), and the tiled 1x1 conv after it adds that map from the plain
  buffer (``Epilogue.residual_layout``): GCViT's global-query block on its stage norm;
- ``head_gemv`` does not take a vector or map held plain only (its kernel reads NCHW4c): the GEMM
  reads a class token in place, the row mean and the GEMM a plain map (XCiT's class attention
  and head, GCViT's head).
"""

import numpy as np

from helpers.onnx_graphs import f32, i64, make, node, run_all_ours, tensor
from test_channel_groups import _layout, _profile, global_query

PROFILE = "nvidia-h200"


def test_global_query_on_plain_tokens_fused():
    """GCViT's global-query block on plain tokens (the stage norm, its transpose to NCHW a gather):
    the fused depthwise + excitation kernel reads the gather's map in place, the gated tiled 1x1
    conv adds it from the plain buffer: no layout kernel (main: the map packed for the fused
    kernel, 7 launches, 1 transform). 16 channels, 32 x 32 tokens: the 1x1 conv is the tiled kernel."""
    ops = _profile(global_query(c=16, size=64, tokens=True), seed=7, profile=PROFILE)
    assert _layout(ops) == [], ops
    assert any(o.startswith("depthwise_excitation") for o in ops), ops
    assert any(o.startswith("conv2d_tiled") for o in ops), ops
    # the norm, its transpose (gather), the fused depthwise + excitation, the gated 1x1 conv, the pool, the Linear
    assert len(ops) == 6, ops


def test_global_query_on_plain_tokens_half_storage():
    """The same plan in float16_acc32 (the plain tensors in half buffers, the fused kernel built to
    read its plain X from one): within half storage's error of onnxruntime, no layout kernel."""
    from tir_adreno.compiler import compile_model
    from tir_adreno.reference import reference_outputs, relative_error

    model = global_query(c=16, size=64, tokens=True)
    cm = compile_model(model, profile=PROFILE, precision="float16_acc32", progress=lambda _: None)
    assert any(c.label.startswith("depthwise_excitation") for c in cm.plan.calls), [c.label for c in cm.plan.calls]
    assert _layout([c.label for c in cm.plan.calls]) == [], [c.label for c in cm.plan.calls]
    x = {"xt": np.random.default_rng(8).standard_normal((1, 32, 32, 16)).astype(np.float32)}
    (out,), (ref,) = cm.run(x), reference_outputs(model, x)
    assert relative_error(out, ref) <= 2e-3, relative_error(out, ref)


C, L, H, W, K = 12, 9, 4, 5, 10


def _class_token_model():
    """Tokens -> LN -> (the class token -> Linear q; all tokens -> Linear k) -> q k^T (XCiT's class
    attention scores), and LN -> class token -> Linear (its head); each class token read by its
    Linear alone, as the head GEMV pattern takes it."""
    nodes = [node("LayerNormalization", ["x", "g", "b"], ["n"], axis=-1),
             node("Gather", ["n", "zero"], ["cls"], axis=1), node("MatMul", ["cls", "wq"], ["q"]),
             node("Unsqueeze", ["q", "one"], ["q3"]), node("MatMul", ["n", "wk"], ["k"]),
             node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]), node("MatMul", ["q3", "kt"], ["s"]),
             node("Gather", ["n", "zero"], ["cls2"], axis=1), node("MatMul", ["cls2", "wh"], ["hm"]), node("Add", ["hm", "bh"], ["head"])]
    inits = [f32("g", (C,), 0.3, low=0.5), f32("b", (C,), 0.1), i64("zero", 0), i64("one", [1]), f32("wq", (C, C), 0.3),
             f32("wk", (C, C), 0.3), f32("wh", (C, K), 0.3), f32("bh", (K,), 0.1)]
    return make(nodes, [tensor("x", [1, L, C])], [tensor("s", [1, 1, L]), tensor("head", [1, K])], inits, opset=17)


def test_class_token_linears_are_gemms():
    """The class token gathered from plain tokens is read by the GEMM in place, for the query and
    for the head: no ``pooled_pointwise`` and no layout kernel (main: the query's vector packed for
    the head GEMV kernel and its output unpacked for q k^T, the head's vector packed)."""
    ops, transforms = run_all_ours(_class_token_model(), 5, (1, L, C), profile=PROFILE)
    assert transforms == [], ops
    assert not any(o.startswith("pooled_pointwise") for o in ops), ops
    assert sum(o.startswith("gemm") for o in ops) == 4, ops


def _pooled_head_model():
    """Channels-last tokens -> LN -> NCHW -> global average pool -> Linear (GCViT's head)."""
    nodes = [node("LayerNormalization", ["x", "g", "b"], ["n"], axis=-1), node("Transpose", ["n"], ["t"], perm=[0, 3, 1, 2]),
             node("GlobalAveragePool", ["t"], ["p"]), node("Flatten", ["p"], ["f"]), node("MatMul", ["f", "wh"], ["hm"]),
             node("Add", ["hm", "bh"], ["y"])]
    inits = [f32("g", (C,), 0.3, low=0.5), f32("b", (C,), 0.1), f32("wh", (C, K), 0.3), f32("bh", (K,), 0.1)]
    return make(nodes, [tensor("x", [1, H, W, C])], [tensor("y", [1, K])], inits, opset=17)


def test_head_of_a_plain_map_reads_it_in_place():
    """The pooled head of a map held plain: the row mean reads it in place (through the transpose
    after the norm: ``rows.x_view``) and the GEMM the mean, one launch fewer than the head GEMV and
    its pack, no layout kernel (main: ``nchw_to_nchw4c`` then ``pooled_pointwise``)."""
    ops, transforms = run_all_ours(_pooled_head_model(), 6, (1, H, W, C), profile=PROFILE)
    assert transforms == [], ops
    assert not any(o.startswith("pooled_pointwise") for o in ops), ops
    assert len(ops) == 3, ops  # the norm, the row mean (reading the transpose in place), the GEMM
