"""benchmarks/linear_attention.py split in two: ``--build-only`` here (TVM) for the H200 profile,
``--from`` without TVM on this device, on an EfficientViT LiteMLA graph with its multi-scale concat."""

from helpers.benchmarks import build_then_run
from helpers.onnx_graphs import lite_mla_graph


def test_linear_attention_build_only_then_from_without_tvm(tmp_path):
    r = build_then_run("linear_attention.py", lite_mla_graph(2, 8, multi_scale=True), "mla", tmp_path, ["split", "one_kernel"])
    split, one = r["split"], r["one_kernel"]
    assert one["launches"] == split["launches"] - 3, (split["launches"], one["launches"])
    assert set(split["kernels"]) - set(one["kernels"]) == {"concat_channels", "linear_kv_partials", "linear_kv_finish", "linear_apply"}
    assert one["kernels"]["linear_attention"]["launches"] == 1
    assert r["relative_difference"] <= 1e-5, r["relative_difference"]
