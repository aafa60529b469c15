"""Every op attribute a rule reads, set to a value other than its default in a small ONNX graph
(onnx.helper) and checked against onnxruntime, with our kernel running where the rule takes the
op; and no rule reads an attribute name its op's attributes type does not have.

A rule that misreads an attribute (a misspelled name read with a default, the wrong side of
``pads``, ``count_include_pad`` taken as 0) passes every test whose graphs use the defaults: the
exporters' common values. Each case here sets one or more attributes to what the defaults are
not, so a misread shows as a wrong number. ``ATTRIBUTES_EXERCISED`` names, for every attribute
name ``tir_adreno/`` reads on ``.attrs``, the cases that set it (or why no ONNX graph can); a
new read fails :func:`test_every_attribute_read_is_exercised` until it is listed.
"""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from helpers.attributes import attribute_names_read, attrs_fields, unknown_attribute_reads
from helpers.onnx_graphs import PATTERN_RTOL
from tir_adreno import compile_model
from tir_adreno.reference import reference_outputs, relative_error

node = helper.make_node


def _graph(nodes, inits, shape, opset):
    """A one-input ("x" of ``shape``), one-output ("y") model; the output's shape inferred (a
    shape-less output is valid ONNX but makes TVM's importer warn about onnx.checker's complaint)."""
    g = helper.make_graph(nodes, "attributes", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [_initializer(k, v) for k, v in inits.items()])
    model = onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]))
    if not model.graph.output[0].type.tensor_type.HasField("shape"):  # an op onnx cannot infer yet (GroupNormalization-21)
        model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT, shape))  # its output is x's shape
    onnx.checker.check_model(model)
    return model


def _initializer(name, value):
    value = np.asarray(value)
    return numpy_helper.from_array(value.astype(np.int64 if value.dtype.kind in "iu" else np.float32), name)


def _weights(rng, inits, name, shape):
    inits[name] = rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))
    return name


# -- the cases: (nodes, initializers, input shape, opset, kernel of ours that must run) ----------
#
# Inputs have a channel count that is not a multiple of 4 and odd or even sizes. Pads are
# per side (ONNX: top, left, bottom, right) and differ from side to side.

def _pool(op, **attrs):
    return [node(op, ["x"], ["y"], **attrs)], {}


POOL_CASES = {
    "avg_count_include_pad": (*_pool("AveragePool", kernel_shape=[3, 3], pads=[1, 0, 0, 1], count_include_pad=1), (1, 5, 9, 8), 19, "avg_pool2d"),
    "avg_ceil_mode": (*_pool("AveragePool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1), (1, 5, 8, 8), 19, "avg_pool2d"),
    # a ceil_mode window overhangs the padding: count_include_pad counts the padding, not the overhang
    "avg_ceil_mode_count_include_pad": (*_pool("AveragePool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1,
                                               count_include_pad=1), (1, 5, 8, 8), 19, "avg_pool2d"),
    "avg_pads_per_side": (*_pool("AveragePool", kernel_shape=[3, 2], strides=[2, 1], pads=[0, 1, 1, 0]), (1, 5, 9, 7), 19, "avg_pool2d"),
    # ONNX allows pads up to the window size - 1; our kernels take half the window span: upstream's
    "avg_pads_past_half_window": (*_pool("AveragePool", kernel_shape=[3, 2], strides=[2, 1], pads=[0, 1, 2, 0]), (1, 5, 9, 7), 19, None),
    "avg_dilations": (*_pool("AveragePool", kernel_shape=[2, 3], dilations=[2, 1], pads=[1, 1, 0, 1]), (1, 5, 9, 9), 19, "avg_pool2d"),
    "avg_auto_pad_same_upper": (*_pool("AveragePool", kernel_shape=[2, 2], strides=[2, 2], auto_pad="SAME_UPPER"), (1, 5, 7, 7), 19, "avg_pool2d"),
    "avg_auto_pad_same_lower": (*_pool("AveragePool", kernel_shape=[2, 2], strides=[2, 2], auto_pad="SAME_LOWER", count_include_pad=1),
                                (1, 5, 7, 7), 19, "avg_pool2d"),
    "avg_auto_pad_valid": (*_pool("AveragePool", kernel_shape=[3, 3], strides=[2, 2], auto_pad="VALID"), (1, 5, 8, 9), 19, "avg_pool2d"),
    "max_pads_per_side": (*_pool("MaxPool", kernel_shape=[3, 3], strides=[2, 2], pads=[0, 1, 1, 0]), (1, 5, 9, 8), 12, "max_pool2d"),
    "max_pads_past_half_window": (*_pool("MaxPool", kernel_shape=[3, 3], strides=[2, 2], pads=[0, 2, 1, 0]), (1, 5, 9, 8), 12, None),
    "max_ceil_mode": (*_pool("MaxPool", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1), (1, 5, 8, 8), 12, "max_pool2d"),
    "max_dilations": (*_pool("MaxPool", kernel_shape=[3, 2], dilations=[1, 2], pads=[1, 1, 1, 0]), (1, 5, 9, 9), 12, "max_pool2d"),
    "max_auto_pad_same_upper": (*_pool("MaxPool", kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"), (1, 5, 8, 8), 12, "max_pool2d"),
    "max_auto_pad_same_lower": (*_pool("MaxPool", kernel_shape=[2, 2], strides=[2, 2], auto_pad="SAME_LOWER"), (1, 5, 7, 7), 12, "max_pool2d"),
    # TVM's importer pads SAME_LOWER negatively (docs/upstream defect 18): spelled as pads before it imports
    "max_auto_pad_same_lower_strides": (*_pool("MaxPool", kernel_shape=[3, 2], strides=[3, 2], auto_pad="SAME_LOWER"), (1, 5, 8, 9), 12,
                                        "max_pool2d"),
    "max_auto_pad_same_lower_even": (*_pool("MaxPool", kernel_shape=[3, 3], strides=[1, 1], auto_pad="SAME_LOWER"), (1, 5, 6, 6), 12, "max_pool2d"),
}


def _conv(rng, cout, cin, k, bias=True, **attrs):
    inits = {}
    inputs = ["x", _weights(rng, inits, "w", (cout, cin // attrs.get("group", 1), *k))]
    if bias:
        inits["b"] = rng.standard_normal(cout) * 0.5
        inputs.append("b")
    return [node("Conv", inputs, ["y"], kernel_shape=list(k), **attrs)], inits


def _conv_cases(rng):
    return {
        "conv_pads_per_side": (*_conv(rng, 6, 5, (3, 3), pads=[0, 2, 1, 1]), (1, 5, 9, 8), 13, "conv2d"),
        "conv_strides_dilations": (*_conv(rng, 6, 5, (3, 2), strides=[2, 1], dilations=[1, 2], pads=[1, 1, 1, 1]), (1, 5, 9, 9), 13, "conv2d"),
        "conv_group": (*_conv(rng, 6, 6, (3, 3), group=2, pads=[1, 1, 1, 1]), (1, 6, 8, 8), 13, "conv2d"),
        "conv_depthwise": (*_conv(rng, 5, 5, (3, 3), group=5, strides=[2, 2], pads=[1, 0, 1, 2]), (1, 5, 9, 9), 13, "conv2d"),
        "conv_auto_pad_same_upper": (*_conv(rng, 6, 5, (4, 4), auto_pad="SAME_UPPER", strides=[2, 2]), (1, 5, 9, 9), 13, "conv2d"),
        "conv_auto_pad_same_lower": (*_conv(rng, 6, 5, (4, 4), auto_pad="SAME_LOWER"), (1, 5, 8, 8), 13, "conv2d"),
        "conv_auto_pad_valid": (*_conv(rng, 6, 5, (3, 3), auto_pad="VALID", strides=[2, 1]), (1, 5, 9, 8), 13, "conv2d"),
    }


def _gemm(rng, trans_b, alpha=1.0, beta=1.0, bias_shape=(7,)):
    """Flatten -> Gemm of a [1, 5, 2, 2] map (K = 20) to 7 outputs."""
    inits = {}
    _weights(rng, inits, "w", (7, 20) if trans_b else (20, 7))
    inits["w"] = inits["w"] if trans_b else inits["w"] * np.sqrt(20 / 7)
    inits["c"] = rng.standard_normal(bias_shape)
    nodes = [node("Flatten", ["x"], ["f"]), node("Gemm", ["f", "w", "c"], ["y"], transB=trans_b, alpha=alpha, beta=beta)]
    return nodes, inits


def _gemm_cases(rng):
    return {
        "gemm_trans_b": (*_gemm(rng, 1), (1, 5, 2, 2), 13, "conv2d"),
        "gemm_no_trans_b": (*_gemm(rng, 0), (1, 5, 2, 2), 13, "conv2d"),
        # with alpha the [N, K] is computed plain (scaled), so our GEMM reads it: one launch, no layout kernel
        "gemm_alpha_beta": (*_gemm(rng, 1, alpha=0.375, beta=-1.5), (1, 5, 2, 2), 13, "gemm"),
        "gemm_alpha_beta_broadcast_c": (*_gemm(rng, 0, alpha=2.5, beta=0.25, bias_shape=(1, 7)), (1, 5, 2, 2), 13, "gemm"),
    }


def _gemm_trans_a(rng):
    """transA: the activation [K, N] is transposed first (no exporter writes it for a classifier;
    whatever runs it must be right)."""
    inits = {"shape": np.array([20, 1]), "w": rng.standard_normal((7, 20)) / np.sqrt(20), "c": rng.standard_normal(7)}
    nodes = [node("Reshape", ["x", "shape"], ["f"]), node("Gemm", ["f", "w", "c"], ["y"], transA=1, transB=1, alpha=0.5)]
    return nodes, inits


def _norm_cases(rng):
    c = 5
    ln = {"g": rng.uniform(0.5, 1.5, c), "b": rng.standard_normal(c)}
    bn = {"s": rng.uniform(0.5, 1.5, c), "bb": rng.standard_normal(c), "m": rng.standard_normal(c) * 0.1,
          "v": np.exp(rng.uniform(np.log(1e-3), 0.0, c))}
    gn = {"gs": rng.uniform(0.5, 1.5, 8), "gb": rng.standard_normal(8)}
    gn6 = {"gs": rng.uniform(0.5, 1.5, 6), "gb": rng.standard_normal(6)}
    return {
        # ConvNeXt's layer norm over the channels of NHWC, epsilon far from the default 1e-5
        "layer_norm_axis_last_epsilon": ([node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
                                          node("LayerNormalization", ["t", "g", "b"], ["l"], axis=-1, epsilon=0.25),
                                          node("Transpose", ["l"], ["y"], perm=[0, 3, 1, 2])], ln, (1, c, 6, 7), 17, "layer_norm"),
        # axis 1 of NCHW normalizes over C, H and W together; axis -1 of NCHW over W alone: neither is
        # the channel layer norm, whatever runs them
        "layer_norm_axis_1_of_nchw": ([node("LayerNormalization", ["x", "gc", "bc"], ["y"], axis=1, epsilon=1e-3)],
                                      {"gc": rng.uniform(0.5, 1.5, (c, 6, 7)), "bc": rng.standard_normal((c, 6, 7))}, (1, c, 6, 7), 17, None),
        "layer_norm_axis_last_of_nchw": ([node("LayerNormalization", ["x", "gw", "bw"], ["y"], axis=-1, epsilon=1e-3)],
                                         {"gw": rng.uniform(0.5, 1.5, 7), "bw": rng.standard_normal(7)}, (1, c, 6, 7), 17, None),
        "batch_norm_epsilon": ([node("BatchNormalization", ["x", "s", "bb", "m", "v"], ["y"], epsilon=0.02)], bn, (1, c, 6, 7), 15, "affine"),
        "group_norm_groups_epsilon": ([node("GroupNormalization", ["x", "gs", "gb"], ["y"], num_groups=2, epsilon=0.3)], gn, (1, 8, 5, 7),
                                      21, "group_norm"),
        # groups of 2 channels: not whole 4-channel blocks, upstream's
        "group_norm_groups_of_2": ([node("GroupNormalization", ["x", "gs", "gb"], ["y"], num_groups=3, epsilon=0.3)], gn6, (1, 6, 5, 7),
                                   21, None),
    }


def _softmax(axis, opset):
    return [node("Softmax", ["x"], ["y"], axis=axis)], {}


def _reduce(op, axes, keepdims, opset=13):
    if op == "ReduceSum" or opset >= 18:  # axes became an input (ReduceSum at 13, the others at 18)
        return [node(op, ["x", "axes"], ["y"], keepdims=keepdims)], {"axes": np.array(axes)}
    return [node(op, ["x"], ["y"], axes=axes, keepdims=keepdims)], {}


def _resize(mode, coordinate_mode, nearest_mode="round_prefer_floor", scales=(1, 1, 1.5, 2.5)):
    """Resize of a [1, 5, 6, 4] map by ``scales``: the default's output sizes are exact (9, 10), so the
    scale ONNX divides by equals in/out, the ratio Relax's resize2d keeps."""
    attrs = dict(mode=mode, coordinate_transformation_mode=coordinate_mode)
    if mode == "nearest":
        attrs["nearest_mode"] = nearest_mode
    return [node("Resize", ["x", "", "scales"], ["y"], **attrs)], {"scales": np.array(scales, np.float32)}


OTHER_CASES = {
    "softmax_axis_last": (*_softmax(-1, 13), (1, 5, 6, 7), 13, "softmax"),
    "softmax_axis_1": (*_softmax(1, 13), (1, 5, 6, 7), 13, "softmax"),
    # before opset 13, axis=1 means the softmax of the flattened C*H*W: not a channel softmax
    "softmax_axis_1_opset_11": (*_softmax(1, 11), (1, 5, 6, 7), 11, None),
    "softmax_axis_2": (*_softmax(2, 13), (1, 5, 6, 7), 13, None),
    "reduce_mean_hw_no_keepdims": (*_reduce("ReduceMean", [2, 3], 0), (1, 5, 6, 7), 13, "mean_rows"),  # on the model's plain input: the rows rule
    "reduce_sum_channels_keepdims": (*_reduce("ReduceSum", [1], 1), (1, 5, 6, 7), 13, "sum_rows"),
    "reduce_max_w_keepdims": (*_reduce("ReduceMax", [-1], 1), (1, 5, 6, 7), 13, "max_rows"),
    "reduce_min_h_keepdims": (*_reduce("ReduceMin", [2], 1, opset=18), (1, 5, 6, 7), 18, "min_rows"),
    "concat_axis_negative": ([node("Relu", ["x"], ["r"]), node("Sigmoid", ["x"], ["s"]), node("Concat", ["r", "s", "x"], ["y"], axis=-3)],
                             # plain inputs, the output its reader: the gather on plain tensors (passes.channel_groups)
                             {}, (1, 5, 6, 7), 13, "gather"),
    "split_uneven_axis_1": ([node("Split", ["x", "sizes"], ["a", "b"], axis=1), node("Relu", ["a"], ["ra"]), node("Sigmoid", ["b"], ["sb"]),
                             node("Concat", ["sb", "ra"], ["y"], axis=1)], {"sizes": np.array([2, 3])}, (1, 5, 6, 7), 13, "concat"),
    "resize_nearest_asymmetric_floor": (*_resize("nearest", "asymmetric", "floor"), (1, 5, 6, 4), 13, "resize2d"),
    "resize_nearest_half_pixel_ceil": (*_resize("nearest", "half_pixel", "ceil"), (1, 5, 6, 4), 13, "resize2d"),
    "resize_nearest_align_corners_prefer_ceil": (*_resize("nearest", "align_corners", "round_prefer_ceil"), (1, 5, 6, 4), 13, "resize2d"),
    "resize_linear_align_corners": (*_resize("linear", "align_corners"), (1, 5, 6, 4), 13, "resize2d"),
    "resize_linear_asymmetric": (*_resize("linear", "asymmetric"), (1, 5, 6, 4), 13, "resize2d"),
    "resize_linear_pytorch_half_pixel": (*_resize("linear", "pytorch_half_pixel", scales=(1, 1, 2, 1.5)), (1, 5, 6, 4), 13, "resize2d"),
    "hardsigmoid_alpha_beta": ([node("HardSigmoid", ["x"], ["y"], alpha=0.3, beta=0.4)], {}, (1, 5, 6, 7), 13, None),
    "leaky_relu_alpha": ([node("LeakyRelu", ["x"], ["y"], alpha=0.3)], {}, (1, 5, 6, 7), 13, None),
    "tile_repeats": ([node("Tile", ["x", "repeats"], ["y"])], {"repeats": np.array([1, 2, 1, 3], np.int64)}, (1, 5, 6, 7), 13, "gather"),
    "pad_constant_value_per_side": ([node("Pad", ["x", "pads", "value"], ["y"], mode="constant")],
                                    {"pads": np.array([0, 1, 2, 0, 0, 0, 1, 3], np.int64), "value": np.float32(0.5)}, (1, 5, 6, 7), 13, "gather"),
    "clip_bounds": ([node("Clip", ["x", "lo", "hi"], ["y"])], {"lo": np.float32(-0.75), "hi": np.float32(1.25)}, (1, 5, 6, 7), 13,
                    "elementwise_plain"),  # on the plain model input: runs plain (the layout planner)
}


def _all_cases():
    rng = np.random.default_rng(38)
    return {**POOL_CASES, **_conv_cases(rng), **_gemm_cases(rng), "gemm_trans_a": (*_gemm_trans_a(rng), (1, 5, 2, 2), 13, None),
            **_norm_cases(rng), **OTHER_CASES}


CASES = _all_cases()

#: Every attribute name ``tir_adreno/`` reads on ``.attrs``: the cases above that set it to a
#: non-default value, or why an ONNX graph cannot (the importer always writes one value).
ATTRIBUTES_EXERCISED = {
    "count_include_pad": ["avg_count_include_pad", "avg_ceil_mode_count_include_pad", "avg_auto_pad_same_lower"],
    "ceil_mode": ["avg_ceil_mode", "avg_ceil_mode_count_include_pad", "max_ceil_mode"],
    "padding": ["avg_pads_per_side", "max_pads_per_side", "conv_pads_per_side", "conv_depthwise", "avg_auto_pad_same_upper",
                "avg_auto_pad_same_lower", "max_auto_pad_same_upper", "max_auto_pad_same_lower", "conv_auto_pad_same_upper",
                "conv_auto_pad_same_lower"],
    "pool_size": ["avg_pads_per_side", "avg_dilations", "max_dilations"],
    "strides": ["avg_pads_per_side", "max_pads_per_side", "conv_strides_dilations", "conv_depthwise", "conv_auto_pad_valid"],
    "dilation": ["avg_dilations", "max_dilations", "conv_strides_dilations"],
    "groups": ["conv_group", "conv_depthwise"],
    "axis": ["softmax_axis_last", "softmax_axis_1", "softmax_axis_2", "softmax_axis_1_opset_11", "concat_axis_negative",
             "split_uneven_axis_1", "reduce_max_w_keepdims"],
    "axes": ["reduce_mean_hw_no_keepdims", "reduce_sum_channels_keepdims", "reduce_min_h_keepdims", "layer_norm_axis_last_epsilon",
             "layer_norm_axis_1_of_nchw", "layer_norm_axis_last_of_nchw"],
    "keepdims": ["reduce_mean_hw_no_keepdims", "reduce_sum_channels_keepdims"],
    "epsilon": ["layer_norm_axis_last_epsilon", "batch_norm_epsilon", "group_norm_groups_epsilon"],
    "num_groups": ["group_norm_groups_epsilon", "group_norm_groups_of_2"],
    "method": ["resize_nearest_asymmetric_floor", "resize_linear_align_corners"],
    "alpha": ["leaky_relu_alpha", "hardsigmoid_alpha_beta"],
    "repeats": ["tile_repeats"],
    "pad_width": ["pad_constant_value_per_side"],
    "pad_mode": ["pad_constant_value_per_side"],
    "pad_value": ["pad_constant_value_per_side"],
    "coordinate_transformation_mode": ["resize_nearest_asymmetric_floor", "resize_nearest_half_pixel_ceil", "resize_linear_align_corners",
                                       "resize_linear_asymmetric", "resize_linear_pytorch_half_pixel"],
    "rounding_method": ["resize_nearest_asymmetric_floor", "resize_nearest_half_pixel_ceil", "resize_nearest_align_corners_prefer_ceil"],
    # the importer writes one value whatever the ONNX graph says: nothing to vary from ONNX
    "scale": "BatchNormalization/LayerNormalization/GroupNormalization always import with scale=True (their scale is an input)",
    "center": "BatchNormalization/LayerNormalization/GroupNormalization always import with center=True (their bias is an input)",
    "training": "ONNX inference graphs import batch norm with training=False",
    "channel_axis": "ONNX GroupNormalization is over channel axis 1 of NCHW",
    "data_layout": "ONNX Conv is NCHW (the rules' own NHWC convs are built in the pass, not imported)",
    "kernel_layout": "ONNX Conv weights are OIHW",
    "out_layout": "ONNX Conv and pooling import with out_layout NCHW",
    "layout": "ONNX pooling and Resize are NCHW",
    "dtype": "the attention rule's astype to float32, written by exporters of float16 attention (tests/passes/test_attention.py)",
    "launch_params": "a lowered kernel call's launch parameters (codegen, not an op attribute)",
    "get": "a function's DictAttrs (codegen and the compiler), not an op attribute",
    "items": "a function's DictAttrs (the rewriter), not an op attribute",
}


#: Cases TVM's ONNX importer gets wrong (upstream's build gives the same wrong numbers): strict, so
#: they turn red the day upstream fixes them.
@pytest.mark.parametrize("case", CASES)
def test_attribute_matches_onnxruntime(case):
    nodes, inits, shape, opset, kernel = CASES[case]
    model = _graph(nodes, inits, list(shape), opset)
    pytest.importorskip("tvm")
    with unknown_attribute_reads() as misses:
        compiled = compile_model(model, progress=lambda _: None)
    x = (np.random.default_rng(sum(map(ord, case))).standard_normal(shape) * 2).astype("float32")
    (out,) = compiled.run({"x": x})
    (ref,) = reference_outputs(model, {"x": x})
    assert out.shape == ref.shape
    assert relative_error(out, ref) <= PATTERN_RTOL, (case, relative_error(out, ref))
    ops = [(p["op"], p["ours"]) for p in compiled.profile()]
    if kernel is not None:  # the rule took the op: our kernel ran, not upstream's
        assert any(kernel in op and ours for op, ours in ops), f"{case}: no kernel of ours named *{kernel}*: {ops}"
    assert not misses, f"attribute names the op does not have were read: {misses}"


@pytest.mark.parametrize("scales, mode", [((1, 1, 1.75, 2.6), "asymmetric"), ((1, 1, 1.5, 1.3), "half_pixel")])
def test_resize_with_inexact_scales_is_refused_in_one_line(scales, mode):
    """Resize whose scales give no whole output size (6 x 1.75, 4 x 2.6) in a mode that divides by
    the scale: TVM's importer would sample with in/out instead of 1/scale (docs/upstream defect 19),
    so it is refused before import, naming the node, not run into wrong numbers."""
    from tir_adreno.frontend.importer_defects import ImporterDefectError

    nodes, inits = _resize("nearest", mode, "floor", scales=scales)
    with pytest.raises(ImporterDefectError, match=r"^Resize node 'y': scales \[1\.0, 1\.0, 1\.\d+, .*defect 19") as err:
        compile_model(_graph(nodes, inits, [1, 5, 6, 4], 13), progress=lambda _: None)
    assert "\n" not in str(err.value)


def test_every_attribute_read_is_a_field_of_some_attrs_type():
    fields = attrs_fields()
    unknown = {name: where for name, where in attribute_names_read().items() if name not in fields}
    assert not unknown, f"attribute names no TVM attributes type has: {unknown}"


def test_every_attribute_read_is_exercised():
    read = attribute_names_read()
    missing = {name: where for name, where in read.items() if name not in ATTRIBUTES_EXERCISED}
    assert not missing, f"attributes read by tir_adreno with no case here setting them (add one to ATTRIBUTES_EXERCISED): {missing}"
    for name, cases in ATTRIBUTES_EXERCISED.items():
        assert name in read, f"{name} is no longer read: drop it from ATTRIBUTES_EXERCISED"
        assert isinstance(cases, str) or set(cases) <= set(CASES), (name, set(cases) - set(CASES))


def test_misspelled_attribute_read_is_caught():
    """The dynamic check sees a read with a default of a name Pool2DAttrs does not have, made from
    tir_adreno's code (the misspelling a default hides)."""
    tvm = pytest.importorskip("tvm")
    from tvm import relax

    from tir_adreno.passes import graph

    x = relax.Var("x", relax.TensorType((1, 4, 8, 8), "float32"))
    attrs = relax.op.nn.avg_pool2d(x, (3, 3), count_include_pad=True).attrs
    assert isinstance(attrs, tvm.ir.Attrs)
    with unknown_attribute_reads() as found:
        assert getattr(attrs, "count_include_pad", False) is True
        assert graph.ints(getattr(attrs, "count_include_padd", (7,))) == (7,)  # read from here: not tir_adreno's code
    assert found == []
    with unknown_attribute_reads() as found:
        exec(compile("getattr(attrs, 'count_include_padd', False)", graph.__file__, "exec"), {"attrs": attrs})
    assert len(found) == 1 and found[0].startswith("Pool2DAttrs.count_include_padd at tir_adreno/passes/graph.py")
