"""Slices of whole channel blocks of a blocked map read in place (``Value.window``,
``Rewriter.blocked_view``): EfficientViT's cascaded group attention as timm exports it,
``x.chunk(heads)`` -> head ``i`` reads ``chunk[i] + out[i - 1]``. A conv reading a chunk and a
binary op adding one read the map itself through a gather view, so no ``slice_channels`` kernel
runs; a slice that is not whole blocks (or with fusion off) keeps its kernel. Against
onnxruntime, batch 2, on the CPU's profile and the wide GPU's plans."""

import pytest

from helpers.onnx_graphs import f32, i64, make, node, run_all_ours, tensor
from tir_adreno import compile_model

N, C, H, W = 2, 6, 5, 4


def _cascade(bounds, width=24):
    """x -> 1x1 conv to ``width`` channels (a blocked map) -> slices ``bounds`` (channel ranges);
    head 0: a depthwise 3x3 conv of slice 0; head i: a 1x1 conv of ``slice_i + head_{i-1}`` (to the
    next slice's width); the heads concatenated -> 1x1 conv. Slices 0 and 1 are as wide."""
    widths = [e - b for b, e in bounds]
    nodes = [node("Conv", ["x", "wm", "bm"], ["m"])]
    inits = [f32("wm", (width, C, 1, 1), 0.4), f32("bm", (width,), 0.1), i64("axis1", [1])]
    for i, (b, e) in enumerate(bounds):
        inits += [i64(f"b{i}", [b]), i64(f"e{i}", [e])]
        nodes.append(node("Slice", ["m", f"b{i}", f"e{i}", "axis1"], [f"s{i}"]))
        if i == 0:
            nodes.append(node("Conv", ["s0", "w0"], ["h0"], pads=[1, 1, 1, 1], group=widths[0]))
            inits.append(f32("w0", (widths[0], 1, 3, 3), 0.3))
            continue
        out = widths[i + 1] if i + 1 < len(bounds) else widths[i]
        nodes += [node("Add", [f"s{i}", f"h{i - 1}"], [f"a{i}"]), node("Conv", [f"a{i}", f"w{i}"], [f"h{i}"])]
        inits.append(f32(f"w{i}", (out, widths[i], 1, 1), 0.4))
    heads = [f"h{i}" for i in range(len(bounds))]
    total = widths[0] + sum(widths[2:]) + widths[-1]
    nodes += [node("Concat", heads, ["cat"], axis=1), node("Conv", ["cat", "wp"], ["y"])]
    inits.append(f32("wp", (5, total, 1, 1), 0.3))
    return make(nodes, [tensor("x", [N, C, H, W])], [tensor("y", [N, 5, H, W])], inits, opset=17)


@pytest.mark.parametrize("profile", [None, "nvidia-h200"])
def test_whole_block_slices_are_read_in_place(profile):
    """Three heads of 8 channels (whole blocks): neither the conv of head 0 nor the adds read a
    slice kernel's output (3 launches fewer than with the slices run)."""
    model = _cascade([(0, 8), (8, 16), (16, 24)])
    ops, _ = run_all_ours(model, 0, (N, C, H, W), profile=profile)
    assert not any(op.startswith("slice_channels") for op in ops), ops
    unfused = compile_model(model, profile=profile, fuse=False, progress=lambda _: None)
    slices = [r["op"] for r in unfused.profile() if r["op"].startswith("slice_channels")]
    assert len(slices) == 3, slices


@pytest.mark.parametrize("bounds, kept", [
    ([(0, 8), (8, 16), (12, 18)], 1),   # a window ending inside a block, not the map's last: a kernel
    ([(2, 10), (12, 20), (16, 22)], 1),  # a window starting inside a block: a kernel
    ([(0, 4), (4, 8), (20, 22)], 0),     # the last window reaches the map's last channel (its padded lanes 0)
])
def test_slices_that_are_not_whole_blocks_keep_their_kernel(bounds, kept):
    """A slice starting inside a 4-lane block, or ending inside one before the map's last channel,
    runs its ``slice_channels`` kernel; the others are read in place. Same numbers either way."""
    model = _cascade(bounds, width=22)
    ops, _ = run_all_ours(model, 1, (N, C, H, W))
    slices = [op for op in ops if op.startswith("slice_channels")]
    assert len(slices) == kept, ops
