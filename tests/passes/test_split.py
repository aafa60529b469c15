"""ONNX ``Split`` along channels into groups of any sizes (MixNet's mixed depthwise kernels, issue 21)
on NCHW4c textures: the ``split_channels`` kernel against NumPy (fp32 and half images), and graphs
that split, work on each group and concatenate back with no layout transform inside."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import helper, numpy_helper

from helpers.numeric import pack_nchw4c, rand, unpack_nchw4c
from helpers.onnx_graphs import check_pattern, conv_node, pattern_graph
from primfuncs import shuffle
from primfuncs._common import TEXTURE
from tir_adreno import ops
from tir_adreno.strategy.profile import get_profile, without_fusion

PRECISIONS = ("float32", "float16_acc32")  # float16_acc32: the same kernel on RGBA half images


def _run_split(device, func, x5, storage):
    """The kernel's outputs (poisoned first) from ``x5`` (NCHW4c); texture tensors in ``storage``."""
    loaded, name = ops.compile(func, device)
    specs = [replace(spec, storage=storage) if spec.scope == TEXTURE else spec for spec in loaded[name].params]
    x = device.empty(specs[0]).upload(x5)
    outs = [device.empty(spec).poison() for spec in specs[1:]]
    loaded(name, x, *outs)
    return [o.numpy() for o in outs]


@given(
    sizes=st.lists(st.integers(1, 9), min_size=2, max_size=shuffle.MAX_PARTS), before=st.integers(0, 5), after=st.integers(0, 3),
    n=st.integers(1, 2), h=st.integers(1, 4), w=st.integers(1, 5), scope=st.sampled_from([TEXTURE, "global"]),
    precision=st.sampled_from(PRECISIONS), seed=st.integers(0, 2**32 - 1),
)
def test_split_channels_kernel(device, sizes, before, after, n, h, w, scope, precision, seed):
    """Each part is its channels exactly (a half image holds x rounded to half: still exact), the
    padded lanes of its last block are 0, from any first channel (``begin``) and any alignment."""
    channels = before + sum(sizes) + after
    x = rand(np.random.default_rng(seed), (n, channels, h, w)) * 10
    storage = "float16" if precision == "float16_acc32" and scope == TEXTURE else None
    expected = x.astype(np.float16).astype(np.float64) if storage else x.astype(np.float64)
    func = shuffle.split_channels(pack_nchw4c(x).shape, channels, sizes, before, scope=scope)
    outs = _run_split(device, func, pack_nchw4c(x), storage)
    offset = before
    for size, y in zip(sizes, outs, strict=True):
        np.testing.assert_array_equal(unpack_nchw4c(y, size), expected[:, offset : offset + size])
        assert np.all(y[:, -1, :, :, (size - 1) % 4 + 1 :] == 0), "padded lanes not zero"
        offset += size


def test_split_channels_refuses_bad_parts():
    with pytest.raises(ValueError, match="2..4 parts"):
        shuffle.split_channels((1, 2, 3, 3, 4), 8, [8])
    with pytest.raises(ValueError, match="within channels_in=8 from begin=2"):
        shuffle.split_channels((1, 2, 3, 3, 4), 8, [4, 3], begin=2)
    with pytest.raises(ValueError, match="does not fill"):
        shuffle.split_channels((1, 2, 3, 3, 4), 9, [4, 5])


def _split_graph(rng, inits, sizes, kernel_sizes):
    """MixNet's mixed depthwise block: conv -> Split(sizes) -> a depthwise conv of its own kernel
    size per group -> Concat -> conv."""
    channels = sum(sizes)
    names = [f"g{i}" for i in range(len(sizes))]
    nodes = [conv_node(rng, inits, "x", "c", channels, 3, k=1), helper.make_node("Split", ["c", "sizes"], names, axis=1)]
    for name, size, k in zip(names, sizes, kernel_sizes):
        nodes.append(conv_node(rng, inits, name, f"{name}_dw", size, size, k=k, group=size))
    nodes += [helper.make_node("Concat", [f"{n}_dw" for n in names], ["cat"], axis=1),
              conv_node(rng, inits, "cat", "y", 4, channels, k=1)]
    model = pattern_graph(nodes, inits)
    model.graph.initializer.append(numpy_helper.from_array(np.asarray(sizes, np.int64), "sizes"))
    return model


#: Fusion off: the mixed convs stay split (else each is one conv, tests/passes/test_mixed_conv.py).
SPLIT = without_fusion(get_profile("pocl"))


def test_mixed_depthwise_split_stays_on_textures():
    """Groups of 3, 5 and 6 channels (none on a block boundary after the first): one split kernel,
    the depthwise convs, one concat, no layout transform inside."""
    names = check_pattern(_split_graph(np.random.default_rng(5), {}, [3, 5, 6], [3, 5, 7]), profile=SPLIT)
    assert names.count("split_channels") == 1 and names.count("concat_channels") == 1, names
    assert sum(n.startswith("depthwise_conv2d_nchw4c") for n in names) == 3, names


def test_split_into_more_parts_than_one_launch_writes():
    """Five groups: one split kernel for four, a channel slice for the fifth."""
    names = check_pattern(_split_graph(np.random.default_rng(6), {}, [2, 4, 1, 3, 2], [3, 3, 3, 3, 3]), profile=SPLIT)
    assert names.count("split_channels") == 1 and names.count("slice_channels") == 1, names


def _partial_conv_graph(rng, inits, sizes):
    """FasterNet's partial conv: conv -> Split(sizes) -> a 3x3 conv on the first part ->
    Concat(it, the untouched rest) -> conv."""
    channels = sum(sizes)
    nodes = [conv_node(rng, inits, "x", "c", channels, 3, k=1), helper.make_node("Split", ["c", "sizes"], ["g0", "g1"], axis=1),
             conv_node(rng, inits, "g0", "g0_conv", sizes[0], sizes[0], k=3),
             helper.make_node("Concat", ["g0_conv", "g1"], ["cat"], axis=1), conv_node(rng, inits, "cat", "y", 4, channels, k=1)]
    model = pattern_graph(nodes, inits)
    model.graph.initializer.append(numpy_helper.from_array(np.asarray(sizes, np.int64), "sizes"))
    return model


@pytest.mark.parametrize("sizes, split_runs", [([4, 12], False), ([8, 6], False), ([3, 13], True)])
def test_a_concat_reads_split_parts_in_place(sizes, split_runs):
    """Both parts of a split on channel-block boundaries are read from the split's input (the conv
    and the concat through a window of it): no split launch; a part off a boundary still needs one."""
    names = check_pattern(_partial_conv_graph(np.random.default_rng(7), {}, sizes))
    assert names.count("concat_channels") == 1, names
    assert any(n.startswith(("split_channels", "slice_channels")) for n in names) is split_runs, names
    # without fusion the split runs, as before views existed
    names = check_pattern(_partial_conv_graph(np.random.default_rng(7), {}, sizes), profile=SPLIT)
    assert names.count("split_channels") == 1, names
