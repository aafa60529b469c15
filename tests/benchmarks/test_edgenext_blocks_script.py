"""benchmarks/edgenext_blocks.py split in two: ``--build-only`` here (TVM) for the H200 profile,
``--from`` without TVM on this device, on EdgeNeXt's conv encoder block (its tail) followed by a
split depthwise block."""

import numpy as np

from helpers.benchmarks import build_then_run
from helpers.onnx_graphs import edgenext_block, pattern_graph, split_block_graph


def _model():
    """A conv encoder block on 10 channels (``x + gamma * fc2(...)`` after the permute), then a
    split block of two convs (4 + 4 + 2 channels) reading its output."""
    rng, inits = np.random.default_rng(5), {}
    block = pattern_graph(edgenext_block(rng, inits, channels=10, tail=True), inits, channels=10)
    split = split_block_graph(10, 2, seed=6)
    for n in split.graph.node:  # the split block reads the conv block's output
        n.input[:] = ["r" if i == "x" else i for i in n.input]
    for n in block.graph.node:
        n.output[:] = ["r" if o == "y" else o for o in n.output]
    block.graph.node.extend(split.graph.node)
    block.graph.initializer.extend(split.graph.initializer)
    return block


def test_edgenext_blocks_build_only_then_from_without_tvm(tmp_path):
    r = build_then_run("edgenext_blocks.py", _model(), "eb", tmp_path, ["apart", "tail", "fused"])
    kernels = {way: r[way]["kernels"] for way in ("apart", "tail", "fused")}
    assert kernels["apart"]["add"]["launches"] == 2 and kernels["tail"]["add"]["launches"] == 1 and "add" not in kernels["fused"]
    assert kernels["fused"]["hierarchical_depthwise"]["launches"] == 2 and "concat_channels" not in kernels["fused"]
    # the convs and the concat read their slices as channel windows (no kernel); apart: an add, the concat
    assert not [k for k in kernels["apart"] if k.startswith("slice_channels")], kernels["apart"]
    assert r["apart"]["launches"] == r["tail"]["launches"] + 1 == r["fused"]["launches"] + 1 + 2
    assert r["relative_difference"] <= 1e-5, r["relative_difference"]
