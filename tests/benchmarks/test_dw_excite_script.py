"""benchmarks/dw_excite.py split in two: ``--build-only`` here (TVM) for the H200 profile, ``--from``
without TVM on this device, on a conv -> depthwise -> SE block (16 channels of 28 x 28) -> 1x1 conv graph."""

import numpy as np

from helpers.benchmarks import build_then_run
from helpers.onnx_graphs import conv_node, mbconv_se, pattern_graph


def test_dw_excite_build_only_then_from_without_tvm(tmp_path):
    rng, inits = np.random.default_rng(4), {}
    nodes = [conv_node(rng, inits, "x", "a", 16, 3), *mbconv_se(rng, inits, "a", "y", 16, 4, "silu", "Sigmoid", dw_act="Relu")]
    ways = ["apart", "fused", "fused-p256-t256", "fused-p128-t128"]
    r = build_then_run("dw_excite.py", pattern_graph(nodes, inits, size=28), "se", tmp_path, ways)
    assert [c["op"] for c in r["apart"]["calls"]] == ["depthwise_conv2d_nchw4c", "excitation_split"], r["apart"]["calls"]
    for way in ways[1:]:  # one launch fewer: the depthwise conv writes its output and the gate
        assert r[way]["launches"] == r["apart"]["launches"] - 1, r[way]
        (call,) = r[way]["calls"]
        assert call["op"] == "depthwise_excitation" and call["shape"] == [1, 4, 28, 28, 4] and call["us"] > 0
        assert r[way]["relative_difference"] <= 1e-5, (way, r[way]["relative_difference"])
