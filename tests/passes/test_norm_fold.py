"""A layer norm over the channels folded into the 1x1 conv that alone reads it (ConvNeXt's and
EdgeNeXt's ``dwconv -> LayerNorm -> pwconv1``; ``layer_norm`` rule, ``strategy.fusion.fold_norm``,
``primfuncs.conv.norm``): onnx.helper graphs as torch.onnx.export writes them, against onnxruntime,
asserting the plan (no layer norm kernel), and the layer norm kept where the conv cannot fold it."""

import numpy as np
import pytest
from onnx import helper

from helpers.onnx_graphs import check_pattern, conv_node, convnext_block, edgenext_block, pattern_graph
from tir_adreno import compile_model
from tir_adreno.reference import layer_norm, relative_error
from tir_adreno.strategy.profile import get_profile, without_fusion

node = helper.make_node


@pytest.mark.parametrize("target", ["nvidia-h200", "pocl", "adreno"])
def test_convnext_norm_folds_into_pwconv(target):
    """ConvNeXt's block: the depthwise conv, then on a wide GPU's plan the 1x1 conv reading the
    layer norm folded in (6 channels: a padded block); PoCL's and Adreno's plans keep the layer norm
    kernel (``strategy.fusion.FOLD_NORM_KINDS``). Each plan runs here."""
    rng, inits = np.random.default_rng(21), {}
    names = check_pattern(pattern_graph(convnext_block(rng, inits), inits, channels=6), channels=6, profile=get_profile(target))
    folded = ["depthwise_conv2d_nchw4c", "conv2d_nchw4c"]
    assert names == (folded if target == "nvidia-h200" else [folded[0], "layer_norm_channels", folded[1]]), names


def test_folded_norm_of_large_mean_inputs():
    """Input pixels at 1000 +- 1 -> permute -> layer norm -> permute -> 1x1 conv, folded: within
    1e-6 of the float64 graph on the same float32 inputs (the H200's plan, run here) (measured 2.2e-7; the shifted statistics).
    Against float64 onnxruntime is off by 6.5e-5 here and our layer norm kernel by 3.9e-5 (a float32
    mean of values near 1000 is off by ~ulp(1000) = 6e-5), so the reference is float64 NumPy."""
    rng, inits, c = np.random.default_rng(24), {}, 6
    inits.update(g=1 + 0.3 * rng.standard_normal(c), b=0.3 * rng.standard_normal(c))
    nodes = [node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
             node("LayerNormalization", ["t", "g", "b"], ["l"], axis=-1, epsilon=1e-6),
             node("Transpose", ["l"], ["n"], perm=[0, 3, 1, 2]), conv_node(rng, inits, "n", "y", 10, c, k=1)]
    compiled = compile_model(pattern_graph(nodes, inits, channels=c), profile="nvidia-h200", progress=lambda _: None)
    x = (1000 + rng.standard_normal((1, c, 7, 7))).astype(np.float32)
    (out,) = compiled.run({"x": x})
    f32 = {k: np.asarray(v, np.float32).astype(np.float64) for k, v in inits.items()}
    z = layer_norm(x, f32["g"], f32["b"], axis=1, epsilon=1e-6)
    ref = np.einsum("oc,nchw->nohw", f32["y_w"][:, :, 0, 0], z) + f32["y_b"][None, :, None, None]
    assert relative_error(out, ref) <= 1e-6
    assert "layer_norm_channels" not in [p["op"] for p in compiled.profile()]


def test_edgenext_norm_folds_into_linear():
    """EdgeNeXt's conv encoder on the H200's plan: the Linear (MatMul + Add over NHWC channels, run
    as a 1x1 conv) reads the layer norm folded in, its bias and ReLU in its epilogue."""
    rng, inits = np.random.default_rng(22), {}
    names = check_pattern(pattern_graph(edgenext_block(rng, inits), inits, channels=6), channels=6, profile=get_profile("nvidia-h200"))
    assert names == ["depthwise_conv2d_nchw4c", "conv2d_nchw4c"], names


@pytest.mark.parametrize("case", ["fusion off", "3x3 conv", "second reader"])
def test_norm_kept_where_the_conv_cannot_fold_it(case):
    """On the H200's plan, fusion off, a padded 3x3 conv after the norm, or the norm's output read
    by an add too: the layer norm kernel runs, still exact."""
    rng, inits = np.random.default_rng(23), {}
    nodes = convnext_block(rng, inits, k=3 if case == "3x3 conv" else 1, reader="residual" if case == "second reader" else None)
    profile = without_fusion(get_profile("nvidia-h200")) if case == "fusion off" else get_profile("nvidia-h200")
    names = check_pattern(pattern_graph(nodes, inits, channels=6), channels=6, profile=profile)
    assert "layer_norm_channels" in names, names
