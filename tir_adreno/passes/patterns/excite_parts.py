"""Helpers the squeeze-excitation patterns share (not a pattern): the plain 1x1 conv on a pooled
vector, the global average pool, the two convs' tails and the excitation kernels' constants, and
:class:`Sizes`, what the excitation schedules (``strategy.excite``) are asked about, found by ``match``
from the graph alone (``base.graph_only``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tvm import relax

from primfuncs import excite

from tir_adreno.passes.activations import clip_fields
from tir_adreno.passes.conv_emit import Tail, conv_tail
from tir_adreno.passes.convs import conv_geometry, conv_operands
from tir_adreno.passes.graph import Node, dtype, same, static_shape
from tir_adreno.passes.rewriter import Rewriter
from tir_adreno.strategy.packing import pack_bias


def vector_pointwise(node: Node | None, var) -> np.ndarray | None:
    """The OIHW weights of ``node`` when it is a plain 1x1 conv (no groups, and no padding) on
    ``var``, an NCHW ``[N, C, 1, 1]`` float32 tensor; else None."""
    # the shape first: every conv is asked, and its operands are a float64 copy of its weights
    shape = static_shape(var) if node is not None and node.op == "relax.nn.conv2d" and same(node.args[0], var) else None
    if shape is None or len(shape) != 4 or shape[2:] != (1, 1) or dtype(var) != "float32":
        return None
    operands = conv_operands(node)
    if operands is None or operands.layout != "NCHW":
        return None
    g = conv_geometry(node, shape, operands.weights.shape)
    if (g.h, g.w, g.kh, g.kw, g.groups, g.oh, g.ow) != (1, 1, 1, 1, 1, 1, 1):
        return None
    return operands.weights


def padded(w: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """The 2-d float32 ``w`` zero padded to ``(rows, cols)``."""
    out = np.zeros((rows, cols), np.float32)
    out[: w.shape[0], : w.shape[1]] = w
    return out


def excite_constants(fc1: Tail, fc2: Tail, c4: int, o4: int) -> list:
    """The kernel's weight and bias arguments (``primfuncs.excite``'s layouts)."""
    hidden = fc1.w.shape[0]
    return [relax.const(padded(fc1.w[:, :, 0, 0], hidden, 4 * c4)), relax.const(fc1.bias.astype(np.float32)),
            relax.const(padded(fc2.w[:, :, 0, 0].T, hidden, 4 * o4)), relax.const(pack_bias(fc2.bias.astype(np.float32)))]


def split_scratch(n: int, c4: int, pixels: int, hidden: int, schedule: dict) -> list:
    """``excitation_split``'s scratch arguments, constants each call owns: the work groups'
    partial sums (float32 even in half storage: pinned by ``FLOAT32_ATTR``), filled with
    ``excite.PARTIAL_SENTINEL``, and the tickets, zero (each launch leaves them so for the next)."""
    slices = excite.split_slices(c4, pixels, schedule["channel_blocks"], schedule["pixel_slices"])
    unwritten = np.full((n, slices, hidden), excite.PARTIAL_SENTINEL, np.int32).view(np.float32)
    return [relax.const(unwritten), relax.const(np.zeros((n,), np.int32))]


def global_average(node: Node) -> bool:
    """Whether ``node`` is the mean over H and W of an NCHW tensor, keeping the dims."""
    shape = static_shape(node.var)
    if shape is None or len(shape) != 4 or shape[2:] != (1, 1):
        return False
    a = node.attrs
    if node.op == "relax.mean":
        return a.axis is not None and sorted(int(i) % 4 for i in a.axis) == [2, 3] and bool(a.keepdims)
    return str(a.layout) == "NCHW" and (not a.out_layout or str(a.out_layout) == "NCHW")


def excite_tails(rw: Rewriter, node: Node, w1: np.ndarray) -> tuple[Tail, Tail] | None:
    """The tails of fc1 (``node``) and of the 1x1 conv that is its value's only user (marked fused),
    neither with a residual; else None."""
    fc1 = conv_tail(rw, node, w1, "NCHW")
    fc2_node = rw.graph.sole_user(fc1.last.var) if fc1.residual is None else None
    w2 = vector_pointwise(fc2_node, fc1.last.var)
    if w2 is None:
        return None
    fc2_node.fused = True
    fc2 = conv_tail(rw, fc2_node, w2, "NCHW")
    return None if fc2.residual is not None else (fc1, fc2)


def excite_macs(tails: tuple[Tail, Tail]) -> int:
    """The multiply-adds of the two 1x1 convs per sample."""
    return int(sum(t.w.shape[0] * t.w.shape[1] for t in tails))


def clip_bounds(fc1: Tail, fc2: Tail) -> dict:
    """The factory's clip bounds of the two activations (the defaults where one is no clip)."""
    one, two = (clip_fields(t.clip_bounds) for t in (fc1, fc2))
    return dict(bounds=(one.get("clip_min", 0.0), one.get("clip_max", 6.0)),
                gate_bounds=(two.get("clip_min", 0.0), two.get("clip_max", 6.0)))


@dataclass(frozen=True)
class Sizes:
    """An excitation as its schedule sees it: the pooled map's ``channels`` x ``pixels``, the two
    1x1 convs' ``macs`` per sample, ``hidden`` units and ``out_channels``."""

    macs: int
    channels: int
    pixels: int
    hidden: int
    out_channels: int

    @classmethod
    def of(cls, nchw, tails: tuple[Tail, Tail]) -> Sizes:
        """The sizes of the excitation of ``tails`` (:func:`excite_tails`) on a map of ``nchw``."""
        n, c, h, w = nchw
        return cls(excite_macs(tails), c, h * w, tails[0].w.shape[0], tails[1].w.shape[0])
