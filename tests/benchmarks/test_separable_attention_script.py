"""benchmarks/separable_attention.py split in two: ``--build-only`` here (TVM) for the H200
profile, ``--from`` without TVM on this device, on a MobileViT-v2 attention block graph."""

from helpers.benchmarks import build_then_run
from helpers.onnx_graphs import mobilevit_graph


def test_separable_attention_build_only_then_from_without_tvm(tmp_path):
    r = build_then_run("separable_attention.py", mobilevit_graph(6, 8, 2, 2, 1), "mvit", tmp_path, ["apart", "one_kernel"])
    apart, one = r["apart"], r["one_kernel"]
    assert one["launches"] == apart["launches"] - 5, (apart["launches"], one["launches"])
    assert set(apart["kernels"]) - set(one["kernels"]) == {"split_channels", "softmax_w", "multiply_broadcast_c", "sum_w", "relu",
                                                           "multiply_broadcast_w"}
    assert one["kernels"]["separable_attention"]["launches"] == 1
    assert r["relative_difference"] <= 1e-5, r["relative_difference"]
