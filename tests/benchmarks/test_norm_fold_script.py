"""benchmarks/norm_fold.py split in two: ``--build-only`` here (TVM) for the H200 profile, ``--from``
without TVM on this device, on ConvNeXt's depthwise conv -> LayerNorm -> 1x1 conv graph and on
MobileViT-v2's conv -> GroupNorm1 -> 1x1 conv."""

import numpy as np

from helpers.benchmarks import build_then_run
from helpers.onnx_graphs import conv_node, convnext_block, group_norm_nodes, int_pattern_graph, pattern_graph


def test_norm_fold_build_only_then_from_without_tvm(tmp_path):
    rng, inits = np.random.default_rng(3), {}
    r = build_then_run("norm_fold.py", pattern_graph(convnext_block(rng, inits), inits, channels=6), "ln", tmp_path, ["apart", "folded"])
    assert r["apart"]["kernels"]["layer_norm_channels"]["launches"] == 1 and r["apart"]["launches"] == r["folded"]["launches"] + 1
    assert "layer_norm_channels" not in r["folded"]["kernels"]
    assert r["folded"]["relative_difference"] <= 1e-5, r["folded"]["relative_difference"]
    assert [c["op"] for c in r["folded"]["calls"]] == ["conv2d_nchw4c"] and r["folded"]["calls"][0]["shape"] == [1, 2, 7, 7, 4]


def test_group_norm_fold_build_only_then_from_without_tvm(tmp_path):
    """The split group norm's apply: its own kernel "apart", read by the tiled 1x1 conv "folded"
    (28 x 28: the H200's plan runs that conv tiled)."""
    rng, inits = np.random.default_rng(4), {}
    nodes = [conv_node(rng, inits, "x", "c", 8, 3), *group_norm_nodes("c", "n", inits, 8, 1, rng), conv_node(rng, inits, "n", "y", 16, 8, k=1)]
    r = build_then_run("norm_fold.py", int_pattern_graph(nodes, inits, size=28), "gn", tmp_path, ["apart", "folded"])
    assert r["apart"]["kernels"]["group_norm_apply"]["launches"] == 1 and r["apart"]["launches"] == r["folded"]["launches"] + 1
    assert "group_norm_apply" not in r["folded"]["kernels"]
    assert r["folded"]["relative_difference"] <= 1e-5, r["folded"]["relative_difference"]
    assert [c["op"] for c in r["folded"]["calls"]][-2:] == ["group_norm_partials", "conv2d_tiled_nchw4c"], r["folded"]["calls"]
