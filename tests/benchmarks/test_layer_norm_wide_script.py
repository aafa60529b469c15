"""benchmarks/layer_norm_wide.py split in two: ``--build-only`` here (TVM) for the H200 profile, ``--from``
without TVM on this device, on a conv -> ConvNeXt LayerNorm (66 channels on a 7x7 map) graph."""

import numpy as np
from onnx import helper

from helpers.benchmarks import build_then_run
from helpers.onnx_graphs import conv_node, pattern_graph


def test_layer_norm_wide_build_only_then_from_without_tvm(tmp_path):
    rng = np.random.default_rng(3)
    inits = {"g": rng.standard_normal(66), "b": rng.standard_normal(66)}
    nodes = [conv_node(rng, inits, "x", "c", 66, 3), helper.make_node("Transpose", ["c"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("LayerNormalization", ["t", "g", "b"], ["l"], axis=-1, epsilon=1e-6),
             helper.make_node("Transpose", ["l"], ["y"], perm=[0, 3, 1, 2])]
    r = build_then_run("layer_norm_wide.py", pattern_graph(nodes, inits), "ln", tmp_path, ["one-kernel", "wide", "wide-all"])
    assert r["one-kernel"]["kernels"]["layer_norm_channels"]["launches"] == 1 and "layer_norm_channels_wide" not in r["one-kernel"]["kernels"]
    for way in ("wide", "wide-all"):  # 17 channel blocks, 49 pixels: the rule takes the wide form
        assert r[way]["kernels"]["layer_norm_channels_wide"]["launches"] == 1 and "layer_norm_channels" not in r[way]["kernels"]
        assert r[way]["relative_difference"] <= 1e-5, r[way]["relative_difference"]
        (call,) = r[way]["calls"]
        assert call["op"] == "layer_norm_channels_wide" and call["shape"] == [1, 17, 7, 7, 4] and call["us"] > 0
