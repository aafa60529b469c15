"""Maps held plain stay plain where every op on them has a plain kernel (issue 35, the layout planner):
a channel group (``passes.channel_groups``: a split of a plain map, a conv per group reading and
writing plain NCHW, the concat as a gather: CoaT's conv-relative position encoding), a conv adding
the plain map it read (``Epilogue.residual_layout``: CoaT's ``x + dwconv(x)``), a conv reading a plain
map beside the add of it, a gated conv and a pool writing the tokens their readers take (GCViT's
global query). Against onnxruntime, with the plan's layout kernels and launches counted exactly
(main before these rules: the counts in each case's comment)."""

import numpy as np
import pytest

from helpers.onnx_graphs import PATTERN_RTOL, f32, i64, make, node, tensor
from tir_adreno import compile_model
from tir_adreno.reference import reference_outputs, relative_error

LAYOUT_KERNELS = ("nchw_to_nchw4c", "nhwc_to_nchw4c", "nchw4c_to_nchw", "nchw4c_to_nhwc")


def _tokens_to_map(nodes, inits, tokens, c, h, w, out):
    """Plain tokens ``[1, H * W, C]`` -> Linear -> the ``[1, C, H, W]`` map (a transpose and a reshape)."""
    nodes += [node("MatMul", [tokens, "wl"], [f"{out}_l"]), node("Transpose", [f"{out}_l"], [f"{out}_t"], perm=[0, 2, 1]),
              node("Reshape", [f"{out}_t", "s_map"], [out])]
    inits += [f32("wl", (c, c), 0.3), i64("s_map", [1, c, h, w])]


def _map_to_tokens(nodes, inits, x, c, h, w, out):
    nodes += [node("Reshape", [x, "s_tok"], [f"{out}_r"]), node("Transpose", [f"{out}_r"], [out], perm=[0, 2, 1])]
    inits += [i64("s_tok", [1, c, h * w])]


def _depthwise(nodes, inits, x, y, c, k, tag):
    nodes.append(node("Conv", [x, f"w{tag}", f"b{tag}"], [y], group=c, pads=[k // 2] * 4, kernel_shape=[k, k]))
    inits += [f32(f"w{tag}", (c, 1, k, k), 0.3), f32(f"b{tag}", (c,), 0.1)]


def channel_group(sizes, kernels, reader="tokens", hw=(5, 6)):
    """Tokens -> Linear -> map (plain) -> split into ``sizes`` channels -> a depthwise conv of kernel
    ``kernels[i]`` on each -> concat; then ``reader`` "tokens": back to tokens times the Linear's
    tokens (CoaT); "conv": a dense 3x3 conv (its kernels read blocked maps: no group)."""
    c, (h, w) = sum(sizes), hw
    nodes, inits = [], []
    _tokens_to_map(nodes, inits, "tt", c, h, w, "m")
    parts = [f"p{i}" for i in range(len(sizes))]
    nodes.append(node("Split", ["m", "sizes"], parts, axis=1))
    inits.append(i64("sizes", list(sizes)))
    for i, (part, size, k) in enumerate(zip(parts, sizes, kernels)):
        _depthwise(nodes, inits, part, f"d{i}", size, k, i)
    nodes.append(node("Concat", [f"d{i}" for i in range(len(sizes))], ["cat"], axis=1))
    if reader == "tokens":
        _map_to_tokens(nodes, inits, "cat", c, h, w, "ct")
        nodes.append(node("Mul", ["ct", "m_l"], ["y"]))
        out = tensor("y", [1, h * w, c])
    else:
        nodes.append(node("Conv", ["cat", "wc", "bc"], ["y"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]))
        inits += [f32("wc", (4, c, 3, 3), 0.3), f32("bc", (4,), 0.1)]
        out = tensor("y", [1, 4, h, w])
    return make(nodes, [tensor("tt", [1, h * w, c])], [out], inits, opset=17)


def position_encoding(c=8, hw=(5, 6)):
    """Tokens -> Linear -> map (plain) -> ``map + dwconv3x3(map)`` -> tokens -> Linear (CoaT's conv
    position encoding between two token ops)."""
    h, w = hw
    nodes, inits = [], []
    _tokens_to_map(nodes, inits, "tt", c, h, w, "m")
    _depthwise(nodes, inits, "m", "d", c, 3, "pe")
    nodes.append(node("Add", ["d", "m"], ["s"]))
    _map_to_tokens(nodes, inits, "s", c, h, w, "st")
    nodes.append(node("MatMul", ["st", "wo"], ["y"]))
    inits.append(f32("wo", (c, c), 0.3))
    return make(nodes, [tensor("tt", [1, h * w, c])], [tensor("y", [1, h * w, c])], inits, opset=17)


def global_query(c=8, size=12, gate=True, pool=True, tokens=False):
    """A map -> stride-2 conv (``tokens``: channels-last tokens, the model's input) -> channels-last
    layer norm (the stage norm) -> back to NCHW (``t``) -> ``t + conv1x1(dwconv(t) [* SE gate])`` ->
    [max pool 3x3 s2] -> channels-last -> Linear (GCViT's global query generator feeding its attention)."""
    half = size // 2
    if tokens:
        nodes, inits = [], []
    else:
        nodes = [node("Conv", ["x", "ws", "bs"], ["s"], strides=[2, 2], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
                 node("Transpose", ["s"], ["sl"], perm=[0, 2, 3, 1])]
        inits = [f32("ws", (c, 3, 3, 3), 0.3), f32("bs", (c,), 0.1)]
    nodes += [node("LayerNormalization", ["xt" if tokens else "sl", "g", "be"], ["n"], axis=-1),
              node("Transpose", ["n"], ["t"], perm=[0, 3, 1, 2])]
    inits += [f32("g", (c,), 0.3, low=0.5), f32("be", (c,), 0.1)]
    _depthwise(nodes, inits, "t", "dw", c, 3, "q")
    nodes.append(node("Relu", ["dw"], ["dr"]))
    x = "dr"
    if gate:
        nodes += [node("GlobalAveragePool", ["dr"], ["gp"]), node("Conv", ["gp", "w1", "b1"], ["g1"]), node("Relu", ["g1"], ["g2"]),
                  node("Conv", ["g2", "w2", "b2"], ["g3"]), node("Sigmoid", ["g3"], ["g4"]), node("Mul", ["dr", "g4"], ["gx"])]
        inits += [f32("w1", (4, c, 1, 1), 0.3), f32("b1", (4,), 0.1), f32("w2", (c, 4, 1, 1), 0.3), f32("b2", (c,), 0.1)]
        x = "gx"
    nodes += [node("Conv", [x, "wp", "bp"], ["pw"]), node("Add", ["pw", "t"], ["r"])]
    inits += [f32("wp", (c, c, 1, 1), 0.3), f32("bp", (c,), 0.1)]
    if pool:
        nodes.append(node("MaxPool", ["r"], ["q"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    nodes += [node("Transpose", ["q" if pool else "r"], ["ql"], perm=[0, 2, 3, 1]), node("MatMul", ["ql", "wo"], ["y"])]
    inits.append(f32("wo", (c, 6), 0.3))
    side = half // (2 if pool else 1)
    inputs = [tensor("xt", [1, half, half, c])] if tokens else [tensor("x", [1, 3, size, size])]
    return make(nodes, inputs, [tensor("y", [1, side, side, 6])], inits, opset=17)


def _profile(model, seed, profile=None):
    """The op names of ``model`` compiled for ``profile`` (default: the device's), run here on random
    inputs against onnxruntime, every kernel ours."""
    rng = np.random.default_rng(seed)
    inputs = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
              for i in model.graph.input}
    compiled = compile_model(model, profile=profile, progress=lambda _: None)
    (out,), (ref,) = compiled.run(inputs), reference_outputs(model, inputs)
    assert relative_error(out, ref) <= PATTERN_RTOL, relative_error(out, ref)
    rows = compiled.profile()
    assert not [r for r in rows if not r["ours"]], rows
    return [r["op"] for r in rows]


def _layout(ops):
    return [o for o in ops if o.startswith(LAYOUT_KERNELS)]


@pytest.mark.parametrize("sizes, kernels", [
    ((4, 6, 6), (3, 5, 7)),   # CoaT's split of a head's channels: 2, 3, 3 heads of 2 channels
    ((3, 5), (3, 1)),         # groups straddling the 4-lane blocks, a 1x1 group
])
def test_channel_group_stays_plain(sizes, kernels):
    """Split, convs and concat on the plain map: no layout kernel (main: a pack before the blocked
    split, an unpack after the blocked concat), the split's and concat's gathers in place of the
    split_channels and concat_channels kernels; each conv reads its group of the GEMM's output in
    place (``Prologue.x_view``: the transpose into the map and the split read through), so no
    gather runs before them."""
    ops = _profile(channel_group(sizes, kernels), seed=len(sizes))
    assert _layout(ops) == [], ops
    assert not [o for o in ops if o.startswith(("split_channels", "concat_channels"))], ops
    convs = [o for o in ops if o.startswith("depthwise_conv2d")]
    assert len(convs) == len(sizes), ops
    # the GEMM, the convs (each reading its group in place), the concat's gather, the multiply reading
    # the transpose back to tokens in place (plain_elementwise.View: its gather was one more launch)
    assert len(ops) == 1 + len(sizes) + 2, ops


def test_channel_group_read_by_a_blocked_conv_stays_blocked():
    """A group whose concat a dense 3x3 conv reads (its kernel wants the blocked map): the rule does
    not apply; the plan is main's (a pack, the blocked concat), the block-aligned split read by the
    group convs as channel windows of the packed map (no split kernel)."""
    ops = _profile(channel_group((4, 4), (3, 5), reader="conv"), seed=3)
    assert [o.rstrip("0123456789") for o in ops if o.startswith(("split_channels", "concat_channels"))] == ["concat_channels"], ops
    assert _layout(ops) == ["nchw_to_nchw4c", "nchw4c_to_nchw"], ops  # the split's pack, the model output's unpack


def test_position_encoding_reads_its_residual_plain():
    """``map + dwconv(map)`` on a plain map: the conv reads the map and adds it from the plain buffer,
    writing the tokens the Linear reads: no layout kernel (main: the map packed for the residual)."""
    ops = _profile(position_encoding(), seed=5)
    assert _layout(ops) == [], ops
    # the GEMM, its transpose into the map (a gather), the conv, the Linear
    assert len(ops) == 4, ops


@pytest.mark.parametrize("gate, pool, tokens, launches", [
    (True, True, False, 7),   # the stride-2 conv, the layer norm over its blocked map, the depthwise conv,
                              # the excitation, the gated 1x1 conv, the pool, the Linear (main: and an unpack)
    (False, True, False, 5),  # no gate: the depthwise and 1x1 convs one kernel (main: the Linear a 1x1
                              # conv on the blocked map, then an unpack)
    (True, False, False, 6),  # no pool: the gated conv writes the tokens (main: an unpack)
    (True, True, True, 7),    # GCViT: plain tokens in, the layer norm on them, its transpose to NCHW (a
                              # gather) read in place by the depthwise conv and added by the 1x1 conv
                              # (main: a pack of the transposed map, an unpack)
])
def test_global_query_needs_no_layout_kernel(gate, pool, tokens, launches):
    """The stage norm's plain map read by a depthwise conv in place beside the add of it, added from
    the plain buffer by the (gated) 1x1 conv, and the pool (or the conv) writing the channels-last
    tokens the Linear reads: no layout kernel (main: the map packed for the convs, the result unpacked)."""
    ops = _profile(global_query(gate=gate, pool=pool, tokens=tokens), seed=gate + 2 * pool + 4 * tokens)
    assert _layout(ops) == [], ops
    assert len(ops) == launches, ops
