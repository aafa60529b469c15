"""benchmarks/grn_fusion.py split in two: ``--build-only`` here (TVM) for the H200 profile, ``--from``
without TVM on this device, on a conv -> GRN -> 1x1 conv graph (random gamma and beta) whose 1x1
conv runs tiled on the H200 (a 40 x 40 map: 100 work groups), so the "folded" way folds GRN's scale."""

import numpy as np

from helpers.benchmarks import build_then_run
from helpers.onnx_graphs import conv_node, grn_block, pattern_graph


def test_grn_fusion_build_only_then_from_without_tvm(tmp_path):
    rng, inits = np.random.default_rng(6), {}
    nodes = grn_block(rng, inits, channels=8)
    nodes[-1] = conv_node(rng, inits, "r", "y", 64, 8, k=1)
    r = build_then_run("grn_fusion.py", pattern_graph(nodes, inits, size=14), "grn", tmp_path, ["apart", "fused", "folded"])
    apart, fused, folded = r["apart"], r["fused"], r["folded"]
    # GRN's 6 kernels become 2, and the first conv reads the input itself (apart: no fusion at all)
    assert fused["launches"] == apart["launches"] - 5, (apart["launches"], fused["launches"])
    assert set(apart["kernels"]) - set(fused["kernels"]) == {"multiply", "sum_hw", "multiply_channels", "affine", "add", "nchw_to_nchw4c"}
    assert fused["kernels"]["sum_squares_hw"]["launches"] == fused["kernels"]["grn_scale"]["launches"] == 1
    # then 1: the tiled 1x1 conv computes GRN's scale itself
    assert folded["launches"] == fused["launches"] - 1 and "grn_scale" not in folded["kernels"], folded["kernels"]
    assert [c["op"] for c in folded["calls"] if c["op"].startswith("conv2d_tiled")], folded["calls"]
    assert r["relative_difference"] <= 1e-5, r["relative_difference"]
