"""benchmarks/patchify_tiled.py split in two: ``--build-only`` here (TVM) for the H200 profile,
``--from`` without TVM on this device, on a 2x2 stride-2 conv (ConvNeXt's downsample) of a 56 x 56
map: the direct kernel before, the tiled one now."""

import numpy as np

from helpers.benchmarks import build_then_run
from helpers.onnx_graphs import conv_node, pattern_graph


def test_patchify_tiled_build_only_then_from_without_tvm(tmp_path):
    rng, inits = np.random.default_rng(5), {}
    nodes = [conv_node(rng, inits, "x", "y", 16, 8, k=2, strides=[2, 2], pads=[0, 0, 0, 0])]
    r = build_then_run("patchify_tiled.py", pattern_graph(nodes, inits, channels=8, size=56), "down", tmp_path, ["direct", "tiled"])
    assert r["direct"]["launches"] == r["tiled"]["launches"]
    assert "conv2d_nchw4c" in r["direct"]["kernels"] and "conv2d_tiled_nchw4c" in r["tiled"]["kernels"], r
    assert r["tiled"]["relative_difference"] <= 1e-5, r["tiled"]["relative_difference"]
