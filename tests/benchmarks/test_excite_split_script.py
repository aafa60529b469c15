"""benchmarks/excite_split.py split in two: ``--build-only`` here (TVM) for the H200 profile, ``--from``
without TVM on this device, on a conv -> SE block (16 channels of 28 x 28) -> 1x1 conv graph."""

import numpy as np
from onnx import helper

from helpers.benchmarks import build_then_run
from helpers.onnx_graphs import conv_node, pattern_graph


def test_excite_split_build_only_then_from_without_tvm(tmp_path):
    rng, inits, node = np.random.default_rng(4), {}, helper.make_node
    nodes = [conv_node(rng, inits, "x", "c", 16, 3), node("ReduceMean", ["c"], ["p"], axes=[2, 3], keepdims=1),
             conv_node(rng, inits, "p", "h", 4, 16, k=1), node("Relu", ["h"], ["a"]), conv_node(rng, inits, "a", "e", 16, 4, k=1),
             node("Sigmoid", ["e"], ["g"]), node("Mul", ["c", "g"], ["s"]), conv_node(rng, inits, "s", "y", 8, 16, k=1)]
    ways = ["one-group", "split", "split-p256", "split-p2048", "split-t256"]

    def only_one_group_has_weights(saved):  # split's are made there
        assert [w for w in ways if (saved / f"se-{w}" / "weights.npz").exists()] == ["one-group"]

    r = build_then_run("excite_split.py", pattern_graph(nodes, inits, size=28), "se", tmp_path, ways, build_args=("--weights", "se"),
                       between=only_one_group_has_weights)
    assert r["one-group"]["kernels"]["excitation"]["launches"] == 1 and "excitation_split" not in r["one-group"]["kernels"]
    for way in ways[1:]:  # 784 pixels: 2 slices of each channel block at 512 and 256 pixels, 1 at 2048
        assert r[way]["launches"] == r["one-group"]["launches"], r[way]
        (call,) = r[way]["calls"]
        assert call["op"].startswith("excitation") and call["shape"] == [1, 4, 28, 28, 4] and call["us"] > 0
    assert "excitation_split" in r["split"]["kernels"] and r["split"]["relative_difference"] <= 1e-5, r["split"]
    assert r["split-p256"]["relative_difference"] is None  # timing only
