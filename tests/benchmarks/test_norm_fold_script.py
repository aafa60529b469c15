"""benchmarks/norm_fold.py split in two: ``--build-only`` here (TVM) for the H200 profile, ``--from``
without TVM on this device, on ConvNeXt's depthwise conv -> LayerNorm -> 1x1 conv graph."""

import numpy as np

from helpers.benchmarks import build_then_run
from helpers.onnx_graphs import convnext_block, pattern_graph


def test_norm_fold_build_only_then_from_without_tvm(tmp_path):
    rng, inits = np.random.default_rng(3), {}
    r = build_then_run("norm_fold.py", pattern_graph(convnext_block(rng, inits), inits, channels=6), "ln", tmp_path, ["apart", "folded"])
    assert r["apart"]["kernels"]["layer_norm_channels"]["launches"] == 1 and r["apart"]["launches"] == r["folded"]["launches"] + 1
    assert "layer_norm_channels" not in r["folded"]["kernels"]
    assert r["folded"]["relative_difference"] <= 1e-5, r["folded"]["relative_difference"]
    assert [c["op"] for c in r["folded"]["calls"]] == ["conv2d_nchw4c"] and r["folded"]["calls"][0]["shape"] == [1, 2, 7, 7, 4]
