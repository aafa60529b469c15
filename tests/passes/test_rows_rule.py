"""The ``rows`` rules: softmax, layer norm, batch norm and reductions on plain tensors (tokens,
heads, channels-last maps) as exporters write them run as our row kernels, against onnxruntime;
the plan has no upstream kernel of those ops and no layout transform around them. A batch norm on
a Linear's output features (LeViT's Linear + BatchNorm1d) folds into the Linear's GEMM."""

import numpy as np
import pytest
from onnx import numpy_helper

from helpers.onnx_graphs import PATTERN_RTOL, f32, make, node, tensor
from tir_adreno import compile_model
from tir_adreno.reference import reference_outputs, relative_error

LAYOUT_KERNELS = ("nchw_to_nchw4c", "nhwc_to_nchw4c", "nchw4c_to_nchw", "nchw4c_to_nhwc", "copy")
ROW_OPS = ("softmax", "layer_norm", "batch_norm", "mean", "sum", "max", "min")


def _run(model, inputs: dict, precision="float32", rtol=PATTERN_RTOL, fuse=True):
    """Compile ``model`` for this device, check it against onnxruntime, and check its plan: no
    upstream softmax, norm or reduction, no layout transform. Returns the kernels' op names."""
    compiled = compile_model(model, progress=lambda _: None, precision=precision, fuse=fuse)
    outs = compiled.run(inputs, profile=True)
    for out, ref in zip(outs, reference_outputs(model, inputs)):
        assert relative_error(out, ref) <= rtol, relative_error(out, ref)
    rows = compiled.profile()
    assert not [r for r in rows if not r["ours"] and r["op"].startswith(ROW_OPS)], rows
    assert not [r for r in rows if r["op"].startswith(LAYOUT_KERNELS)], rows
    return [r["op"] for r in rows]


def _inputs(rng, **shapes) -> dict:
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}


def _heads_attention(axis=-1):
    """``softmax(q kᵀ * scale) v`` on heads ``[N, heads, L, d]``."""
    nodes = [node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), node("MatMul", ["q", "kt"], ["s"]),
             node("Mul", ["s", "scale"], ["ss"]), node("Softmax", ["ss"], ["p"], axis=axis), node("MatMul", ["p", "v"], ["y"])]
    shapes = {"q": (1, 3, 11, 6), "k": (1, 3, 11, 6), "v": (1, 3, 11, 5)}
    inits = [numpy_helper.from_array(np.array(0.4, np.float32), "scale")]
    return make(nodes, [tensor(n, list(s)) for n, s in shapes.items()], [tensor("y", [1, 3, 11, 5])], inits, opset=17), shapes


def test_attention_softmax_between_gemms():
    """Attention's softmax over the keys of ``[N, heads, L, L]`` scores with fusion off: the GEMM, our
    softmax on its plain output, the GEMM (three kernels; upstream's blocked softmax_w had a
    transform each side). With fusion on, the ``softmax_attention`` pattern's one kernel."""
    model, shapes = _heads_attention()
    inputs = _inputs(np.random.default_rng(1), **shapes)
    assert _run(model, inputs, fuse=False) == ["gemm", "softmax_rows", "gemm1"]
    assert _run(model, inputs) == ["softmax_attention"]


def test_softmax_over_a_middle_axis():
    """Softmax over the queries (axis 2 of four: strided rows) is ours too."""
    model, shapes = _heads_attention(axis=2)
    assert "softmax_rows" in _run(model, _inputs(np.random.default_rng(2), **shapes))


def _token_block(norm_axis=-1):
    """A transformer block's norm on tokens: Linear -> LayerNorm -> Linear -> token mean."""
    nodes = [node("MatMul", ["x", "w1"], ["h"]), node("LayerNormalization", ["h", "g", "b"], ["n"], axis=norm_axis, epsilon=1e-6),
             node("MatMul", ["n", "w2"], ["o"]), node("ReduceMean", ["o"], ["y"], axes=[1], keepdims=0)]
    normalized = [7, 20][norm_axis:] if norm_axis == -2 else [20]
    inits = [f32("w1", (12, 20)), f32("g", normalized), f32("b", normalized), f32("w2", (20, 9))]
    return make(nodes, [tensor("x", [2, 7, 12])], [tensor("y", [2, 9])], inits, opset=17)


def test_layer_norm_and_token_mean():
    """LayerNorm over the channels of tokens and the mean over the tokens run as ours: four kernels."""
    ops = _run(_token_block(), _inputs(np.random.default_rng(3), x=(2, 7, 12)))
    assert ops == ["gemm", "layer_norm_rows", "gemm1", "mean_rows"], ops


def test_layer_norm_over_two_trailing_axes():
    """ONNX LayerNormalization with axis=-2 normalizes the last two axes (gamma of their shape)."""
    ops = _run(_token_block(norm_axis=-2), _inputs(np.random.default_rng(4), x=(2, 7, 12)))
    assert "layer_norm_rows" in ops


def test_token_block_in_half_storage():
    """float16_acc32: the buffers between our kernels are half, the statistics float32; within
    half's rounding of onnxruntime."""
    ops = _run(_token_block(), _inputs(np.random.default_rng(5), x=(2, 7, 12)), precision="float16_acc32", rtol=1e-2)
    assert ops == ["gemm", "layer_norm_rows", "gemm1", "mean_rows"], ops


def _bn_inits(tag, channels, rng):
    return [numpy_helper.from_array(v.astype(np.float32), f"{tag}_{n}") for n, v in (
        ("g", rng.standard_normal(channels)), ("b", rng.standard_normal(channels)), ("m", rng.standard_normal(channels)),
        ("v", rng.uniform(0.5, 2.0, channels)))]


def test_linear_batch_norm_folds_into_the_gemm():
    """LeViT's Linear + BatchNorm1d (``MatMul -> Reshape [L, C] -> BatchNormalization -> Reshape``):
    the norm folds into the GEMM's weight and bias, no kernel of its own."""
    rng = np.random.default_rng(6)
    nodes = [node("MatMul", ["x", "w"], ["h"]), node("Reshape", ["h", "flat"], ["hf"]),
             node("BatchNormalization", ["hf", "bn_g", "bn_b", "bn_m", "bn_v"], ["n"], epsilon=1e-5),
             node("Reshape", ["n", "back"], ["y"])]
    inits = [f32("w", (12, 16)), numpy_helper.from_array(np.array([-1, 16], np.int64), "flat"),
             numpy_helper.from_array(np.array([2, 7, 16], np.int64), "back"), *_bn_inits("bn", 16, rng)]
    model = make(nodes, [tensor("x", [2, 7, 12])], [tensor("y", [2, 7, 16])], inits, opset=17)
    ops = _run(model, _inputs(rng, x=(2, 7, 12)))
    assert [op for op in ops if op.startswith(("gemm", "channel_affine"))] == ["gemm"], ops


def test_batch_norm_on_channels_of_tokens():
    """BatchNorm1d on ``[N, C, L]`` (axis 1) of a plain tensor after no Linear: one per-channel
    affine kernel of ours."""
    rng = np.random.default_rng(7)
    nodes = [node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]), node("BatchNormalization", ["xt", "bn_g", "bn_b", "bn_m", "bn_v"], ["y"])]
    model = make(nodes, [tensor("x", [2, 9, 5])], [tensor("y", [2, 5, 9])], _bn_inits("bn", 5, rng), opset=17)
    assert "channel_affine" in _run(model, _inputs(rng, x=(2, 9, 5)))


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin"])
def test_reductions_of_a_channels_last_map(op):
    """A reduction over H, W of a channels-last map ``[N, H, W, C]`` (strided rows)."""
    axes = numpy_helper.from_array(np.array([1, 2], np.int64), "axes")  # ReduceSum's axes are an input from opset 13
    reduce = node(op, ["h", "axes"], ["y"], keepdims=1) if op == "ReduceSum" else node(op, ["h"], ["y"], axes=[1, 2], keepdims=1)
    model = make([node("MatMul", ["x", "w"], ["h"]), reduce], [tensor("x", [1, 5, 3, 8])], [tensor("y", [1, 1, 1, 6])],
                 [f32("w", (8, 6)), axes], opset=17)
    ops = _run(model, _inputs(np.random.default_rng(8), x=(1, 5, 3, 8)))
    assert ops == ["gemm", f"{op[6:].lower()}_rows"], ops


@pytest.mark.parametrize("profile, gemm", [("adreno", "gemm"), ("nvidia-h200", "gemm_tiled")])
def test_plan_for_other_devices(profile, gemm):
    """The rules plan the same on every profile (the GEMM kernel and work groups are the profile's:
    the tiled GEMM on nvidia-h200), for float32 and float16 alike (plain tensors stay float32):
    compiled without a device, fusion off (on, the attention is one kernel everywhere)."""
    from helpers.onnx_graphs import plan_kernels
    from tir_adreno.strategy.profile import get_profile, without_fusion

    model, _ = _heads_attention()
    assert plan_kernels(model, without_fusion(get_profile(profile))) == [gemm, "softmax_rows", gemm]
    assert plan_kernels(model, get_profile(profile)) == ["softmax_attention"]


def test_map_softmax_stays_blocked():
    """A softmax over the channels of a conv's output (a blocked map) stays the map rule's."""
    from helpers.onnx_graphs import pattern_graph, plan_kernels
    from tir_adreno.strategy.profile import get_profile

    w = np.random.default_rng(9).standard_normal((3, 3, 1, 1)).astype(np.float32)
    model = pattern_graph([node("Conv", ["x", "w"], ["c"]), node("Softmax", ["c"], ["y"], axis=1)], {"w": w})
    assert "softmax_c" in plan_kernels(model, get_profile("pocl"))


@pytest.mark.parametrize("scaled", [True, False])
def test_rms_norm_as_exported(scaled):
    """An RMS norm as torch exports it (``Pow -> ReduceMean -> Add eps -> Sqrt -> Div``, then
    ``Mul gamma``) on a Linear's tokens: one ``rms_norm_rows`` kernel, no upstream op left."""
    scalars = [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in (("two", 2.0), ("eps", 1e-5))]
    nodes = [node("MatMul", ["x", "w"], ["h"]), node("Pow", ["h", "two"], ["sq"]), node("ReduceMean", ["sq"], ["ms"], axes=[-1], keepdims=1),
             node("Add", ["ms", "eps"], ["mse"]), node("Sqrt", ["mse"], ["rms"]), node("Div", ["h", "rms"], ["n" if scaled else "y"])]
    nodes += [node("Mul", ["n", "g"], ["y"])] if scaled else []
    inits = [f32("w", (12, 10)), *scalars] + ([f32("g", (10,))] if scaled else [])
    model = make(nodes, [tensor("x", [2, 7, 12])], [tensor("y", [2, 7, 10])], inits, opset=17)
    compiled = compile_model(model, progress=lambda _: None)
    x = _inputs(np.random.default_rng(10), x=(2, 7, 12))
    (out,), (ref,) = compiled.run(x, profile=True), reference_outputs(model, x)
    assert relative_error(out, ref) <= PATTERN_RTOL
    assert [(r["op"], r["ours"]) for r in compiled.profile()] == [("gemm", True), ("rms_norm_rows", True)]


def test_float16_plan_keeps_plain_tensors_float32():
    """precision float16 (planned for Adreno, no device): the row kernels on plain tensors are built
    float32, the dtype of the tensors upstream ops and the GEMM hand them."""
    from tir_adreno.compiler import compile_plan
    from tir_adreno.strategy.profile import get_profile

    for model, kernels in ((_token_block(), ["gemm", "layer_norm_rows", "gemm", "mean_rows"]),
                           (_heads_attention()[0], ["softmax_attention"])):
        plan, _, _ = compile_plan(model, get_profile("adreno"), progress=lambda _: None, precision="float16")
        assert [c["label"].rstrip("0123456789") for c in plan.to_dict()["calls"]] == kernels
        assert {t["dtype"] for t in plan.to_dict()["tensors"]} == {"float32"}


def test_reduction_to_a_scalar_stays_upstream():
    """A reduction over every axis without keepdims (a 0-d result) is left to upstream, correctly."""
    nodes = [node("MatMul", ["x", "w"], ["h"]), node("ReduceMax", ["h"], ["y"], keepdims=0)]
    model = make(nodes, [tensor("x", [2, 7, 12])], [tensor("y", [])], [f32("w", (12, 5))], opset=17)
    compiled = compile_model(model, progress=lambda _: None)
    x = _inputs(np.random.default_rng(11), x=(2, 7, 12))
    (out,), (ref,) = compiled.run(x, profile=True), reference_outputs(model, x)
    assert out.shape == () and relative_error(out, ref) <= PATTERN_RTOL
    assert "max_rows" not in [r["op"] for r in compiled.profile()]


def test_row_threads_per_device():
    """A row kernel's work group: the power of two covering the row, at most 64 and the device's limit."""
    from tir_adreno.strategy.norm import ROW_MAX_THREADS, row_threads
    from tir_adreno.strategy.profile import get_profile

    for name in ("adreno", "pocl", "nvidia-h200"):
        profile = get_profile(name)
        for length in (1, 3, 17, 64, 197, 4096):
            threads = row_threads(profile, length)
            assert threads & (threads - 1) == 0 and threads <= min(ROW_MAX_THREADS, profile.max_work_group_size)
            assert threads >= min(length, ROW_MAX_THREADS, profile.max_work_group_size)
            assert threads < 2 * length or threads == 1


@pytest.mark.parametrize("profile", ["pocl", "nvidia-h200"])
def test_rows_read_split_parts_and_transposes_in_place(profile):
    """gMLP's spatial gating as exported: a Linear's output split in two along the channels
    (``Split``), the second half layer-normed; a softmax over the transposed output; a reduction of
    a slice of it: each row kernel reads the Linear's output in place (``x_view``), no gather kernel
    before it, on every device; outputs match onnxruntime."""
    c = 12
    rng = np.random.default_rng(5)
    nodes = [node("MatMul", ["x", "w"], ["h"]), node("Split", ["h", "sp"], ["u", "v"], axis=-1),
             node("LayerNormalization", ["v", "g", "b"], ["n"], axis=-1, epsilon=1e-6),
             node("Transpose", ["h"], ["ht"], perm=[0, 2, 1]), node("Softmax", ["ht"], ["s"], axis=-1),
             node("Slice", ["h", "starts", "ends", "axes"], ["hs"]), node("ReduceMax", ["hs"], ["m"], axes=[1], keepdims=1)]
    inits = [f32("w", (c, 2 * c)), f32("g", (c,)), f32("b", (c,)),
             *(numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("sp", [c, c]), ("starts", [3]), ("ends", [17]), ("axes", [2])))]
    model = make(nodes, [tensor("x", [1, 10, c])], [tensor("n", [1, 10, c]), tensor("s", [1, 2 * c, 10]), tensor("m", [1, 1, 14])],
                 inits, opset=17)
    compiled = compile_model(model, profile=profile, progress=lambda _: None)
    inputs = _inputs(rng, x=(1, 10, c))
    for out, ref in zip(compiled.run(inputs, profile=True), reference_outputs(model, inputs)):
        assert relative_error(out, ref) <= PATTERN_RTOL, relative_error(out, ref)
    ops = [r["op"] for r in compiled.profile()]
    assert not [op for op in ops if op.startswith(("gather", "copy", "slice", "split"))], ops
    assert {"layer_norm_rows", "softmax_rows", "max_rows"} <= {op.rstrip("0123456789") for op in ops}, ops
