"""Structural reparameterization (``passes.reparam``): sums of parallel linear branches of one value
(MobileOne / RepVGG blocks, FastViT's RepMixer, as exported without ``reparameterize()``) become
one conv. The rewrite's numerics on random branch sums against float64 NumPy and onnxruntime,
the blocks on our kernels against onnxruntime with their plans (one conv kernel, no affine,
subtract or add), and sums that must be left alone."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import helper

from helpers.numeric import assert_close
from helpers.onnx_graphs import PATTERN_RTOL, check_pattern, pattern_graph
from tir_adreno.compiler import import_model
from tir_adreno.frontend.onnx_models import batch_norm_scale, batch_norm_variance
from tir_adreno.passes.graph import const, ints
from tir_adreno.passes.host_fold import fold_constants
from tir_adreno.passes.reparam import reparameterize
from tir_adreno.reference import conv2d_nchw, reference_outputs, relative_error

#: The merged conv (weights summed in float64, rounded to float32 once) against the branches in
#: float64, relative to the merged conv of the magnitudes: only that rounding (2^-24 per weight).
MERGED_RTOL = 1e-6
EPS = 1e-5


class Branches:
    """ONNX nodes and initializers of a graph on input ``x``, each value also computed in float64
    from the same float32 parameters, built together so the two cannot disagree on a shape."""

    def __init__(self, rng, x: np.ndarray):
        self.rng, self.nodes, self.inits, self.count = rng, [], {}, 0
        self.x = x
        self.v = {"x": x.astype(np.float64)}

    def _param(self, tag, value) -> str:
        self.count += 1
        name = f"{tag}{self.count}"
        self.inits[name] = np.asarray(value, np.float32)
        return name

    def _out(self, out, value) -> str:
        self.count += 1
        out = out or f"t{self.count}"
        self.v[out] = value
        return out

    def channels(self, name) -> int:
        return self.v[name].shape[1]

    def conv(self, src, o, k, stride=1, groups=1, bias=True, dilation=1, pads=None, out=None) -> str:
        """Conv with ``pads`` (top, left, bottom, right), by default 'same' ``dilation * (k // 2)``
        on each side (as MobileOne's and FastViT's exports)."""
        c, pads = self.channels(src), pads or (dilation * (k // 2),) * 4
        w = (self.rng.standard_normal((o, c // groups, k, k)) / np.sqrt(c // groups * k * k)).astype(np.float32)
        b = (self.rng.standard_normal(o) * 0.5).astype(np.float32)
        inputs = [src, self._param("w", w)] + ([self._param("b", b)] if bias else [])
        y = conv2d_nchw(self.v[src], w.astype(np.float64), (stride, stride), pads, (dilation, dilation), groups)
        out = self._out(out, y + (b.astype(np.float64)[None, :, None, None] if bias else 0.0))
        self.nodes.append(helper.make_node("Conv", inputs, [out], pads=list(pads), strides=[stride] * 2, group=groups,
                                           dilations=[dilation] * 2, kernel_shape=[k, k]))
        return out

    def batch_norm(self, src, out=None) -> str:
        c = self.channels(src)
        var = batch_norm_variance(self.rng, (c,))
        p = dict(s=batch_norm_scale(self.rng, var), b=self.rng.standard_normal(c) * 0.1, m=self.rng.standard_normal(c) * 0.1, v=var)
        s, b, m, v = (np.asarray(p[k], np.float32).astype(np.float64)[None, :, None, None] for k in "sbmv")
        out = self._out(out, (self.v[src] - m) / np.sqrt(v + np.float32(EPS)) * s + b)
        self.nodes.append(helper.make_node("BatchNormalization", [src, *(self._param(f"bn{k}", p[k]) for k in "sbmv")], [out], epsilon=EPS))
        return out

    def binary(self, op, a, b, out=None) -> str:
        out = self._out(out, {"Add": np.add, "Sub": np.subtract}[op](self.v[a], self.v[b]))
        self.nodes.append(helper.make_node(op, [a, b], [out]))
        return out

    def layer_scale(self, src, out=None) -> str:
        """``src * gamma`` with gamma of shape (C, 1, 1), as timm's LayerScale2d exports."""
        gamma = self.rng.standard_normal((self.channels(src), 1, 1)).astype(np.float32)
        out = self._out(out, self.v[src] * gamma.astype(np.float64))
        self.nodes.append(helper.make_node("Mul", [src, self._param("ls", gamma)], [out]))
        return out

    def divide(self, src, divisor, out=None) -> str:
        """``src / divisor`` by a per-channel constant of shape (C, 1, 1)."""
        d = np.asarray(divisor, np.float32).reshape(-1, 1, 1)
        with np.errstate(divide="ignore", invalid="ignore"):  # a divisor 0 is a case
            out = self._out(out, self.v[src] / d.astype(np.float64))
        self.nodes.append(helper.make_node("Div", [src, self._param("d", d)], [out]))
        return out

    def relu(self, src, out=None) -> str:
        out = self._out(out, np.maximum(self.v[src], 0.0))
        self.nodes.append(helper.make_node("Relu", [src], [out]))
        return out

    def model(self):
        return pattern_graph(self.nodes, self.inits, channels=self.x.shape[1], size=self.x.shape[2])


def _rewritten(model):
    """(module after fold_constants, after reparameterize)."""
    mod, _ = import_model(model)
    mod = fold_constants(mod)
    return mod, reparameterize(mod)


def _calls(mod) -> list:
    return [b.value for block in mod["main"].body.blocks for b in block.bindings]


def _mobileone(g: Branches, x, o, k, stride, groups, identity, out=None) -> str:
    """timm's MobileOneBlock before its act as exported: kxk conv (batch norm folded into a bias),
    1x1 conv, a batch norm of ``x`` when it keeps the shape, summed."""
    s = g.binary("Add", g.conv(x, o, 1, stride, groups), g.conv(x, o, k, stride, groups))
    return g.binary("Add", s, g.batch_norm(x), out) if identity else g.binary("Add", s, g.conv(x, o, 1, stride, groups), out)


def _repmixer(g: Branches, x, out=None) -> str:
    """FastViT's RepMixer as exported: ``x + gamma * ((dw3x3(x) + dw1x1(x) + bn(x)) - bn'(x))``."""
    c = g.channels(x)
    mixer = g.binary("Add", g.binary("Add", g.conv(x, c, 1, groups=c), g.batch_norm(x)), g.conv(x, c, 3, groups=c))
    return g.binary("Add", x, g.layer_scale(g.binary("Sub", mixer, g.batch_norm(x))), out)


@st.composite
def branch_sums(draw):
    """(channels, output multiplier, size, stride, branches, signs, layer scale, residual): a random
    sum of 2 to 4 branches of ``x`` (convs of 1, 3, 5 with one groups, dense, grouped or depthwise,
    a batch norm after some, padded symmetrically or as TensorFlow's SAME; identity batch norms,
    regrouped into the convs, where the shape allows), then maybe a layer scale and ``x +``.
    (Convs of different groups: ``test_mixed_groups_merge_to_their_gcd``.)"""
    c, mult, stride = draw(st.integers(1, 9)), draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2]))
    keeps_shape = mult == 1 and stride == 1
    groups = draw(st.sampled_from([d for d in range(1, c + 1) if c % d == 0]))
    conv = st.tuples(st.just("conv"), st.sampled_from([1, 3, 5]), st.just(groups), st.booleans(), st.booleans(), st.booleans())
    kinds = st.one_of(conv, st.just(("bn",))) if keeps_shape else conv
    branches = draw(st.lists(kinds, min_size=2, max_size=4))
    signs = draw(st.lists(st.sampled_from(["Add", "Sub"]), min_size=len(branches) - 1, max_size=len(branches) - 1))
    return c, mult, draw(st.integers(1, 9)), stride, branches, signs, draw(st.booleans()), keeps_shape and draw(st.booleans())


def _tf_same(size, k, stride) -> tuple:
    """TensorFlow's SAME padding: ceil(size / stride) outputs, the odd pixel at the bottom / right
    (k // 2 on each side gives as many outputs: the two kinds of branch sum)."""
    total = max((-(-size // stride) - 1) * stride + k - size, 0)
    return (total // 2, total // 2, total - total // 2, total - total // 2)


@given(case=branch_sums(), seed=st.integers(0, 2**32 - 1))
def test_branch_sums_become_one_conv(case, seed):
    """Any such sum is ONE ``conv2d`` + bias add of ``x`` after the rewrite; that conv in float64
    (its float32 weights) matches the branches in float64 within their rounding, and onnxruntime
    agrees with the float64 branches (the reference is the graph that was built)."""
    c, mult, size, stride, branches, signs, scaled, residual = case
    rng = np.random.default_rng(seed)
    g = Branches(rng, rng.standard_normal((1, c, size, size)).astype(np.float32))
    terms = []
    for kind, *spec in branches:
        if kind == "bn":
            terms.append(g.batch_norm("x"))
            continue
        k, groups, bias, bn, tf_same = spec
        y = g.conv("x", c * mult, k, stride, groups, bias, pads=_tf_same(size, k, stride) if tf_same else None)
        terms.append(g.batch_norm(y) if bn else y)
    acc = terms[0]
    for op, term in zip(signs, terms[1:]):
        acc = g.binary(op, acc, term)
    acc = g.layer_scale(acc) if scaled else acc
    if residual:
        acc = g.binary("Add", "x", acc)
    g.v["y"] = g.v[acc]
    g.nodes[-1].output[0] = "y"
    model = g.model()
    _, rewritten = _rewritten(model)
    calls = _calls(rewritten)
    assert [call.op.name for call in calls] == ["relax.nn.conv2d", "relax.add"], rewritten["main"]
    conv, add = calls
    attrs = conv.attrs
    assert ints(attrs.dilation) == (1, 1)
    w, bias = const(conv.args[1]).astype(np.float64), const(add.args[1]).astype(np.float64)
    geometry = ints(attrs.strides), ints(attrs.padding), (1, 1), int(attrs.groups)
    merged = conv2d_nchw(g.v["x"], w, *geometry) + bias
    # the weights' rounding is relative to their magnitudes: against a sum that cancels, its bound
    magnitude = conv2d_nchw(np.abs(g.v["x"]), np.abs(w), *geometry) + np.abs(bias)
    assert_close(merged, g.v["y"], MERGED_RTOL, scale=magnitude)
    (ref,) = reference_outputs(model, {"x": g.x})
    assert relative_error(ref, g.v["y"]) <= PATTERN_RTOL


def test_mixed_groups_merge_to_their_gcd():
    """A dense 3x3, a depthwise 1x1 and a 2-group 3x3 branch (6 channels): one dense 3x3 conv
    (no more multiply-adds than the three), matching the branches in float64 and onnxruntime."""
    rng = np.random.default_rng(5)
    g = Branches(rng, rng.standard_normal((1, 6, 7, 7)).astype(np.float32))
    s = g.binary("Add", g.conv("x", 6, 3), g.conv("x", 6, 1, groups=6))
    g.binary("Sub", s, g.conv("x", 6, 3, groups=2), out="y")
    _, rewritten = _rewritten(g.model())
    conv, add = _calls(rewritten)
    assert conv.op.name == "relax.nn.conv2d" and int(conv.attrs.groups) == 1 and const(conv.args[1]).shape == (6, 6, 3, 3)
    merged = conv2d_nchw(g.v["x"], const(conv.args[1]).astype(np.float64), (1, 1), ints(conv.attrs.padding)) + const(add.args[1])
    assert relative_error(merged, g.v["y"]) <= MERGED_RTOL
    (ref,) = reference_outputs(g.model(), {"x": g.x})
    assert relative_error(ref, g.v["y"]) <= PATTERN_RTOL


def _conv_kernels(names) -> list:
    return [n for n in names if n.startswith(("conv2d", "depthwise"))]  # depthwise_pointwise: a depthwise and the 1x1 after it


@pytest.mark.parametrize("groups, stride", [(1, 1), (6, 1), (1, 2), (6, 2)], ids=["dense", "depthwise", "dense-s2", "depthwise-s2"])
def test_mobileone_block_is_one_conv_kernel(groups, stride):
    """A MobileOne block (3x3, 1x1 and the identity batch norm; at stride 2 a second 1x1 in its
    place) then its ReLU, 6 channels (a padded block): one conv kernel on our kernels, nothing else."""
    rng = np.random.default_rng(1)
    g = Branches(rng, rng.standard_normal((1, 6, 9, 9)).astype(np.float32))
    g.relu(_mobileone(g, "x", 6, 3, stride, groups, identity=stride == 1), out="y")
    names = check_pattern(g.model(), channels=6, size=9)
    assert len(names) == 1 and _conv_kernels(names) == names, names


def test_repmixer_is_one_depthwise_conv_kernel():
    """FastViT's RepMixer (5 branches, a Sub, a layer scale, the residual ``x +``): one depthwise
    conv kernel, no affine, subtract or add."""
    rng = np.random.default_rng(2)
    g = Branches(rng, rng.standard_normal((1, 6, 8, 8)).astype(np.float32))
    _repmixer(g, "x", out="y")
    names = check_pattern(g.model(), channels=6, size=8)
    assert len(names) == 1 and "depthwise" in names[0], names


def test_fastvit_stages_are_one_conv_each():
    """FastViT-T8's reparameterizable pieces in a row, as its export writes them: the stem's three
    MobileOne blocks (3x3 stride 2; depthwise stride 2; 1x1 with the identity), each with GELU's
    place taken by a ReLU, a RepMixer, the patch embedding's 7x7 stride 2 depthwise x2 with its 3x3
    branch, then a 1x1 MobileOne block, the final 3x3 depthwise x2 with its 1x1 branch: 7 convs
    (a depthwise one may be computed in the 1x1 conv after it: one ``depthwise_pointwise`` kernel)."""
    rng = np.random.default_rng(3)
    g = Branches(rng, rng.standard_normal((1, 3, 16, 16)).astype(np.float32))
    t = g.relu(_mobileone(g, "x", 8, 3, 2, 1, identity=False))
    t = g.relu(_mobileone(g, t, 8, 3, 2, 8, identity=False))
    t = g.relu(_mobileone(g, t, 8, 1, 1, 1, identity=True))
    t = _repmixer(g, t)
    t = g.binary("Add", g.conv(t, 16, 7, 2, 8), g.conv(t, 16, 3, 2, 8))
    t = g.relu(_mobileone(g, t, 16, 1, 1, 1, identity=True))
    g.relu(_mobileone(g, t, 32, 3, 1, 16, identity=False), out="y")
    names = check_pattern(g.model(), channels=3, size=16)
    fused = sum(n.startswith("depthwise_pointwise") for n in names)
    assert len(names) + fused == 7 and _conv_kernels(names) == names, names


def _left_alone(case):
    """Graphs whose sums the rewrite must not touch."""
    rng = np.random.default_rng(4)
    g = Branches(rng, rng.standard_normal((1, 5, 7, 7)).astype(np.float32))
    if case == "different-values":  # conv(x) + conv(relu(x))
        g.binary("Add", g.conv("x", 5, 3), g.conv(g.relu("x"), 5, 1), out="y")
    elif case == "dilated":  # a dilated branch: its window has holes
        g.binary("Add", g.conv("x", 5, 3, dilation=2), g.conv("x", 5, 1), out="y")
    elif case == "branch-read-elsewhere":  # the 3x3 branch also feeds a ReLU: it stays a kernel of its own
        a = g.conv("x", 5, 3)
        g.binary("Add", g.binary("Add", a, g.conv("x", 5, 1)), g.relu(a), out="y")
    elif case == "one-branch":  # conv(x) + x: a residual, already one kernel
        g.binary("Add", g.conv("x", 5, 3), "x", out="y")
    elif case == "divided-by-zero":  # conv(x) + bn(x) / 0: +-inf, where merged weights would give NaN (inf * 0)
        g.binary("Add", g.conv("x", 5, 3), g.divide(g.batch_norm("x"), np.zeros(5)), out="y")
    elif case == "costlier-merged":  # depthwise 7x7 + dense 1x1 would be a dense 7x7: 5 x 49 MACs a pixel > 49 + 5
        g.binary("Add", g.conv("x", 5, 7, groups=5), g.conv("x", 5, 1), out="y")
    return g.model()


@pytest.mark.parametrize("case", ["different-values", "dilated", "branch-read-elsewhere", "one-branch", "costlier-merged", "divided-by-zero"])
def test_sums_that_are_not_one_conv_are_left_alone(case):
    folded, rewritten = _rewritten(_left_alone(case))
    assert rewritten.same_as(folded)


def test_dilated_branches_run_as_two_convs():
    """conv(x, dilation 2) + conv1x1(x) on our kernels: two convs (the add fused as the second's
    residual), matching onnxruntime."""
    names = check_pattern(_left_alone("dilated"), channels=5, size=7)
    assert len(_conv_kernels(names)) == 2, names
