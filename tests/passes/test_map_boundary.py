"""The boundary between maps and tokens (``passes.map_boundary``): a conv whose output only token
views read (``Reshape`` + ``Transpose(0, 2, 1)``, ``Transpose(0, 2, 3, 1)``, or a ``Reshape`` read
in NCHW order) by a MatMul writes the plain tokens itself, and a conv after tokens (``Transpose`` +
``Reshape`` back to a map) reads them in place: conv -> tokens -> MatMul by a constant -> map ->
conv runs as conv, GEMM, conv, against onnxruntime, with no layout transform and no upstream
kernel inside (the model's NCHW output is the only transform left). C and O are not multiples of 4."""

import numpy as np
import pytest

from helpers.onnx_graphs import PATTERN_RTOL, f32, i64, make, node, tensor
from tir_adreno import compile_model
from tir_adreno.reference import reference_outputs, relative_error

LAYOUT_KERNELS = ("nchw_to_nchw4c", "nhwc_to_nchw4c", "nchw4c_to_nchw", "nchw4c_to_nhwc", "copy")
N, C, H, W, D = 2, 6, 5, 7, 10  # batch, input channels, map, token channels


def _run(model, precision="float32", rtol=PATTERN_RTOL):
    """Compile and run ``model`` on a random input, check it against onnxruntime; the profile rows."""
    compiled = compile_model(model, progress=lambda _: None, precision=precision)
    x = {"x": np.random.default_rng(5).standard_normal((N, C, H, W)).astype(np.float32)}
    (out,) = compiled.run(x, profile=True)
    (ref,) = reference_outputs(model, x)
    assert relative_error(out, ref) <= rtol, relative_error(out, ref)
    return compiled.profile()


def _check_boundaries(rows, convs: int):
    """``convs`` convs and one GEMM of ours, no upstream kernel, and the only layout transform the
    model output's (the last launch)."""
    assert all(r["ours"] for r in rows), [r["op"] for r in rows if not r["ours"]]
    assert sum(r["op"].startswith(("conv2d", "depthwise")) for r in rows) == convs, rows
    assert sum(r["op"].startswith("gemm") for r in rows) == 1, rows
    transforms = [i for i, r in enumerate(rows) if r["op"].startswith(LAYOUT_KERNELS)]
    assert transforms == [len(rows) - 1] and rows[-1]["op"].startswith("nchw4c_to_nchw"), [r["op"] for r in rows]


def _tokens_graph(to_tokens, to_map, second, extra_inits=()):
    """x -> 3x3 conv (bias) -> ``to_tokens`` -> MatMul by [D, D] -> ``to_map`` -> ``second`` conv -> y."""
    nodes = [node("Conv", ["x", "w1", "b1"], ["map1"], pads=[1, 1, 1, 1]), *to_tokens,
             node("MatMul", ["tok", "m"], ["tok2"]), *to_map, second]
    inits = [f32("w1", (D, C, 3, 3)), f32("b1", (D,)), f32("m", (D, D)), *extra_inits]
    out = 5 if second.input[1] == "w2" else D
    return make(nodes, [tensor("x", [N, C, H, W])], [tensor("y", [N, out, H, W])], inits, opset=17)


DENSE = node("Conv", ["map2", "w2"], ["y"], pads=[1, 1, 1, 1])
DEPTHWISE = node("Conv", ["map2", "wd"], ["y"], pads=[1, 1, 1, 1], group=D)
FLATTEN = [node("Reshape", ["map1", "ncl"], ["flat"]), node("Transpose", ["flat"], ["tok"], perm=[0, 2, 1])]
UNFLATTEN = [node("Transpose", ["tok2"], ["flat2"], perm=[0, 2, 1]), node("Reshape", ["flat2", "nchw"], ["map2"])]
SHAPES = (i64("ncl", [N, D, H * W]), i64("nchw", [N, D, H, W]))


@pytest.mark.parametrize("precision, rtol", [("float32", PATTERN_RTOL), ("float16_acc32", 1e-2)])
def test_tokens_between_convs(precision, rtol):
    """ViT's patch embedding and a conv after the token mixer: conv -> flatten -> transpose ->
    MatMul -> transpose -> reshape -> conv (half buffers between our kernels under float16_acc32)."""
    model = _tokens_graph(FLATTEN, UNFLATTEN, DENSE, (*SHAPES, f32("w2", (5, D, 3, 3))))
    _check_boundaries(_run(model, precision, rtol), convs=2)


def test_channels_last_between_convs():
    """permute to NHWC -> Linear on the channels-last map -> permute back -> depthwise conv
    (the depthwise kernel reads the channels-last buffer in place)."""
    model = _tokens_graph([node("Transpose", ["map1"], ["tok"], perm=[0, 2, 3, 1])],
                          [node("Transpose", ["tok2"], ["map2"], perm=[0, 3, 1, 2])], DEPTHWISE, (f32("wd", (D, 1, 3, 3)),))
    _check_boundaries(_run(model), convs=2)


def test_channel_rows_between_convs():
    """EfficientFormerV2's form: the conv's map reshaped to ``[N, C, H * W]`` read by a MatMul in
    that (NCHW) order, ``[N, C, L] @ [L, L]``, then reshaped back: the conv writes plain NCHW, the
    next one reads it in place."""
    nodes = [node("Conv", ["x", "w1", "b1"], ["map1"], pads=[1, 1, 1, 1]), node("Reshape", ["map1", "ncl"], ["rows"]),
             node("MatMul", ["rows", "m"], ["rows2"]), node("Reshape", ["rows2", "nchw"], ["map2"]), DENSE]
    inits = [f32("w1", (D, C, 3, 3)), f32("b1", (D,)), f32("m", (H * W, H * W), scale=0.2), *SHAPES, f32("w2", (5, D, 3, 3))]
    model = make(nodes, [tensor("x", [N, C, H, W])], [tensor("y", [N, 5, H, W])], inits, opset=17)
    _check_boundaries(_run(model), convs=2)


def test_map_read_by_a_conv_too_stays_blocked():
    """A conv value that another conv also reads is not written plain (that reader wants NCHW4c):
    its tokens stay views of the blocked map, and the MatMul on them runs as a 1x1 conv (the
    matmul rule), not as a GEMM on a plain copy."""
    nodes = [node("Conv", ["x", "w1", "b1"], ["map1"], pads=[1, 1, 1, 1]), *FLATTEN, node("MatMul", ["tok", "m"], ["tok2"]),
             *UNFLATTEN, node("Conv", ["map1", "w3"], ["side"], pads=[1, 1, 1, 1]), node("Add", ["map2", "side"], ["sum"]),
             node("Conv", ["sum", "w2"], ["y"], pads=[1, 1, 1, 1])]
    inits = [f32("w1", (D, C, 3, 3)), f32("b1", (D,)), f32("m", (D, D)), *SHAPES, f32("w3", (D, D, 3, 3)), f32("w2", (5, D, 3, 3))]
    model = make(nodes, [tensor("x", [N, C, H, W])], [tensor("y", [N, 5, H, W])], inits, opset=17)
    ops = [r["op"] for r in _run(model)]
    assert not any(op.startswith("gemm") for op in ops) and sum(op.startswith("conv2d") for op in ops) == 4, ops
    assert [op for op in ops if op.startswith(LAYOUT_KERNELS)] == ["nchw4c_to_nchw"], ops


def test_map_read_by_a_matmul_itself():
    """EfficientFormerV2's talking head: a conv's map ``[N, C, H, W]`` read directly by a MatMul
    (``map @ [W, W]``, a GEMM over the last axis): the conv writes plain NCHW, the GEMM reads it, and
    the next conv reads the GEMM's plain NCHW output in place."""
    nodes = [node("Conv", ["x", "w1", "b1"], ["map1"], pads=[1, 1, 1, 1]), node("MatMul", ["map1", "m"], ["map2"]), DENSE]
    inits = [f32("w1", (D, C, 3, 3)), f32("b1", (D,)), f32("m", (W, W)), f32("w2", (5, D, 3, 3))]
    model = make(nodes, [tensor("x", [N, C, H, W])], [tensor("y", [N, 5, H, W])], inits, opset=17)
    _check_boundaries(_run(model), convs=2)



# The token region (``map_boundary.token_region``): the ops after a conv's token view that run in
# either form (a layer norm over the last axis, a Linear, pixelwise ops) are followed to the ops
# that want one form, so a conv writes plain when its tokens reach plain-only readers through them.

LN_INITS = (f32("g", (D,)), f32("be", (D,)))


def _transforms(rows) -> list[str]:
    return [r["op"] for r in rows if r["op"].startswith(LAYOUT_KERNELS)]


def _tokens_out_graph(nodes, inits, out_shape):
    return make(nodes, [tensor("x", [N, C, H, W])], [tensor("y", out_shape)], [f32("w1", (D, C, 3, 3)), f32("b1", (D,)), *inits], opset=17)


def test_layer_norm_and_linear_followed_to_heads():
    """PVT's and TinyViT's form: conv -> tokens -> LayerNorm -> MatMul -> reshape to heads (a view
    only the plain form has) and a residual add of the tokens: the conv writes the plain tokens, the
    norm and the Linear run on them (row kernel, GEMM), and no layout kernel runs at all."""
    nodes = [node("Conv", ["x", "w1", "b1"], ["map1"], pads=[1, 1, 1, 1]), *FLATTEN,
             node("LayerNormalization", ["tok", "g", "be"], ["ln"], axis=-1, epsilon=1e-5), node("MatMul", ["ln", "m"], ["lin"]),
             node("Add", ["lin", "tok"], ["res"]), node("Reshape", ["res", "heads"], ["y"])]
    inits = [*LN_INITS, f32("m", (D, D)), *SHAPES, i64("heads", [N, H * W, 2, D // 2])]
    rows = _run(_tokens_out_graph(nodes, inits, [N, H * W, 2, D // 2]))
    assert all(r["ours"] for r in rows), [r["op"] for r in rows if not r["ours"]]
    assert _transforms(rows) == [], [r["op"] for r in rows]
    assert any(r["op"].startswith("gemm") for r in rows) and any(r["op"].startswith("layer_norm_rows") for r in rows), rows


def test_gated_conv_concat_on_channels_last():
    """MambaOut's gated conv: a Linear on a channels-last map, Split on the last axis, one part through
    a depthwise conv (read in place through the permute) and back to channels-last, Concat on the
    last axis: the depthwise conv writes channels-last plain (a concat of channels-last maps reads
    plain), no layout kernel runs."""
    nodes = [node("Conv", ["x", "w1", "b1"], ["map1"], pads=[1, 1, 1, 1]), node("Transpose", ["map1"], ["nhwc"], perm=[0, 2, 3, 1]),
             node("LayerNormalization", ["nhwc", "g", "be"], ["ln"], axis=-1, epsilon=1e-5), node("MatMul", ["ln", "m"], ["fc1"]),
             node("Split", ["fc1", "parts"], ["keep", "conv_in"], axis=-1), node("Transpose", ["conv_in"], ["map2"], perm=[0, 3, 1, 2]),
             node("Conv", ["map2", "wd"], ["map3"], pads=[1, 1, 1, 1], group=4), node("Transpose", ["map3"], ["nhwc3"], perm=[0, 2, 3, 1]),
             node("Concat", ["keep", "nhwc3"], ["y"], axis=-1)]
    inits = [*LN_INITS, f32("m", (D, 2 * D)), i64("parts", [2 * D - 4, 4]), f32("wd", (4, 1, 3, 3))]
    rows = _run(_tokens_out_graph(nodes, inits, [N, H, W, 2 * D]))
    assert all(r["ours"] for r in rows), [r["op"] for r in rows if not r["ours"]]
    assert _transforms(rows) == [], [r["op"] for r in rows]
    assert sum(r["op"].startswith(("conv2d", "depthwise")) for r in rows) == 2, rows

