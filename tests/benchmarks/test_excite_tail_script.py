"""benchmarks/excite_tail.py split in two: ``--build-only`` here (TVM) for the H200 profile, ``--from``
without TVM on this device, on a conv -> depthwise -> SE block (24 channels of 7 x 7) -> 1x1 conv graph."""

import numpy as np

from helpers.benchmarks import build_then_run
from helpers.onnx_graphs import conv_node, mbconv_se, pattern_graph


def test_excite_tail_build_only_then_from_without_tvm(tmp_path):
    rng, inits = np.random.default_rng(4), {}
    nodes = [conv_node(rng, inits, "x", "a", 24, 3), *mbconv_se(rng, inits, "a", "y", 24, 6, "relu", "HardSigmoid", k=5)]
    ways = ["before", "after", "after-g32", "after-g64"]
    r = build_then_run("excite_tail.py", pattern_graph(nodes, inits, size=7), "se", tmp_path, ways)
    for way in ways:  # the fused kernel, one launch; 6 blocks of 49 pixels: one work group, or 6 (g32, g64)
        (call,) = r[way]["calls"]
        assert call["op"] == "depthwise_excitation" and call["shape"] == [1, 6, 7, 7, 4] and call["us"] > 0, r[way]
        assert r[way]["launches"] == r["before"]["launches"]
    for way in ways[1:]:  # the same sums in the same order
        assert r[way]["relative_difference"] <= 1e-6, (way, r[way]["relative_difference"])
