"""Where maps meet tokens on a profile that folds layer norms into convs (``nvidia-h200``: the GPU
classes of ``strategy.fusion.FOLD_NORM_KINDS``), compiled for that profile and run here against
onnxruntime (random input and weights; channels not multiples of 4):

- a conv with a layer norm folded in reads X blocked only but writes Y plain
  (``strategy.conv.plain_io_plan``): the qkv Linear of TinyViT's attention writes the tokens its
  GEMMs read;
- a layer norm over the last axis reads either form in the token region
  (``passes.map_boundary._reader_want``), and ``layer_norm_conv`` folds it only into a conv whose
  tokens are held blocked: plain tokens keep the norm's row kernel, the Linear reads its plain
  output (TinyViT's MLP after its plain residual add);
- a depthwise conv's 1x1 reader that alone writes the plain tokens its readers want stays its own
  kernel, also behind a bias add (``passes.conv_emit._writes_plain_alone``: TinyViT's patch merging).
"""

from helpers.onnx_graphs import f32, i64, make, node, run_all_ours, tensor

N, C, H, W, D = 1, 6, 5, 7, 10
PROFILE = "nvidia-h200"


def _tokens(src, name, c=C):
    """``src`` [N, c, H, W] as tokens [N, H * W, c] (flatten then transpose)."""
    return [node("Reshape", [src, f"ncl{c}"], [f"{name}_rows"]), node("Transpose", [f"{name}_rows"], [name], perm=[0, 2, 1])]


def _norm(x, y, tag, c=C):
    return node("LayerNormalization", [x, f"g_{tag}", f"b_{tag}"], [y], axis=-1, epsilon=1e-5), [f32(f"g_{tag}", (c,)), f32(f"b_{tag}", (c,))]


def _folded_qkv_model():
    """A map read by a 1x1 conv (so it stays blocked) and, as tokens, by LN -> Linear -> q q^T."""
    ln, ln_inits = _norm("t", "ln", "n")
    nodes = [node("Conv", ["x", "w3"], ["m"], pads=[1, 1, 1, 1]), node("Conv", ["m", "w1"], ["side"]),
             *_tokens("m", "t"), ln, node("MatMul", ["ln", "wq"], ["q"]),
             node("Transpose", ["q"], ["qt"], perm=[0, 2, 1]), node("MatMul", ["q", "qt"], ["s"])]
    inits = [f32("w3", (C, C, 3, 3), scale=0.3), f32("w1", (C, C, 1, 1)), i64(f"ncl{C}", [N, C, H * W]), f32("wq", (C, D)),
             *ln_inits]
    return make(nodes, [tensor("x", [N, C, H, W])], [tensor("s", [N, H * W, H * W]), tensor("side", [N, C, H, W])], inits,
                opset=17)


def test_folded_norm_conv_writes_plain_tokens():
    """The norm folds into the Linear's 1x1 conv (its tokens are blocked: the map's other reader is
    a conv), which writes q plain for the GEMM: the side output's unpacking is the one transform
    (the first conv reads the plain input; before: q unpacked too, nchw4c_to_nhwc)."""
    ops, transforms = run_all_ours(_folded_qkv_model(), 3, (N, C, H, W), profile=PROFILE)
    assert transforms == ["nchw4c_to_nchw"], ops
    assert len(ops) == 5, ops
    assert not any(op.startswith("layer_norm") for op in ops), ops  # folded into the conv


def _plain_norm_model():
    """Tokens of a conv map (plain: a GEMM reads them), an MLP block ``r + fc2(relu(fc1(LN(r))))``,
    then an attention-like block on its output: ``y = r2 + (q q^T) q``, ``q = Linear(LN(r2))``: r2 is
    read by a layer norm a Linear's conv could fold and by a residual add of plain tokens."""
    ln1, inits1 = _norm("t", "ln1", "n1")
    ln2, inits2 = _norm("r2", "ln2", "n2")
    nodes = [node("Conv", ["x", "w3"], ["m"], pads=[1, 1, 1, 1]), *_tokens("m", "t"),
             ln1, node("MatMul", ["ln1", "w1"], ["h0"]), node("Relu", ["h0"], ["h"]), node("MatMul", ["h", "w2"], ["f"]),
             node("Add", ["t", "f"], ["r2"]),
             ln2, node("MatMul", ["ln2", "wq"], ["q"]), node("Transpose", ["q"], ["qt"], perm=[0, 2, 1]),
             node("MatMul", ["q", "qt"], ["s"]), node("MatMul", ["s", "q"], ["att"]), node("Add", ["r2", "att"], ["y"])]
    inits = [f32("w3", (C, C, 3, 3), scale=0.3), i64(f"ncl{C}", [N, C, H * W]), f32("w1", (C, D)), f32("w2", (D, C)),
             f32("wq", (C, C)), *inits1, *inits2]
    return make(nodes, [tensor("x", [N, C, H, W])], [tensor("y", [N, H * W, C])], inits, opset=17)


def test_norm_of_plain_tokens_runs_as_rows():
    """The map's tokens are plain (GEMMs read them), and the norms that Linears' convs could fold read
    either form in their region: every Linear is our GEMM on plain tokens, and both norms fold into
    the tiled GEMM of the Linear reading them (``layer_norm_gemm``): no transform in 6 launches (before
    that fold: both norms as the row kernel, 8 launches; before plain tokens: both norms folded, the
    Linears as convs on blocked tokens, r2 unpacked for the last add: 1 transform in 7 launches)."""
    ops, transforms = run_all_ours(_plain_norm_model(), 4, (N, C, H, W), profile=PROFILE)
    assert transforms == [], ops
    assert ops.count("layer_norm_rows") == 0 and len(ops) == 6, ops


def _window_model():
    """TinyViT's patch merging then its window attention in small: 1x1 -> ReLU -> 3x3 depthwise
    stride 2 (8x8 -> 4x4) -> 1x1 with a bias (imported as conv2d + add) -> channels-last map, split
    into 2x2 windows -> LN -> Linear -> q q^T q, the windows merged back and added to the map, read
    as NCHW by a 3x3 depthwise conv (TinyViT's local conv)."""
    o, hh = 9, 4
    ln, ln_inits = _norm("w", "ln", "n", c=o)
    nodes = [node("Conv", ["x", "wa"], ["a0"]), node("Relu", ["a0"], ["a"]),
             node("Conv", ["a", "wd"], ["d"], pads=[1, 1, 1, 1], strides=[2, 2], group=C),
             node("Conv", ["d", "wp", "bp"], ["p"]), node("Transpose", ["p"], ["m"], perm=[0, 2, 3, 1]),
             node("Reshape", ["m", "win6"], ["m6"]), node("Transpose", ["m6"], ["m6p"], perm=[0, 1, 3, 2, 4, 5]),
             node("Reshape", ["m6p", "win3"], ["w"]), ln, node("MatMul", ["ln", "wq"], ["q"]),
             node("Transpose", ["q"], ["qt"], perm=[0, 2, 1]), node("MatMul", ["q", "qt"], ["s"]), node("MatMul", ["s", "q"], ["att"]),
             node("Reshape", ["att", "win6"], ["a6"]), node("Transpose", ["a6"], ["a6p"], perm=[0, 1, 3, 2, 4, 5]),
             node("Reshape", ["a6p", "map"], ["back"]), node("Add", ["m", "back"], ["r"]),
             node("Transpose", ["r"], ["rm"], perm=[0, 3, 1, 2]), node("Conv", ["rm", "wl"], ["y"], pads=[1, 1, 1, 1], group=o)]
    inits = [f32("wa", (C, C, 1, 1)), f32("wd", (C, 1, 3, 3), scale=0.5), f32("wp", (o, C, 1, 1)), f32("bp", (o,)),
             i64("win6", [N, 2, 2, 2, 2, o]), i64("win3", [4, 4, o]), i64("map", [N, hh, hh, o]), f32("wq", (o, o)), f32("wl", (o, 1, 3, 3), scale=0.5), *ln_inits]
    return make(nodes, [tensor("x", [N, C, 8, 8])], [tensor("y", [N, o, hh, hh])], inits, opset=17)


def test_pointwise_behind_bias_writes_plain_tokens():
    """The 1x1 (its bias add folded) writes the channels-last map plain for the windows and the
    residual add, so the depthwise conv before it stays its own kernel: the output's unpacking is the
    one transform, in 12 launches (before: the fused depthwise_pointwise kernel, then
    nchw4c_to_nhwc: as many launches, one more transform). The windows' norm folds into the q Linear's
    tiled GEMM (``layer_norm_gemm``), which reads the windows through a view of the map: neither the
    norm's kernel nor the window gather runs."""
    ops, transforms = run_all_ours(_window_model(), 5, (N, C, 8, 8), profile=PROFILE)
    assert transforms == ["nchw4c_to_nchw"], ops
    assert not any(op.startswith("depthwise_pointwise") for op in ops), ops
    assert len(ops) == 9 and "gather" not in ops, ops  # 12 before an elementwise chain read its movement-op operand in place, 11 before the fold


def _gated_conv_mlp_model():
    """MambaOut's gated CNN block as exported, on a channels-last map: Linear -> Split along the
    channels into a gate, an identity part and a conv part -> the conv part permuted to NCHW, a 7x7
    depthwise conv, permuted back -> gelu(gate) * concat(identity, conv) -> Linear."""
    hidden, conv_c = 8, 4  # the split parts: the gate 8, the identity 4, the conv 4 channels of 16
    nodes = [node("MatMul", ["x", "w1"], ["h"]), node("Split", ["h", "parts"], ["g", "i", "c"], axis=-1),
             node("Transpose", ["c"], ["c_nchw"], perm=[0, 3, 1, 2]),
             node("Conv", ["c_nchw", "wdw"], ["cd"], pads=[3, 3, 3, 3], group=conv_c, kernel_shape=[7, 7]),
             node("Transpose", ["cd"], ["c_nhwc"], perm=[0, 2, 3, 1]), node("Concat", ["i", "c_nhwc"], ["ic"], axis=-1),
             node("Sigmoid", ["g"], ["gs"]), node("Mul", ["g", "gs"], ["ga"]), node("Mul", ["ga", "ic"], ["m"]),
             node("MatMul", ["m", "w2"], ["y"])]
    inits = [f32("w1", (C, 2 * hidden)), i64("parts", [hidden, hidden - conv_c, conv_c]), f32("wdw", (conv_c, 1, 7, 7), scale=0.3),
             f32("w2", (hidden, C))]
    return make(nodes, [tensor("x", [N, H, W, C])], [tensor("y", [N, H, W, C])], inits, opset=17)


def test_depthwise_conv_reads_its_channel_slice_in_place():
    """MambaOut's depthwise conv reads its channels of the Linear's output in place (``x_view``: a
    channel slice of the channels-last buffer, ``map_boundary.plain_input(views=True)``): no gather
    kernel before it, no layout transform; the block matches onnxruntime."""
    ops, transforms = run_all_ours(_gated_conv_mlp_model(), 6, (N, H, W, C), profile=PROFILE)
    assert not transforms and not [op for op in ops if op.startswith(("gather", "slice", "split"))], ops
    assert any(op.startswith("depthwise_conv2d") for op in ops), ops
