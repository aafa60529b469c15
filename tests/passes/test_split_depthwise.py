"""EdgeNeXt's hierarchical split depthwise convs (timm ``SplitTransposeBlock``: channel slices,
``sp = conv_i(sp + chunk_i)``, concat) as ``hierarchical_depthwise`` launches, one per conv
(``passes.patterns.split_depthwise``, ``strategy.fusion.hierarchical_depthwise``): onnx.helper graphs
as torch.onnx.export writes them, against onnxruntime, asserting the plan (no slice, add or
concat kernel), and the block left apart where it does not match."""

import pytest

from helpers.onnx_graphs import check_pattern, split_block_graph
from tir_adreno.strategy.profile import get_profile, without_fusion


@pytest.mark.parametrize("target", ["nvidia-h200", "pocl"])
@pytest.mark.parametrize("channels, convs, k", [(48, 1, 3), (10, 2, 3), (13, 3, 5), (9, 2, 3)],
                         ids=["24+24", "4+4+2", "4+4+4+1", "3+3+3"])
def test_split_block_is_one_launch_per_conv(target, channels, convs, k):
    """EdgeNeXt-XXS stage 2's block (48 channels, one conv), chunk boundaries inside 4-lane blocks
    (widths 3 and 4 of 9, 10 and 13 channels), up to three convs and 5x5 kernels: ``convs``
    launches, nothing else, on the H200's plan and PoCL's."""
    model = split_block_graph(channels, convs, k)
    names = check_pattern(model, channels=channels, profile=get_profile(target))
    assert [n.rstrip("0123456789") for n in names] == ["hierarchical_depthwise"] * convs, names


@pytest.mark.parametrize("target", ["nvidia-h200", "pocl"])
def test_positional_encoding_added_by_the_last_step(target):
    """EdgeNeXt's first SDTA block: a constant added to the block's output on its tokens (the
    reshape and transposes views) is added by the last ``hierarchical_depthwise`` launch (no add
    kernel); 10 channels in 4 + 4 + 2."""
    names = check_pattern(split_block_graph(10, 2, pos=True), channels=10, profile=get_profile(target))
    assert [n.rstrip("0123456789") for n in names] == ["hierarchical_depthwise"] * 2, names


@pytest.mark.parametrize("case", ["fusion off", "second reader"])
def test_split_block_left_apart(case):
    """Fusion off, or a conv's output read outside the block too: slices, adds, convs and the
    concat run as exported (still exact)."""
    profile = without_fusion(get_profile("nvidia-h200")) if case == "fusion off" else get_profile("nvidia-h200")
    names = check_pattern(split_block_graph(10, 2, reader=case == "second reader"), channels=10, profile=profile)
    assert not any(n.startswith("hierarchical_depthwise") for n in names), names
    assert any(n.startswith("concat_channels") for n in names), names
