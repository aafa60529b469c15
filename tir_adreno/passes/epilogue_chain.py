"""The elementwise chain after an anchor kernel, as the kernel's expression epilogue.

After a conv's or a GEMM's tail (folded linear steps, a residual add, a named activation:
``conv_emit.conv_tail``, ``rules.gemm.gemm_tail``) come, in many exports, more elementwise ops
that used to run as kernels of their own: a layer scale after the residual, ``x * 0.5``, a
``tanh``, a second add. :func:`match_chain` walks them (``passes.elementwise_chain``) while each is
the only reader of the value before it and keeps the anchor's shape, and builds a
:mod:`primfuncs.epilogue_expr` tree: scalar
constants inline, per-channel constants as rows packed beside the bias, other activations (already
computed, or graph inputs) read as the kernel's operands, in full or broadcast per channel / per
pixel where the anchor's kernel reads those: as many as :attr:`Anchor.operands` (two for the conv's
direct kernel and the GEMM, one for the others; one less after a residual add). A step that would
need one more ends the chain before it. Every node it takes is marked fused.
A pool (max/avg pool2d, adaptive and global average pooling) anchors a chain the same way
(:func:`pool_chain`: the pooled map is an NCHW anchor of its channel count).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from tvm import relax

from primfuncs import epilogue_expr as ex
from primfuncs.epilogue import Epilogue

from tir_adreno.passes.activations import clip_fields
from tir_adreno.passes.affine import channel_vector
from tir_adreno.passes.elementwise_chain import walk
from tir_adreno.passes.graph import Node, const, dtype, same, static_shape
from tir_adreno.strategy.packing import pack_bias

OPERAND_KINDS = ex.OPERAND_KINDS


@dataclass
class Chain:
    """An anchor's elementwise chain: the expression, its per-channel constants (float64 vectors in
    :class:`~primfuncs.epilogue_expr.Channel` order), the operands in
    :class:`~primfuncs.epilogue_expr.Operand` index order (each a variable, or a constant's values
    broadcast to the output: :attr:`Anchor.constant_operand`), the last node."""

    expr: object
    last: Node
    channels: list = field(default_factory=list)
    operands: list = field(default_factory=list)

    def channel_leaf(self, vector) -> ex.Channel:
        """Per-channel constants (a float64 vector) recorded as the next :class:`~primfuncs.epilogue_expr.Channel`."""
        self.channels.append(vector)
        return ex.Channel(len(self.channels) - 1)

    @property
    def operand(self):
        """The first operand (the anchors that read one), None without one."""
        return self.operands[0] if self.operands else None


@dataclass(frozen=True)
class Anchor:
    """What the anchor's kernel takes: its output's channel count and layout ("NCHW": the channel
    axis 1, else the last), how other operands may broadcast (``epilogue_expr.OPERAND_KINDS``) and
    how many it reads (``operands``: one less after a residual add, which the kernel reads too)."""

    channels: int
    layout: str = "NCHW"
    operand_kinds: tuple = ex.OPERAND_KINDS
    constant_operand: bool = False  # a constant tensor (broadcast to the output) may be an operand (plain buffers)
    operands: int = 1

    def kind_of(self, out_shape, shape) -> str | None:
        """How an activation of ``shape`` broadcasts onto the output, None when the kernel cannot read it."""
        if shape == out_shape:
            kind = "full"
        elif self.layout == "NCHW" and len(out_shape) == 4 and len(shape) == 4 and shape[0] == out_shape[0]:
            kind = {(out_shape[1], 1, 1): "channel", (1, *out_shape[2:]): "pixel"}.get(tuple(shape[1:]))
        else:
            kind = None
        return kind if kind in self.operand_kinds else None


def _constant_operand(anchor: Anchor, chain: Chain, data: np.ndarray, out_shape):
    """A constant tensor that broadcasts to the output (LeViT's attention biases after ``q kᵀ``) as
    the operand, its values broadcast to the output's shape; None where the anchor takes none."""
    if not anchor.constant_operand or len(chain.operands) >= anchor.operands or "full" not in anchor.operand_kinds:
        return None
    try:
        chain.operands.append(np.broadcast_to(data, out_shape))
    except ValueError:
        return None
    return ex.Operand("full", len(chain.operands) - 1)


def _leaf(rw, anchor: Anchor, chain: Chain, other, out_shape):
    """The other operand of a binary op as a leaf (a scalar, a per-channel constant, the operand),
    recording per-channel values and the operand on ``chain``; None when the kernel cannot read it."""
    data = const(other)
    if data is not None:
        if data.dtype != np.float32:
            return None
        if data.size == 1 and data.ndim <= len(out_shape):
            return ex.Const(float(data.reshape(())))
        vector = channel_vector(other, anchor.channels, anchor.layout)
        if vector is None:
            return _constant_operand(anchor, chain, data, out_shape)
        return chain.channel_leaf(vector)
    if not isinstance(other, relax.Var) or dtype(other) != "float32":
        return None
    kind = anchor.kind_of(out_shape, static_shape(other))
    if kind is None:
        return None
    for index, operand in enumerate(chain.operands):  # an operand read again
        if isinstance(operand, relax.Var) and same(other, operand):
            return ex.Operand(kind, index)
    if len(chain.operands) >= anchor.operands:  # the kernel reads no more: the chain ends before this step
        return None
    if other not in rw.values and other not in rw.exprs:
        return None  # computed later (a branch emitted after this one): that branch may take this value
    chain.operands.append(other)
    return ex.Operand(kind, len(chain.operands) - 1)


class _Leaves:
    """The walk's leaf policy (``elementwise_chain.Leaves``) of ``anchor``'s kernel, recording on ``chain``."""

    def __init__(self, rw, anchor: Anchor, chain: Chain, out_shape):
        self.rw, self.anchor, self.chain, self.out_shape = rw, anchor, chain, out_shape

    def follows(self, node: Node) -> bool:
        return static_shape(node.var) == self.out_shape and dtype(node.var) == "float32"

    def leaf(self, arg):
        return _leaf(self.rw, self.anchor, self.chain, arg, self.out_shape)

    def axis_constant(self, values, axis: int):
        """Per-channel ``values`` along the anchor's channel axis (1 in NCHW, else the last)."""
        channel_axis = 1 if self.anchor.layout == "NCHW" else len(self.out_shape) - 1
        if axis != channel_axis or len(values) != self.anchor.channels:
            return None
        return self.chain.channel_leaf(np.asarray(values, np.float64))

    def save(self):
        return len(self.chain.operands), len(self.chain.channels)

    def restore(self, state) -> None:
        operands, channels = state
        self.chain.operands[operands:], self.chain.channels[channels:] = [], []  # nothing recorded for a refused step


def match_chain(rw, last: Node, anchor: Anchor) -> Chain | None:
    """The elementwise chain after ``last`` (the node whose value the anchor's kernel writes), its
    nodes marked fused, else None (nothing marked)."""
    out_shape = static_shape(last.var)
    if out_shape is None:
        return None
    chain = Chain(ex.X(), last)
    chain.expr, chain.last, nodes = walk(rw.graph, chain.expr, last, _Leaves(rw, anchor, chain, out_shape))
    for m in nodes:
        m.fused = True
    return chain if nodes else None


def pack_rows(bias, chain: Chain | None, pack) -> np.ndarray | None:
    """The kernel's ``Bias`` buffer: the bias (when given) then the chain's per-channel constants,
    each packed by ``pack`` (``(C/4, 4)``), side by side (``Epilogue.bias_shape``); None when empty."""
    rows = ([] if bias is None else [bias]) + ([] if chain is None else chain.channels)
    return np.concatenate([pack(r) for r in rows], axis=1) if rows else None


def chain_epilogue(has_bias: bool, activation, clip_bounds, residual: bool, chain: Chain | None) -> Epilogue:
    """The kernel's :class:`Epilogue` of a tail (the conv's ``conv_emit.Tail``, the GEMM's
    ``rules.gemm.GemmTail``): bias, residual, named activation, then the chain's expression."""
    return Epilogue(bias=has_bias, activation=activation, residual=residual, **clip_fields(clip_bounds),
                    **({} if chain is None else {"expr": chain.expr}))


def chain_only(chain: Chain) -> tuple[Epilogue, np.ndarray | None]:
    """The :class:`Epilogue` of a kernel whose epilogue is ``chain`` alone (no bias, residual or named
    activation: a pool's, a row kernel's) and its ``Bias`` rows: the chain's per-channel constants,
    float32, packed like a conv bias (None without any)."""
    return (chain_epilogue(False, None, None, False, chain),
            pack_rows(None, chain, lambda r: pack_bias(r.astype(np.float32))))


def chain_with_operands(rw, last: Node, anchor: Anchor, layout: str = "NCHW"):
    """``(chain, operands)``: the chain after ``last`` (:func:`match_chain`) and its operands as the
    rewriter's Values, in index order (in full: seen in ``layout``; broadcast: an NCHW activation),
    else None with every fused mark as it was (no chain, or an operand our kernels do not hold in a
    layout the anchor's kernel reads)."""
    marks = rw.graph.fused_marks()
    chain = match_chain(rw, last, anchor)
    if chain is None:
        return None
    values = []
    for var in chain.operands:
        full = static_shape(var) == static_shape(chain.last.var)
        value = rw.view(var, layout) if full else rw.activation(var, "NCHW")
        if value is None:
            rw.graph.restore_fused(marks)
            return None
        values.append(value)
    return chain, tuple(values)


def pool_chain(rw, node: Node, channels: int):
    """The pool anchor: the chain after pool ``node`` (an NCHW map of ``channels``) with its operand
    (:func:`chain_with_operands`: one, any kind; constants per channel), where kernels fuse; else None."""
    return chain_with_operands(rw, node, Anchor(channels)) if rw.fuses else None


def chain_fuses(rw, node: Node, channels: int) -> bool:
    """Whether a chain fuses into map anchor ``node`` (:func:`pool_chain`; the fused marks it sets
    are restored): an anchor that could write its value plain keeps its chain and writes blocked."""
    marks = rw.graph.fused_marks()
    found = pool_chain(rw, node, channels) is not None
    rw.graph.restore_fused(marks)
    return found
