"""Channel concat of any number of NCHW activations, with the elementwise chain after it as the last
concat's epilogue.

An input held only as a plain NCHW buffer (a GEMM's result seen as a map: each attention head's
output in EfficientViT's cascaded group attention, SHViT's single head) is read by the concat
kernel from that buffer (``concat_channels(plain=...)``) instead of being packed to NCHW4c first:
the concat takes either form, so no layout kernel runs before it (``rules.common.read_in_place``).
An input that is a window of whole channel blocks of a wider map (a split's part, a slice) is read
from that map in place (``Rewriter.blocked_view``): FasterNet's ``cat(conv(x1), x2)`` of
``x1, x2 = split(x)`` then runs no split launch. A concat whose inputs are plain and whose readers
want it plain (a channel group's, ``passes.channel_groups``) is left to the gather on the plain
tensors (``rules.token_layout``)."""

from __future__ import annotations

from typing import NamedTuple

from tvm import relax

from primfuncs import concat as kernels

from tir_adreno.passes import channel_groups
from tir_adreno.passes.graph import Node
from tir_adreno.passes.kernel_index import kernel
from tir_adreno.passes.op_info import concat_info
from tir_adreno.passes.rewriter import Rewriter, blocked_shape
from tir_adreno.passes.rules.base import rule
from tir_adreno.passes.rules.common import emit_with_chain, read_in_place


@rule("relax.concat")
def concat(rw: Rewriter, node: Node):
    parts = node.args[0]
    if not isinstance(parts, relax.Tuple) or node.attrs.axis is None or int(node.attrs.axis) % 4 != 1:
        return None
    if channel_groups.concat_plain(rw, node):
        return None  # a channel group's concat: the gather on its plain inputs (rules.token_layout)
    values = [rw.activation(f) for f in parts.fields]
    if any(v is None or v.layout != "NCHW" for v in values):
        return None
    if len(values) == 1:  # torch.cat([x]) (DenseNet's first layer of a block): x itself
        return rw.alias(node.var, values[0], "NCHW", values[0].nchw)
    n, _, h, w = values[0].nchw
    chans = [v.channels for v in values]
    scope = rw.scope_for(*[v.shape5 for v in values], blocked_shape((n, sum(chans), h, w)))
    parts = [_part(rw, v, scope) for v in values]
    # More inputs than one kernel takes (DenseNet concatenates up to ~50): a tree of
    # concats of up to MAX_INPUTS each, so every channel is copied log4(inputs) times.
    # (a plain input left alone in a last group of one is read plain by the next level's concat)
    while len(parts) > kernels.MAX_INPUTS:
        groups = [parts[i : i + kernels.MAX_INPUTS] for i in range(0, len(parts), kernels.MAX_INPUTS)]
        parts = [_emit_concat(rw, group, n, h, w, scope) if len(group) > 1 else group[0] for group in groups]
    # the last concat takes the elementwise chain after it as its epilogue (GhostNet's cat + shortcut)
    chans = [p.channels for p in parts]
    out_nchw = (n, sum(chans), h, w)
    return emit_with_chain(rw, node, lambda **fused: _concat_kernel(parts, n, h, w, scope, **fused), blocked_shape(out_nchw), scope,
                           out_nchw, [p.expr for p in parts], concat_info(chans, n, h, w))


class _Part(NamedTuple):
    """One input of a concat kernel: its argument, channels, whether it is a plain buffer, and the
    gather steps it is read through (a window of a wider blocked map), () for none."""

    expr: relax.Expr
    channels: int
    plain: bool = False
    view: tuple = ()


def _part(rw: Rewriter, v, scope: str) -> _Part:
    if read_in_place(rw, v):
        return _Part(v.plain, v.channels, plain=True)
    expr, view = rw.blocked_view(v, scope)
    return _Part(expr, v.channels, view=view)


def _concat_kernel(parts, n, h, w, scope, epilogue=None, channels=None):
    """The concat kernel of ``parts`` (:class:`_Part` each); ``channels`` (what emit_with_chain
    passes with an epilogue) is their sum. Without a plain input, a view or an epilogue the
    kernel (and its cache key) is as before any existed."""
    chans = [p.channels for p in parts]
    plain = tuple(i for i, p in enumerate(parts) if p.plain)
    options = {"plain": plain} if plain else {}
    options.update({"views": tuple(p.view for p in parts)} if any(p.view for p in parts) else {})
    options.update({"epilogue": epilogue} if epilogue is not None else {})
    return kernel(kernels.concat_channels, n, chans, h, w, scope=scope, **options)


def _emit_concat(rw: Rewriter, parts, n, h, w, scope) -> _Part:
    chans = [p.channels for p in parts]
    out5 = blocked_shape((n, sum(chans), h, w))
    return _Part(rw.emit_kernel(_concat_kernel(parts, n, h, w, scope), [p.expr for p in parts], out5, op_info=concat_info(chans, n, h, w)),
                 sum(chans))
