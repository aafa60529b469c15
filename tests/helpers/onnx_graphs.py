"""Small ONNX graphs built with onnx.helper the way exporters write them, and the check that
compiles a pattern onto our kernels and compares it with onnxruntime."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from helpers.numeric import rand
from tir_adreno import compile_model
from tir_adreno.frontend.onnx_models import batch_norm_scale, batch_norm_variance
from tir_adreno.reference import reference_outputs, relative_error

# -- graph pieces as exporters write them -------------------------------------------------------

RNG = np.random.default_rng(0)
node = helper.make_node


def f32(name, shape, scale=1.0, low=None):
    data = RNG.uniform(low, low + 1.0, shape) if low is not None else RNG.standard_normal(shape) * scale
    return numpy_helper.from_array(np.asarray(data, np.float32), name)


def i64(name, value):
    return numpy_helper.from_array(np.array(value, np.int64), name)


def i_f32(name, value):
    return numpy_helper.from_array(np.array(value, np.float32), name)  # 0-d


def make(nodes, inputs, outputs, inits, opset=13):
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model


def tensor(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def relu6_nodes(x, out, tag):
    """ReLU6 as PyTorch exports it: Clip with 0-d initializer bounds."""
    return [node("Clip", [x, f"{tag}_lo", f"{tag}_hi"], [out])], [i_f32(f"{tag}_lo", 0.0), i_f32(f"{tag}_hi", 6.0)]


def batch_norm_inits(tag, channels, rng=RNG):
    """(scale, bias, mean, var) initializers ``{tag}_scale`` ...: variances down to 1e-4 (channel 0
    at 1e-4), so the epsilon moves the result by ~5%; scales keep each channel's gain in [0.5, 1.5]."""
    var = batch_norm_variance(rng, (channels,))
    var[0] = 1e-4
    arrays = dict(scale=batch_norm_scale(rng, var), bias=rng.standard_normal(channels) * 0.1,
                  mean=rng.standard_normal(channels) * 0.1, var=var)
    return [numpy_helper.from_array(np.asarray(v, np.float32), f"{tag}_{k}") for k, v in arrays.items()]


def conv_bn(x, out, tag, cin, cout, k=1, groups=1):
    inits = [f32(f"{tag}_w", (cout, cin // groups, k, k), np.sqrt(2.0 / (cin // groups * k * k))),
             *batch_norm_inits(tag, cout)]
    nodes = [
        node("Conv", [x, f"{tag}_w"], [f"{tag}_c"], pads=[k // 2] * 4, group=groups),
        node("BatchNormalization", [f"{tag}_c", f"{tag}_scale", f"{tag}_bias", f"{tag}_mean", f"{tag}_var"], [out]),
    ]
    return nodes, inits


# -- one pattern per graph: input "x", output "y" ------------------------------------------------

#: float32 patterns against onnxruntime: measured at most 6.4e-7 (tests/passes, the Gemm-as-conv
#: pattern; most 1e-7..3e-7). The old 1e-3 let a batch norm without its epsilon pass.
PATTERN_RTOL = 1e-5
EDGE = ("nchw_to_nchw4c", "nchw4c_to_nchw")


def pattern_graph(nodes, inits, channels=3, size=7, opset=17):
    g = helper.make_graph(
        nodes,
        "pattern",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


#: The first kernel of :func:`standalone_graph`: a channel shuffle, a kernel of ours that takes no
#: elementwise chain (a pool, a resize or a conv would take the tail as its epilogue).
STANDALONE_PRODUCER = "channel_shuffle"


def standalone_graph(tail, inits, channels=6, size=7):
    """``tail`` (ONNX nodes from ``c`` to ``y``) after a kernel that fuses nothing, so the tail's ops
    run as kernels of their own: :data:`STANDALONE_PRODUCER`, ``c`` = x's channels shuffled in two groups."""
    if channels % 2:
        raise ValueError(f"the shuffle takes an even channel count, got {channels}")
    nodes = [helper.make_node("Reshape", ["x", "standalone_groups"], ["standalone_r"]),
             helper.make_node("Transpose", ["standalone_r"], ["standalone_t"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", ["standalone_t", "standalone_map"], ["c"])]
    model = pattern_graph([*nodes, *tail], inits, channels, size)
    for name, v in (("standalone_groups", [1, 2, channels // 2, size, size]), ("standalone_map", [1, channels, size, size])):
        model.graph.initializer.append(numpy_helper.from_array(np.asarray(v, np.int64), name))
    return model


def int_pattern_graph(nodes, inits, channels=3, size=7, opset=17):
    """:func:`pattern_graph` whose int64 initializers (reshape targets) stay int64."""
    model = pattern_graph(nodes, {k: v for k, v in inits.items() if v.dtype != np.int64}, channels, size, opset)
    model.graph.initializer.extend(
        helper.make_tensor(k, TensorProto.INT64, v.shape, v.ravel().tolist()) for k, v in inits.items() if v.dtype == np.int64)
    return model


def group_norm_nodes(x, y, inits, channels, groups, rng):
    """timm's GroupNorm (``GroupNorm1``: groups=1, MobileViT-v2's) as torch.onnx.export writes it
    (opset 17): Reshape -> InstanceNormalization -> Reshape back -> Mul -> Add (for :func:`int_pattern_graph`)."""
    inits.update(gn_shape=np.array([0, groups, -1], np.int64), gn_s=rng.uniform(0.5, 1.5, groups), gn_b=rng.standard_normal(groups),
                 gn_w=rng.standard_normal((channels, 1, 1)), gn_bias=rng.standard_normal((channels, 1, 1)))
    return [
        node("Reshape", [x, "gn_shape"], ["gn_r"]),
        node("InstanceNormalization", ["gn_r", "gn_s", "gn_b"], ["gn_i"], epsilon=1e-5),
        node("Shape", [x], ["gn_xs"]),
        node("Reshape", ["gn_i", "gn_xs"], ["gn_o"]),
        node("Mul", ["gn_o", "gn_w"], ["gn_m"]),
        node("Add", ["gn_m", "gn_bias"], [y]),
    ]


def conv_node(rng, inits, x, y, o, c, k=3, **attrs):
    """A Conv node with random weights and bias (added to ``inits``)."""
    inits[f"{y}_w"] = rng.standard_normal((o, c // attrs.get("group", 1), k, k)) / np.sqrt(c * k * k)
    inits[f"{y}_b"] = rng.standard_normal(o) * 0.5
    attrs.setdefault("pads", [k // 2] * 4)
    return helper.make_node("Conv", [x, f"{y}_w", f"{y}_b"], [y], **attrs)


def scalars(inits, **values):
    for k, v in values.items():
        inits[k] = np.float32(v)  # 0-d initializers, as torch writes Clip's bounds


def wide_profile():
    """This device's profile as if it had the H200's compute units (``strategy.width.is_wide``): the
    forms for wide GPUs (split statistics, the wide layer norm) run on PoCL."""
    from dataclasses import replace

    from tir_adreno.strategy.profile import get_profile, resolve

    return replace(resolve(), compute_units=get_profile("nvidia-h200").compute_units)


def check_pattern(model, channels=3, size=7, profile=None):
    """Compile (for ``profile``, default the device's own), run against onnxruntime, return the
    plan's op names between the edge layout transforms."""
    compiled = compile_model(model, profile=profile, progress=lambda _: None)
    x = (np.random.default_rng(11).standard_normal((1, channels, size, size)) * 3).astype("float32")
    (out,) = compiled.run({"x": x})
    (ref,) = reference_outputs(model, {"x": x})
    err = relative_error(out, ref)
    assert err <= PATTERN_RTOL, err
    ops = [(p["op"], p["ours"]) for p in compiled.profile()]
    assert all(ours for _, ours in ops), f"upstream kernels ran: {ops}"
    return between_edges([op for op, _ in ops])


#: float16_acc32 stores the tensors between our kernels in half: an output within half's rounding of a few steps.
HALF_PATTERN_RTOL = 4e-3


def run_ours(model, shapes: dict, seed: int, profile=None, precision="float32") -> list[str]:
    """Compile ``model``, check it on seeded normal inputs of ``shapes`` against onnxruntime (within
    :data:`PATTERN_RTOL`, :data:`HALF_PATTERN_RTOL` in half storage), every kernel ours; its
    launches' op names (numbered kernels' suffixes dropped)."""
    compiled = compile_model(model, profile=profile, precision=precision, progress=lambda _: None)
    inputs = {name: np.random.default_rng(seed + i).standard_normal(shape).astype(np.float32) for i, (name, shape) in enumerate(shapes.items())}
    for out, ref in zip(compiled.run(inputs), reference_outputs(model, inputs), strict=True):
        assert relative_error(out, ref) <= (PATTERN_RTOL if precision == "float32" else HALF_PATTERN_RTOL), relative_error(out, ref)
    rows = compiled.profile()
    assert all(r["ours"] for r in rows), [r["op"] for r in rows if not r["ours"]]
    return [r["op"].rstrip("0123456789") for r in rows]


def between_edges(names: list[str]) -> list[str]:
    """The kernels between a model's edge layout transforms, none of them one. Either edge may be
    absent: a first conv reads the plain input itself, the last kernel's buffer may be the output."""
    start = 1 if names[0].startswith(EDGE[0]) else 0
    end = len(names) - 1 if names[-1].startswith(EDGE[1]) else len(names)
    assert not any(op.startswith(EDGE) for op in names[start:end]), f"layout transforms inside the model: {names}"
    return names[start:end]


def grn_nodes(x, y, inits, channels, rng):
    """GRN as torch.onnx.export writes timm's GlobalResponseNorm (opset 17), then the residual:
    ``y = x + (bias + weight * (x * Nx) * 1)``."""
    inits.update(grn_w=rng.standard_normal((1, channels, 1, 1)), grn_b=rng.standard_normal((1, channels, 1, 1)),
                 grn_eps=np.float32(1e-6), grn_one=np.ones(1, np.float32))
    node = helper.make_node
    return [
        node("ReduceL2", [x], ["g"], axes=[2, 3], keepdims=1),
        node("ReduceMean", ["g"], ["gm"], axes=[1], keepdims=1),
        node("Add", ["gm", "grn_eps"], ["ge"]),
        node("Div", ["g", "ge"], ["nx"]),
        node("Mul", [x, "nx"], ["xn"]),
        node("Mul", ["grn_w", "xn"], ["wx"]),
        node("Mul", ["wx", "grn_one"], ["wx1"]),
        node("Add", ["grn_b", "wx1"], ["t"]),
        node("Add", [x, "t"], [y]),
    ]


def grn_block(rng, inits, k=1, channels=6):
    """conv -> GRN (``channels``: 6 leaves a padded block) -> ``k`` x ``k`` conv (padded when k > 1)."""
    return [conv_node(rng, inits, "x", "c", channels, 3), *grn_nodes("c", "r", inits, channels, rng),
            conv_node(rng, inits, "r", "y", 4, channels, k=k)]


def _group_conv(rng, inits, x, y, o, c, k, group=1, bias=False, pads=None, stride=1, dilation=1):
    """A Conv node as exporters write a MixedConv2d's group conv (kernel ``k`` square, or ``(kh,
    kw)``; 'same' pads unless given): no bias (a batch norm follows) unless asked."""
    kh, kw = (k, k) if isinstance(k, int) else k
    inits[f"{y}_w"] = rng.standard_normal((o, c // group, kh, kw)) / np.sqrt(c // group * kh * kw)
    inputs = [x, f"{y}_w"]
    if bias:
        inits[f"{y}_b"] = rng.standard_normal(o) * 0.5
        inputs.append(f"{y}_b")
    pads = pads if pads is not None else [dilation * (kh // 2), dilation * (kw // 2)] * 2
    return helper.make_node("Conv", inputs, [y], pads=pads, group=group, strides=[stride] * 2, dilations=[dilation] * 2)


def mixed_conv_graph(sizes, kernels, outs=None, seed=0, bias=False, pads=None, stride=1, dilations=None, order=None,
                     extra_reader=False, size=9):
    """MixNet's MixedConv2d as exported, on a ``size`` x ``size`` map:
    x -> Split(sizes) -> a conv per group (depthwise of kernel ``kernels[i]``, or with ``outs``
    a dense conv to ``outs[i]`` channels; a kernel ``(kh, kw)`` is rectangular, None passes the
    group on unchanged: InceptionNeXt's identity part) -> Concat (in ``order``) ->
    BatchNormalization -> Relu -> y. ``extra_reader``: the first group's conv is also concatenated
    to y (a second reader)."""
    rng, inits = np.random.default_rng(seed), {}
    names = [f"g{i}" for i in range(len(sizes))]
    nodes, outputs = [helper.make_node("Split", ["x", "sizes"], names, axis=1)], []
    for i, (name, c, k) in enumerate(zip(names, sizes, kernels)):
        o, group = (outs[i], 1) if outs else (c, c)
        outputs.append(name if k is None else f"{name}_c")
        if k is not None:
            nodes.append(_group_conv(rng, inits, name, f"{name}_c", o, c, k, group, bias, pads[i] if pads else None, stride,
                                     dilations[i] if dilations else 1))
    order = order or range(len(sizes))
    channels = sum(outs) if outs else sum(sizes)
    nodes += [helper.make_node("Concat", [outputs[i] for i in order], ["cat"], axis=1),
              helper.make_node("BatchNormalization", ["cat", "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["bn"]),
              helper.make_node("Relu", ["bn"], ["r" if extra_reader else "y"])]
    if extra_reader:
        nodes.append(helper.make_node("Concat", ["r", "g0_c"], ["y"], axis=1))
    inits.update({t.name: numpy_helper.to_array(t) for t in batch_norm_inits("bn", channels, rng)})
    model = pattern_graph(nodes, inits, channels=sum(sizes), size=size)
    model.graph.initializer.append(numpy_helper.from_array(np.asarray(sizes, np.int64), "sizes"))
    return model


# -- the small models several test folders run --------------------------------------------------


def tiny_model():
    """conv -> relu -> conv (same shapes: one kernel, two calls) -> relu -> depthwise conv,
    and a global average pool of the input as a second output (so the first conv reads the
    packed input, as the second reads its blocked one)."""
    rng = np.random.default_rng(5)

    def weight(name, shape):
        return helper.make_tensor(name, TensorProto.FLOAT, shape, rand(rng, shape).ravel())

    nodes = [
        helper.make_node("Conv", ["image", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "wd"], ["out"], pads=[1, 1, 1, 1], group=8),
        helper.make_node("GlobalAveragePool", ["image"], ["pool"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, (1, 8, 9, 10))],
        [
            helper.make_tensor_value_info("out", TensorProto.FLOAT, (1, 8, 9, 10)),
            helper.make_tensor_value_info("pool", TensorProto.FLOAT, (1, 8, 1, 1)),
        ],
        [weight("w1", (8, 8, 3, 3)), weight("w2", (8, 8, 3, 3)), weight("wd", (8, 1, 3, 3))],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def conv_relu_pool_model():
    """conv -> relu -> global average pool, input "image" (1, 3, 8, 8) (the CLI's tiny model)."""
    rng = np.random.default_rng(0)
    w = helper.make_tensor("w", TensorProto.FLOAT, (5, 3, 3, 3), rng.standard_normal(135).astype("float32"))
    nodes = [
        helper.make_node("Conv", ["image", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, (1, 3, 8, 8))],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, (1, 5, 1, 1))],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def two_convs_model():
    """A 1x1 conv, relu, a 3x3 stride-2 conv (no Winograd: few tuning candidates) and a max pool."""
    rng = np.random.default_rng(0)
    w1 = helper.make_tensor("w1", TensorProto.FLOAT, (8, 4, 1, 1), rng.standard_normal(32).astype("float32"))
    w2 = helper.make_tensor("w2", TensorProto.FLOAT, (8, 8, 3, 3), rng.standard_normal(576).astype("float32"))
    nodes = [
        helper.make_node("Conv", ["image", "w1"], ["c1"]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("MaxPool", ["c2"], ["out"], kernel_shape=[2, 2]),
    ]
    graph = helper.make_graph(
        nodes, "two", [helper.make_tensor_value_info("image", TensorProto.FLOAT, (1, 4, 6, 6))],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, (1, 8, 2, 2))], [w1, w2],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


# -- MobileViT-v2 (issue 21) -------------------------------------------------------------------

def mobilevit_attention_nodes(rng, inits, x, y, d, tag, relu=True):
    """timm's MobileViT-v2 LinearSelfAttention as exported (opset 17), then the residual:
    qkv 1x1 conv -> Split [1, d, d] -> Softmax(axis=-1) of q -> k * scores (channel broadcast)
    -> ReduceSum(axis=-1) -> relu(v) * Expand(context) (spatial broadcast) -> 1x1 conv -> + x.
    ``relu=False``: v itself times the context (a spelling the one-kernel rule does not take)."""
    inits[f"{tag}_split"] = np.asarray([1, d, d], np.int64)
    inits[f"{tag}_axes"] = np.asarray([-1], np.int64)
    return [
        conv_node(rng, inits, x, f"{tag}_qkv", 1 + 2 * d, d, k=1),
        node("Split", [f"{tag}_qkv", f"{tag}_split"], [f"{tag}_q", f"{tag}_k", f"{tag}_v"], axis=1),
        node("Softmax", [f"{tag}_q"], [f"{tag}_s"], axis=-1),
        node("Mul", [f"{tag}_k", f"{tag}_s"], [f"{tag}_ks"]),
        node("ReduceSum", [f"{tag}_ks", f"{tag}_axes"], [f"{tag}_ctx"], keepdims=1),
        node("Relu" if relu else "Identity", [f"{tag}_v"], [f"{tag}_rv"]),
        node("Shape", [f"{tag}_v"], [f"{tag}_shape"]),
        node("Expand", [f"{tag}_ctx", f"{tag}_shape"], [f"{tag}_ectx"]),
        node("Mul", [f"{tag}_rv", f"{tag}_ectx"], [f"{tag}_o"]),
        conv_node(rng, inits, f"{tag}_o", f"{tag}_p", d, d, k=1),
        node("Add", [x, f"{tag}_p"], [y]),
    ]


def patch_nodes(inits, x, y, shape6, perm, shape4, tag):
    """Reshape (6-d) -> Transpose -> Reshape (4-d), as MobileViT-v2 exports its unfold and fold."""
    inits[f"{tag}_s6"], inits[f"{tag}_s4"] = np.asarray(shape6, np.int64), np.asarray(shape4, np.int64)
    return [
        node("Reshape", [x, f"{tag}_s6"], [f"{tag}_6"]),
        node("Transpose", [f"{tag}_6"], [f"{tag}_t"], perm=list(perm)),
        node("Reshape", [f"{tag}_t", f"{tag}_s4"], [y]),
    ]


def mobilevit_graph(d, size, ph, pw, layers=1, relu=True):
    """conv -> unfold into ph x pw patches -> ``layers`` attention blocks -> fold -> conv."""
    rng, inits = np.random.default_rng(7), {}
    nh, nw = size // ph, size // pw
    nodes = [conv_node(rng, inits, "x", "c", d, 3, k=1)]
    nodes += patch_nodes(inits, "c", "u0", (1, d, nh, ph, nw, pw), (0, 1, 3, 5, 2, 4), (1, d, ph * pw, nh * nw), "unfold")
    for i in range(layers):
        nodes += mobilevit_attention_nodes(rng, inits, f"u{i}", f"u{i + 1}", d, f"a{i}", relu)
    nodes += patch_nodes(inits, f"u{layers}", "f", (1, d, ph, pw, nh, nw), (0, 1, 4, 2, 5, 3), (1, d, size, size), "fold")
    nodes.append(conv_node(rng, inits, "f", "y", 4, d, k=3))
    model = pattern_graph(nodes, {k: v for k, v in inits.items() if v.dtype != np.int64}, size=size)
    model.graph.initializer.extend(
        helper.make_tensor(k, 7, v.shape, v.ravel().tolist()) for k, v in inits.items() if v.dtype == np.int64)
    return model


def convnext_block(rng, inits, channels=6, hidden=10, k=1, reader=None):
    """ConvNeXt's block head (tests/passes/test_norm_fold.py): 3x3 depthwise conv -> permute ->
    LayerNormalization(axis=-1) -> permute -> ``k`` x ``k`` conv to ``hidden`` channels -> y;
    ``reader`` "residual": the norm's output is also added to the conv's input (a second reader)."""
    inits.update(g=1 + 0.3 * rng.standard_normal(channels), b=0.3 * rng.standard_normal(channels))
    nodes = [conv_node(rng, inits, "x", "d", channels, channels, group=channels)]
    nodes += [helper.make_node("Transpose", ["d"], ["t"], perm=[0, 2, 3, 1]),
              helper.make_node("LayerNormalization", ["t", "g", "b"], ["l"], axis=-1, epsilon=1e-6),
              helper.make_node("Transpose", ["l"], ["n"], perm=[0, 3, 1, 2])]
    if reader == "residual":
        nodes += [helper.make_node("Add", ["n", "d"], ["r"])]
    nodes += [conv_node(rng, inits, "r" if reader == "residual" else "n", "y", hidden, channels, k=k)]
    return nodes


def edgenext_block(rng, inits, channels=6, hidden=10, tail=False):
    """EdgeNeXt's conv encoder (tests/passes/test_norm_fold.py, test_block_tail.py): 3x3 depthwise
    conv -> permute -> LayerNormalization -> Linear (MatMul + Add, pwconv1) -> ReLU -> permute back
    -> y; with ``tail`` the whole block: ... -> ReLU -> Linear (pwconv2) -> ``gamma *`` (layer scale)
    -> permute back -> ``x +`` that -> y."""
    node = helper.make_node
    inits.update(g=1 + 0.3 * rng.standard_normal(channels), b=0.3 * rng.standard_normal(channels),
                 w1=rng.standard_normal((channels, hidden)) / np.sqrt(channels), b1=0.5 * rng.standard_normal(hidden))
    nodes = [conv_node(rng, inits, "x", "d", channels, channels, group=channels),
             node("Transpose", ["d"], ["t"], perm=[0, 2, 3, 1]),
             node("LayerNormalization", ["t", "g", "b"], ["l"], axis=-1, epsilon=1e-6),
             node("MatMul", ["l", "w1"], ["m"]), node("Add", ["m", "b1"], ["a"]),
             node("Relu", ["a"], ["e"])]
    if not tail:
        return nodes + [node("Transpose", ["e"], ["y"], perm=[0, 3, 1, 2])]
    inits.update(w2=rng.standard_normal((hidden, channels)) / np.sqrt(hidden), b2=0.5 * rng.standard_normal(channels),
                 gamma=1 + 0.5 * rng.standard_normal(channels))
    return nodes + [node("MatMul", ["e", "w2"], ["m2"]), node("Add", ["b2", "m2"], ["a2"]),
                    node("Mul", ["gamma", "a2"], ["s"]), node("Transpose", ["s"], ["p"], perm=[0, 3, 1, 2]),
                    node("Add", ["x", "p"], ["y"])]


def split_block_graph(channels, convs, k=3, seed=0, size=7, reader=False, pos=False):
    """EdgeNeXt's hierarchical split depthwise convs as torch.onnx.export writes timm's
    ``SplitTransposeBlock`` (tests/passes/test_split_depthwise.py): ``x.chunk(convs + 1)`` as one
    ``Slice`` per chunk, ``sp = conv_i(sp + chunk_i)`` (Add, then a ``k`` x ``k`` depthwise Conv
    with bias), ``Concat(sp_0, ..., sp_{convs-1}, last chunk)`` -> y. ``reader``: the first conv's
    output also added to the output (a second reader outside the block). ``pos``: then, as the
    block's positional encoding, ``Reshape [1, C, H * W]`` -> ``Transpose(0, 2, 1)`` -> ``Add`` of a
    constant ``[1, H * W, C]``, and back to the map (``Transpose``, ``Reshape``) -> y."""
    rng, inits, node = np.random.default_rng(seed), {}, helper.make_node
    width = -(-channels // (convs + 1))
    bounds = [(i * width, min((i + 1) * width, channels)) for i in range(convs + 1)]
    nodes, ints = [], []
    for i, (b, e) in enumerate(bounds):
        ints += [numpy_helper.from_array(np.array([b], np.int64), f"begin{i}"), numpy_helper.from_array(np.array([e], np.int64), f"end{i}")]
        nodes.append(node("Slice", ["x", f"begin{i}", f"end{i}", "slice_axis"], [f"s{i}"]))
    ints.append(numpy_helper.from_array(np.array([1], np.int64), "slice_axis"))
    sp = None
    for i in range(convs):
        if i > 0:
            nodes.append(node("Add", [sp, f"s{i}"], [f"a{i}"]))
        nodes.append(conv_node(rng, inits, f"a{i}" if i > 0 else "s0", f"c{i}", width, width, k=k, group=width))
        sp = f"c{i}"
    out = "cat" if reader or pos else "y"
    nodes.append(node("Concat", [f"c{i}" for i in range(convs)] + [f"s{convs}"], [out], axis=1))
    if reader:
        nodes += [node("Slice", ["cat", "begin0", "end0", "slice_axis"], ["head"]), node("Add", ["head", "c0"], ["sum"]),
                  node("Concat", ["sum", "cat"], ["y"], axis=1)]
    if pos:
        inits["pos"] = rng.standard_normal((1, size * size, channels))
        ints += [numpy_helper.from_array(np.array([1, channels, size * size], np.int64), "tokens_shape"),
                 numpy_helper.from_array(np.array([1, channels, size, size], np.int64), "map_shape")]
        nodes += [node("Reshape", ["cat", "tokens_shape"], ["ncl"]), node("Transpose", ["ncl"], ["nlc"], perm=[0, 2, 1]),
                  node("Add", ["nlc", "pos"], ["nlc_pos"]), node("Transpose", ["nlc_pos"], ["ncl_pos"], perm=[0, 2, 1]),
                  node("Reshape", ["ncl_pos", "map_shape"], ["y"])]
    model = pattern_graph(nodes, inits, channels=channels, size=size)
    model.graph.initializer.extend(ints)
    return model


def se_nodes(x, y, inits, channels, hidden, rng, pool="ReduceMean", act="silu", gate="Sigmoid", name="se"):
    """A squeeze-excitation block as torch.onnx.export writes timm's ``SqueezeExcite`` (opset 17):
    pool -> 1x1 conv -> act -> 1x1 conv -> gate -> multiply with the feature map (values named ``name_*``)."""
    node = helper.make_node
    pooled = node("ReduceMean", [x], [f"{name}_p"], axes=[2, 3], keepdims=1) if pool == "ReduceMean" else node("GlobalAveragePool", [x], [f"{name}_p"])
    acts = ([node("Sigmoid", [f"{name}_1"], [f"{name}_1s"]), node("Mul", [f"{name}_1", f"{name}_1s"], [f"{name}_a"])] if act == "silu"
            else [node("Relu", [f"{name}_1"], [f"{name}_a"])])
    return [
        pooled,
        conv_node(rng, inits, f"{name}_p", f"{name}_1", hidden, channels, k=1),
        *acts,
        conv_node(rng, inits, f"{name}_a", f"{name}_2", channels, hidden, k=1),
        node(gate, [f"{name}_2"], [f"{name}_g"]),
        node("Mul", [x, f"{name}_g"], [y]),
    ]


def mbconv_se(rng, inits, x, y, channels, hidden, act, gate, k=3, stride=1, dw_act=None):
    """An inverted residual's depthwise ``k`` x ``k`` conv (``stride``; then ``dw_act``, an ONNX op
    such as "HardSwish", or none) -> SE (``act``, ``gate``) -> 1x1 projection, as EfficientNet-B0
    (SiLU, sigmoid) and MobileNetV3 (ReLU, hard-sigmoid) export them."""
    d = f"{y}_d" if dw_act is None else f"{y}_d0"
    dw = [conv_node(rng, inits, x, d, channels, channels, k=k, group=channels, strides=[stride, stride])]
    if dw_act is not None:
        dw.append(helper.make_node(dw_act, [d], [f"{y}_d"]))
    return [*dw, *se_nodes(f"{y}_d", f"{y}_s", inits, channels, hidden, rng, act=act, gate=gate, name=f"{y}_se"),
            conv_node(rng, inits, f"{y}_s", y, channels, channels, k=1)]


def lite_mla_nodes(x, y, inits, heads, d, size):
    """timm's EfficientViT LiteMLA attention between the qkv convs and the projection, as torch
    exports it (opset 17): Reshape, Transpose, three Slices, ReLU, Pad with ones, Casts, two MatMuls,
    the normalizing Div, Transpose, Reshape."""
    node = helper.make_node
    tokens = size * size
    ints = dict(shape_heads=[1, heads, 3 * d, tokens], shape_map=[1, heads * d, size, size], axis3=[3], zero=[0], d1=[d], d2=[2 * d],
                d3=[3 * d], minus1=[-1], end=[9223372036854775807], pads=[0, 0, 0, 0, 0, 0, 0, 1])
    inits.update({k: np.array(v, np.int64) for k, v in ints.items()})
    inits.update(one=np.float32(1.0), eps=np.float32(1e-5))
    return [
        node("Reshape", [x, "shape_heads"], ["r"]),
        node("Transpose", ["r"], ["t"], perm=[0, 1, 3, 2]),
        node("Slice", ["t", "zero", "d1", "axis3"], ["q0"]),
        node("Slice", ["t", "d1", "d2", "axis3"], ["k0"]),
        node("Slice", ["t", "d2", "d3", "axis3"], ["v0"]),
        node("Relu", ["q0"], ["q1"]),
        node("Relu", ["k0"], ["k1"]),
        node("Pad", ["v0", "pads", "one"], ["v1"], mode="constant"),
        node("Cast", ["q1"], ["q"], to=1),
        node("Cast", ["k1"], ["k"], to=1),
        node("Cast", ["v1"], ["v"], to=1),
        node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        node("MatMul", ["kt", "v"], ["kv"]),
        node("MatMul", ["q", "kv"], ["o"]),
        node("Slice", ["o", "zero", "minus1", "axis3"], ["num"]),
        node("Slice", ["o", "minus1", "end", "axis3"], ["den0"]),
        node("Add", ["den0", "eps"], ["den"]),
        node("Div", ["num", "den"], ["div"]),
        node("Cast", ["div"], ["divc"], to=1),
        node("Transpose", ["divc"], ["back"], perm=[0, 1, 3, 2]),
        node("Reshape", ["back", "shape_map"], [y]),
    ]


def lite_mla_graph(heads, d, size=7, multi_scale=False, seed=5):
    """conv (qkv: ``heads`` heads of ``d``) -> EfficientViT's LiteMLA -> 1x1 conv (4 channels), input
    ``[1, 3, size, size]``. ``multi_scale``: as timm's EfficientViT, the qkv map and its aggregation
    (depthwise 5x5, grouped 1x1: ``heads`` more heads) concatenated along channels first."""
    rng, inits, c = np.random.default_rng(seed), {}, 3 * heads * d
    nodes, x, total = [conv_node(rng, inits, "x", "c", c, 3)], "c", heads
    if multi_scale:
        nodes += [conv_node(rng, inits, "c", "a0", c, c, k=5, group=c), conv_node(rng, inits, "a0", "a", c, c, k=1, group=3 * heads),
                  helper.make_node("Concat", ["c", "a"], ["cat"], axis=1)]
        x, total = "cat", 2 * heads
    nodes += [*lite_mla_nodes(x, "m", inits, total, d, size), conv_node(rng, inits, "m", "y", 4, total * d, k=1)]
    return int_pattern_graph(nodes, inits, size=size)


def plan_kernels(model, profile) -> list[str]:
    """The kernel families ``model`` launches on ``profile``, in order (lowered, nothing built)."""
    from tvm import relax

    from tir_adreno.compiler import import_model, lower

    mod, _ = import_model(model)
    names = []

    def visit(e):
        if isinstance(e, relax.Call) and getattr(e.op, "name", "") == "relax.call_tir":
            names.append(e.args[0].name_hint.rstrip("0123456789"))

    relax.analysis.post_order_visit(lower(mod, profile, lazy=True)["main"].body, visit)
    return names


#: The profile's layout transform kernels (docs/coverage.md counts these).
LAYOUT_KERNELS = ("nchw_to_nchw4c", "nhwc_to_nchw4c", "nchw4c_to_nchw", "nchw4c_to_nhwc", "copy")


def run_all_ours(model, seed: int, shape, profile=None) -> tuple[list[str], list[str]]:
    """Compile ``model`` (for ``profile``: default the device's own), run it on a random input ``x``
    of ``shape`` against onnxruntime (every output within :data:`PATTERN_RTOL`, every kernel ours):
    (its launches' op names, its layout transforms)."""
    compiled = compile_model(model, profile=profile, progress=lambda _: None)
    x = {"x": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}
    outs = compiled.run(x, profile=True)
    for out, ref in zip(outs, reference_outputs(model, x), strict=True):
        assert relative_error(out, ref) <= PATTERN_RTOL, relative_error(out, ref)
    rows = compiled.profile()
    assert all(r["ours"] for r in rows), [r["op"] for r in rows if not r["ours"]]
    ops = [r["op"] for r in rows]
    return ops, [op for op in ops if op.startswith(LAYOUT_KERNELS)]
