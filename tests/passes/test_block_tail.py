"""The block tail ``x = shortcut + permute(gamma * fc2(...))`` of EdgeNeXt (its conv encoder and
SDTA blocks) and ConvNeXt: fc2 a Linear on NHWC run as a 1x1 conv, the layer scale ``gamma`` and
fc2's bias folded into its weights and bias, the permute back to NCHW a view, and the residual add
in the conv's epilogue (``passes.conv_emit._permuted_residual``): onnx.helper graphs against
onnxruntime, asserting the plan (no add kernel), and the add kept where the conv cannot take it."""

import numpy as np
import pytest
from onnx import helper

from helpers.onnx_graphs import check_pattern, edgenext_block, pattern_graph
from tir_adreno.strategy.profile import get_profile


@pytest.mark.parametrize("target", ["nvidia-h200", "pocl"])
def test_layer_scale_and_residual_fold_into_fc2(target):
    """EdgeNeXt's conv encoder block (6 channels: a padded block): fc2 writes ``x + gamma * fc2``
    itself, on the H200's plan (the layer norm folded into fc1) and PoCL's (its own kernel)."""
    rng, inits = np.random.default_rng(31), {}
    names = check_pattern(pattern_graph(edgenext_block(rng, inits, tail=True), inits, channels=6), channels=6,
                          profile=get_profile(target))
    norm = [] if target == "nvidia-h200" else ["layer_norm_channels"]
    assert [n.rstrip("0123456789") for n in names] == ["depthwise_conv2d_nchw4c", *norm, "conv2d_nchw4c", "conv2d_nchw4c"], names


def test_residual_kept_when_the_permute_has_another_reader():
    """The permuted fc2 output also read by a second add: the permute stays a view, the residual
    add its own kernel (still exact)."""
    rng, inits = np.random.default_rng(32), {}
    nodes = edgenext_block(rng, inits, tail=True)
    nodes[-1] = helper.make_node("Add", ["x", "p"], ["q"])
    nodes.append(helper.make_node("Add", ["q", "p"], ["y"]))
    names = check_pattern(pattern_graph(nodes, inits, channels=6), channels=6, profile=get_profile("nvidia-h200"))
    assert names.count("add") == 2, names
