"""Mobile CNN patterns as TVM's ONNX importer writes them, one small ONNX graph each (built
with onnx.helper), compiled onto our kernels and checked against onnxruntime; the plan must
show the pattern fused into our kernels, with layout transforms only at the model's edges."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tir_adreno import compile_model
from tir_adreno.reference import reference_outputs, relative_error

RTOL = 1e-3
EDGE = ("nchw_to_nchw4c", "nchw4c_to_nchw")


def _graph(nodes, inits, channels=3, size=7, opset=17):
    g = helper.make_graph(
        nodes,
        "pattern",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _conv(rng, inits, x, y, o, c, k=3, **attrs):
    """A Conv node with random weights and bias (added to ``inits``)."""
    inits[f"{y}_w"] = rng.standard_normal((o, c // attrs.get("group", 1), k, k)) / np.sqrt(c * k * k)
    inits[f"{y}_b"] = rng.standard_normal(o) * 0.5
    return helper.make_node("Conv", [x, f"{y}_w", f"{y}_b"], [y], pads=[k // 2] * 4, **attrs)


def check(model, channels=3, size=7):
    """Compile, run against onnxruntime, return the plan's (op, ours) list."""
    compiled = compile_model(model, progress=lambda _: None)
    x = (np.random.default_rng(11).standard_normal((1, channels, size, size)) * 3).astype("float32")
    (out,) = compiled.run({"x": x})
    (ref,) = reference_outputs(model, {"x": x})
    err = relative_error(out, ref)
    assert err <= RTOL, err
    ops = [(p["op"], p["ours"]) for p in compiled.profile()]
    assert all(ours for _, ours in ops), f"upstream kernels ran: {ops}"
    names = [op for op, _ in ops]
    assert names[0] == "nchw_to_nchw4c" and names[-1] == "nchw4c_to_nchw", names
    assert not any(op.startswith(EDGE) for op in names[1:-1]), f"layout transforms inside the model: {names}"
    return names[1:-1]


def _scalars(inits, **values):
    for k, v in values.items():
        inits[k] = np.float32(v)  # 0-d initializers, as torch writes Clip's bounds


def _conv_then(tail, inits=None, rng_seed=0):
    rng = np.random.default_rng(rng_seed)
    inits = dict(inits or {})
    nodes = [_conv(rng, inits, "x", "c", 8, 3)] + tail
    return _graph(nodes, inits)


ACT_TAILS = {
    # torch's ReLU6 at opset 17: Clip with 0-d initializer bounds -> maximum/minimum call_tir
    "relu6": ([helper.make_node("Clip", ["c", "lo", "hi"], ["y"])], dict(lo=0.0, hi=6.0), "relu6"),
    "hardswish": ([helper.make_node("HardSwish", ["c"], ["y"])], {}, "hardswish"),
    "hardsigmoid": ([helper.make_node("HardSigmoid", ["c"], ["y"], alpha=1 / 6, beta=0.5)], {}, "hardsigmoid"),
    "sigmoid": ([helper.make_node("Sigmoid", ["c"], ["y"])], {}, "sigmoid"),
    "silu": ([helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])], {}, "silu"),
    # opset < 14 torch writes HardSwish as x * HardSigmoid(x); relu6(x + 3) / 6 by hand
    "hardswish_decomposed": (
        [helper.make_node("HardSigmoid", ["c"], ["s"], alpha=1 / 6, beta=0.5), helper.make_node("Mul", ["s", "c"], ["y"])],
        {},
        "hardswish",
    ),
    "hardsigmoid_by_hand": (
        [
            helper.make_node("Add", ["c", "three"], ["a"]),
            helper.make_node("Clip", ["a", "lo", "hi"], ["r"]),
            helper.make_node("Div", ["r", "six"], ["y"]),
        ],
        dict(three=3.0, lo=0.0, hi=6.0, six=6.0),
        "hardsigmoid",
    ),
}


@pytest.mark.parametrize("name", sorted(ACT_TAILS))
def test_activation_fuses_into_conv(name, monkeypatch):
    tail, scalars, expected = ACT_TAILS[name]
    inits = {}
    _scalars(inits, **scalars)
    from tir_adreno import relax_pass

    seen = []
    real = relax_pass.Epilogue
    monkeypatch.setattr(relax_pass, "Epilogue", lambda **kw: seen.append(kw["activation"]) or real(**kw))
    assert check(_conv_then(tail, inits)) == ["conv2d_nchw4c"]
    assert seen == [expected]


def _standalone(tail, inits):
    """The activation after a max pool (no conv to fuse into)."""
    nodes = [helper.make_node("MaxPool", ["x"], ["c"], kernel_shape=[2, 2])] + tail
    return _graph(nodes, inits, channels=6)


@pytest.mark.parametrize("name,kernel", [("relu6", "clip"), ("hardswish", "hardswish"), ("silu", "silu"), ("hardsigmoid", "hardsigmoid"), ("hardswish_decomposed", "hardswish")])
def test_activation_standalone_kernel(name, kernel):
    tail, scalars, _ = ACT_TAILS[name]
    inits = {}
    _scalars(inits, **scalars)
    ops = check(_standalone(tail, inits), channels=6)
    assert ops == ["max_pool2d", kernel], ops


def test_squeeze_excitation_stays_on_textures():
    """MobileNetV3's SE: pool -> 1x1 conv -> relu -> 1x1 conv -> hardsigmoid -> gate * x."""
    rng = np.random.default_rng(1)
    inits = {}
    nodes = [
        _conv(rng, inits, "x", "c", 12, 3),
        helper.make_node("GlobalAveragePool", ["c"], ["p"]),
        _conv(rng, inits, "p", "f1", 4, 12, k=1),
        helper.make_node("Relu", ["f1"], ["r"]),
        _conv(rng, inits, "r", "f2", 12, 4, k=1),
        helper.make_node("HardSigmoid", ["f2"], ["g"], alpha=1 / 6, beta=0.5),
        helper.make_node("Mul", ["g", "c"], ["y"]),
    ]
    ops = check(_graph(nodes, inits))
    assert ops.count("multiply_channels") == 1 and sum(op.startswith("conv2d") for op in ops) == 3, ops
    assert len(ops) == 5, ops  # conv, pool, conv(+relu), conv(+hardsigmoid), gate multiply


def test_batch_norm_without_conv_is_one_affine_kernel():
    rng = np.random.default_rng(2)
    inits = dict(s=rng.uniform(0.5, 1.5, 6), b=rng.standard_normal(6), m=rng.standard_normal(6), v=rng.uniform(0.5, 1.5, 6))
    nodes = [
        helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2]),
        helper.make_node("BatchNormalization", ["p", "s", "b", "m", "v"], ["n"]),
        helper.make_node("Relu", ["n"], ["y"]),
    ]
    assert check(_graph(nodes, inits, channels=6), channels=6) == ["max_pool2d", "affine_relu"]


def test_mul_add_after_conv_folds_into_its_weights():
    """Batch norm as Caffe/TF exporters write it: Mul then Add by [1, C, 1, 1] constants."""
    rng = np.random.default_rng(3)
    inits = dict(s=rng.uniform(0.5, 1.5, (1, 8, 1, 1)), t=rng.standard_normal((1, 8, 1, 1)))
    tail = [helper.make_node("Mul", ["c", "s"], ["m"]), helper.make_node("Add", ["m", "t"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    assert check(_conv_then(tail, inits)) == ["conv2d_nchw4c"]


def test_concat_of_six_inputs():
    rng = np.random.default_rng(4)
    inits = {}
    chans = [3, 4, 5, 8, 2, 6]
    nodes = [_conv(rng, inits, "x", f"c{i}", c, 3, k=1) for i, c in enumerate(chans)]
    nodes.append(helper.make_node("Concat", [f"c{i}" for i in range(len(chans))], ["y"], axis=1))
    ops = check(_graph(nodes, inits))
    assert sum(op.startswith("conv2d") for op in ops) == len(chans), ops
    assert sum(op.startswith("concat") for op in ops) == 3, ops  # (4 inputs, 2 inputs) then the 2 results
