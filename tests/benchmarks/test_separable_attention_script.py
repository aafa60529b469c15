"""benchmarks/separable_attention.py split in two: ``--build-only`` here (TVM) for the H200
profile, ``--from`` without TVM on this device, on a MobileViT-v2 attention block graph."""

import json

from helpers.benchmarks import script
from helpers.onnx_graphs import mobilevit_graph


def test_separable_attention_build_only_then_from_without_tvm(tmp_path):
    import onnx

    onnx.save(mobilevit_graph(6, 8, 2, 2, 1), tmp_path / "mvit.onnx")
    saved = tmp_path / "saved"
    script("separable_attention.py", "--onnx", tmp_path / "mvit.onnx", "--target", "nvidia-h200", "--build-only", saved)
    assert sorted(p.name for p in saved.iterdir()) == ["mvit-apart", "mvit-one_kernel"]
    out = script("separable_attention.py", "--from", saved, "--repeat", "2", "--results-dir", tmp_path / "results", no_tvm=True)
    assert out.strip().splitlines()[-1].startswith("mvit ")  # the models' table comes last
    (result,) = (tmp_path / "results").glob("separable_attention-*.json")
    r = json.loads(result.read_text())["models"]["mvit"]
    apart, one = r["apart"], r["one_kernel"]
    assert one["launches"] == apart["launches"] - 5, (apart["launches"], one["launches"])
    assert set(apart["kernels"]) - set(one["kernels"]) == {"split_channels", "softmax_w", "multiply_broadcast_c", "sum_w", "relu",
                                                           "multiply_broadcast_w"}
    assert one["kernels"]["separable_attention"]["launches"] == 1
    assert r["relative_difference"] <= 1e-5, r["relative_difference"]
