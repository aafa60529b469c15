"""benchmarks/reparam.py split in two: ``--build-only`` here (TVM) for the H200 profile, ``--from``
without TVM on this device, on a MobileOne block (3x3, 1x1 and identity batch norm branches, ReLU)."""

import numpy as np
from onnx import helper

from helpers.benchmarks import build_then_run
from helpers.onnx_graphs import batch_norm_inits, conv_node, pattern_graph


def test_reparam_build_only_then_from_without_tvm(tmp_path):
    from onnx import numpy_helper

    rng, inits = np.random.default_rng(6), {}
    nodes = [conv_node(rng, inits, "x", "k3", 8, 8), conv_node(rng, inits, "x", "k1", 8, 8, k=1),
             helper.make_node("BatchNormalization", ["x", *(f"bn_{k}" for k in ("scale", "bias", "mean", "var"))], ["bn"]),
             helper.make_node("Add", ["k3", "k1"], ["s"]), helper.make_node("Add", ["s", "bn"], ["t"]), helper.make_node("Relu", ["t"], ["y"])]
    inits.update({t.name: numpy_helper.to_array(t) for t in batch_norm_inits("bn", 8, rng)})
    r = build_then_run("reparam.py", pattern_graph(nodes, inits, channels=8, size=9), "block", tmp_path, ["branches", "reparam"])
    branches, merged = r["branches"], r["reparam"]
    assert branches["kernels"]["affine"]["launches"] == 1 and branches["kernels"]["conv2d_nchw4c"]["launches"] == 2, branches
    # one conv reading the input itself, and the output layout transform
    assert merged["launches"] == 2 and merged["kernels"]["conv2d_nchw4c"]["launches"] == 1, merged
    assert r["relative_difference"] <= 1e-5, r["relative_difference"]
