"""Exported ONNX models import: 0-d scalar initializers, symbolic batch dims, run-time shape arithmetic.

Each model is built with ``onnx.helper`` the way exporters write it and
compared with onnxruntime on random inputs.
"""

import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from tir_adreno import compile_model
from tir_adreno.compiler import ModelError
from tir_adreno.frontend.onnx_import import make_static
from tir_adreno.reference import relative_error

from helpers.onnx_graphs import RNG, conv_bn, f32, i64, i_f32, make, node, relu6_nodes, tensor
RTOL = 1e-5  # float32 against onnxruntime: measured at most 1.1e-7


def check(model, inputs, **kwargs):
    compiled = compile_model(model, progress=lambda _: None, **kwargs)
    outputs = compiled.run(inputs)
    refs = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, inputs)
    assert len(outputs) == len(refs)
    for y, ref in zip(outputs, refs):
        assert y.shape == ref.shape
        assert relative_error(y, ref) <= RTOL
    return compiled


def test_relu6_as_clip_with_0d_bounds():
    nodes, inits = relu6_nodes("x", "y", "r")
    model = make(nodes, [tensor("x", (1, 6, 5, 7))], [tensor("y", (1, 6, 5, 7))], inits)
    x = (RNG.standard_normal((1, 6, 5, 7)) * 5).astype("float32")  # both bounds are hit
    check(model, {"x": x})


def mobilenet_v2_block(batch="N"):
    """Inverted residual: 1x1 expand -> BN -> ReLU6 -> 3x3 depthwise -> BN -> ReLU6 -> 1x1 project -> BN -> + x."""
    nodes, inits = [], []
    for part in (
        conv_bn("x", "e", "expand", 8, 16),
        relu6_nodes("e", "e6", "r1"),
        conv_bn("e6", "d", "dw", 16, 16, k=3, groups=16),
        relu6_nodes("d", "d6", "r2"),
        conv_bn("d6", "p", "project", 16, 8),
    ):
        nodes += part[0]
        inits += part[1]
    nodes.append(node("Add", ["p", "x"], ["y"]))
    return make(nodes, [tensor("x", (batch, 8, 6, 6))], [tensor("y", (batch, 8, 6, 6))], inits)


def test_mobilenet_v2_block_batch_2():
    """Exporter-style block with a symbolic batch, run at batch 2."""
    x = RNG.standard_normal((2, 8, 6, 6)).astype("float32")
    compiled = check(mobilenet_v2_block(), {"x": x}, input_shapes={"x": (2, 8, 6, 6)})
    assert any(p["ours"] and "conv2d" in p["op"] for p in compiled.profile())


def test_symbolic_dim_without_shape_names_input_and_dim():
    with pytest.raises(ModelError, match=r"input 'x' has symbolic dim 'N' \(shape \[N, 8, 6, 6\]\).*input_shapes=\{'x': \(1, 8, 6, 6\)\}"):
        compile_model(mobilenet_v2_block(), progress=lambda _: None)


@pytest.mark.parametrize(
    "shapes, message",
    [({"y": (1, 8, 6, 6)}, "names 'y', which is not a model input"), ({"x": (2, 8, 6, 5)}, r"shape \(2, 8, 6, 5\) does not fit")],
)
def test_bad_input_shapes(shapes, message):
    with pytest.raises(ModelError, match=message):
        compile_model(mobilenet_v2_block(), input_shapes=shapes, progress=lambda _: None)


def channel_shuffle_model():
    """Torch's channel split + shuffle with a symbolic batch: the split point and the reshape targets
    are computed at run time (Shape -> Gather -> Div -> Mul -> Slice / Concat -> Reshape -> Transpose)."""
    nodes = [
        node("Shape", ["x"], ["s"]),
        node("Gather", ["s", "i1"], ["c"], axis=0),
        node("Div", ["c", "two"], ["half"]),
        node("Mul", ["half", "two"], ["end"]),
        node("Unsqueeze", ["half", "axes0"], ["half1"]),
        node("Unsqueeze", ["end", "axes0"], ["end1"]),
        node("Slice", ["x", "zero1", "half1", "one1"], ["x1"]),
        node("Slice", ["x", "half1", "end1", "one1"], ["x2"]),
        node("Conv", ["x2", "w"], ["x2c"]),
        node("Relu", ["x2c"], ["x2r"]),
        node("Concat", ["x1", "x2r"], ["cat"], axis=1),
        node("Shape", ["cat"], ["s2"]),  # channel_shuffle's x.size(), on an intermediate
        node("Gather", ["s2", "i0"], ["n"], axis=0),
        node("Gather", ["s2", "i2"], ["h"], axis=0),
        node("Gather", ["s2", "i3"], ["wd"], axis=0),
        node("Unsqueeze", ["n", "axes0"], ["n1"]),
        node("Unsqueeze", ["h", "axes0"], ["h1"]),
        node("Unsqueeze", ["wd", "axes0"], ["w1"]),
        node("Concat", ["n1", "two1", "half1", "h1", "w1"], ["groups_shape"], axis=0),
        node("Reshape", ["cat", "groups_shape"], ["r"]),
        node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3, 4]),
        node("Concat", ["n1", "minus1", "h1", "w1"], ["flat_shape"], axis=0),
        node("Reshape", ["t", "flat_shape"], ["y"]),
    ]
    # the integer constants as Constant nodes, as torch exports them
    consts = [("two", 2), ("i0", 0), ("i1", 1), ("i2", 2), ("i3", 3), ("axes0", [0]), ("zero1", [0]), ("one1", [1]), ("two1", [2]), ("minus1", [-1])]
    nodes = [node("Constant", [], [k], value=i64(k, v)) for k, v in consts] + nodes
    w = f32("w", (4, 4, 1, 1), 0.5)
    return make(nodes, [tensor("x", ("N", 8, 5, 5))], [tensor("y", ("N", 8, 5, 5))], [w])


def test_channel_split_and_shuffle():
    x = RNG.standard_normal((3, 8, 5, 5)).astype("float32")
    check(channel_shuffle_model(), {"x": x}, input_shapes={"x": (3, 8, 5, 5)})


def test_shape_arithmetic_is_folded():
    static = make_static(channel_shuffle_model(), {"x": (3, 8, 5, 5)})
    ops = {n.op_type for n in static.graph.node}
    assert ops == {"Slice", "Conv", "Relu", "Concat", "Reshape", "Transpose"}, ops
    (dim_values,) = [[d.dim_value for d in i.type.tensor_type.shape.dim] for i in static.graph.input]
    assert dim_values == [3, 8, 5, 5]


# (an empty slice, start 2 end 0, is left to TVM's importer: onnxslim folds no zero-size value)
@pytest.mark.parametrize("start, end, expected", [(None, None, [3, 8, 5, 5]), (1, None, [8, 5, 5]), (-2, None, [5, 5]), (0, -1, [3, 8, 5])])
def test_shape_with_start_end_folds_like_onnxruntime(start, end, expected):
    attrs = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
    model = make(
        [node("Shape", ["x"], ["s"], **attrs), node("Identity", ["s"], ["y"])],
        [tensor("x", ("N", 8, 5, 5))], [helper.make_tensor_value_info("y", TensorProto.INT64, (len(expected),))], [], opset=15,
    )
    static = make_static(model, {"x": (3, 8, 5, 5)})
    (folded,) = [numpy_helper.to_array(i) for i in static.graph.initializer if i.name == "s"]
    x = RNG.standard_normal((3, 8, 5, 5)).astype("float32")
    (ref,) = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert folded.tolist() == ref.tolist() == expected


def _half_channels(tag):
    """Shape -> Gather(1) -> the channel count halved, as torch writes it: Div on int64 ("floordiv")
    or a float division with Floor and Casts ("float")."""
    head = [node("Shape", ["x"], ["s"]), node("Gather", ["s", "one"], ["c"], axis=0)]
    if tag == "floordiv":
        return head + [node("Div", ["c", "two"], ["h"])]
    return head + [
        node("Cast", ["c"], ["cf"], to=TensorProto.FLOAT),
        node("Div", ["cf", "two_f"], ["hf"]),
        node("Floor", ["hf"], ["hff"]),
        node("Cast", ["hff"], ["h"], to=TensorProto.INT64),
    ]


@pytest.mark.parametrize("halving", ["floordiv", "float"])
@pytest.mark.parametrize("split", ["Split", "Slice"])
def test_chunk_with_computed_sizes(halving, split):
    """torch's x.chunk(2, dim=1) with a symbolic batch: split sizes computed from Shape (TVM's importer
    alone refuses a Split with computed sizes and a Floor on a shape)."""
    nodes = _half_channels(halving) + [node("Unsqueeze", ["h", "axes0"], ["h1"])]
    if split == "Split":
        nodes += [node("Concat", ["h1", "h1"], ["sizes"], axis=0), node("Split", ["x", "sizes"], ["a", "b"], axis=1)]
    else:
        nodes += [node("Slice", ["x", "zero1", "h1", "one1"], ["a"]), node("Mul", ["h1", "two"], ["end"]), node("Slice", ["x", "h1", "end", "one1"], ["b"])]
    nodes += [node("Relu", ["a"], ["ra"]), node("Mul", ["b", "ra"], ["y"])]
    inits = [i64("one", 1), i64("two", 2), i64("axes0", [0]), i64("zero1", [0]), i64("one1", [1]), i_f32("two_f", 2.0)]
    model = make(nodes, [tensor("x", ("N", 8, 5, 5))], [tensor("y", ("N", 4, 5, 5))], inits)
    x = RNG.standard_normal((2, 8, 5, 5)).astype("float32")
    check(model, {"x": x}, input_shapes={"x": (2, 8, 5, 5)})


def _same_pad_nodes(x, y, tag, inits, k=3, stride=2):
    """timm's pad-same as a traced export writes it: ``Shape -> Gather -> Cast -> Div -> Ceil ->
    Cast -> Sub -> Mul -> Add -> Sub -> Clip(min 0) -> Div / Sub -> Unsqueeze -> Concat -> Pad``
    over H and W (TVM's importer: "Dynamic pads are not supported yet" unless it is folded)."""
    t = lambda s: f"{tag}_{s}"  # noqa: E731
    inits += [i64(t("i2"), 2), i_f32(t("sf"), float(stride)), i64(t("one"), 1), i64(t("s"), stride), i64(t("k"), k),
              i64(t("zero"), 0), i64(t("two"), 2), i64(t("ax"), [0]), i64(t("z2"), [0, 0])]
    chain = [("Shape", [x], "shape", {}), ("Gather", [t("shape"), t("i2")], "h", {"axis": 0}),
             ("Cast", [t("h")], "hf", {"to": TensorProto.FLOAT}), ("Div", [t("hf"), t("sf")], "q", {}), ("Ceil", [t("q")], "c", {}),
             ("Cast", [t("c")], "ci", {"to": TensorProto.INT64}), ("Sub", [t("ci"), t("one")], "m", {}), ("Mul", [t("m"), t("s")], "ms", {}),
             ("Add", [t("ms"), t("k")], "t", {}), ("Sub", [t("t"), t("h")], "p", {}), ("Clip", [t("p"), t("zero")], "pad", {}),
             ("Div", [t("pad"), t("two")], "lo", {}), ("Sub", [t("pad"), t("lo")], "hi", {}),
             ("Unsqueeze", [t("lo"), t("ax")], "lo1", {}), ("Unsqueeze", [t("hi"), t("ax")], "hi1", {})]
    nodes = [node(op, ins, [t(out)], **attrs) for op, ins, out, attrs in chain]
    nodes.append(node("Concat", [t("z2"), t("lo1"), t("lo1"), t("z2"), t("hi1"), t("hi1")], [t("pads")], axis=0))
    return nodes + [node("Pad", [x, t("pads")], [y])]


def test_pads_from_a_shape_chain_are_folded():
    """Two same-padded strided convs with a symbolic batch, the second Pad's amounts computed from
    the Shape of the first conv's output: folded before TVM's importer, matching onnxruntime."""
    inits = [f32("w1", (4, 3, 3, 3)), f32("w2", (5, 4, 3, 3))]
    nodes = _same_pad_nodes("x", "p1", "a", inits) + [node("Conv", ["p1", "w1"], ["c1"], strides=[2, 2])]
    nodes += _same_pad_nodes("c1", "p2", "b", inits) + [node("Conv", ["p2", "w2"], ["y"], strides=[2, 2])]
    model = make(nodes, [tensor("x", ("N", 3, 9, 9))], [tensor("y", ("N", 5, 4, 4))], inits, opset=17)
    static = make_static(model, {"x": (2, 3, 9, 9)})
    assert [n.op_type for n in static.graph.node] == ["Pad", "Conv", "Pad", "Conv"]
    x = RNG.standard_normal((2, 3, 9, 9)).astype("float32")
    check(model, {"x": x}, input_shapes={"x": (2, 3, 9, 9)})


def _torch_pad_nodes(x, y, pads, tag):
    """``F.pad(x, pads)`` as torch exports it (HGNetV2's stem): the amounts built from Constants with
    no Shape at all, ``Concat(pads, ConstantOfShape(4)) -> Reshape [-1, 2] -> Slice reversed ->
    Transpose -> Reshape [-1] -> Cast -> Pad``."""
    t = lambda s: f"{tag}_{s}"  # noqa: E731
    consts = [("four", [4]), ("pads", pads), ("pairs", [-1, 2]), ("ax", [0]), ("rev_start", [-1]), ("rev_end", [-(2**63) + 1]),
              ("rev_step", [-1]), ("flat", [-1])]
    nodes = [node("Constant", [], [t(k)], value=i64(t(k), v)) for k, v in consts]
    nodes += [node("ConstantOfShape", [t("four")], [t("zeros")], value=i64(t("zero"), [0])),
              node("Concat", [t("pads"), t("zeros")], [t("all")], axis=0), node("Reshape", [t("all"), t("pairs")], [t("p2")]),
              node("Slice", [t("p2"), t("rev_start"), t("rev_end"), t("ax"), t("rev_step")], [t("rv")]),
              node("Transpose", [t("rv")], [t("tr")], perm=[1, 0]), node("Reshape", [t("tr"), t("flat")], [t("f")]),
              node("Cast", [t("f")], [t("amounts")], to=TensorProto.INT64), node("Pad", [x, t("amounts")], [y], mode="constant")]
    return nodes


def test_pads_built_from_constants_are_folded():
    """HGNetV2's stem: two ``F.pad(x, [0, 1, 0, 1])`` (right and bottom) whose amounts no Shape
    starts (TVM's importer alone: "Dynamic pads are not supported yet"): folded to a constant Pad,
    our kernels run it, matching onnxruntime."""
    inits = [f32("w1", (4, 3, 2, 2)), f32("w2", (5, 4, 2, 2))]
    nodes = _torch_pad_nodes("x", "p1", [0, 1, 0, 1], "a") + [node("Conv", ["p1", "w1"], ["c1"])]
    nodes += _torch_pad_nodes("c1", "p2", [1, 2, 0, 1], "b") + [node("Conv", ["p2", "w2"], ["y"])]
    model = make(nodes, [tensor("x", (1, 3, 7, 9))], [tensor("y", (1, 5, 7, 11))], inits, opset=17)
    static = make_static(model, {"x": (1, 3, 7, 9)})
    assert [n.op_type for n in static.graph.node] == ["Pad", "Conv", "Pad", "Conv"]
    x = RNG.standard_normal((1, 3, 7, 9)).astype("float32")
    compiled = check(model, {"x": x})
    assert all(r["ours"] for r in compiled.profile())


def test_folding_keeps_the_exported_node_order():
    """onnxslim sorts nodes by their depth from the inputs; the import keeps the exported order
    (TVM's importer then writes the module it wrote before folding moved to onnxslim, and plans
    list their kernels as before): a Relu chain written before a shallower Sigmoid branch stays so."""
    nodes = [node("Relu", ["x"], ["r1"]), node("Relu", ["r1"], ["r2"]), node("Relu", ["r2"], ["r3"]), node("Sigmoid", ["x"], ["s"]),
             node("Shape", ["s"], ["shape"]), node("Reshape", ["s", "shape"], ["s2"]), node("Add", ["r3", "s2"], ["y"])]
    model = make(nodes, [tensor("x", ("N", 3, 4, 5))], [tensor("y", ("N", 3, 4, 5))], [], opset=17)
    static = make_static(model, {"x": (2, 3, 4, 5)})
    assert [n.op_type for n in static.graph.node] == ["Relu", "Relu", "Relu", "Sigmoid", "Reshape", "Add"]


def test_large_constant_subgraphs_stay_for_tvm():
    """Constant subgraphs larger than ``FOLDED_BYTES`` are data (EdgeNeXt's positional encoding):
    left to TVM's FoldConstant, as before onnxslim, so the weights TVM computes stay bitwise its own;
    a small one (a Pad's amounts) folds. Both run against onnxruntime."""
    big = 65  # float32 values: one more than FOLDED_BYTES (256) holds
    nodes = [node("Cos", ["table"], ["enc"]), node("Reshape", ["enc", "s"], ["enc4"]), node("Add", ["x", "enc4"], ["a"]),
             node("Add", ["pads0", "one"], ["pads"]), node("Pad", ["a", "pads"], ["y"], mode="constant")]
    inits = [f32("table", (big,)), i64("s", [1, 1, 1, big]), i64("pads0", [0, 0, 0, 0, 0, 0, 0, 0]), i64("one", 1)]
    model = make(nodes, [tensor("x", (1, 2, 3, big))], [tensor("y", (3, 4, 5, big + 2))], inits, opset=17)
    static = make_static(model, {"x": (1, 2, 3, big)})
    assert [n.op_type for n in static.graph.node] == ["Cos", "Reshape", "Add", "Pad"]
    x = RNG.standard_normal((1, 2, 3, big)).astype("float32")
    check(model, {"x": x})
