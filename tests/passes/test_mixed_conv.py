"""Mixed convs (MixNet's ``MixedConv2d``, issue 21) as one conv: ONNX ``Split`` along channels -> a
conv per group -> ``Concat`` graphs against onnxruntime with random weights, asserting the plan (one
conv kernel with the batch norm and activation after the concat fused, no split or concat kernel,
no layout transform inside), the patterns that must stay split, and the strategy's choice."""

import pytest

from helpers.onnx_graphs import check_pattern, mixed_conv_graph
from tir_adreno.strategy.conv import mixed_conv_form
from tir_adreno.strategy.profile import get_profile, without_fusion

SIZE = 9  # the graphs' input maps are SIZE x SIZE
#: Forms that add multiply-adds (zero-padded kernels, off-diagonal blocks) merge on wide GPUs only:
#: such graphs are planned for the H200's profile (and run here).
WIDE = "nvidia-h200"


@pytest.mark.parametrize("stride", [1, 2])
def test_mixed_depthwise_is_one_depthwise_conv(stride):
    """Groups of 5, 6 and 5 channels (not block-aligned) with 3x3, 5x5 and 7x7 kernels: one
    depthwise conv over the 16 channels (kernels zero-padded to 7x7), batch norm and ReLU fused."""
    model = mixed_conv_graph([5, 6, 5], [3, 5, 7], stride=stride)
    names = check_pattern(model, channels=16, size=SIZE, profile=WIDE)
    assert names == ["depthwise_conv2d_nchw4c"], names


@pytest.mark.parametrize("dilation", [1, 2])
def test_mixed_depthwise_with_biases(dilation):
    """Group convs with their own biases (folded into one bias of the merged conv), five groups
    (more than one split launch writes), 3x3 to 11x11; dilated alike, padded alike."""
    model = mixed_conv_graph([3, 4, 2, 5, 2], [3, 5, 7, 9, 11], bias=True, seed=1, dilations=[dilation] * 5)
    names = check_pattern(model, channels=16, size=SIZE, profile=WIDE)
    assert names == ["depthwise_conv2d_nchw4c"], names


@pytest.mark.parametrize("sizes, outs, profile", [([6, 6], [10, 10], None), ([8, 8], [12, 12], None), ([8, 8], [12, 12], WIDE),
                                                   ([4, 7], [6, 9], WIDE)],
                         ids=["grouped-unaligned", "grouped-aligned", "grouped-wide", "dense-uneven"])
def test_mixed_pointwise_is_one_conv(sizes, outs, profile):
    """Two 1x1 groups: a grouped conv (groups 2, no work added: on every profile) when the groups
    have equal sizes, else one dense conv with block-diagonal weights; batch norm and ReLU fused."""
    model = mixed_conv_graph(sizes, [1, 1], outs=outs, seed=2)
    names = check_pattern(model, channels=sum(sizes), size=SIZE, profile=profile)
    assert names == ["conv2d_nchw4c"], names


@pytest.mark.parametrize("sizes, kernels", [([25, 5, 5, 5], [None, 3, (1, 11), (11, 1)]), ([6, 7, 3], [(3, 5), None, (5, 1)])],
                         ids=["inceptionnext", "identity-between"])
def test_inception_mixer_is_one_depthwise_conv(sizes, kernels):
    """InceptionNeXt's token mixer as exported (a part passed on unchanged, depthwise 3x3, 1x11 and
    11x1 convs of 5 channels each, not block-aligned) and an identity part between rectangular
    kernels: one depthwise conv over all channels (each kernel zero-padded, centered, to the
    largest side; the identity a 1x1 of ones), batch norm and ReLU fused."""
    model = mixed_conv_graph(sizes, kernels, seed=4, size=13)
    names = check_pattern(model, channels=sum(sizes), size=13, profile=WIDE)
    assert names == ["depthwise_conv2d_nchw4c"], names


def test_partial_conv_is_one_dense_conv():
    """FasterNet's partial conv: a dense 3x3 conv on the first 4 of 14 channels, the other 10 passed
    on: one dense conv (block-diagonal: the identity part an identity matrix), batch norm and ReLU fused."""
    model = mixed_conv_graph([4, 10], [3, None], outs=[4, 10], seed=5)
    names = check_pattern(model, channels=14, size=SIZE, profile=WIDE)
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
    """Anything but the exact pattern keeps its group convs and its concat; its split stays apart too,
    read as channel windows (each group starts on a 4-lane block or reaches the last channel: the
    convs read their part of the map in place, no split kernel)."""
    args = NOT_MERGED[case]
    names = check_pattern(mixed_conv_graph(**args, seed=3), channels=sum(args["sizes"]), size=SIZE, profile=WIDE)
    assert "split_channels" not in names and "concat_channels" in names, names
    assert sum(n.startswith("depthwise_conv2d_nchw4c") for n in names) == len(args["sizes"]), names


@pytest.mark.parametrize("profile", [without_fusion(get_profile(WIDE)), get_profile("pocl")], ids=["fusion-off", "pocl"])
def test_mixed_depthwise_stays_split(profile):
    """Fusion off (``compile_model(fuse=False)``: ``launch_cost_macs`` 0), or a profile that is not
    wide (zero-padded kernels add work): as exported."""
    names = check_pattern(mixed_conv_graph([5, 6, 5], [3, 5, 7]), channels=16, size=SIZE, profile=profile)
    assert names.count("split_channels") == 1 and sum(n.startswith("depthwise_conv2d_nchw4c") for n in names) == 3, names


def test_mixed_conv_form_weighs_added_work_against_launches():
    """The form adding the fewest multiply-adds (a tie: the first, grouped before dense): one that
    adds none with fusion on; one that adds some on wide GPUs only, up to what the launches saved
    (the pieces + 1) are worth there."""
    pocl, adreno, h200 = get_profile("pocl"), get_profile("adreno"), get_profile(WIDE)
    for profile in (pocl, adreno, h200):
        assert mixed_conv_form({"grouped": 0, "dense": 9_633_792}, 2, profile) == "grouped"
        assert mixed_conv_form({"grouped": 0, "dense": 0}, 2, profile) == "grouped"
        assert mixed_conv_form({"depthwise": 0}, 3, profile) == "depthwise"  # equal kernels
        assert mixed_conv_form({"grouped": 0}, 2, without_fusion(profile)) is None
        assert mixed_conv_form({}, 2, profile) is None
    for profile in (pocl, adreno):
        assert mixed_conv_form({"dense": 5}, 2, profile) is None
        assert mixed_conv_form({"depthwise": 5}, 3, profile) is None
    limit = 4 * h200.launch_cost_macs  # 3 pieces
    assert mixed_conv_form({"depthwise": limit}, 3, h200) == "depthwise"
    assert mixed_conv_form({"depthwise": limit + 1}, 3, h200) is None
    assert mixed_conv_form({"dense": 5}, 2, h200) == "dense"
