"""resize2d, GELU, Gemm/MatMul, layer norm and channel split/shuffle (ConvNeXt- and ShuffleNet-style
blocks) as TVM's ONNX importer writes them, on our kernels: one onnx.helper graph per pattern
against onnxruntime (PATTERN_RTOL) with the plan asserted, plus the kernels against float64 references."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import helper, numpy_helper

from helpers.numeric import rand, run_kernel
from helpers.onnx_graphs import PATTERN_RTOL, between_edges
from helpers.onnx_graphs import check_pattern as check
from helpers.onnx_graphs import conv_node as _conv
from helpers.onnx_graphs import pattern_graph as _graph
from helpers.onnx_graphs import scalars as _scalars
from helpers.onnx_graphs import wide_profile
from helpers.onnx_graphs import STANDALONE_PRODUCER, standalone_graph

from primfuncs import elementwise, resize, shuffle
from tir_adreno.strategy.packing import pack_nchw4c, unpack_nchw4c
from tir_adreno.reference import gelu, resize2d_nchw
from tir_adreno.strategy.norm import layer_norm_schedule
from tir_adreno.strategy.profile import get_profile

# -- GELU ------------------------------------------------------------------------------------


def _gelu_nodes(x, y):
    """GELU as torch.onnx.export (opset 17) writes it: x * (erf(x / sqrt 2) + 1) * 0.5."""
    return [
        helper.make_node("Div", [x, "sqrt2"], ["g_d"]),
        helper.make_node("Erf", ["g_d"], ["g_e"]),
        helper.make_node("Add", ["g_e", "one"], ["g_a"]),
        helper.make_node("Mul", [x, "g_a"], ["g_m"]),
        helper.make_node("Mul", ["g_m", "half"], [y]),
    ]


GELU_SCALARS = dict(sqrt2=np.sqrt(2.0), one=1.0, half=0.5)


def test_gelu_fuses_into_conv(monkeypatch):
    from tir_adreno.passes import epilogue_chain as relax_pass  # where a tail's Epilogue is made

    seen = []
    real = relax_pass.Epilogue
    monkeypatch.setattr(relax_pass, "Epilogue", lambda **kw: seen.append(kw["activation"]) or real(**kw))
    rng, inits = np.random.default_rng(0), {}
    _scalars(inits, **GELU_SCALARS)
    assert check(_graph([_conv(rng, inits, "x", "c", 8, 3), *_gelu_nodes("c", "y")], inits)) == ["conv2d_nchw4c"]
    assert seen == ["gelu"]


def test_gelu_standalone_kernel():
    inits = {}
    _scalars(inits, **GELU_SCALARS)
    assert check(standalone_graph(_gelu_nodes("c", "y"), inits), channels=6) == [STANDALONE_PRODUCER, "gelu"]


blocked_shapes = st.tuples(st.integers(1, 2), st.integers(1, 3), st.integers(1, 6), st.integers(1, 7), st.integers(0, 2**32 - 1))
scopes = st.sampled_from(["global.texture", "global"])


@given(blocked_shapes, scopes, st.sampled_from(["gelu", "gelu_tanh"]))
def test_gelu_kernel(device, d, scope, name):
    *shape, seed = d
    x = rand(np.random.default_rng(seed), (*shape, 4)) * 4
    x.reshape(-1)[:3] = [np.nan, np.inf, -np.inf]  # as the NumPy formula: NaN, inf, NaN (-inf * 0)
    y = run_kernel(device, elementwise.activation((*shape, 4), name, scope=scope), x)
    np.testing.assert_allclose(y, gelu(x, "tanh" if name == "gelu_tanh" else "none"), rtol=1e-5, atol=1e-6)


# -- resize2d --------------------------------------------------------------------------------

# A non-integer ratio comes with ``sizes`` (as F.interpolate(size=...) exports it): with
# ``scales``, ONNX maps coordinates by the scale, TVM's importer by in/out sizes.
RESIZES = {
    # torch nn.Upsample(scale_factor=2, mode="nearest") at opset 17
    "nearest_upsample": (dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"), [1, 1, 2, 2], "resize2d_nearest"),
    "nearest_half_pixel": (dict(mode="nearest", coordinate_transformation_mode="half_pixel", nearest_mode="round_prefer_floor"), [1, 6, 10, 5], "resize2d_nearest"),
    # F.interpolate(mode="bilinear", align_corners=False / True)
    "bilinear": (dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel"), [1, 6, 14, 11], "resize2d_linear"),
    "bilinear_align_corners": (dict(mode="linear", coordinate_transformation_mode="align_corners"), [1, 6, 4, 13], "resize2d_linear"),
}


@pytest.mark.parametrize("name", sorted(RESIZES))
def test_resize_after_conv(name):
    attrs, target, kernel = RESIZES[name]
    rng = np.random.default_rng(1)
    sizes = len(target) == 4 and target[1] == 6  # else scales
    inits = {}
    inputs = ["c", "", "", "target"] if sizes else ["c", "", "target"]
    nodes = [_conv(rng, inits, "x", "c", 6, 3), helper.make_node("Resize", inputs, ["y"], **attrs)]
    model = _graph(nodes, inits)
    model.graph.initializer.append(numpy_helper.from_array(np.asarray(target, np.int64 if sizes else np.float32), "target"))
    assert check(model) == ["conv2d_nchw4c", kernel]


def test_resize_cubic_stays_upstream():
    """An attribute we do not cover (cubic) goes upstream, with the right numbers."""
    from tir_adreno import compile_model
    from tir_adreno.reference import reference_outputs, relative_error

    inits = {"scales": np.asarray([1, 1, 2, 2])}
    model = _graph([helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="cubic")], inits)
    compiled = compile_model(model, progress=lambda _: None)
    x = rand(np.random.default_rng(2), (1, 3, 7, 7))
    (out,) = compiled.run({"x": x})
    assert relative_error(out, reference_outputs(model, {"x": x})[0]) <= PATTERN_RTOL
    assert not any(p["op"].startswith("resize2d_") for p in compiled.profile())


@given(
    st.tuples(st.integers(1, 2), st.integers(1, 6), st.integers(1, 6), st.integers(1, 9), st.integers(1, 9), st.integers(1, 9), st.integers(0, 2**32 - 1)),
    st.sampled_from(["nearest", "linear"]),
    st.sampled_from(resize.COORDINATE_MODES),
    st.sampled_from(resize.ROUNDING_METHODS),
    scopes,
)
def test_resize_kernel(device, d, method, mode, rounding, scope):
    n, c, h, w, oh, ow, seed = d
    rng = np.random.default_rng(seed)
    x = rand(rng, (n, c, h, w))
    func = resize.resize2d((n, -(-c // 4), h, w, 4), (oh, ow), method, mode, rounding, scope=scope)
    y = unpack_nchw4c(run_kernel(device, func, pack_nchw4c(x)), c)
    ref = resize2d_nchw(x, (oh, ow), method, mode, rounding)
    if method == "nearest":
        np.testing.assert_array_equal(y, ref.astype(np.float32))  # an exact copy of the right pixel
    else:
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_resize_bad_arguments():
    with pytest.raises(ValueError, match="method"):
        resize.resize2d((1, 1, 2, 2, 4), (4, 4), "cubic")
    with pytest.raises(ValueError, match="coordinate_transformation_mode"):
        resize.resize2d((1, 1, 2, 2, 4), (4, 4), "linear", "tf_crop_and_resize")
    with pytest.raises(ValueError, match="rounding_method"):
        resize.resize2d((1, 1, 2, 2, 4), (4, 4), "nearest", "asymmetric", "round")
    with pytest.raises(ValueError, match="out_h"):
        resize.resize2d((1, 1, 2, 2, 4), (0, 4))
    with pytest.raises(ValueError, match="NCHW4c"):
        resize.resize2d((1, 4, 2, 2), (4, 4))


# -- Linear / Gemm / MatMul --------------------------------------------------------------------


def check_classifier(model, channels=3, size=7):
    """:func:`check` for a model with an ``[N, M]`` output: its last kernel is the layout
    transform writing ``[N, M]`` itself (no upstream reshape of ``[N, M, 1, 1]`` after it)."""
    from tir_adreno import compile_model
    from tir_adreno.reference import reference_outputs, relative_error

    compiled = compile_model(model, progress=lambda _: None)
    x = rand(np.random.default_rng(12), (1, channels, size, size)) * 3
    (out,) = compiled.run({"x": x})
    assert relative_error(out, reference_outputs(model, {"x": x})[0]) <= PATTERN_RTOL
    ops = [(p["op"], p["ours"]) for p in compiled.profile()]
    assert ops[-1][0].startswith("nchw4c_to_nchw") and all(ours for _, ours in ops), ops
    assert compiled.plan.tensors[compiled.plan.outputs[0]].shape == tuple(out.shape), "the transform writes [N, M]"
    return between_edges([op for op, _ in ops])


def test_classifier_gemm_runs_as_convs(monkeypatch):
    """pool -> Flatten -> Gemm -> Relu -> Gemm (MobileNet, ResNet, ...): 1x1 convs, relu fused."""
    from tir_adreno.passes import epilogue_chain as relax_pass  # where a tail's Epilogue is made

    seen = []
    real = relax_pass.Epilogue
    monkeypatch.setattr(relax_pass, "Epilogue", lambda **kw: seen.append((kw["bias"], kw["activation"])) or real(**kw))
    rng = np.random.default_rng(3)
    inits = {"w1": rng.standard_normal((10, 8)), "b1": rng.standard_normal(10), "w2": rng.standard_normal((5, 10)), "b2": rng.standard_normal(5)}
    nodes = [
        _conv(rng, inits, "x", "c", 8, 3),
        helper.make_node("GlobalAveragePool", ["c"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "w1", "b1"], ["g"], transB=1),
        helper.make_node("Relu", ["g"], ["r"]),
        helper.make_node("Gemm", ["r", "w2", "b2"], ["y"], transB=1),
    ]
    assert check_classifier(_graph(nodes, inits)) == ["conv2d_nchw4c", "mean_hw", "conv2d_nchw4c1", "conv2d_nchw4c2"]
    assert seen[1:] == [(True, "relu"), (True, None)]


@pytest.mark.parametrize("precision", ["float32", "float16_acc32"])
def test_logits_are_a_view_of_the_last_conv(precision):
    """A classifier whose logits' channels are a multiple of 4: the last conv writes a buffer that
    holds ``[N, M]`` element for element, so the output is a view of it and no layout kernel runs
    after it (issue 21's launches); the output stays float32 under half storage."""
    from tir_adreno import compile_model
    from tir_adreno.reference import reference_outputs, relative_error

    rng = np.random.default_rng(4)
    inits = {"w1": rng.standard_normal((12, 8)), "b1": rng.standard_normal(12)}
    nodes = [
        _conv(rng, inits, "x", "c", 8, 3),
        helper.make_node("GlobalAveragePool", ["c"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "w1", "b1"], ["y"], transB=1),
    ]
    model = _graph(nodes, inits)
    compiled = compile_model(model, precision=precision, progress=lambda _: None)
    x = rand(np.random.default_rng(12), (1, 3, 7, 7)) * 3
    (out,) = compiled.run({"x": x})
    assert out.shape == (1, 12) and out.dtype == np.float32
    assert relative_error(out, reference_outputs(model, {"x": x})[0]) <= (PATTERN_RTOL if precision == "float32" else 1e-3)
    ops = [p["op"].rstrip("0123456789") for p in compiled.profile()]
    assert ops == ["conv2d_nchw4c", "mean_hw", "conv2d_nchw4c"], ops  # the first conv reads the input itself
    output = compiled.plan.tensors[compiled.plan.outputs[0]]
    assert (output.shape, output.scope, output.storage) == ((1, 12), "global", None), output


def test_global_mean_then_gemm():
    """ShuffleNet's classifier: x.mean([2, 3]) (keepdims 0) -> Gemm: reduce kernel, 1x1 conv."""
    rng = np.random.default_rng(8)
    inits = {"w1": rng.standard_normal((10, 8)), "b1": rng.standard_normal(10), "axes": np.asarray([2, 3])}
    nodes = [
        _conv(rng, inits, "x", "c", 8, 3),
        helper.make_node("ReduceMean", ["c"], ["p"], axes=[2, 3], keepdims=0),
        helper.make_node("Gemm", ["p", "w1", "b1"], ["y"], transB=1),
    ]
    del inits["axes"]
    assert check_classifier(_graph(nodes, inits)) == ["conv2d_nchw4c", "mean_hw", "conv2d_nchw4c1"]


def test_flatten_gemm_runs_as_one_conv():
    """VGG: Flatten of [N, C, H, W] -> Gemm is one HxW conv over the activation."""
    rng = np.random.default_rng(4)
    inits = {"w1": rng.standard_normal((10, 8 * 49)), "b1": rng.standard_normal(10)}
    nodes = [_conv(rng, inits, "x", "c", 8, 3), helper.make_node("Flatten", ["c"], ["f"]), helper.make_node("Gemm", ["f", "w1", "b1"], ["y"], transB=1)]
    assert check_classifier(_graph(nodes, inits)) == ["conv2d_nchw4c", "conv2d_nchw4c1"]


def test_convnext_block_stays_on_textures():
    """ConvNeXt: conv -> permute NHWC -> Linear -> GELU -> Linear -> permute back -> layer
    scale -> residual: the permutes are views, the Linears 1x1 convs (bias, GELU fused)."""
    rng = np.random.default_rng(5)
    inits = {"w1": rng.standard_normal((8, 16)), "b1": rng.standard_normal(16), "w2": rng.standard_normal((16, 8)) / 4, "b2": rng.standard_normal(8), "gamma": rng.standard_normal((8, 1, 1))}
    _scalars(inits, **GELU_SCALARS)
    nodes = [
        _conv(rng, inits, "x", "c", 8, 3),
        helper.make_node("Transpose", ["c"], ["t"], perm=[0, 2, 3, 1]),
        helper.make_node("MatMul", ["t", "w1"], ["m1"]),
        helper.make_node("Add", ["m1", "b1"], ["a1"]),
        *_gelu_nodes("a1", "ge"),
        helper.make_node("MatMul", ["ge", "w2"], ["m2"]),
        helper.make_node("Add", ["m2", "b2"], ["a2"]),
        helper.make_node("Transpose", ["a2"], ["t2"], perm=[0, 3, 1, 2]),
        helper.make_node("Mul", ["t2", "gamma"], ["s"]),
        helper.make_node("Add", ["s", "c"], ["y"]),
    ]
    assert check(_graph(nodes, inits)) == ["conv2d_nchw4c", "conv2d_nchw4c1", "conv2d_nchw4c2", "affine", "add"]


# -- layer norm --------------------------------------------------------------------------------


def _layer_norm_nodes(rng, inits, channels):
    """conv -> ConvNeXt's LayerNorm (permute -> LayerNormalization(axis=-1) -> permute) -> y."""
    inits.update(g=rng.standard_normal(channels), b=rng.standard_normal(channels))
    return [
        _conv(rng, inits, "x", "c", channels, 3),
        helper.make_node("Transpose", ["c"], ["t"], perm=[0, 2, 3, 1]),
        helper.make_node("LayerNormalization", ["t", "g", "b"], ["l"], axis=-1, epsilon=1e-6),
        helper.make_node("Transpose", ["l"], ["y"], perm=[0, 3, 1, 2]),
    ]


def test_layer_norm_over_channels():
    """ConvNeXt's LayerNorm: permute -> LayerNormalization(axis=-1) -> permute, one kernel."""
    rng, inits = np.random.default_rng(6), {}
    assert check(_graph(_layer_norm_nodes(rng, inits, 6), inits)) == ["conv2d_nchw4c", "layer_norm_channels"]


@pytest.mark.parametrize("wide", [False, True], ids=["one-kernel", "wide"])
def test_layer_norm_form_in_graph(wide):
    """66 channels (17 blocks, the last padded) on a 7x7 map: the one kernel here, the wide form
    (a work group per pixel) on a wide profile, the same outputs as onnxruntime either way."""
    rng, inits = np.random.default_rng(9), {}
    names = check(_graph(_layer_norm_nodes(rng, inits, 66), inits), profile=wide_profile() if wide else None)
    assert names == ["conv2d_nchw4c", "layer_norm_channels_wide" if wide else "layer_norm_channels"], names


def test_layer_norm_form_by_profile():
    """The H200's profile (132 compute units) spreads a layer norm of at least 16 channel blocks
    on a map of fewer than 64 pixels per compute unit over a work group per pixel (as many items
    as cover the blocks, at most 64); fewer blocks or a larger map keep the one kernel, and so do
    PoCL and Adreno for any shape; compiled plans (no device) say the same."""
    from tir_adreno.compiler import compile_plan

    h200 = get_profile("nvidia-h200")
    assert layer_norm_schedule(h200, (1, 80, 1, 1, 4)) == {"threads": 64}  # EfficientViT-B0's head (320 blocks: 5 rounds)
    assert layer_norm_schedule(h200, (1, 40, 14, 14, 4)) == {"threads": 64}
    assert layer_norm_schedule(h200, (1, 20, 28, 28, 4)) == {"threads": 32}
    assert layer_norm_schedule(h200, (1, 16, 91, 92, 4)) == {"threads": 16}  # 8372 pixels < 64 x 132
    assert layer_norm_schedule(h200, (1, 16, 92, 92, 4)) is None  # 8464 pixels
    assert layer_norm_schedule(h200, (1, 15, 7, 7, 4)) is None  # 15 blocks
    for name in ("pocl", "adreno"):
        assert layer_norm_schedule(get_profile(name), (1, 80, 1, 1, 4)) is None
    rng, inits = np.random.default_rng(9), {}
    model = _graph(_layer_norm_nodes(rng, inits, 66), inits)
    for name, label in (("nvidia-h200", "layer_norm_channels_wide"), ("pocl", "layer_norm_channels"), ("adreno", "layer_norm_channels")):
        plan, _, _ = compile_plan(model, get_profile(name), progress=lambda _: None)
        assert [c.label for c in plan.calls if c.label.startswith("layer_norm")] == [label], name


# -- ShuffleNet's channel split and shuffle ----------------------------------------------------


def test_channel_split_and_shuffle_stay_on_textures():
    """ShuffleNetV2 unit as torch exports x.chunk(2, dim=1): two Slices of the channels, conv
    one half, concat, shuffle (groups 2)."""
    rng = np.random.default_rng(7)
    inits = {}
    nodes = [
        _conv(rng, inits, "x", "c", 10, 3),
        helper.make_node("Slice", ["c", "zero", "five", "one"], ["s1"]),
        helper.make_node("Slice", ["c", "five", "ten", "one"], ["s2"]),
        _conv(rng, inits, "s2", "b", 5, 5),
        helper.make_node("Concat", ["s1", "b"], ["cat"], axis=1),
        helper.make_node("Reshape", ["cat", "shape5"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3, 4]),
        helper.make_node("Reshape", ["t", "shape4"], ["y"]),
    ]
    model = _graph(nodes, inits)
    for name, v in (("zero", [0]), ("five", [5]), ("ten", [10]), ("one", [1]), ("shape5", [1, 2, 5, 7, 7]), ("shape4", [1, 10, 7, 7])):
        model.graph.initializer.append(numpy_helper.from_array(np.asarray(v, np.int64), name))
    ops = check(model)
    assert sorted(ops) == sorted(["conv2d_nchw4c", "slice_channels", "slice_channels1", "conv2d_nchw4c1", "concat_channels", "channel_shuffle"]), ops


def test_slice_of_every_channel_is_the_tensor_itself():
    """GhostNet's ghost module as timm exports it: ``cat([conv(x), dw(conv(x))])[:, :C]``, the two
    halves filling C, so the Slice keeps every channel: it is no node (``graph.is_identity_slice``),
    no ``slice_channels`` kernel runs; a Slice that drops a channel (C odd: the halves hold C + 1)
    still does."""
    for channels, slices in ((10, 0), (9, 1)):
        rng, inits = np.random.default_rng(channels), {}
        half = (channels + 1) // 2
        nodes = [
            _conv(rng, inits, "x", "p", half, 3),
            _conv(rng, inits, "p", "q", half, half, group=half),
            helper.make_node("Concat", ["p", "q"], ["cat"], axis=1),
            helper.make_node("Slice", ["cat", "zero", "end", "one"], ["s"]),
            _conv(rng, inits, "s", "y", 4, channels),
        ]
        model = _graph(nodes, inits)
        for name, v in (("zero", [0]), ("end", [channels]), ("one", [1])):
            model.graph.initializer.append(numpy_helper.from_array(np.asarray(v, np.int64), name))
        ops = check(model)
        assert sum(op.startswith("slice_channels") for op in ops) == slices, ops
        assert sum(op.startswith("concat_channels") for op in ops) == 1, ops
    # a slice of every channel of the model's input, written as its output: a kernel (an output that
    # is an input would need a copy of its own)
    model = _graph([helper.make_node("Slice", ["x", "zero", "end", "one"], ["y"])], {})
    for name, v in (("zero", [0]), ("end", [3]), ("one", [1])):
        model.graph.initializer.append(numpy_helper.from_array(np.asarray(v, np.int64), name))
    assert check(model) == ["slice_channels"]


@given(blocked_shapes, st.integers(0, 3), st.data(), scopes)
def test_channel_gather_kernels(device, d, pad, data, scope):
    *shape, seed = d
    channels = max(2, 4 * shape[1] - pad)
    x = rand(np.random.default_rng(seed), (shape[0], channels, shape[2], shape[3]))
    begin = data.draw(st.integers(0, channels - 1))
    end = data.draw(st.integers(begin + 1, channels))
    y = run_kernel(device, shuffle.slice_channels((*shape, 4), channels, begin, end, scope=scope), pack_nchw4c(x))
    np.testing.assert_array_equal(unpack_nchw4c(y, end - begin), x[:, begin:end])
    assert np.all(y[:, -1, :, :, (end - begin - 1) % 4 + 1 :] == 0)
    groups = data.draw(st.sampled_from([g for g in (1, 2, 3, 4) if channels % g == 0]))
    y = run_kernel(device, shuffle.channel_shuffle((*shape, 4), channels, groups, scope=scope), pack_nchw4c(x))
    ref = x.reshape(shape[0], groups, channels // groups, *x.shape[2:]).transpose(0, 2, 1, 3, 4).reshape(x.shape)
    np.testing.assert_array_equal(unpack_nchw4c(y, channels), ref)


def test_concat_of_one_input_is_a_view():
    """DenseNet's torch.cat([x], 1) before a block's first layer: no kernel."""
    rng = np.random.default_rng(9)
    inits = {}
    nodes = [_conv(rng, inits, "x", "c", 6, 3), helper.make_node("Concat", ["c"], ["k"], axis=1), _conv(rng, inits, "k", "y", 5, 6)]
    assert check(_graph(nodes, inits)) == ["conv2d_nchw4c", "conv2d_nchw4c1"]
