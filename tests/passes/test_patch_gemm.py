"""Patchify convs between plain tensors as one GEMM (``passes.patch_gemm``), compiled for the
nvidia-h200 profile and run here against onnxruntime (random input and weights):

- PVT-v2's spatial-reduction conv on tokens (``[N, H W, C]`` -> transpose -> reshape -> Conv
  k = s -> reshape -> transpose -> LayerNorm): the GEMM reads the patches through a view of
  the tokens (``(kh, kw, C)`` order) and writes the reduced tokens for the norm;
- a ViT / MLP-Mixer stem on the model's NCHW input (Conv k = s -> flatten -> transpose -> norm), the
  patches in ``(C, kh, kw)`` order, its bias and a GELU after it in the GEMM's epilogue;

no conv and no layout kernel in either plan; a padded or overlapping conv and a 1x1 conv stay
convs, and on the pocl profile (no split or tiled GEMM) the patchify conv stays the direct conv. The view and
weight order are checked against NumPy on their own (every patch element where the conv reads it)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.onnx_graphs import f32, i64, make, node, run_all_ours, tensor
from primfuncs import gather as G
from primfuncs.conv import ConvGeometry
from tir_adreno.passes.patch_gemm import is_patchify, patch_view, patch_weights

PROFILE = "nvidia-h200"


def _reduction_block(c, size, r, o=None, pad=0):
    """Tokens ``x [1, size^2, c]`` -> map -> Conv (kernel r, stride r, ``pad``) -> tokens -> LayerNorm."""
    o = o or c
    n = (size + 2 * pad - r) // r + 1
    nodes = [node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]), node("Reshape", ["xt", "map_shape"], ["m"]),
             node("Conv", ["m", "w", "bias"], ["y"], kernel_shape=[r, r], strides=[r, r], pads=[pad] * 4),
             node("Reshape", ["y", "tok_shape"], ["yt"]), node("Transpose", ["yt"], ["t"], perm=[0, 2, 1]),
             node("LayerNormalization", ["t", "g", "b"], ["out"], axis=-1, epsilon=1e-5)]
    inits = [i64("map_shape", [1, c, size, size]), i64("tok_shape", [1, o, n * n]),
             f32("w", (o, c, r, r), scale=1 / np.sqrt(c * r * r)), f32("bias", (o,)), f32("g", (o,), low=0.5), f32("b", (o,), scale=0.1)]
    return make(nodes, [tensor("x", [1, size * size, c])], [tensor("out", [1, n * n, o])], inits, opset=17)


def _stem(c, size, p, o):
    """An NCHW image -> Conv (kernel = stride = p) -> GELU -> flatten(2) -> transpose -> LayerNorm: patch tokens."""
    n = size // p
    nodes = [node("Conv", ["x", "w", "bias"], ["y"], kernel_shape=[p, p], strides=[p, p]), node("Gelu", ["y"], ["a"]),
             node("Reshape", ["a", "tok_shape"], ["f"]), node("Transpose", ["f"], ["t"], perm=[0, 2, 1]),
             node("LayerNormalization", ["t", "g", "b"], ["out"], axis=-1, epsilon=1e-6)]
    inits = [i64("tok_shape", [1, o, n * n]), f32("w", (o, c, p, p), scale=1 / np.sqrt(c * p * p)), f32("bias", (o,)),
             f32("g", (o,), low=0.5), f32("b", (o,), scale=0.1)]
    return make(nodes, [tensor("x", [1, c, size, size])], [tensor("out", [1, n * n, o])], inits, opset=20)


def test_spatial_reduction_conv_on_tokens_is_one_gemm():
    """16 channels, 4 x 4 patches: K = 256, 16 x 12 outputs: the split GEMM (``strategy.gemm``)."""
    ops, layout = run_all_ours(_reduction_block(c=16, size=16, r=4, o=12), seed=1, shape=(1, 256, 16), profile=PROFILE)
    assert layout == [] and not [op for op in ops if op.startswith("conv")], ops
    assert [op for op in ops if op.startswith("gemm")] == ["gemm_split"], ops


def test_stem_on_the_model_input_is_one_gemm():
    ops, layout = run_all_ours(_stem(c=3, size=32, p=8, o=20), seed=2, shape=(1, 3, 32, 32), profile=PROFILE)
    assert layout == [] and not [op for op in ops if op.startswith("conv")], ops
    assert len(ops) == 2 and ops[0].startswith("gemm"), ops  # the GEMM, then the norm on its tokens


@pytest.mark.parametrize("profile, pad", [("pocl", 0), (PROFILE, 1)])
def test_patch_gemm_only_for_unpadded_convs_on_gemm_profiles(profile, pad):
    ops, _ = run_all_ours(_reduction_block(c=8, size=16, r=4, pad=pad), seed=3, shape=(1, 256, 8), profile=profile)
    assert any(op.startswith("conv") for op in ops) and not any(op.startswith("gemm") for op in ops), ops


@settings(deadline=None)
@given(layout=st.sampled_from(["NHWC", "NCHW"]), n=st.integers(1, 2), c=st.integers(1, 6), oh=st.integers(1, 3), ow=st.integers(1, 3),
       kh=st.integers(1, 4), kw=st.integers(1, 4), o=st.integers(1, 5), seed=st.integers(0, 2**32 - 1))
def test_patch_view_and_weights_are_the_conv(layout, n, c, oh, ow, kh, kw, o, seed):
    """A's view of the stored input times B is the conv (float64 NumPy, every output pixel), for
    inputs stored NHWC or NCHW in any shape of as many elements (tokens ``[N, H W, C]``)."""
    geom = ConvGeometry(n, c, oh * kh, ow * kw, o, kh, kw, (kh, kw), (0, 0, 0, 0), (1, 1), 1)
    assert is_patchify(geom) == (kh * kw > 1)  # a 1x1 conv stays the conv rule's (its view and weights are right all the same)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, geom.h, geom.w))
    w = rng.standard_normal((o, c, kh, kw))
    stored = np.transpose(x, (0, 2, 3, 1)).reshape(n, geom.h * geom.w, c) if layout == "NHWC" else x
    a_shape = (n, oh, ow, c * kh * kw)
    source = G.Source(0, patch_view(geom, layout, stored.shape))
    a = np.array([stored[G.index_map(source, a_shape, idx)[0]] for idx in np.ndindex(*a_shape)]).reshape(a_shape)
    conv = np.einsum("nchpwq,ocpq->nhwo", x.reshape(n, c, oh, kh, ow, kw), w)
    assert np.allclose(a @ patch_weights(w, layout).astype(np.float64), conv, rtol=1e-6, atol=1e-6)
