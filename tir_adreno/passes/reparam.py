"""Structural reparameterization at compile time (RepVGG, MobileOne, FastViT's RepMixer).

A model exported without its ``reparameterize()`` step sums parallel linear branches of one
input: a kxk conv (its batch norm folded into a bias by the exporter), a 1x1 conv, a batch norm
of the input itself (the identity branch); FastViT's RepMixer computes
``x + layer_scale * (mixer(x) - norm(x))`` of such branches. All of it is ONE conv of ``x`` with
constant weights. :func:`reparameterize` rewrites each such sum into ``conv2d`` + bias add
(weights combined in float64, rounded to float32 once), which the Relax pass then runs as any
conv, with the activation or residual that follows fused.

What merges, exactly: a value ``y = sum_i a_i * B_i(x) + c`` where each branch ``B_i`` is a
``conv2d`` of ``x`` (constant float32 OIHW weights, NCHW, dilation 1), an inference batch norm
of ``x``, or ``x`` itself; ``a_i`` and ``c`` are per-channel (or scalar) constants met on the way
(bias add, layer scale, ``add 0``, a subtract is a branch times -1); every branch has the same
stride; and every intermediate value is read only by the next step (a branch that something
else reads too stays as it is, read as an opaque value). Kernels of different sizes merge by
zero-padding each into the union of their windows (a 1x1 centered in a 3x3 when the paddings
are 'same'); groups merge to their gcd (a depthwise branch inside a dense conv is block
diagonal); the identity is a 1x1 depthwise tap and per-channel steps scale a branch's output
channels. Only sums of two or more branches that would each be a kernel (a conv; a batch norm or
other per-channel step of ``x`` itself: an affine) are rewritten: a conv plus its input already
is one kernel (a residual). Nor is a sum whose conv would cost more multiply-adds than its
branches (a depthwise 7x7 plus a dense 1x1 would be a dense 7x7).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import gcd

import numpy as np
import tvm
from tvm import relax
from tvm.relax.analysis import remove_all_unused

from tir_adreno.passes.affine import batch_norm_affine, linear_step
from tir_adreno.passes.convs import conv_operands
from tir_adreno.passes.graph import Graph, Node, dtype, ints, same, static_shape


@dataclass(frozen=True)
class Linear:
    """A value as ``conv2d(source, weight) + bias`` (NCHW, OIHW, dilation 1): the window of output
    pixel ``o`` starts at input ``stride * o + origin`` (``origin`` is minus the top / left padding)."""

    source: relax.Var
    weight: np.ndarray  # float64 [O, C // groups, KH, KW]
    bias: np.ndarray  # float64 [O]
    stride: tuple[int, int]
    origin: tuple[int, int]
    groups: int
    branches: int  # branches summed in that alone would be a kernel (the bare identity counts none)
    macs: int  # multiply-adds per output pixel of those branches as they are

    def scaled(self, scale: np.ndarray, shift: np.ndarray) -> Linear:
        """``self * scale + shift`` per output channel."""
        return replace(self, weight=self.weight * scale[:, None, None, None], bias=self.bias * scale + shift)


def _activation(expr) -> tuple[int, int, int, int] | None:
    """The static NCHW shape of a float32 4-d var, else None."""
    shape = static_shape(expr) if isinstance(expr, relax.Var) else None
    return shape if shape is not None and len(shape) == 4 and dtype(expr) == "float32" else None


def identity(x) -> Linear | None:
    """``x`` itself as a 1x1 depthwise conv of weight 1 (None unless ``x`` is a float32 NCHW map)."""
    shape = _activation(x)
    if shape is None:
        return None
    c = shape[1]
    return Linear(x, np.ones((c, 1, 1, 1)), np.zeros(c), (1, 1), (0, 0), c, 0, 0)


def conv_branch(node: Node) -> Linear | None:
    """A ``conv2d`` of a float32 NCHW map with constant float32 weights and dilation 1."""
    found = conv_operands(node) if node.op == "relax.nn.conv2d" else None
    if found is None or found.layout != "NCHW" or _activation(node.args[0]) is None or dtype(node.var) != "float32":
        return None
    if ints(node.attrs.dilation) != (1, 1):
        return None
    top, left = ints(node.attrs.padding)[:2]
    return Linear(node.args[0], found.weights, np.zeros(found.weights.shape[0]), ints(node.attrs.strides),
                  (-top, -left), int(node.attrs.groups), 1, found.weights.size)


def batch_norm_step(g: Graph, getter: Node) -> tuple | None:
    """(input, scale, shift) of ``batch_norm(x)[0]`` (inference, over channels, its tuple read
    only here), else None."""
    bn = g.by_var.get(getter.args[0]) if getter.op == "tuple_get_item" and getter.index == 0 else None
    if bn is None or bn.op != "relax.nn.batch_norm" or g.uses.get(bn.var, 0) != 1:
        return None
    if int(bn.attrs.axis) % 4 != 1 or bool(bn.attrs.training):
        return None
    folded = batch_norm_affine(bn)
    return None if folded is None else (bn.args[0], *folded)


def regroup(weight: np.ndarray, groups: int, to: int) -> np.ndarray:
    """OIHW weights of a conv with ``groups`` groups as the same conv with ``to`` groups (``to``
    divides ``groups``): each output channel's input slice placed in its wider group, zeros around."""
    if to == groups:
        return weight
    o, cg = weight.shape[:2]
    wide = cg * groups // to
    rows = np.arange(o)
    start = (rows // (o // groups)) * cg - (rows // (o // to)) * wide  # the slice's first channel in the new group
    out = np.zeros((o, wide, *weight.shape[2:]))
    out[rows[:, None], start[:, None] + np.arange(cg)] = weight
    return out


def _padding(size: int, out: int, stride: int, origin: int, k: int) -> tuple[int, int] | None:
    """(low, high) padding of one axis giving ``out`` windows of ``k`` from ``origin``: symmetric when
    that gives ``out`` (the exporter's usual choice), else the least that covers the last window."""
    low = -origin
    if low < 0:
        return None
    for high in (low, max(0, stride * (out - 1) + origin + k - size)):
        if (size + low + high - k) // stride + 1 == out:
            return low, high
    return None


def padding(form: Linear, out_shape) -> tuple[int, int, int, int] | None:
    """The conv2d padding (top, left, bottom, right) of ``form`` giving ``out_shape``, else None."""
    in_shape = static_shape(form.source)
    axes = [_padding(in_shape[2 + a], out_shape[2 + a], form.stride[a], form.origin[a], form.weight.shape[2 + a])
            for a in range(2)]
    return None if None in axes else (axes[0][0], axes[1][0], axes[0][1], axes[1][1])


def _placed(form: Linear, origin, size, groups: int) -> np.ndarray:
    """``form``'s weights regrouped to ``groups`` and zero-padded into a window of ``size`` at ``origin``."""
    w = regroup(form.weight, form.groups, groups)
    out = np.zeros((*w.shape[:2], *size))
    top, left = form.origin[0] - origin[0], form.origin[1] - origin[1]
    out[:, :, top : top + w.shape[2], left : left + w.shape[3]] = w
    return out


def combine(a: Linear, b: Linear, sign: float, out_shape) -> Linear | None:
    """``a + sign * b`` as one conv (same source and stride, the window their union), else None;
    also None when that conv would cost more multiply-adds than the branches (a depthwise 7x7
    and a dense 1x1 would make a dense 7x7)."""
    if not same(a.source, b.source) or a.stride != b.stride or a.weight.shape[0] != b.weight.shape[0]:
        return None
    if not all(np.isfinite(f.weight).all() and np.isfinite(f.bias).all() for f in (a, b)):
        return None  # a step x / 0: summed, inf * 0 taps would give NaN where the branches give inf
    origin = tuple(min(a.origin[i], b.origin[i]) for i in range(2))
    end = [max(f.origin[i] + f.weight.shape[2 + i] for f in (a, b)) for i in range(2)]
    size = (end[0] - origin[0], end[1] - origin[1])
    groups = gcd(a.groups, b.groups)
    if a.weight.shape[0] * (a.weight.shape[1] * a.groups // groups) * size[0] * size[1] > a.macs + b.macs:
        return None
    weight = _placed(a, origin, size, groups) + sign * _placed(b, origin, size, groups)
    merged = Linear(a.source, weight, a.bias + sign * b.bias, a.stride, origin, groups, a.branches + b.branches, a.macs + b.macs)
    return merged if padding(merged, out_shape) is not None else None


class _Forms:
    """The linear form of each binding of ``main`` that has one, in binding order."""

    def __init__(self, g: Graph):
        self.g = g
        self.forms: dict[relax.Var, Linear] = {}
        self.absorbed: set = set()  # vars whose form a reader took in
        for node in g.nodes:
            found = self._form(node)
            if found is not None:
                form, used = found
                self.forms[node.var] = form
                self.absorbed.update(used)

    def _operand(self, v) -> tuple[Linear | None, list]:
        """(form of ``v`` as its reader sees it, the vars that reading takes in): ``v``'s own form when
        that reader is its only one, else ``v`` itself as an opaque value."""
        form = self.forms.get(v) if isinstance(v, relax.Var) else None
        if form is not None and self.g.uses.get(v, 0) == 1 and not same(self.g.output, v):
            return form, [v]
        return identity(v), []

    def _form(self, node: Node):
        shape = static_shape(node.var)
        if shape is None or len(shape) != 4:
            return None
        if node.op == "relax.nn.conv2d":
            form = conv_branch(node)
            return None if form is None else (form, [])
        if node.op == "tuple_get_item":
            step = batch_norm_step(self.g, node)
            return None if step is None else self._scaled(step[0], step[1:], shape)
        if node.op not in ("relax.add", "relax.subtract", "relax.multiply", "relax.divide") or len(node.args) != 2:
            return None
        a, b = node.args
        if node.op in ("relax.add", "relax.subtract") and _activation(a) == shape and _activation(b) == shape:
            if same(a, b):  # x + x: nothing to merge
                return None
            (fa, used_a), (fb, used_b) = self._operand(a), self._operand(b)
            merged = combine(fa, fb, 1.0 if node.op == "relax.add" else -1.0, shape) if fa is not None and fb is not None else None
            return None if merged is None else (merged, used_a + used_b)
        x = a if isinstance(a, relax.Var) else b
        step = linear_step(node, x, shape[1]) if _activation(x) == shape else None
        return None if step is None else self._scaled(x, step, shape)

    def _scaled(self, x, step, shape):
        """(form, vars taken in) of per-channel ``step`` (scale, shift) applied to ``x``: a step of
        ``x`` itself is a branch (alone it would be a kernel: an affine)."""
        if _activation(x) != shape:
            return None
        form, used = self._operand(x)
        if form is None:
            return None
        form = form.scaled(*step)
        return (form if form.branches else replace(form, branches=1, macs=form.weight.size)), used

    def merged(self) -> dict:
        """var -> form of each sum of two or more branches that no reader took in."""
        return {v: f for v, f in self.forms.items() if f.branches >= 2 and v not in self.absorbed}


@relax.expr_functor.mutator
class _Emitter(relax.PyExprMutator):
    """Rebinds each merged var to ``conv2d`` + bias add of its source."""

    def __init__(self, mod, merged: dict):
        super().__init__(mod)
        self.merged = merged

    def visit_var_binding_(self, binding):
        form = self.merged.get(binding.var)
        if form is None:
            return super().visit_var_binding_(binding)
        out_shape = static_shape(binding.var)
        conv = self.builder_.emit(relax.op.nn.conv2d(
            self.visit_expr(form.source), relax.const(form.weight.astype(np.float32)), form.stride,
            padding(form, out_shape), groups=form.groups))
        bias = relax.const(form.bias.astype(np.float32).reshape(1, -1, 1, 1))
        self.builder_.emit_normalized(relax.VarBinding(binding.var, self.builder_.normalize(relax.op.add(conv, bias))))


def reparameterize(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with each sum of parallel linear branches of one value in ``main`` as one conv (see
    the module docstring); ``mod`` itself when there is none."""
    merged = _Forms(Graph(mod["main"], mod)).merged()
    if not merged:
        return mod
    main = remove_all_unused(_Emitter(mod, merged).visit_expr(mod["main"]))
    functions = {gv: (main if gv.name_hint == "main" else f) for gv, f in mod.functions.items()}
    return tvm.IRModule(functions, attrs=mod.attrs)
