"""benchmarks/norm_fold.py split in two: ``--build-only`` here (TVM) for the H200 profile, ``--from``
without TVM on this device, on ConvNeXt's depthwise conv -> LayerNorm -> 1x1 conv graph."""

import json

import numpy as np

from helpers.benchmarks import script
from helpers.onnx_graphs import convnext_block, pattern_graph


def test_norm_fold_build_only_then_from_without_tvm(tmp_path):
    import onnx

    rng, inits = np.random.default_rng(3), {}
    onnx.save(pattern_graph(convnext_block(rng, inits), inits, channels=6), tmp_path / "ln.onnx")
    saved = tmp_path / "saved"
    script("norm_fold.py", "--onnx", tmp_path / "ln.onnx", "--target", "nvidia-h200", "--build-only", saved)
    assert sorted(p.name for p in saved.iterdir()) == ["ln-apart", "ln-folded"]
    out = script("norm_fold.py", "--from", saved, "--repeat", "2", "--results-dir", tmp_path / "results", no_tvm=True)
    assert out.strip().splitlines()[-1].startswith("ln ")  # the models' table comes last
    (result,) = (tmp_path / "results").glob("norm_fold-*.json")
    r = json.loads(result.read_text())["models"]["ln"]
    assert r["apart"]["kernels"]["layer_norm_channels"]["launches"] == 1 and r["apart"]["launches"] == r["folded"]["launches"] + 1
    assert "layer_norm_channels" not in r["folded"]["kernels"]
    assert r["folded"]["relative_difference"] <= 1e-5, r["folded"]["relative_difference"]
    assert [c["op"] for c in r["folded"]["calls"]] == ["conv2d_nchw4c"] and r["folded"]["calls"][0]["shape"] == [1, 2, 7, 7, 4]
