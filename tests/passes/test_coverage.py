"""Mobile CNN patterns as TVM's ONNX importer writes them, one small ONNX graph each (built
with onnx.helper), compiled onto our kernels and checked against onnxruntime; the plan must
show the pattern fused into our kernels, with layout transforms only at the model's edges."""

import numpy as np
import pytest
from onnx import helper

from helpers.onnx_graphs import EDGE

#: Our kernels on plain tensors (tokens, logits): a value unpacked for them is read plain.
PLAIN_KERNELS = ("softmax_rows", "layer_norm_rows", "mean_rows", "gemm", "elementwise_plain", "gather")
from helpers.onnx_graphs import PATTERN_RTOL as RTOL
from helpers.onnx_graphs import check_pattern as check
from helpers.onnx_graphs import conv_node as _conv
from helpers.onnx_graphs import pattern_graph as _graph
from helpers.onnx_graphs import scalars as _scalars
from helpers.onnx_graphs import STANDALONE_PRODUCER, standalone_graph
from tir_adreno import compile_model
from tir_adreno.frontend.onnx_models import batch_norm_scale, batch_norm_variance
from tir_adreno.reference import reference_outputs, relative_error

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
    from tir_adreno.passes import epilogue_chain as relax_pass  # where a tail's Epilogue is made

    seen = []
    real = relax_pass.Epilogue
    monkeypatch.setattr(relax_pass, "Epilogue", lambda **kw: seen.append((kw["activation"], kw.get("expr"))) or real(**kw))
    assert check(_conv_then(tail, inits)) == ["conv2d_nchw4c"]
    assert seen == [(expected, None)]  # named, not an expression


def test_onnx_default_hardsigmoid_is_one_kernel():
    """HardSigmoid with ONNX's default alpha=0.2: an affine step, then a clamp to [0, 1]."""
    tail = [helper.make_node("HardSigmoid", ["c"], ["y"])]
    assert check(standalone_graph(tail, {}), channels=6) == [STANDALONE_PRODUCER, "affine_clip"]
    assert check(_conv_then(tail)) == ["conv2d_nchw4c"]


@pytest.mark.parametrize("name,kernel", [("relu6", "clip"), ("hardswish", "hardswish"), ("silu", "silu"), ("hardsigmoid", "hardsigmoid"), ("hardswish_decomposed", "hardswish")])
def test_activation_standalone_kernel(name, kernel):
    tail, scalars, _ = ACT_TAILS[name]
    inits = {}
    _scalars(inits, **scalars)
    ops = check(standalone_graph(tail, inits), channels=6)
    assert ops == [STANDALONE_PRODUCER, kernel], ops


SE_ACTIVATIONS = {
    "mobilenet_v3": ([helper.make_node("Relu", ["f1"], ["r"])], helper.make_node("HardSigmoid", ["f2"], ["g"], alpha=1 / 6, beta=0.5)),
    "efficientnet": ([helper.make_node("Sigmoid", ["f1"], ["s"]), helper.make_node("Mul", ["f1", "s"], ["r"])], helper.make_node("Sigmoid", ["f2"], ["g"])),
}


@pytest.mark.parametrize("kind", sorted(SE_ACTIVATIONS))
def test_squeeze_excitation_stays_on_textures(kind):
    """SE: pool -> 1x1 conv -> act (ReLU / SiLU) -> 1x1 conv -> gate (hardsigmoid / sigmoid) -> gate * x."""
    rng = np.random.default_rng(1)
    inits = {}
    act, gate = SE_ACTIVATIONS[kind]
    nodes = [
        _conv(rng, inits, "x", "c", 12, 3),
        helper.make_node("GlobalAveragePool", ["c"], ["p"]),
        _conv(rng, inits, "p", "f1", 4, 12, k=1),
        *act,
        _conv(rng, inits, "r", "f2", 12, 4, k=1),
        gate,
        helper.make_node("Mul", ["g", "c"], ["y"]),
    ]
    ops = check(_graph(nodes, inits))
    assert ops.count("multiply_channels") == 1 and ops.count("excitation") == 1, ops
    assert len(ops) == 3, ops  # conv, excitation (pool, conv + act, conv + gate), gate multiply


def test_batch_norm_without_conv_is_one_affine_kernel():
    rng = np.random.default_rng(2)
    v = batch_norm_variance(rng, 6)
    v[0] = 1e-4  # the epsilon (1e-5) moves this channel by ~5%
    inits = dict(s=batch_norm_scale(rng, v), b=rng.standard_normal(6), m=rng.standard_normal(6), v=v)
    nodes = [
        helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2]),
        helper.make_node("BatchNormalization", ["p", "s", "b", "m", "v"], ["n"]),
        helper.make_node("Relu", ["n"], ["y"]),
    ]
    # the norm and the ReLU after the pool are its epilogue (an elementwise chain)
    assert check(_graph(nodes, inits, channels=6), channels=6) == ["max_pool2d"]
    # where the pool's output has a second reader (a residual), they are an affine kernel of their own (the add another)
    nodes[2:] = [helper.make_node("Relu", ["n"], ["r"]), helper.make_node("Add", ["r", "p"], ["y"])]
    assert check(_graph(nodes, inits, channels=6), channels=6) == ["max_pool2d", "affine_relu", "add"]


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


def test_inception_v2_mul_add_batch_norm_folds_into_convs():
    """The onnx package's Inception-v2 writes batch norm as Mul/Add by [1, C, 1, 1]: folded,
    the lowered model has no layout transform next to a conv (only before the classifier)."""
    import onnx
    from tvm import relax

    from tir_adreno.compiler import import_model, lower
    from tir_adreno.strategy.profile import get_profile
    from tir_adreno.frontend.onnx_models import light_model_path, randomize_weights
    from tir_adreno.passes import OURS_ATTR

    mod, _ = import_model(randomize_weights(onnx.load(light_model_path("inception_v2")), seed=3))
    mod = lower(mod, get_profile("adreno"))  # compile only: planned for an Adreno GPU
    main = mod["main"]
    calls = [b for block in main.body.blocks for b in block.bindings if isinstance(b.value, relax.Call) and b.value.op.name == "relax.call_tir"]
    ours = {b.var: bool(mod[b.value.args[0]].attrs.get(OURS_ATTR, False)) for b in calls}
    names = [b.value.args[0].name_hint for b in calls]
    assert sum(n.startswith("conv2d") for n in names) >= 60 and all(ours[b.var] for b in calls if b.value.args[0].name_hint.startswith("conv2d"))
    # a view (``relax.memory.view``: a reshape of a plain tensor) is read as the tensor it views
    views = {b.var: b.value.args[0] for block in main.body.blocks for b in block.bindings
             if isinstance(b.value, relax.Call) and b.value.op.name == "relax.memory.view"}

    def reads(call, var) -> bool:
        return any((views.get(f, f)).same_as(var) for f in call.value.args[1].fields)

    for b in calls:
        if b.value.args[0].name_hint.startswith(EDGE):
            (src,) = b.value.args[1].fields
            consumers = [c for c in calls if reads(c, b.var)]
            # Either the model input is packed, or a value is unpacked for a plain reader: upstream, or
            # our kernels on plain tensors (the classifier's softmax over its logits).
            plain_reader = [c for c in consumers if not ours[c.var] or c.value.args[0].name_hint.startswith(PLAIN_KERNELS)]
            assert any(src.same_as(p) for p in main.params) or (consumers and plain_reader == consumers), b.value.args[0].name_hint


def test_importer_made_kernels_are_not_ours():
    """Clip with attribute bounds (opset 6) imports as PrimFuncs of TVM's importer: upstream's."""
    rng = np.random.default_rng(5)
    inits = {}
    nodes = [_conv(rng, inits, "x", "c", 8, 3), helper.make_node("Clip", ["c"], ["y"], min=-0.5, max=0.5)]
    compiled = compile_model(_graph(nodes, inits, opset=6), progress=lambda _: None)
    x = np.random.default_rng(0).standard_normal((1, 3, 7, 7)).astype("float32")
    (out,) = compiled.run({"x": x})
    ref = np.clip(reference_outputs(_graph(nodes, inits, opset=6), {"x": x})[0], -0.5, 0.5)
    assert relative_error(out, ref) <= RTOL
    ours = {p["op"]: p["ours"] for p in compiled.profile()}
    assert ours["conv2d_nchw4c"] and not ours["maximum"] and not ours["minimum"], ours


# --- the new kernels against float64 NumPy --------------------------------------------------

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import functools  # noqa: E402

from primfuncs import elementwise  # noqa: E402
from primfuncs.activation_table import NAMES  # noqa: E402
from tir_adreno.reference import activation as reference_activation  # noqa: E402
from helpers.numeric import rand, run_kernel  # noqa: E402


#: Every activation an activation kernel takes (clip has its own kernel), its float64 reference
#: from the one table the kernels' formulas come from (tests/kernels/test_activation_table.py checks
#: that table against the textbook definitions).
ACTIVATIONS = {name: functools.partial(reference_activation, name=name) for name in NAMES if name not in (None, "clip")}
blocked_shapes = st.tuples(st.integers(1, 2), st.integers(1, 3), st.integers(1, 6), st.integers(1, 7), st.integers(0, 2**32 - 1))
scopes = st.sampled_from(["global.texture", "global"])


@given(blocked_shapes, scopes, st.sampled_from(sorted(ACTIVATIONS)))
def test_activation_kernel(device, d, scope, name):
    *shape, seed = d
    x = rand(np.random.default_rng(seed), (*shape, 4)) * 4  # past the breakpoints at -3, 0, 3, 6
    x.reshape(-1)[:3] = [np.nan, np.inf, -np.inf]  # NaN and Inf as NumPy has them
    y = run_kernel(device, elementwise.activation((*shape, 4), name, scope=scope), x)
    with np.errstate(over="ignore", invalid="ignore"):
        ref = ACTIVATIONS[name](x.astype(np.float64))
    np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-6)  # NaN where ref is NaN (equal_nan)


@given(blocked_shapes, scopes, st.sampled_from([None, "relu", "hardswish"]))
def test_affine_kernel(device, d, scope, activation):
    *shape, seed = d
    rng = np.random.default_rng(seed)
    x, scale, shift = rand(rng, (*shape, 4)), rand(rng, (shape[1], 4)), rand(rng, (shape[1], 4))
    y = run_kernel(device, elementwise.affine((*shape, 4), activation, scope=scope), x, scale, shift)
    ref = x.astype(np.float64) * scale[None, :, None, None] + shift[None, :, None, None]
    np.testing.assert_allclose(y, ACTIVATIONS.get(activation, lambda v: v)(ref), rtol=1e-5, atol=1e-6)


@given(blocked_shapes, scopes, st.sampled_from(["multiply", "add"]))
def test_channel_broadcast_kernel(device, d, scope, op):
    *shape, seed = d
    rng = np.random.default_rng(seed)
    x, gate = rand(rng, (*shape, 4)), rand(rng, (shape[0], shape[1], 1, 1, 4))
    y = run_kernel(device, elementwise.binary((*shape, 4), op, scope=scope, broadcast_channels=True), x, gate)
    ref = x.astype(np.float64) * gate if op == "multiply" else x.astype(np.float64) + gate
    np.testing.assert_array_equal(y, ref.astype(np.float32))  # one rounded operation per element


def test_bad_activation_arguments():
    with pytest.raises(ValueError, match="activation must be one of"):
        elementwise.activation((1, 1, 2, 2, 4), "mish")
    with pytest.raises(ValueError, match="activation must be one of"):
        elementwise.affine((1, 1, 2, 2, 4), "mish")
    with pytest.raises(ValueError, match="clip_min <= clip_max"):
        elementwise.affine((1, 1, 2, 2, 4), "clip", clip_min=1.0, clip_max=-1.0)
    from primfuncs.epilogue import Epilogue

    with pytest.raises(ValueError, match="clip_min <= clip_max"):
        Epilogue(activation="clip", clip_min=1.0, clip_max=0.0)
