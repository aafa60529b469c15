"""Elementwise chains after an anchor kernel fuse into its expression epilogue (issue 34).

Hypothesis draws a chain (unary ops, binary ops with a scalar, a per-channel constant or another
activation in full or broadcast, depth 1-4; after a conv or a MatMul a second other activation, their
kernels reading two) after a conv, a depthwise conv, a MatMul on tokens or a
row kernel on tokens (layer norm, RMS norm, softmax, batch norm: ``primfuncs.rows``) or a
pool (MaxPool, AveragePool, GlobalAveragePool), a nearest resize or a channel concat,
builds one ONNX graph, compiles it onto PoCL, compares with onnxruntime and asserts the anchor and
its chain are ONE launch (plus the model's layout transforms). The expression evaluator itself is
checked against NumPy written out op by op.
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from onnx import TensorProto, helper, numpy_helper

from helpers.onnx_graphs import PATTERN_RTOL, group_norm_nodes
from primfuncs import epilogue_expr as ex
from primfuncs.activation_table import TABLE, numpy_activation
from primfuncs.epilogue import Epilogue

# -- the evaluator against NumPy, op by op ------------------------------------------------------

NUMPY_UNARY = {"neg": np.negative, "abs": np.abs, "exp": np.exp, "sqrt": np.sqrt, "tanh": np.tanh,
               "erf": np.vectorize(math.erf, otypes=[np.float64]), "reciprocal": lambda v: 1.0 / v}
NUMPY_BINARY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
                "maximum": np.maximum, "minimum": np.minimum, "pow": np.power}


def _sample(rng, shape):
    x = rng.standard_normal(shape) * 3
    x.flat[:4] = [np.nan, np.inf, -np.inf, 0.0]  # NaN and Inf as NumPy has them
    return x


def test_every_unary_op_is_numpys():
    rng = np.random.default_rng(0)
    x = _sample(rng, (2, 5, 3, 3))
    with np.errstate(all="ignore"):
        for op, fn in NUMPY_UNARY.items():
            np.testing.assert_array_equal(ex.numpy_evaluate(ex.Unary(op, ex.X()), x), fn(x), err_msg=op)
        for name in TABLE:
            np.testing.assert_array_equal(ex.numpy_evaluate(ex.Unary(name, ex.X()), x), numpy_activation(x, name), err_msg=name)
    got = ex.numpy_evaluate(ex.Unary("leaky_relu", ex.X(), (("alpha", 0.3),)), x)
    np.testing.assert_array_equal(got, numpy_activation(x, "leaky_relu", alpha=0.3))


def test_binary_ops_broadcast_their_leaves():
    rng = np.random.default_rng(1)
    x = _sample(rng, (2, 5, 3, 4))
    c = rng.standard_normal(5)
    operands = {"full": rng.standard_normal(x.shape), "channel": rng.standard_normal((2, 5, 1, 1)),
                "pixel": rng.standard_normal((2, 1, 3, 4))}
    with np.errstate(all="ignore"):
        for op, fn in NUMPY_BINARY.items():
            if op == "pow":
                np.testing.assert_array_equal(ex.numpy_evaluate(ex.Binary(op, ex.X(), ex.Const(3.0)), x), x ** 3.0)
                continue
            got = ex.numpy_evaluate(ex.Binary(op, ex.Channel(0), ex.X()), x, channels=[c])
            np.testing.assert_array_equal(got, fn(c.reshape(1, 5, 1, 1), x), err_msg=op)
            for kind, operand in operands.items():
                got = ex.numpy_evaluate(ex.Binary(op, ex.X(), ex.Operand(kind)), x, operands=[operand])
                np.testing.assert_array_equal(got, fn(x, operand), err_msg=f"{op} {kind}")
    # tokens: the channel axis last
    t = rng.standard_normal((3, 7, 5))
    got = ex.numpy_evaluate(ex.Binary("multiply", ex.X(), ex.Channel(0)), t, channels=[c], channel_axis=-1)
    np.testing.assert_array_equal(got, t * c)


def test_expressions_are_keys_and_checked():
    e = ex.Binary("add", ex.Unary("clip", ex.X(), (("lo", -1.0), ("hi", 2.0))), ex.Channel(1))
    assert e == ex.Binary("add", ex.Unary("clip", ex.X(), (("lo", -1.0), ("hi", 2.0))), ex.Channel(1))
    assert hash(Epilogue(expr=e)) == hash(Epilogue(expr=e))
    assert ex.channel_count(e) == 2 and ex.operand_kinds(e) == ()
    assert Epilogue(bias=True, expr=e).bias_shape(3) == (3, 12)
    assert Epilogue(expr=ex.Binary("add", ex.X(), ex.Operand("pixel"))).residual_shape((1, 3, 5, 6, 4)) == (1, 1, 5, 6, 4)
    assert Epilogue().params(["X"], "Y") == ["X", "Y"]
    with pytest.raises(ValueError, match="unary op"):
        ex.Unary("cube", ex.X())
    with pytest.raises(ValueError, match="constant exponent"):
        ex.Binary("pow", ex.X(), ex.X())
    two = ex.Binary("multiply", ex.Binary("add", ex.X(), ex.Operand("pixel")), ex.Operand("channel", 1))
    assert ex.operand_kinds(two) == ("pixel", "channel") and ex.describe(two) == "multiply(add(x, operand[pixel]), operand1[channel])"
    assert Epilogue(residual=True, expr=ex.Binary("add", ex.X(), ex.Operand("pixel"))).extra_kinds == ("full", "pixel")
    assert Epilogue(expr=two).residual_shape((1, 3, 5, 6, 4), 1) == (1, 3, 1, 1, 4)
    assert Epilogue(expr=two).params(["X"], "Y") == ["X", "Residual", "Residual2", "Y"]
    with pytest.raises(ValueError, match="at most 2 other activations"):
        Epilogue(residual=True, expr=two)
    with pytest.raises(ValueError, match="kinds 'full' and 'pixel'"):
        ex.operand_kinds(ex.Binary("add", ex.Operand("full"), ex.Operand("pixel")))
    with pytest.raises(ValueError, match="without gaps"):
        ex.operand_kinds(ex.Binary("add", ex.X(), ex.Operand("full", 1)))
    with pytest.raises(ValueError, match="index must be below 2"):
        ex.Operand("full", 2)


# -- random chains after each anchor, compiled and run -------------------------------------------

#: unary steps as ONNX nodes (a Tanh before Exp keeps exp finite; Sqrt reads an Abs)
UNARY_STEPS = {
    "Relu": [("Relu", {})], "Sigmoid": [("Sigmoid", {})], "Tanh": [("Tanh", {})], "Neg": [("Neg", {})],
    "Abs": [("Abs", {})], "Erf": [("Erf", {})], "LeakyRelu": [("LeakyRelu", {"alpha": 0.2})],
    "Exp": [("Tanh", {}), ("Exp", {})], "Sqrt": [("Abs", {}), ("Sqrt", {})], "HardSigmoid": [("HardSigmoid", {})],
    "Log": [("Tanh", {}), ("Exp", {}), ("Log", {})],  # of exp(tanh x): never 0
}
#: (ONNX Max/Min import as max/min over a stack of broadcasts, which no chain reads: not drawn; the
#: evaluator's maximum/minimum are Relax's, e.g. a Clip the importer wrote as call_tir)
BINARY_STEPS = ("Add", "Sub", "Mul", "Div", "Pow")
#: the row kernels on tokens (primfuncs.rows) as anchors
NORMS = ("layer_norm", "rms_norm", "softmax", "batch_norm")
#: what the other operand of a binary step is, per anchor (the GEMM reads operands of its output's shape)
LEAVES = {"conv": ("scalar", "channel", "full", "per_channel", "per_pixel"), "depthwise": ("scalar", "channel", "full", "per_pixel"),
          "matmul": ("scalar", "channel", "tensor", "full"),  # tensor: a constant of [L, N] (attention biases)
          **{norm: ("scalar", "channel", "tensor", "full") for norm in NORMS},
          "maxpool": ("scalar", "channel", "full", "per_channel", "per_pixel"),
          "avgpool": ("scalar", "channel", "full", "per_channel", "per_pixel"),
          "globalavgpool": ("scalar", "channel", "full", "per_pixel"),  # [N, C, 1, 1]: full is per channel
          "resize": ("scalar", "channel", "full", "per_channel", "per_pixel"),
          "concat": ("scalar", "channel", "full", "per_channel", "per_pixel"),
          "group_norm": ("scalar", "channel", "full", "per_channel", "per_pixel")}  # a map's norm (timm's GroupNorm as exported)
#: the pool anchors: ONNX node and attributes, and the input's size for an output of ``size`` x ``size``
POOLS = {"maxpool": ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), lambda s: 2 * s),
         "avgpool": ("AveragePool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1), lambda s: s),
         "globalavgpool": ("GlobalAveragePool", {}, lambda s: s)}
#: anchors that read a conv's map (a global pool of a graph input is a plain mean of rows, the token
#: path's): that conv is one more kernel of the graph, its own (a map has two readers: no chain)
AFTER_A_CONV = {"globalavgpool"}
#: anchors whose kernels read two activations (the conv's direct kernel, the GEMM): a chain after them
#: draws a second graph input
TWO_OPERANDS = ("conv", "depthwise", "matmul")
#: anchors on tokens [1, L, C] (the others on maps [1, C, H, W]): the row kernels (primfuncs.rows) and the GEMM
TOKEN_ANCHORS = ("matmul", *NORMS)


@st.composite
def chains(draw, anchor):
    steps = []
    # binary steps more often after the two-activation anchors: a second activation in 1 of 5-7 chains
    # after a conv (measured over 200 draws), 1 of 30 after a MatMul (its leaves mostly constants)
    two = anchor in TWO_OPERANDS
    for _ in range(draw(st.integers(1, 4))):
        if anchor not in TOKEN_ANCHORS and draw(st.integers(0, 5)) == 0:  # over axis 1: the channels of a map
            steps.append(("batch_norm",))
        elif draw(st.sampled_from([True, False, False] if two else [True, False])):
            steps.append(("unary", draw(st.sampled_from(sorted(UNARY_STEPS)))))
        else:
            op = draw(st.sampled_from(BINARY_STEPS))
            leaf = "scalar" if op == "Pow" else draw(st.sampled_from(LEAVES[anchor]))
            # x on the right; the leaf read again (an activation) or a new one (after conv and MatMul: a second)
            steps.append(("binary", op, leaf, draw(st.booleans()) and op not in ("Div", "Pow"),
                          draw(st.sampled_from([True, False, False] if two else [True]))))
    return steps


class GraphBuilder:
    def __init__(self, rng, anchor, channels, size):
        self.rng, self.anchor, self.c, self.size = rng, anchor, channels, size
        self.nodes, self.inits, self.inputs, self.feeds = [], {}, [], {}
        self.operand = None
        self.reads = {}  # graph input -> times read

    @property
    def out_shape(self):
        if self.anchor in TOKEN_ANCHORS:
            return (1, self.size * self.size, self.c)
        return (1, self.c, 1, 1) if self.anchor == "globalavgpool" else (1, self.c, self.size, self.size)

    def add_input(self, name, shape, positive=False):
        data = self.rng.uniform(0.5, 2.0, shape) * self.rng.choice([-1, 1]) if positive else self.rng.standard_normal(shape)
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        self.feeds[name] = data.astype(np.float32)
        return name

    def leaf(self, kind, positive, again=True):
        """The other operand's name: a constant, or a graph input ("g", reused; and after a conv or a
        MatMul, whose kernels read two activations, a second one "g2" when ``again`` is False). A
        constant tensor is an operand too: after it any other becomes a scalar, and it comes first."""
        c = self.c
        if self.anchor in TWO_OPERANDS and kind in ("full", "per_channel", "per_pixel") and self.operand == "g":
            return self.second_input(kind, positive, again)
        if kind in ("tensor", "full", "per_channel", "per_pixel") and self.operand is not None:
            # the graph input "g" is read again; a constant tensor after it would be a second operand
            kind = "scalar" if self.operand != "g" or kind == "tensor" else kind
        if kind == "tensor":
            self.operand = "tensor"
        if kind in ("scalar", "channel", "tensor"):
            shape = {"scalar": (), "channel": (c,) if self.anchor in TOKEN_ANCHORS else (1, c, 1, 1), "tensor": self.out_shape[1:]}[kind]
            name = f"k{len(self.inits)}"
            value = self.rng.uniform(0.5, 2.0, shape) * self.rng.choice([-1, 1], shape) if positive else self.rng.standard_normal(shape)
            self.inits[name] = np.asarray(value, np.float32)
            return name
        if self.operand is None:
            self.operand = self.add_input("g", self.operand_shape(kind), positive=True)  # away from 0: Div reads it too
        self.reads["g"] = self.reads.get("g", 0) + 1
        return self.operand

    def operand_shape(self, kind):
        n, c, h, w = self.out_shape if len(self.out_shape) == 4 else (1, self.c, self.size, self.size)
        return {"full": self.out_shape, "per_channel": (n, c, 1, 1), "per_pixel": (n, 1, h, w)}[kind]

    def second_input(self, kind, positive, again):
        """After "g": "g" again, or a second graph input "g2" (in ``kind``'s shape) or "g2" again. The
        kernel reads two activations: when "g" was the conv's or the GEMM's residual (the first Add),
        reading it again in the chain takes the second; so "g2" only while "g" was read once, and "g"
        no more once "g2" is read (a scalar instead)."""
        if "g2" in self.reads:
            name = "g2" if again else None
        elif again or self.reads["g"] > 1:
            name = "g"
        else:
            name = self.add_input("g2", self.operand_shape(kind), positive=True)
        if name is None:
            return self.leaf("scalar", positive)
        self.reads[name] = self.reads.get(name, 0) + 1
        return name

    def norm_nodes(self):
        """A row kernel's op on tokens: a layer norm over the channels (ONNX LayerNormalization,
        random gamma and beta), an RMS norm as torch exports it (``x / sqrt(mean(x ** 2) + eps) *
        gamma``), a softmax over the channels, or a batch norm (over axis 1, the tokens)."""
        rng, c = self.rng, self.c
        self.add_input("x", self.out_shape)
        if self.anchor == "softmax":
            self.nodes.append(helper.make_node("Softmax", ["x"], ["v0"], axis=-1))
            return "v0"
        if self.anchor == "batch_norm":
            return self.batch_norm("x", "v0")
        self.inits["gamma"] = (rng.standard_normal(c) * 0.5 + 1).astype(np.float32)
        if self.anchor == "layer_norm":
            self.inits["beta"] = (rng.standard_normal(c) * 0.5).astype(np.float32)
            self.nodes.append(helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["v0"], axis=-1, epsilon=1e-5))
            return "v0"
        self.inits["two"], self.inits["eps"] = np.float32(2.0), np.float32(1e-6)
        self.nodes += [helper.make_node("Pow", ["x", "two"], ["sq"]), helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[-1]),
                       helper.make_node("Add", ["ms", "eps"], ["mse"]), helper.make_node("Sqrt", ["mse"], ["rms"]),
                       helper.make_node("Div", ["x", "rms"], ["xn"]), helper.make_node("Mul", ["xn", "gamma"], ["v0"])]
        return "v0"

    def batch_norm(self, v, name):
        """An inference BatchNormalization of ``v`` over axis 1 (a map's channels, a token anchor's
        tokens), random statistics and affine."""
        c, rng = self.out_shape[1], self.rng
        params = {f"{name}_{field}": values for field, values in (("scale", rng.standard_normal(c)), ("shift", rng.standard_normal(c)),
                                                                   ("mean", rng.standard_normal(c)), ("var", rng.uniform(0.5, 2.0, c)))}
        self.inits.update({k: v.astype(np.float32) for k, v in params.items()})
        self.nodes.append(helper.make_node("BatchNormalization", [v, *params], [name], epsilon=1e-5))
        return name

    def anchor_nodes(self):
        rng, c = self.rng, self.c
        if self.anchor in NORMS:
            return self.norm_nodes()
        if self.anchor == "matmul":
            self.add_input("x", (1, self.size * self.size, c + 3))
            self.inits["w"] = (rng.standard_normal((c + 3, c)) / math.sqrt(c + 3)).astype(np.float32)
            self.nodes.append(helper.make_node("MatMul", ["x", "w"], ["v0"]))
            return "v0"
        if self.anchor == "concat":  # of two maps along the channels (6: 3 + 3, lanes straddling blocks)
            halves = [self.add_input(name, (1, part, self.size, self.size)) for name, part in (("x", c // 2), ("xb", c - c // 2))]
            self.nodes.append(helper.make_node("Concat", halves, ["v0"], axis=1))
            return "v0"
        if self.anchor == "resize":  # a nearest 2x upsampling (the size is even)
            self.add_input("x", (1, c, self.size // 2, self.size // 2))
            self.inits["scales"] = np.array([1, 1, 2, 2], np.float32)
            self.nodes.append(helper.make_node("Resize", ["x", "", "scales"], ["v0"], mode="nearest"))
            return "v0"
        if self.anchor == "group_norm":  # its affine steps and an activation after it are the kernel's own; the rest its epilogue
            self.add_input("x", (1, c, self.size, self.size))
            inits = {}
            self.nodes += group_norm_nodes("x", "v0", inits, c, 2 if c % 8 == 0 else 1, rng)
            self.inits.update({k: v if v.dtype == np.int64 else v.astype(np.float32) for k, v in inits.items()})
            return "v0"
        if self.anchor in POOLS:
            op, attrs, extent = POOLS[self.anchor]
            self.add_input("x", (1, c, extent(self.size), extent(self.size)))
            x = "x"
            if self.anchor in AFTER_A_CONV:
                self.inits["w"] = (rng.standard_normal((c, c, 3, 3)) / math.sqrt(9 * c)).astype(np.float32)
                self.nodes.append(helper.make_node("Conv", ["x", "w"], ["m"], pads=[1] * 4))
                x = "m"
            self.nodes.append(helper.make_node(op, [x], ["v0"], **attrs))
            return "v0"
        self.add_input("x", (1, c, self.size, self.size))
        group = c if self.anchor == "depthwise" else 1
        self.inits["w"] = (rng.standard_normal((c, c // group, 3, 3)) / math.sqrt(9 * c // group)).astype(np.float32)
        self.inits["b"] = (rng.standard_normal(c) * 0.5).astype(np.float32)
        self.nodes.append(helper.make_node("Conv", ["x", "w", "b"], ["v0"], pads=[1] * 4, group=group))
        return "v0"

    def build(self, steps):
        v = self.anchor_nodes()
        for i, step in enumerate(steps):
            if step[0] == "batch_norm":
                v = self.batch_norm(v, f"bn{i}")
                continue
            if step[0] == "unary":
                for j, (op, attrs) in enumerate(UNARY_STEPS[step[1]]):
                    self.nodes.append(helper.make_node(op, [v], [f"u{i}_{j}"], **attrs))
                    v = f"u{i}_{j}"
                continue
            _, op, kind, swapped, *again = step
            if op == "Pow":
                self.inits[f"p{i}"] = np.float32(self.rng.choice([2.0, 3.0]))
                other = f"p{i}"
            else:
                other = self.leaf(kind, positive=op == "Div", again=again[0] if again else True)
            args = [other, v] if swapped else [v, other]
            self.nodes.append(helper.make_node(op, args, [f"b{i}"]))
            v = f"b{i}"
        self.nodes.append(helper.make_node("Identity", [v], ["y"]))
        graph = helper.make_graph(self.nodes, "chain", self.inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                                  [numpy_helper.from_array(np.asarray(a), k) for k, a in self.inits.items()])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _is_layout_transform(op: str) -> bool:
    return "_to_" in op or op.startswith("layout_transform")


def check_chain(anchor, steps, channels, size, seed):
    from tir_adreno import compile_model
    from tir_adreno.reference import reference_outputs, relative_error

    size += size % 2 if anchor == "resize" else 0  # its input is half the size
    builder = GraphBuilder(np.random.default_rng(seed), anchor, channels, size)
    model = builder.build(steps)
    compiled = compile_model(model, progress=lambda _: None)
    (out,) = compiled.run(builder.feeds, profile=True)  # outputs poisoned first
    (ref,) = reference_outputs(model, builder.feeds)
    err = relative_error(out, ref)
    assert err <= PATTERN_RTOL, (err, steps)
    rows = compiled.profile()
    assert all(r["ours"] for r in rows), rows
    kernels = [r["op"] for r in rows if not _is_layout_transform(r["op"])]
    assert len(kernels) == 1 + (anchor in AFTER_A_CONV), (kernels, steps)


@pytest.mark.parametrize("anchor", sorted(LEAVES))
@settings(max_examples=max(2, settings().max_examples // 4), deadline=None)  # each example compiles a model (~20 s)
@given(data=st.data())
def test_random_chain_fuses_into_the_anchor(anchor, data):
    steps = data.draw(chains(anchor), label="steps")
    channels = data.draw(st.sampled_from([4, 6, 8]), label="channels")  # 6: a padded last block
    size = data.draw(st.integers(3, 6), label="size")
    check_chain(anchor, steps, channels, size, seed=data.draw(st.integers(0, 2**16), label="seed"))


@pytest.mark.parametrize("anchor", sorted(LEAVES))
def test_a_deep_chain_with_every_leaf_kind(anchor):
    """One fixed chain per anchor that reads a scalar, a per-channel constant and an operand."""
    operand = LEAVES[anchor][-1]
    steps = [("unary", "Sigmoid"), ("binary", "Mul", "channel", True), ("binary", "Add", operand, False),
             ("binary", "Pow", "scalar", False), ("binary", "Sub", "scalar", True), ("unary", "Tanh")]
    check_chain(anchor, steps, channels=6, size=5, seed=3)


@pytest.mark.parametrize("anchor", sorted(LEAVES))
def test_log_fuses_like_on_plain_tensors(anchor):
    """``log`` (which the plain-tensor chains took first: one walk, ``passes.elementwise_chain``,
    serves both) in an anchor's chain, between a scale and a per-channel add."""
    steps = [("binary", "Mul", "scalar", False), ("unary", "Log"), ("binary", "Add", "channel", False)]
    check_chain(anchor, steps, channels=6, size=4, seed=5)


@pytest.mark.parametrize("anchor", ["conv", "depthwise", "maxpool"])
def test_a_batch_norm_after_the_activation_is_the_epilogue(anchor):
    """XCiT's local patch interaction (depthwise conv -> GELU -> BatchNorm): the norm after the
    activation is ``x * scale + shift`` by per-channel constants in the anchor's epilogue, no
    affine kernel; then another step reads its output."""
    steps = [("unary", "Relu"), ("batch_norm",), ("binary", "Mul", "scalar", False)]
    check_chain(anchor, steps, channels=6, size=5, seed=9)


def test_a_refused_step_records_no_leaf():
    """``tanh(conv) ** c[C]``: the walk reads the per-channel exponent as a leaf, then refuses
    the step (a per-lane epilogue raises to constant powers only) and must forget that leaf, or the
    conv's ``Bias`` would carry a row its epilogue does not read. The chain before it still fuses."""
    from tir_adreno import compile_model
    from tir_adreno.reference import reference_outputs, relative_error

    rng = np.random.default_rng(7)
    inits = {"w": (rng.standard_normal((8, 4, 3, 3)) / 6).astype(np.float32), "b": rng.standard_normal(8).astype(np.float32),
             "e": rng.choice([1.0, 2.0, 3.0], (1, 8, 1, 1)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["v"], pads=[1] * 4), helper.make_node("Tanh", ["v"], ["m"]),
             helper.make_node("Pow", ["m", "e"], ["y"])]
    graph = helper.make_graph(nodes, "refused", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [helper.make_tensor(k, TensorProto.FLOAT, np.shape(a), np.ravel(a).tolist()) for k, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": rng.standard_normal((1, 4, 5, 5)).astype(np.float32)}
    compiled = compile_model(model, progress=lambda _: None)
    (out,) = compiled.run(feeds)
    (ref,) = reference_outputs(model, feeds)
    assert relative_error(out, ref) <= PATTERN_RTOL
    convs = [r for r in compiled.profile() if r["op"].startswith("conv")]
    assert len(convs) == 1 and len(compiled.profile()) > 1, convs  # the conv with tanh; the Pow a kernel of its own


@pytest.mark.parametrize("anchor", TWO_OPERANDS)
@pytest.mark.parametrize("residual", [True, False])
def test_a_chain_reading_two_activations(anchor, residual):
    """A residual add then a second activation (read twice), or two activations in the chain (one
    broadcast after a conv): the kernel reads both, one launch."""
    wide = "full" if anchor == "matmul" else "per_pixel"
    first = ("binary", "Add", "full", False, True) if residual else ("binary", "Mul", wide, True, True)
    steps = [first, ("unary", "Sigmoid"), ("binary", "Mul", "full" if anchor == "matmul" else "per_channel", True, False),
             ("binary", "Sub", "full", False, True), ("unary", "Tanh")]
    check_chain(anchor, steps, channels=6, size=5, seed=11)


# -- the Winograd conv's output transform with an expression (no model draws Winograd this small) --

@pytest.mark.parametrize("m, scope", [(2, "global.texture"), (4, "global")])
def test_winograd_output_transform_evaluates_the_expression(device, m, scope):
    """sigmoid(conv + bias) * c0 - operand[pixel] (0 -> 0.5 on padded lanes: they must stay 0), poisoned Y."""
    from helpers.conv import check_blocked_output, reference_conv2d
    from helpers.numeric import assert_close, pack_nchw4c, rand, unpack_nchw4c
    from primfuncs.conv import ConvConfig, winograd as wg
    from tir_adreno import ops
    from tir_adreno.codegen import build
    from tir_adreno.strategy.packing import pack_bias
    from tir_adreno.tuning.programs import ConvProgram

    rng = np.random.default_rng(m)
    n, c, h, w, o = 1, 5, 7, 6, 6
    expr = ex.Binary("subtract", ex.Binary("multiply", ex.X(), ex.Channel(0)), ex.Operand("pixel"))
    epi = Epilogue(bias=True, activation="sigmoid", expr=expr)
    kernels = wg.conv2d_winograd_nchw4c((n, c, h, w), (o, c, 3, 3), padding=(1, 1, 1, 1), m=m, epilogue=epi,
                                        config=ConvConfig(2, 2, (4, 2, 1)), scope=scope)
    x, wt, bias, c0, operand = rand(rng, (n, c, h, w)), rand(rng, (o, c, 3, 3)), rand(rng, (o,)), rand(rng, (o,)), rand(rng, (n, 1, h, w))
    y = reference_conv2d(x, wt, (1, 1), (1, 1, 1, 1), (1, 1), 1) + bias.reshape(1, o, 1, 1)
    ref = ex.numpy_evaluate(expr, numpy_activation(y, "sigmoid"), operands=[operand], channels=[c0])
    program = ConvProgram(f"winograd_{m}x{m}", build.build_cached(kernels.module()), kernels.names)
    assert program.inputs == ("X", "U", "Bias", "Residual")
    tensors = {
        "X": device.array(pack_nchw4c(x), scope, "X"),
        "U": device.array(wg.winograd_weight_transform(wt, m), kernels.weight_scope, "U"),
        "Bias": device.array(np.concatenate([pack_bias(bias), pack_bias(c0)], axis=1), "global", "Bias"),
        "Residual": device.array(pack_nchw4c(operand), scope, "Residual"),
        "Y": ops.empty_nchw4c(device, (n, o, h, w), "float32", scope, "Y"),  # poisoned
    }
    program.run(device, tensors)
    blocked = tensors["Y"].numpy()
    check_blocked_output(blocked, o)
    assert_close(unpack_nchw4c(blocked, o), ref, 1e-4)


def test_the_chain_steps_through_a_slice_of_every_channel():
    """GhostNet's ghost module and shortcut: ``cat([a, b])[:, :C] + shortcut``, the Slice keeping every
    channel: the concat, the Slice and the Add are one launch, within tolerance of onnxruntime; a
    Slice that drops a channel ends the chain: concat, slice and add are three launches."""
    from tir_adreno import compile_model
    from tir_adreno.reference import reference_outputs, relative_error

    rng = np.random.default_rng(4)
    # (a slice to one channel broadcast over the next op's six would fit the chain's shape: not the value)
    for keep, alone in ((6, ["concat_channels"]), (5, ["concat_channels", "slice_channels", "add"]), (1, ["concat_channels", "slice_channels", "add"])):
        nodes = [helper.make_node("Concat", ["x", "xb"], ["cat"], axis=1),
                 helper.make_node("Slice", ["cat", "zero", "end", "one"], ["s"]), helper.make_node("Add", ["s", "g"], ["y"])]
        inits = [numpy_helper.from_array(np.asarray(v, np.int64), name) for name, v in (("zero", [0]), ("end", [keep]), ("one", [1]))]
        shapes = {"x": (1, 3, 5, 5), "xb": (1, 3, 5, 5), "g": (1, 6 if keep == 1 else keep, 5, 5)}
        graph = helper.make_graph(nodes, "ghost", [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v)) for k, v in shapes.items()],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        feeds = {k: rng.standard_normal(v).astype(np.float32) for k, v in shapes.items()}
        compiled = compile_model(model, progress=lambda _: None)
        (out,) = compiled.run(feeds)
        assert relative_error(out, reference_outputs(model, feeds)[0]) <= PATTERN_RTOL
        kernels = [r["op"] for r in compiled.profile() if not _is_layout_transform(r["op"])]
        assert len(kernels) == len(alone) and kernels[:2] == alone[:2], kernels  # (the add's kernel: the planner's form)


# -- precedence: the pool's chain and the patterns anchored on an op it can take -------------------

#: Every fusion pattern anchored on an op a chain can take, and how a pool's chain and it meet. The
#: patterns anchored on the pool ops themselves (pooled_excitation, head_gemv, pooled_pointwise: a
#: global pool read by a 1x1 conv or a classifier) are tried before the pool rule by the registry
#: (``before``: pool, reduction) and need a conv, not an elementwise op, after the pool: disjoint.
CHAIN_OVERLAPS = {
    "gated_conv2d": "the chain first: a pool's gate multiply is its epilogue, once per pooled pixel, not once per conv tap",
    "grn_gated_conv2d": "disjoint: GRN's x * x reads one value twice, a step no chain takes",
    "grn_scale": "disjoint: its sqrt reads a sum of squares (a sum over H, W), no pool anchor (a mean over H, W is one)",
    "producer_gemm": "the chain first: an anchor takes its chain when it is emitted, before the pattern meets the chain's "
                     "first op; the GEMM computes only a chain no anchor took (its epilogue is cheaper than a re-evaluation)",
}


def test_every_pattern_a_chain_can_reach_is_named():
    from tir_adreno.passes import elementwise_chain
    from tir_adreno.passes.patterns import PATTERNS

    chain_ops = set(elementwise_chain.OPS)
    assert {p.name for p in PATTERNS if set(p.ops) & chain_ops} == set(CHAIN_OVERLAPS)


def _gated_after_pool(rng):
    """MaxPool 2x2 of a 16-channel map, times a per-channel gate (a graph input), read by a 1x1 conv."""
    from helpers.onnx_graphs import conv_node

    inits = {}
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Mul", ["p", "g"], ["m"]), conv_node(rng, inits, "m", "y", 8, 16, k=1)]
    graph = helper.make_graph(nodes, "gated", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 16, 16]),
                                               helper.make_tensor_value_info("g", TensorProto.FLOAT, [1, 16, 1, 1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [helper.make_tensor(k, TensorProto.FLOAT, v.shape, np.asarray(v, np.float32).ravel().tolist()) for k, v in inits.items()])
    feeds = {"x": rng.standard_normal((1, 16, 16, 16)).astype(np.float32), "g": rng.uniform(0.5, 2.0, (1, 16, 1, 1)).astype(np.float32)}
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), feeds


def _arities(model, profile) -> dict:
    """Kernel family -> the argument counts of its calls in the lowered plan."""
    from tvm import relax

    from tir_adreno.compiler import import_model, lower

    found = {}

    def visit(e):
        if isinstance(e, relax.Call) and getattr(e.op, "name", "") == "relax.call_tir":
            found.setdefault(e.args[0].name_hint.rstrip("0123456789"), []).append(len(e.args[1].fields))

    relax.analysis.post_order_visit(lower(import_model(model)[0], profile, lazy=True)["main"].body, visit)
    return found


def test_the_pool_chain_goes_before_gated_conv2d(monkeypatch):
    """``pool_chain > gated_conv2d``: the gate multiply after a pool is the pool's epilogue (the pool
    reads the gate: 2 arguments; the conv reads its input alone), one launch each, within tolerance
    of onnxruntime; with the pool's chain off, ``gated_conv2d`` takes the multiply (the conv reads the
    gate), so the overlap is real and the chain's order decides it."""
    from tir_adreno import compile_model
    from tir_adreno.passes.rules import common as map_anchors
    from tir_adreno.reference import reference_outputs, relative_error
    from tir_adreno.strategy.profile import get_profile

    model, feeds = _gated_after_pool(np.random.default_rng(5))
    profile = get_profile("pocl")
    chained = _arities(model, profile)
    assert chained["max_pool2d"] == [2] and "multiply" not in chained, chained
    conv = next(name for name in chained if name.startswith("conv2d"))
    compiled = compile_model(model, profile=profile, progress=lambda _: None)
    (out,) = compiled.run(feeds)
    assert relative_error(out, reference_outputs(model, feeds)[0]) <= PATTERN_RTOL
    monkeypatch.setattr(map_anchors, "pool_chain", lambda rw, node, channels: None)
    gated = _arities(model, profile)
    assert gated["max_pool2d"] == [1] and "multiply" not in gated, gated
    assert gated[conv][0] == chained[conv][0] + 1, (gated, chained)  # the conv reads the gate


#: A draw of ``test_random_chain_fuses_into_the_anchor`` that failed (found by the fresh-clone run
#: of a9f2aaa, stop 53): two adds of full-size operands around an Abs, the first operand a plain
#: model input the anchor reads in place as its residual. The kernel declares its second operand
#: (``Residual2``) in the residual's scope, a buffer; the plan handed it over in texture and the
#: compile stopped ("argument Residual2 expects ... global, gets ... global.texture"):
#: ``strategy.conv.plain_io_plan`` now moves Residual2 with the residual.
TWO_FULL_OPERANDS = [("binary", "Add", "full", False, True), ("unary", "Abs"), ("binary", "Add", "full", False, True)]


@pytest.mark.parametrize("anchor", ["conv", "depthwise"])
def test_two_full_operands_with_a_plain_residual(anchor):
    check_chain(anchor, TWO_FULL_OPERANDS, 4, 3, seed=0)
