"""EdgeNeXt's hierarchical split depthwise convs (timm ``SplitTransposeBlock``) as exported::

    x -> Slice(chunk 0) -> Conv(depthwise) [-> bias Add] ------------------------------> Concat
      -> Slice(chunk 1) -> Add(previous conv) -> Conv(depthwise) [-> bias Add] --------> Concat
      ...
      -> Slice(chunk k) (the last one, untouched) ---------------------------------------> Concat

``k`` steps of ``primfuncs.hierarchical.hierarchical_depthwise``, each writing the whole map (the
previous step's output read for the channels before its chunk and for the add), so the slices,
the adds and the concat are planned away (``strategy.fusion.can_fuse("split_depthwise", ...)`` decides).
Matched from any of the slices (the first the rewriter meets): every slice of ``x`` over its
channels, together tiling them in ``k + 1`` chunks, the first ``k`` of equal width; each
depthwise conv (stride 1, no dilation, 'same' padding of an odd kernel, per-channel steps after
it folded: ``passes.mixed_conv.conv_piece``) read by the next step's add and the concat only;
the concat of the convs' outputs and the last slice in order. Anything else stays as it is. A
constant added to the concat's tokens (EdgeNeXt's positional encoding, :func:`token_addend`) is
added by the last step too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tvm import relax

from primfuncs import hierarchical as kernels

from tir_adreno.passes.affine import other_operand
from tir_adreno.passes.graph import SWAP_TOKENS, Graph, Node, channel_range, const, same, static_shape
from tir_adreno.passes.kernel_index import kernel
from tir_adreno.passes.mixed_conv import ConvPiece, conv_piece
from tir_adreno.passes.op_info import elementwise_info
from tir_adreno.passes.patterns.base import Match, Plan, pattern
from tir_adreno.passes.rewriter import Rewriter
from tir_adreno.strategy.fusion import can_fuse
from tir_adreno.strategy.packing import pack_channel_range


@dataclass(frozen=True)
class SplitBlock:
    """A matched block: its input, chunk width, the convs (in order), every node it replaces, the concat."""

    x: relax.Var
    width: int
    pieces: list[ConvPiece]
    nodes: list[Node]
    concat: Node


def _slices(g: Graph, x, channels: int) -> list[tuple[int, int, Node]] | None:
    """The channel slices reading ``x`` as (begin, end, node), sorted, when they tile
    ``[0, channels)`` in at least two chunks and each has one reader, else None."""
    users = g.users(x)
    found = sorted((*r, u) for u in users if u.op == "relax.strided_slice" and (r := channel_range(u, channels)) is not None)
    if len(found) < 2 or found[0][0] != 0 or found[-1][1] != channels:
        return None
    if any(a[1] != b[0] for a, b in zip(found, found[1:])) or any(g.sole_user(s.var) is None for _, _, s in found):
        return None
    return found


def _depthwise_piece(g: Graph, getter: Node, nchw) -> tuple[ConvPiece, Node] | None:
    """The depthwise conv (multiplier 1, stride 1, no dilation) that alone reads ``getter`` with
    its steps folded: (piece, its last node), else None."""
    found = conv_piece(g, getter, nchw)
    if found is None:
        return None
    piece, last, _ = found
    geom = piece.geom
    if not geom.groups == geom.c == geom.o or geom.strides != (1, 1) or geom.dilation != (1, 1):
        return None
    return piece, last


def match_split_block(g: Graph, x, nchw) -> SplitBlock | None:
    """The hierarchical split block reading NCHW activation ``x`` (module docstring), else None."""
    n, channels, h, w = nchw
    slices = _slices(g, x, channels)
    if slices is None:
        return None
    width = slices[0][1]
    k = len(slices) - 1
    if any(e - b != width for b, e, _ in slices[:k]):
        return None
    pieces, nodes, lasts, getter = [], [s for _, _, s in slices], [], slices[0][2]
    for i in range(k):
        if i > 0:  # sp + chunk i, read by conv i alone
            add = g.sole_user(slices[i][2].var)
            if add is None or add.op != "relax.add" or len(add.args) != 2:
                return None
            pair = (lasts[-1].var, slices[i][2].var)
            if not any(same(add.args[0], a) and same(add.args[1], b) for a, b in (pair, pair[::-1])):
                return None
            getter = add
            nodes.append(add)
        found = _depthwise_piece(g, getter, (n, width, h, w))
        if found is None:
            return None
        pieces.append(found[0])
        nodes += found[0].nodes
        lasts.append(found[1])
    concat = g.sole_user(lasts[-1].var)
    if concat is None or concat.op != "relax.concat" or concat.attrs.axis is None or int(concat.attrs.axis) % 4 != 1:
        return None
    fields = concat.args[0].fields if isinstance(concat.args[0], relax.Tuple) else []
    if len(fields) != k + 1 or not all(same(f, v) for f, v in zip(fields, [m.var for m in lasts] + [slices[k][2].var])):
        return None
    # Each conv's output is read by the next step's add and the concat only, and is no model output.
    if any(g.uses.get(m.var, 0) != 2 or same(g.output, m.var) for m in lasts[:-1]):
        return None
    return SplitBlock(x, width, pieces, nodes + [concat], concat)


def token_addend(g: Graph, concat: Node, nchw) -> tuple[list[Node], np.ndarray] | None:
    """The constant added to the block's output on its tokens (EdgeNeXt's positional encoding:
    ``reshape [N, C, H * W]`` -> ``permute (0, 2, 1)`` -> ``add`` of a constant ``[1, H * W, C]``,
    each the only reader of the one before): (those nodes, the constant as ``(C, H, W)``), else None."""
    n, c, h, w = nchw
    reshape = g.sole_user(concat.var)
    if reshape is None or reshape.op != "relax.reshape" or static_shape(reshape.var) != (n, c, h * w):
        return None
    permute = g.sole_user(reshape.var)
    if permute is None or permute.op != "relax.permute_dims" or tuple(int(a) for a in permute.attrs.axes or ()) != SWAP_TOKENS:
        return None
    add = g.sole_user(permute.var)
    value = const(other_operand(add, permute.var)) if add is not None and add.op == "relax.add" else None
    if value is None or value.dtype != np.float32 or static_shape(add.var) != (n, h * w, c) or value.shape not in ((1, h * w, c), (h * w, c)):
        return None
    return [reshape, permute, add], value.reshape(h * w, c).T.reshape(c, h, w)


def _match(g, node: Node) -> Match | None:
    """The block (:func:`match_split_block`) reading the static NCHW map that slice ``node`` reads."""
    nchw = static_shape(node.args[0])
    block = match_split_block(g, node.args[0], nchw) if nchw is not None and len(nchw) == 4 else None
    return Match(node, {"block": block}) if block is not None else None


def _plan(match: Match, profile, records, precision) -> Plan | None:
    fusion = can_fuse("split_depthwise", None, profile, precision, records)
    return Plan(match, fusion) if fusion is not None else None


@pattern("relax.strided_slice", match=_match, plan=_plan, before=("strided_slice",))
def split_depthwise(rw: Rewriter, plan: Plan):
    """EdgeNeXt's hierarchical split depthwise convs from any of their slices
    (:func:`match_split_block`): one ``hierarchical_depthwise`` launch per conv when the strategy
    says so, the last one's map the concat; else None (each slice, add, conv and the concat apart)."""
    node, block = plan.match.anchor, plan.match.block
    v = rw.activation(node.args[0])
    if v is None or v.layout != "NCHW":
        return None
    addend = token_addend(rw.graph, block.concat, v.nchw)
    scope = rw.scope_for(v.shape5)
    x = rw.blocked(v, scope)
    channels, width, k = v.channels, block.width, len(block.pieces)
    out = None
    for i, piece in enumerate(block.pieces):
        begin, geom = i * width, piece.geom
        has_bias, adds = bool(np.any(piece.shift != 0)), addend is not None and i == k - 1
        func = kernel(kernels.hierarchical_depthwise, v.shape5, channels, begin, width, (geom.kh, geom.kw), geom.padding,
                      previous=i > 0, bias=has_bias, addend=adds, scope=scope)
        consts = [relax.const(pack_channel_range(piece.w[:, 0].astype(rw.dtype), channels, begin))]
        if has_bias:
            consts.append(relax.const(pack_channel_range(piece.shift.astype(rw.dtype), channels, begin)))
        if adds:
            consts.append(relax.const(pack_channel_range(addend[1].astype(rw.dtype), channels, 0)))
        info = elementwise_info("hierarchical_depthwise", piece.nodes + (addend[0] if adds else []), [v.nchw], begin=begin,
                                width=width, kernel=[geom.kh, geom.kw], padding=list(geom.padding), addend=adds)
        out = rw.emit_kernel(func, [x, *([out] if out is not None else []), *consts], v.shape5, op_info=info)
    for m in block.nodes + (addend[0] if addend is not None else []):
        m.fused = True
    if addend is None:
        rw.define(block.concat.var, out, scope, v.nchw)
    else:  # the tokens after the addend (NLC: a view of the same NCHW4c map)
        rw.define(addend[0][-1].var, out, scope, v.nchw, "NHWC")
    return out
