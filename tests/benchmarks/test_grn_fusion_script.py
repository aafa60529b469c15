"""benchmarks/grn_fusion.py split in two: ``--build-only`` here (TVM) for the H200 profile, ``--from``
without TVM on this device, on a conv -> GRN -> 1x1 conv graph (random gamma and beta)."""

import json

import numpy as np

from helpers.benchmarks import script
from helpers.onnx_graphs import grn_block, pattern_graph


def test_grn_fusion_build_only_then_from_without_tvm(tmp_path):
    import onnx

    rng, inits = np.random.default_rng(6), {}
    onnx.save(pattern_graph(grn_block(rng, inits, channels=8), inits, size=9), tmp_path / "grn.onnx")
    saved = tmp_path / "saved"
    script("grn_fusion.py", "--onnx", tmp_path / "grn.onnx", "--target", "nvidia-h200", "--build-only", saved)
    assert sorted(p.name for p in saved.iterdir()) == ["grn-apart", "grn-fused"]
    out = script("grn_fusion.py", "--from", saved, "--repeat", "2", "--results-dir", tmp_path / "results", no_tvm=True)
    assert out.strip().splitlines()[-1].startswith("grn ")  # the models' table comes last
    (result,) = (tmp_path / "results").glob("grn_fusion-*.json")
    r = json.loads(result.read_text())["models"]["grn"]
    apart, fused = r["apart"], r["fused"]
    # GRN's 6 kernels become 2, and the first conv reads the input itself (apart: no fusion at all)
    assert fused["launches"] == apart["launches"] - 5, (apart["launches"], fused["launches"])
    assert set(apart["kernels"]) - set(fused["kernels"]) == {"multiply", "sum_hw", "multiply_channels", "affine", "add", "nchw_to_nchw4c"}
    assert fused["kernels"]["sum_squares_hw"]["launches"] == fused["kernels"]["grn_scale"]["launches"] == 1
    assert r["relative_difference"] <= 1e-5, r["relative_difference"]
