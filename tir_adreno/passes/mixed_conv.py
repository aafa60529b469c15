"""Mixed convs (MixNet's ``MixedConv2d``) as one conv, before the Relax pass.

ONNX exports a mixed conv as ``Split`` along channels, one ``Conv`` per channel group (depthwise
convs of kernel sizes 3, 5, 7, ... or 1x1 convs) and ``Concat`` of their outputs in group order.
InceptionNeXt's token mixer is one too: a group passed through unchanged (an identity piece: the
split's part read by the concat itself) and depthwise 3x3, 1x11 and 11x1 convs.
Run as it is, that is a ``split_channels`` launch, one conv launch per group and a
``concat_channels`` launch, and the batch norm after the concat runs apart (an affine kernel: it
follows no conv). :func:`merge_mixed_convs` rewrites each such pattern into ONE ``nn.conv2d``,
whose batch norm, activation, residual and gate then fuse as any conv's:

- depthwise groups: one depthwise conv over all channels, each group's kernel zero-padded
  (centered) to the largest (``form`` "depthwise");
- dense groups of equal input and output sizes: one grouped conv, a group per piece, kernels
  zero-padded likewise ("grouped": no extra work for MixNet's 1x1 pieces);
- other dense groups: one dense conv with block-diagonal weights ("dense").

A group conv's ``kh x kw`` kernel padded to ``K x K`` (K the largest side of any group) around its
center reads the same inputs when its padding is ``dilation * (kh // 2)`` above and below and
``dilation * (kw // 2)`` left and right ('same', odd sides) and every group has the same stride and
dilation: the merged conv with padding ``dilation * (K // 2)`` is exact. An identity piece is a
1x1 kernel of ones (depthwise) or an identity matrix (dense), stride 1. A group's
per-channel constant steps between its conv and the concat (an exporter's bias add) fold into
the merged weights and one bias add. Anything else is left alone: other strides or dilations,
other paddings, even kernels, groups of other kinds, pieces with other readers.
Whether a match merges, and in which form, is the strategy's (``strategy.conv.mixed_conv_form``:
the multiply-adds the zero padding adds against the launches saved).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax
from tvm.relax.analysis import remove_all_unused

from primfuncs.conv import ConvGeometry

from tir_adreno.passes.affine import linear_step
from tir_adreno.passes.convs import conv_geometry, conv_operands
from tir_adreno.passes.graph import Graph, Node, dtype, same, split_parts, static_shape
from tir_adreno.strategy import conv as strategy
from tir_adreno.strategy.profile import DeviceProfile


@dataclass
class ConvPiece:
    """One group of a mixed conv (or one conv of a hierarchical split block,
    ``passes.patterns.split_depthwise``): its conv's geometry and weights with its constant steps folded."""

    geom: ConvGeometry
    w: np.ndarray  # OIHW float64, the steps' scale folded in
    shift: np.ndarray  # per output channel, float64
    nodes: list  # the conv and its steps, in order
    identity: bool = False  # the split's part itself, no conv: :func:`identity_piece`


@dataclass(frozen=True)
class MixedConv:
    """A mixed conv as one conv: the concat it replaces, the split's input, the merged conv's
    weights (OIHW float32) and bias (None when zero), ``groups``, padding, strides, dilation."""

    concat: Node
    data: relax.Var
    weights: np.ndarray
    bias: np.ndarray | None
    groups: int
    padding: int
    strides: tuple
    dilation: tuple


def _depthwise(geom) -> bool:
    """One input channel per group, multiplier 1 (a 1-channel group exports as a dense conv)."""
    return geom.groups == geom.c == geom.o


def conv_piece(g: Graph, getter: Node, nchw, rectangular: bool = False) -> tuple[ConvPiece, Node, Node | None] | None:
    """The group conv reading ``getter`` (its sole reader) with the per-channel constant steps
    after it folded: (piece, its last node, the sole reader of that: the concat, checked by the
    caller), else None. ``rectangular``: odd kernels of two sizes too (1x11), else square only."""
    conv = g.sole_user(getter.var)
    if conv is None or conv.op != "relax.nn.conv2d" or not same(conv.args[0], getter.var):
        return None
    operands = conv_operands(conv)
    if operands is None or operands.layout != "NCHW":
        return None
    try:
        geom = conv_geometry(conv, nchw, operands.weights.shape)
    except ValueError:
        return None
    d = geom.dilation[0]
    if not (_depthwise(geom) or geom.groups == 1) or geom.kh % 2 == 0 or geom.kw % 2 == 0 or geom.dilation[1] != d:
        return None
    if geom.kh != geom.kw and not rectangular:
        return None
    if geom.padding != (d * (geom.kh // 2), d * (geom.kw // 2)) * 2:  # 'same': the padded kernel stays centered
        return None
    piece, last = ConvPiece(geom, operands.weights, np.zeros(geom.o), [conv]), conv
    while True:
        user = g.sole_user(last.var)
        step = linear_step(user, last.var, geom.o) if user is not None else None
        if step is None:
            return piece, last, user
        scale, shift = step
        piece.w = piece.w * scale[:, None, None, None]
        piece.shift = piece.shift * scale + shift
        piece.nodes.append(user)
        last = user


def identity_piece(g: Graph, getter: Node, nchw, like: ConvGeometry) -> tuple[ConvPiece, Node, Node | None] | None:
    """The split's part ``getter`` passed on unchanged (read by one node only: the concat, checked
    by the caller) as a depthwise 1x1 conv of ones with ``like``'s dilation, else None (``like``
    strided: the part has another size than the convs' outputs)."""
    if like.strides != (1, 1):
        return None
    n, c, h, w = nchw
    geom = ConvGeometry(n, c, h, w, c, 1, 1, (1, 1), (0, 0, 0, 0), like.dilation, c)
    return ConvPiece(geom, np.ones((c, 1, 1, 1)), np.zeros(c), [], identity=True), getter, g.sole_user(getter.var)


def _match(g: Graph, split: Node) -> MixedPattern | None:
    """The mixed conv that starts at ``split``, else None."""
    x = split.args[0]
    shape = static_shape(x) if isinstance(x, relax.Var) else None
    if shape is None or len(shape) != 4 or dtype(x) != "float32" or same(g.output, split.var):
        return None
    sizes = split_parts(split, shape)
    getters = g.users(split.var)
    if sizes is None or len(getters) != len(sizes) or any(u.op != "tuple_get_item" for u in getters):
        return None
    getters = sorted(getters, key=lambda u: u.index)
    if [u.index for u in getters] != list(range(len(sizes))):
        return None  # a piece read twice or not at all
    n, _, h, w = shape
    found = [conv_piece(g, u, (n, c, h, w), rectangular=True) for u, c in zip(getters, sizes)]
    like = next((f[0].geom for f in found if f is not None), None)
    if like is None:
        return None  # no conv: a split and a concat
    found = [f or identity_piece(g, u, (n, c, h, w), like) for f, u, c in zip(found, getters, sizes)]
    if any(f is None for f in found):
        return None
    pieces = [p for p, _, _ in found]
    concat = found[0][2]
    if concat is None or concat.op != "relax.concat" or concat.attrs.axis is None or int(concat.attrs.axis) % 4 != 1:
        return None
    fields = concat.args[0].fields if isinstance(concat.args[0], relax.Tuple) else []
    # The concat reads the pieces, in group order, and nothing else.
    if len(fields) != len(found) or any(after is not concat or not same(f, last.var) for (_, last, after), f in zip(found, fields)):
        return None
    first = pieces[0].geom
    if any((p.geom.strides, p.geom.dilation) != (first.strides, first.dilation) for p in pieces):
        return None
    return MixedPattern(concat, x, pieces) if _forms(pieces) else None


def _forms(pieces: list[ConvPiece]) -> dict[str, int]:
    """The forms ``pieces`` merge in (module docstring) -> the merged conv's ``groups``."""
    c = sum(p.geom.c for p in pieces)
    if all(_depthwise(p.geom) for p in pieces):
        return {"depthwise": c}
    if not all(p.geom.groups == 1 for p in pieces if not p.identity):  # an identity piece fits either
        return {}
    equal = len({(p.geom.c, p.geom.o) for p in pieces}) == 1
    return {"grouped": len(pieces), "dense": 1} if equal else {"dense": 1}


@dataclass(frozen=True)
class MixedPattern:
    """A matched mixed conv: the concat it replaces, the split's input and its group convs."""

    concat: Node
    data: relax.Var
    pieces: list

    @property
    def forms(self) -> dict[str, int]:
        """Form -> the multiply-adds its one conv adds over the group convs (zero-padded kernels, a
        dense form's off-diagonal blocks)."""
        big = _side(self.pieces)
        c, o = (sum(getattr(p.geom, a) for p in self.pieces) for a in "co")
        out = self.pieces[0].geom
        macs = sum(p.geom.flops // 2 for p in self.pieces)
        return {form: o * (c // groups) * big * big * out.n * out.oh * out.ow - macs for form, groups in _forms(self.pieces).items()}

    def merged(self, form: str) -> MixedConv:
        """The one conv of ``form`` (a key of :attr:`forms`)."""
        pieces = self.pieces
        groups = _forms(pieces)[form]
        big = _side(pieces)
        c, o = (sum(getattr(p.geom, a) for p in pieces) for a in "co")
        weights = np.zeros((o, c // groups, big, big), np.float64)
        row = col = 0
        for p in pieces:
            kh, kw = p.geom.kh, p.geom.kw
            top, left = (big - kh) // 2, (big - kw) // 2
            w = np.eye(p.geom.c)[:, :, None, None] if p.identity and form != "depthwise" else p.w
            cols = slice(col, col + p.geom.c) if groups == 1 else slice(0, w.shape[1])  # dense: block-diagonal
            weights[row : row + p.geom.o, cols, top : top + kh, left : left + kw] = w
            row, col = row + p.geom.o, col + p.geom.c
        shift = np.concatenate([p.shift for p in pieces])
        first = next(p.geom for p in pieces if not p.identity)
        return MixedConv(self.concat, self.data, weights.astype(np.float32), shift.astype(np.float32) if np.any(shift) else None,
                         groups, first.dilation[0] * (big // 2), first.strides, first.dilation)


def _side(pieces: list[ConvPiece]) -> int:
    """The merged conv's kernel side: the largest side of any piece's kernel."""
    return max(max(p.geom.kh, p.geom.kw) for p in pieces)


def find_mixed_convs(func: relax.Function, mod: tvm.IRModule | None = None) -> list[MixedPattern]:
    """Every mixed conv of ``func`` (a Relax ``main``), in graph order."""
    g = Graph(func, mod)
    found = (_match(g, node) for node in g.nodes if node.op == "relax.split")
    return [m for m in found if m is not None]


@relax.expr_functor.mutator
class _Merger(relax.PyExprMutator):
    """Replaces each chosen mixed conv's concat by its one conv (the split and the group convs
    are then unused)."""

    def __init__(self, mod, merges: list[MixedConv]):
        super().__init__(mod)
        self.merges = merges

    def visit_call_(self, call):
        m = next((m for m in self.merges if call.same_as(m.concat.value)), None)
        if m is None:
            return super().visit_call_(call)
        conv = relax.op.nn.conv2d(self.visit_expr(m.data), relax.const(m.weights), strides=list(m.strides),
                                  padding=[m.padding] * 4, dilation=list(m.dilation), groups=m.groups)
        if m.bias is None:
            return conv
        return relax.op.add(self.builder_.emit(conv), relax.const(m.bias.reshape(1, -1, 1, 1)))


def merge_mixed_convs(mod: tvm.IRModule, profile: DeviceProfile) -> tvm.IRModule:
    """``mod`` with each mixed conv of ``main`` that the strategy merges on ``profile`` as one conv."""
    merges = []
    for pattern in find_mixed_convs(mod["main"], mod):
        form = strategy.mixed_conv_form(pattern.forms, len(pattern.pieces), profile)
        if form is not None:
            merges.append(pattern.merged(form))
    if not merges:
        return mod
    main = remove_all_unused(_Merger(mod, merges).visit_expr(mod["main"]))
    functions = {gv: (main if gv.name_hint == "main" else f) for gv, f in mod.functions.items()}
    return tvm.IRModule(functions, attrs=mod.attrs)
