"""benchmarks/mixed_conv.py split in two: ``--build-only`` here (TVM) for the H200 profile, ``--from``
without TVM on this device, on a mixed depthwise conv; a way saved without weights runs for
timing only."""

import json

import onnx

from helpers.benchmarks import script
from helpers.onnx_graphs import mixed_conv_graph


def test_mixed_conv_build_only_then_from_without_tvm(tmp_path):
    onnx.save(mixed_conv_graph([5, 6, 5], [3, 5, 7]), tmp_path / "mix.onnx")
    saved = tmp_path / "saved"
    script("mixed_conv.py", "--onnx", tmp_path / "mix.onnx", "--target", "nvidia-h200", "--all", "--build-only", saved)
    assert sorted(p.name for p in saved.iterdir()) == ["mix-all", "mix-apart", "mix-merged"]
    (saved / "mix-all" / "weights.npz").unlink()  # as when it is over what the device tool carries
    out = script("mixed_conv.py", "--from", saved, "--repeat", "2", "--results-dir", tmp_path / "results", no_tvm=True)
    assert out.strip().splitlines()[-1].startswith("mix ")  # the models' table comes last
    (result,) = (tmp_path / "results").glob("mixed_conv-*.json")
    r = json.loads(result.read_text())["models"]["mix"]
    apart, merged, every = r["apart"], r["merged"], r["all"]
    # apart: the split, three depthwise convs, the concat and the batch norm's affine kernel
    assert [apart["kernels"][k]["launches"] for k in ("split_channels", "depthwise_conv2d_nchw4c", "concat_channels", "affine_relu")] == [1, 3, 1, 1]
    assert merged["launches"] == every["launches"] == apart["launches"] - 5
    assert merged["kernels"]["depthwise_conv2d_nchw4c"]["launches"] == 1
    assert merged["relative_difference"] <= 1e-5 and r["relative_difference"] == merged["relative_difference"]
    assert every["relative_difference"] is None  # random weights: timing only
