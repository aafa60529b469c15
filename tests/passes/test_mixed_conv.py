"""Mixed convs (MixNet's ``MixedConv2d``, issue 21) as one conv: ONNX ``Split`` along channels -> a
conv per group -> ``Concat`` graphs against onnxruntime with random weights, asserting the plan (one
conv kernel with the batch norm and activation after the concat fused, no split or concat kernel,
no layout transform inside), the patterns that must stay split, and the strategy's choice."""

import pytest

from helpers.onnx_graphs import check_pattern, mixed_conv_graph
from tir_adreno.strategy.conv import mixed_conv_form
from tir_adreno.strategy.profile import get_profile, without_fusion

SIZE = 9  # the graphs' input maps are SIZE x SIZE


@pytest.mark.parametrize("stride", [1, 2])
def test_mixed_depthwise_is_one_depthwise_conv(stride):
    """Groups of 5, 6 and 5 channels (not block-aligned) with 3x3, 5x5 and 7x7 kernels: one
    depthwise conv over the 16 channels (kernels zero-padded to 7x7), batch norm and ReLU fused."""
    model = mixed_conv_graph([5, 6, 5], [3, 5, 7], stride=stride)
    names = check_pattern(model, channels=16, size=SIZE)
    assert names == ["depthwise_conv2d_nchw4c"], names


@pytest.mark.parametrize("dilation", [1, 2])
def test_mixed_depthwise_with_biases(dilation):
    """Group convs with their own biases (folded into one bias of the merged conv), five groups
    (more than one split launch writes), 3x3 to 11x11; dilated alike, padded alike."""
    model = mixed_conv_graph([3, 4, 2, 5, 2], [3, 5, 7, 9, 11], bias=True, seed=1, dilations=[dilation] * 5)
    names = check_pattern(model, channels=16, size=SIZE)
    assert names == ["depthwise_conv2d_nchw4c"], names


@pytest.mark.parametrize("sizes, outs", [([6, 6], [10, 10]), ([8, 8], [12, 12]), ([4, 7], [6, 9])],
                         ids=["grouped-unaligned", "grouped-aligned", "dense-uneven"])
def test_mixed_pointwise_is_one_conv(sizes, outs):
    """Two 1x1 groups: a grouped conv (groups 2) when the groups have equal sizes, else one dense
    conv with block-diagonal weights; batch norm and ReLU fused."""
    model = mixed_conv_graph(sizes, [1, 1], outs=outs, seed=2)
    names = check_pattern(model, channels=sum(sizes), size=SIZE)
    assert names == ["conv2d_nchw4c"], names


NOT_MERGED = {
    "dilations differ": dict(sizes=[4, 4], kernels=[3, 3], dilations=[1, 2]),
    # both outputs 7 x 7 of 9 x 9 and both centered on the same input pixel, but not 'same'
    "pads not same": dict(sizes=[4, 4], kernels=[3, 5], pads=[[0] * 4, [1] * 4]),
    "concat out of order": dict(sizes=[4, 5], kernels=[3, 5], order=[1, 0]),
    "a piece read twice": dict(sizes=[4, 5], kernels=[3, 5], extra_reader=True),
}


@pytest.mark.parametrize("case", NOT_MERGED)
def test_mixed_conv_that_does_not_match_stays_split(case):
    """Anything but the exact pattern keeps its split, its group convs and its concat."""
    args = NOT_MERGED[case]
    names = check_pattern(mixed_conv_graph(**args, seed=3), channels=sum(args["sizes"]), size=SIZE)
    assert "split_channels" in names and "concat_channels" in names, names
    assert sum(n.startswith("depthwise_conv2d_nchw4c") for n in names) == len(args["sizes"]), names


def test_mixed_conv_split_with_fusion_off():
    """Fusion off (``compile_model(fuse=False)``: ``launch_cost_macs`` 0): as exported."""
    profile = without_fusion(get_profile("pocl"))
    names = check_pattern(mixed_conv_graph([5, 6, 5], [3, 5, 7]), channels=16, size=SIZE, profile=profile)
    assert names.count("split_channels") == 1 and sum(n.startswith("depthwise_conv2d_nchw4c") for n in names) == 3, names


def test_mixed_conv_form_weighs_added_work_against_launches():
    """The form adding the fewest multiply-adds (a tie: the first, grouped before dense), when
    they are worth at most the launches saved (the pieces + 1) on the profile."""
    pocl, h200 = get_profile("pocl"), get_profile("nvidia-h200")
    assert mixed_conv_form({"grouped": 0, "dense": 9_633_792}, 2, pocl) == "grouped"
    assert mixed_conv_form({"grouped": 0, "dense": 0}, 2, pocl) == "grouped"
    assert mixed_conv_form({"dense": 5}, 2, pocl) == "dense"
    limit = 4 * pocl.launch_cost_macs  # 3 pieces
    assert mixed_conv_form({"depthwise": limit}, 3, pocl) == "depthwise"
    assert mixed_conv_form({"depthwise": limit + 1}, 3, pocl) is None
    assert mixed_conv_form({"depthwise": limit + 1}, 3, h200) == "depthwise"  # a launch is worth more there
    assert mixed_conv_form({"grouped": 0}, 2, without_fusion(h200)) is None
    assert mixed_conv_form({}, 2, h200) is None
