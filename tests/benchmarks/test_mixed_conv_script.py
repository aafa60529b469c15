"""benchmarks/mixed_conv.py split in two: ``--build-only`` here (TVM) for the H200 profile, ``--from``
without TVM on this device, on a mixed depthwise conv; a way saved without weights runs for
timing only."""

from helpers.benchmarks import build_then_run
from helpers.onnx_graphs import mixed_conv_graph


def test_mixed_conv_build_only_then_from_without_tvm(tmp_path):
    def drop_all_weights(saved):  # as when they are over what the device tool carries
        (saved / "mix-all" / "weights.npz").unlink()

    r = build_then_run("mixed_conv.py", mixed_conv_graph([5, 6, 5], [3, 5, 7]), "mix", tmp_path, ["all", "apart", "merged"],
                       build_args=("--all",), between=drop_all_weights)
    apart, merged, every = r["apart"], r["merged"], r["all"]
    # apart: the split, three depthwise convs and the concat, the batch norm and ReLU after it its
    # epilogue (an elementwise chain: passes.elementwise_chain)
    assert [apart["kernels"][k]["launches"] for k in ("split_channels", "depthwise_conv2d_nchw4c", "concat_channels")] == [1, 3, 1]
    assert not [k for k in apart["kernels"] if k.startswith("affine")], apart["kernels"]
    # merged: one depthwise kernel (the batch norm folded) reading the plain model input in place (a
    # depthwise conv reads plain NCHW: no pack), and the output's unpack
    assert merged["launches"] == every["launches"] == apart["launches"] - 5
    assert "nchw_to_nchw4c" not in merged["kernels"] and apart["kernels"]["nchw_to_nchw4c"]["launches"] == 1
    assert merged["kernels"]["depthwise_conv2d_nchw4c"]["launches"] == 1
    assert merged["relative_difference"] <= 1e-5 and r["relative_difference"] == merged["relative_difference"]
    assert every["relative_difference"] is None  # random weights: timing only
