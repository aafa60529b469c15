"""Ops that move pixels or change the view of an activation: NCHW <-> NHWC permutes, the
flatten of ``[N, C, 1, 1]`` and the token views ``[N, C, H * W]`` / ``[N, H * W, C]`` of a map
(views, no kernel), channel shuffle and channel slices
(ShuffleNet), channel splits into groups of any sizes (ONNX ``Split``: MixNet), and resize
(ONNX ``Resize``/``Upsample``)."""

from __future__ import annotations

from tvm import relax

from primfuncs import gather, resize, shuffle

from tir_adreno.passes import channel_groups
from tir_adreno.passes.graph import SWAP_TOKENS, TO_NCHW, TO_NHWC, Node, channel_range, dtype, split_parts, static_shape
from tir_adreno.passes.kernel_index import kernel
from tir_adreno.passes.op_info import elementwise_info, node_info
from tir_adreno.passes.rewriter import Rewriter, Value, blocked_shape
from tir_adreno.passes.rules.base import rule
from tir_adreno.passes.rules.common import emit_with_chain



@rule("relax.image.resize2d")
def resize2d(rw: Rewriter, node: Node):
    """ONNX ``Resize``/``Upsample``, nearest (ONNX's nearest modes) or bilinear, in the
    coordinate modes of :mod:`primfuncs.resize`, with the elementwise chain after it as its
    epilogue (FPN's ``upsample(p) + lateral``, GhostNet-v2's ``x * upsample(gate)``); other
    attributes stay upstream."""
    a = node.attrs
    method = {"nearest_neighbor": "nearest", "linear": "linear"}.get(str(a.method))
    mode, rounding = str(a.coordinate_transformation_mode), str(a.rounding_method)
    if method is None or mode not in resize.COORDINATE_MODES or (method == "nearest" and rounding not in resize.ROUNDING_METHODS):
        return None
    x = rw.activation(node.args[0])
    out_shape = static_shape(node.var)
    if x is None or x.layout != "NCHW" or str(a.layout) != "NCHW" or out_shape is None or dtype(node.var) != "float32":
        return None
    in5, out5 = x.shape5, blocked_shape(out_shape)
    scope = rw.scope_for(in5, out5)
    info = node_info(node, method=method, coordinate_transformation_mode=mode, rounding_method=rounding)
    return emit_with_chain(rw, node, lambda **fused: kernel(resize.resize2d, in5, out_shape[2:], method, mode, rounding, scope=scope, **fused),
                           out5, scope, out_shape, [rw.blocked(x, scope)], info)


@rule("relax.permute_dims")
def permute(rw: Rewriter, node: Node):
    """NCHW <-> NHWC of a blocked activation: a change of view, no kernel."""
    axes = tuple(int(a) for a in node.attrs.axes) if node.attrs.axes is not None else None
    x = rw.values.get(node.args[0])  # only blocked values: a plain one stays what it is
    if x is None or not x.blocked:
        return None
    swaps = {TO_NHWC: ("NCHW", "NHWC"), TO_NCHW: ("NHWC", "NCHW"), SWAP_TOKENS: (x.layout, {"NCL": "NLC", "NLC": "NCL"}.get(x.layout))}
    src, dst = swaps.get(axes, (None, None))
    if dst is None or x.layout != src:
        return None
    return rw.alias(node.var, x, dst, x.nchw)


def _channel_shuffle(rw: Rewriter, node: Node, x: Value):
    """``reshape(N, g, C/g, H, W) -> permute(0, 2, 1, 3, 4) -> reshape(N, C, H, W)`` from ``node``
    (ShuffleNet): one ``channel_shuffle`` kernel, else None."""
    g = rw.graph
    n, c, h, w = x.nchw
    split, perm = static_shape(node.var), g.sole_user(node.var)
    back = g.sole_user(perm.var) if perm is not None else None
    if split is None or len(split) != 5 or split[0] != n or split[1] * split[2] != c or split[3:] != (h, w):
        return None
    if perm is None or perm.op != "relax.permute_dims" or tuple(int(a) for a in perm.attrs.axes or ()) != (0, 2, 1, 3, 4):
        return None
    if back is None or back.op != "relax.reshape" or static_shape(back.var) != x.nchw:
        return None
    shape5 = x.shape5
    scope = rw.scope_for(shape5)
    info = elementwise_info("channel_shuffle", [node, perm, back], [x.nchw], groups=split[1])
    out = rw.emit_kernel(kernel(shuffle.channel_shuffle, shape5, c, split[1], scope=scope), [rw.blocked(x, scope)], shape5, op_info=info)
    perm.fused = back.fused = True
    rw.define(back.var, out, scope, x.nchw)
    return out


@rule("relax.strided_slice")
def strided_slice(rw: Rewriter, node: Node):
    """A slice of channels (ShuffleNet's split): one ``slice_channels`` kernel (a slice of every
    channel is no node: ``graph.is_identity_slice``)."""
    x = rw.activation(node.args[0])
    if x is None or x.layout != "NCHW":
        return None
    found = channel_range(node, x.channels)
    out_shape = static_shape(node.var)
    if found is None or out_shape != (x.nchw[0], found[1] - found[0], *x.nchw[2:]):
        return None
    b, e = found
    in5, out5 = x.shape5, blocked_shape(out_shape)
    scope = rw.scope_for(in5, out5)
    out = rw.emit_kernel(kernel(shuffle.slice_channels, in5, x.channels, b, e, scope=scope), [rw.blocked(x, scope)], out5, op_info=node_info(node, axis=1, begin=b, end=e))
    rw.define(node.var, out, scope, out_shape)
    rw.values[node.var].window = channel_window(x, b, e)
    return out


@rule("relax.split")
def split(rw: Rewriter, node: Node):
    """ONNX ``Split`` along channels, any group sizes: one ``split_channels`` launch per up to
    ``MAX_PARTS`` parts, each part an activation of its own (the ``TupleGetItem`` users fused)."""
    if channel_groups.split_plain(rw, node):
        return None  # the layout planner runs it on the plain tensor (rules.token_layout)
    x = rw.activation(node.args[0])
    sizes = split_parts(node, x.nchw) if x is not None and x.layout == "NCHW" else None
    users = rw.graph.users(node.var)
    if sizes is None or not users or any(u.op != "tuple_get_item" for u in users):
        return None
    n, _, h, w = x.nchw
    outs5 = [blocked_shape((n, c, h, w)) for c in sizes]
    scope = rw.scope_for(x.shape5, *outs5)
    src, parts, offset = rw.blocked(x, scope), [], 0
    for first in range(0, len(sizes), shuffle.MAX_PARTS):
        chunk = sizes[first : first + shuffle.MAX_PARTS]
        begin, end = offset, offset + sum(chunk)
        info = node_info(node, axis=1, sizes=chunk, begin=begin, end=end)
        if len(chunk) == 1:  # the last part of a split into MAX_PARTS k + 1
            func = kernel(shuffle.slice_channels, x.shape5, x.channels, begin, end, scope=scope)
            parts.append(rw.emit_kernel(func, [src], outs5[first], op_info=info))
        else:
            func = kernel(shuffle.split_channels, x.shape5, x.channels, chunk, begin, scope=scope)
            parts += rw.emit_kernel_outputs(func, [src], outs5[first : first + len(chunk)], op_info=info)
        offset = end
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    for u in users:
        u.fused = True
        rw.define(u.var, parts[u.index], scope, (n, sizes[u.index], h, w))
        rw.values[u.var].window = channel_window(x, starts[u.index], starts[u.index] + sizes[u.index])
    return relax.Tuple(parts)


def channel_window(x: Value, begin: int, end: int) -> tuple:
    """Channels ``[begin, end)`` of blocked ``x`` as a window a kernel reads in place
    (``Value.window``): where they are whole blocks of it (``begin`` a multiple of 4, and the
    width too or the window reaching x's last channel, whose padded lanes are 0), else ()."""
    if begin % 4 or ((end - begin) % 4 and end != x.channels):
        return ()
    return x, (gather.Affine(x.shape5, (0, begin // 4, 0, 0, 0), (1,) * 5),)


def _token_view(node: Node, x: Value) -> str | None:
    """The layout ``node`` (a reshape of blocked ``x``) views ``x`` in: a map flattened to tokens
    (``[N, C, H, W] -> [N, C, H * W]``, ``[N, H, W, C] -> [N, H * W, C]``) or tokens unflattened
    to their map, or a classifier's ``[N, C]`` back to ``[N, C, 1, 1]``, else None."""
    out_shape = static_shape(node.var)
    n, c, h, w = x.nchw
    views = {("NCHW", (n, c, h * w)): "NCL", ("NHWC", (n, h * w, c)): "NLC",
             ("NCL", (n, c, h, w)): "NCHW", ("NLC", (n, h, w, c)): "NHWC", ("NC", (n, c, 1, 1)): "NCHW"}
    return views.get((x.layout, out_shape)) if x.blocked else None


@rule("relax.reshape")
def reshape(rw: Rewriter, node: Node):
    """Flatten of ``[N, C, 1, 1]`` (after a global pool) to ``[N, C]``, a map to its tokens or
    back, and a reshape of a blocked tensor to its own shape (EfficientViT's ``view(B, -1, H, W)``):
    a change of view; a channel shuffle (reshape -> permute -> reshape): one kernel."""
    v = rw.values.get(node.args[0])
    if v is not None and v.blocked and static_shape(node.var) == static_shape(node.args[0]):
        return rw.alias(node.var, v, v.layout, v.nchw)  # a reshape to its own shape: the tensor itself
    view = _token_view(node, v) if v is not None else None
    if view is not None:
        return rw.alias(node.var, v, view, v.nchw)
    x = rw.activation(node.args[0])
    if x is not None and x.layout == "NCHW" and len(static_shape(node.var) or ()) == 5:
        return _channel_shuffle(rw, node, x)
    out_shape = static_shape(node.var)
    if x is None or x.layout != "NCHW" or not x.blocked or x.nchw[2:] != (1, 1) or out_shape != x.nchw[:2]:
        return None
    return rw.alias(node.var, x, "NC", x.nchw)
