"""benchmarks/wide_split.py split in two: ``--build-only`` here (TVM) for the H200 profile, ``--from``
without TVM on this device, on a conv -> GroupNormalization -> conv graph."""

import numpy as np
from onnx import helper

from helpers.benchmarks import build_then_run
from helpers.onnx_graphs import conv_node, pattern_graph


def test_wide_split_build_only_then_from_without_tvm(tmp_path):
    rng, inits = np.random.default_rng(3), {}
    inits.update(g_s=rng.standard_normal(8), g_b=rng.standard_normal(8))
    nodes = [conv_node(rng, inits, "x", "c", 8, 3), helper.make_node("GroupNormalization", ["c", "g_s", "g_b"], ["n"], num_groups=1),
             conv_node(rng, inits, "n", "y", 4, 8, k=1)]
    r = build_then_run("wide_split.py", pattern_graph(nodes, inits, size=11, opset=21), "gn", tmp_path, ["one-kernel", "split"])  # 2 x 121 pixels: 4 slices
    one, split = r["one-kernel"], r["split"]
    assert split["launches"] == one["launches"] + 1 and one["kernels"]["group_norm"]["launches"] == 1
    assert split["kernels"]["group_norm_partials"]["launches"] == split["kernels"]["group_norm_apply"]["launches"] == 1
    assert r["relative_difference"] <= 1e-5, r["relative_difference"]
