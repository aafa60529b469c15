"""The ``softmax_attention`` pattern (``passes.patterns.softmax_attention``): softmax attention as
exporters write it runs as one ``softmax_attention`` kernel, against onnxruntime, on the default
profile and the nvidia-h200 one, in float32 and float16_acc32; the plan has no GEMM, softmax,
transpose or gather kernel for the attention; the spellings it must leave alone still run (the
GEMM and softmax rules)."""

import numpy as np
import pytest
from onnx import numpy_helper

from helpers.onnx_graphs import f32, make, node, run_ours, tensor

def _efficientvit_head(heads=2, d=4, dv=6, length=9, biased=True):
    """EfficientViT's cascaded group attention head as timm exports it: ``(qᵀ k) * scale + biases``
    (a constant ``[heads, L, L]``: the attention-bias table gathered at export), the softmax, then
    ``v @ attnᵀ`` (the probabilities transposed, on the right)."""
    nodes = [node("Transpose", ["q"], ["qt"], perm=[0, 1, 3, 2]), node("MatMul", ["qt", "k"], ["s0"]),
             node("Mul", ["s0", "scale"], ["s1"])]
    nodes += [node("Add", ["s1", "ab"], ["s"])] if biased else [node("Identity", ["s1"], ["s"])]
    nodes += [node("Softmax", ["s"], ["p"], axis=-1), node("Transpose", ["p"], ["pt"], perm=[0, 1, 3, 2]),
              node("MatMul", ["v", "pt"], ["y"])]
    inits = [numpy_helper.from_array(np.array(d**-0.5, np.float32), "scale"), f32("ab", (heads, length, length))]
    shapes = {"q": (1, heads, d, length), "k": (1, heads, d, length), "v": (1, heads, dv, length)}
    return make(nodes, [tensor(n, list(s)) for n, s in shapes.items()], [tensor("y", [1, heads, dv, length])], inits, opset=17), shapes


@pytest.mark.parametrize("precision", ["float32", "float16_acc32"])
def test_efficientvit_head_is_one_kernel(precision):
    model, shapes = _efficientvit_head()
    assert run_ours(model, shapes, seed=1, precision=precision) == ["softmax_attention"]


def test_efficientvit_head_on_the_wide_profile():
    from tir_adreno.strategy.profile import get_profile

    model, shapes = _efficientvit_head(heads=3, d=16, dv=16, length=49)
    assert run_ours(model, shapes, seed=2, profile=get_profile("nvidia-h200")) == ["softmax_attention"]


def test_multi_query_attention_stored_for_the_proj():
    """Multi-query attention (one K and V ``[N, 1, L, d]`` for every head, MobileNetV4) with its
    output transposed to ``[N, L, heads, d]`` and reshaped for the proj Linear: the attention and
    the Linear, two launches (the transpose is the kernel's permuted store)."""
    n, heads, length, d = 1, 4, 12, 8
    nodes = [node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), node("MatMul", ["q", "kt"], ["s"]),
             node("Softmax", ["s"], ["p"], axis=3), node("MatMul", ["p", "v"], ["o"]),
             node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]), node("Reshape", ["ot", "shape"], ["o3"]),
             node("MatMul", ["o3", "w"], ["y"])]
    inits = [numpy_helper.from_array(np.array([n, length, heads * d], np.int64), "shape"), f32("w", (heads * d, 5))]
    shapes = {"q": (n, heads, length, d), "k": (n, 1, 7, d), "v": (n, 1, 7, d)}
    model = make(nodes, [tensor(k, list(s)) for k, s in shapes.items()], [tensor("y", [n, length, 5])], inits, opset=17)
    assert run_ours(model, shapes, seed=3) == ["softmax_attention", "gemm"]


def test_a_residual_after_the_values_is_in_the_kernel():
    """``softmax(q kᵀ) v + r`` (a residual of the output's shape, computed already): one kernel."""
    nodes = [node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]), node("MatMul", ["q", "kt"], ["s"]),
             node("Softmax", ["s"], ["p"], axis=-1), node("MatMul", ["p", "v"], ["o"]), node("Add", ["o", "r"], ["y"])]
    shapes = {"q": (2, 5, 3), "k": (2, 6, 3), "v": (2, 6, 4), "r": (2, 5, 4)}
    model = make(nodes, [tensor(k, list(s)) for k, s in shapes.items()], [tensor("y", [2, 5, 4])], [], opset=17)
    assert run_ours(model, shapes, seed=4) == ["softmax_attention"]


def test_softmax_over_another_axis_is_not_attention():
    """A softmax over the queries (axis -2) is no attention row: two GEMMs and the softmax rule."""
    nodes = [node("MatMul", ["q", "k"], ["s"]), node("Softmax", ["s"], ["p"], axis=-2), node("MatMul", ["p", "v"], ["y"])]
    shapes = {"q": (2, 5, 3), "k": (2, 3, 5), "v": (2, 5, 4)}
    model = make(nodes, [tensor(k, list(s)) for k, s in shapes.items()], [tensor("y", [2, 5, 4])], [], opset=17)
    assert sorted(run_ours(model, shapes, seed=5)) == ["gemm", "gemm", "softmax_rows"]


def test_the_strategy_fuses_attention_where_one_kernel_wins():
    """``strategy.attention.softmax_attention_threads``: EfficientViT-M0's heads (196 rows of 49 keys)
    are one kernel; DeiT's (3 x 197 rows of 197 keys, d 64: 15 M multiply-adds, 453 steps), GC
    ViT's 64 windows (20 M) and XCiT's class attention (1 query a head, 197 keys: 325 steps an
    item) stay three launches, as does every
    attention with fusion off or rows past local memory."""
    from tir_adreno.strategy.attention import softmax_attention_threads
    from tir_adreno.strategy.profile import get_profile, without_fusion

    h200 = get_profile("nvidia-h200")
    for profile in (h200, get_profile("pocl"), get_profile("adreno")):
        assert softmax_attention_threads(profile, 4 * 49, 49, 16, 16) == 64
        assert softmax_attention_threads(profile, 3 * 197, 197, 64, 64) is None
        assert softmax_attention_threads(profile, 4, 197, 32, 32) is None
        assert softmax_attention_threads(profile, 64 * 2 * 49, 49, 32, 32) is None  # GC ViT's 64 windows: 81 steps, 20 M
        assert softmax_attention_threads(without_fusion(profile), 4 * 49, 49, 16, 16) is None
    assert softmax_attention_threads(h200, 16, 9, 8, 8) == 16
    assert softmax_attention_threads(h200, 1, 4096, 4, 4) is None  # past MAX_KEYS


def test_deit_sized_heads_stay_gemms():
    """timm's ViT attention at DeiT-Tiny's size (3 heads of 197 tokens, d 64) on the nvidia-h200
    profile: the two tiled GEMMs and the softmax (the one kernel lost there on the H100)."""
    from helpers.onnx_graphs import plan_kernels
    from tir_adreno.strategy.profile import get_profile

    nodes = [node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), node("MatMul", ["q", "kt"], ["s"]),
             node("Softmax", ["s"], ["p"], axis=-1), node("MatMul", ["p", "v"], ["y"])]
    shapes = {"q": (1, 3, 197, 64), "k": (1, 3, 197, 64), "v": (1, 3, 197, 64)}
    model = make(nodes, [tensor(k, list(s)) for k, s in shapes.items()], [tensor("y", [1, 3, 197, 64])], [], opset=17)
    assert plan_kernels(model, get_profile("nvidia-h200")) == ["gemm_tiled", "softmax_rows", "gemm_tiled"]
