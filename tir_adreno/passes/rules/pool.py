"""Pooling, reductions over C/H/W and the channel softmax of an NCHW activation. A pool (and the
global average pool, a mean over H and W) takes the elementwise chain after it as its epilogue
(``passes.epilogue_chain.pool_chain``): one launch for the pool and its chain. A pool whose readers take
plain tensors only (``map_boundary.token_output``: GCViT's global query, a pooled map permuted and
tiled into attention heads) and no chain fuses into writes that plain buffer itself
(``pool2d(plain_axes=...)``)."""

from __future__ import annotations

from tvm import relax

from primfuncs import pool2d, reduce

from tir_adreno.passes.epilogue_chain import chain_fuses
from tir_adreno.passes.graph import Node, ints, static_shape
from tir_adreno.passes.kernel_index import kernel
from tir_adreno.passes.map_boundary import define_plain_output, token_output
from tir_adreno.passes.op_info import node_info
from tir_adreno.passes.rewriter import Rewriter, blocked_shape
from tir_adreno.passes.rules.base import rule
from tir_adreno.passes.rules.common import emit_with_chain
from tir_adreno.strategy import pool as pool_strategy
from tir_adreno.strategy.records import pool_key

POOL_OPS = ("relax.nn.max_pool2d", "relax.nn.avg_pool2d", "relax.nn.adaptive_avg_pool2d")


def pool_spec(node: Node):
    """(op, factory, attributes, output (OH, OW)) of a pooling node, or None when it is not one
    of ours; ``factory(in5, scope=, strategy=, group_threshold=, **attributes)``. ``tune`` uses it too."""
    out_shape = static_shape(node.var)
    a = node.attrs
    if out_shape is None or str(a.layout) != "NCHW" or (a.out_layout and str(a.out_layout) != "NCHW"):
        return None
    if node.op == "relax.nn.adaptive_avg_pool2d":
        return "adaptive_avg", pool2d.adaptive_avg_pool2d, dict(output_size=tuple(out_shape[2:])), out_shape[2:]
    if pool2d.padding_past_half_window(ints(a.pool_size), ints(a.padding), ints(a.dilation)) is not None:
        return None  # valid ONNX (pads up to the window size - 1) our kernels do not take: upstream's
    kind = "max" if node.op.endswith("max_pool2d") else "avg"
    attrs = dict(pool_type=kind, pool_size=ints(a.pool_size), strides=ints(a.strides), padding=ints(a.padding),
                 dilation=ints(a.dilation), ceil_mode=bool(a.ceil_mode),
                 count_include_pad=bool(getattr(a, "count_include_pad", False)))
    return f"{kind}", pool2d.pool2d, attrs, out_shape[2:]


@rule(*POOL_OPS)
def pool(rw: Rewriter, node: Node):
    spec = pool_spec(node)
    x = rw.activation(node.args[0])
    if spec is None or x is None or x.layout != "NCHW":
        return None
    op, factory, attrs, (oh, ow) = spec
    n, c, h, w = x.nchw
    in5, out5 = x.shape5, blocked_shape((n, c, oh, ow))
    scope = rw.scope_for(in5, out5)
    schedule = pool_strategy.pool_schedule(pool_key(op, x.nchw, attrs), rw.profile, rw.records)
    plain = token_output(rw, node.var, (n, c, oh, ow)) if factory is pool2d.pool2d and not chain_fuses(rw, node, c) else None
    if plain is not None:  # its readers take plain tensors (a token view, a GEMM): the pool writes that buffer
        nhwc = plain.layout == "NHWC"
        func = kernel(factory, in5, scope=scope, **schedule, **attrs, channels=c, plain_axes=tuple("hwc" if nhwc else "chw"))
        out = rw.emit_kernel(func, [rw.blocked(x, scope)], (n, oh, ow, c) if nhwc else (n, c, oh, ow), dtype="float32",
                             op_info=node_info(node, **attrs))
        define_plain_output(rw, node.var, out, (n, c, oh, ow), plain)
        return out
    return emit_with_chain(rw, node, lambda **fused: kernel(factory, in5, scope=scope, **schedule, **attrs, **fused), out5, scope,
                        (n, c, oh, ow), [rw.blocked(x, scope)], node_info(node, **attrs))


#: The NCHW axes each axis of tokens ``[N, L, C]`` stands for (L: the map's H and W flattened).
_MAP_AXES = {"N": (0,), "C": (1,), "L": (2, 3)}


@rule("relax.mean", "relax.sum", "relax.max", "relax.min")
def reduction(rw: Rewriter, node: Node):
    x = rw.activation(node.args[0])
    out_shape = static_shape(node.var)
    if x is None or x.layout != "NCHW" or node.attrs.axis is None or out_shape is None:
        return _view_reduction(rw, node)
    axes = tuple(sorted(int(a) % 4 for a in node.attrs.axis))
    keepdims = bool(node.attrs.keepdims)
    if 0 in axes or (not keepdims and axes != (2, 3)):
        return None  # plain-layout results are left to upstream; [N, C] (a global pool) is "NC"
    return _emit_reduce(rw, node, x, axes, out_shape if keepdims else (*out_shape, 1, 1), "NCHW")


def _view_reduction(rw: Rewriter, node: Node):
    """A reduction, dims kept, of a blocked map seen as tokens ``[N, L, C]`` (a Linear on the map's
    tokens ran as a 1x1 conv): the same NCHW4c reduction on the map, its result seen as tokens
    (SwiftFormer's sum over the channels: ``[N, L, 1]``; over the tokens: ``[N, 1, C]``); else None.
    (A map seen as ``[N, C, L]`` reaches the row rules: the importer's Reshape makes it plain.)"""
    x = rw.values.get(node.args[0]) if isinstance(node.args[0], relax.Var) else None
    if x is None or not x.blocked or x.layout != "NLC" or node.attrs.axis is None or not bool(node.attrs.keepdims):
        return None
    axes = tuple(sorted({m for a in node.attrs.axis for m in _MAP_AXES["NLC"[int(a) % 3]]}))
    if 0 in axes:
        return None
    out_nchw = tuple(1 if i in axes else d for i, d in enumerate(x.nchw))
    return _emit_reduce(rw, node, x, axes, out_nchw, "NHWC")  # defined at rank 3: tokens NLC


def _emit_reduce(rw: Rewriter, node: Node, x, axes, out_nchw, layout: str):
    """One ``reduce`` kernel over NCHW ``axes`` of map ``x`` (dims kept), defining ``node``'s value as
    the map ``out_nchw`` seen in ``layout``."""
    in5 = x.shape5
    shape5, _ = reduce.reduce_output(in5, x.channels, axes, keepdims=True)
    scope = rw.scope_for(in5, shape5)
    op = node.op.split(".")[-1]
    info = node_info(node, axis=axes, keepdims=True)
    threshold = pool_strategy.group_threshold(rw.profile)

    def make(channels=None, **fused):
        return kernel(reduce.reduce, in5, x.channels, op, axes, True, scope=scope, group_threshold=threshold, **fused)

    if op == "mean" and axes == (2, 3) and layout == "NCHW" and bool(node.attrs.keepdims):  # a global average pool: a pool's anchor
        return emit_with_chain(rw, node, make, shape5, scope, out_nchw, [rw.blocked(x, scope)], info)
    out = rw.emit_kernel(make(), [rw.blocked(x, scope)], shape5, op_info=info)
    rw.define(node.var, out, scope, out_nchw, layout)
    return out


@rule("relax.nn.softmax")
def softmax(rw: Rewriter, node: Node):
    """Softmax over the channels or over W (the last axis: MobileViT-v2's attention over patches)."""
    x = rw.activation(node.args[0])
    axis = int(node.attrs.axis) % 4
    if x is None or x.layout != "NCHW" or axis not in reduce.SOFTMAX_AXES:
        return None
    shape5 = x.shape5
    scope = rw.scope_for(shape5)
    # axis=1 passes no axis: the channel softmax keeps the kernel key it always had
    func = kernel(reduce.softmax, shape5, x.channels, scope=scope, **({"axis": axis} if axis != 1 else {}))
    out = rw.emit_kernel(func, [rw.blocked(x, scope)], shape5, op_info=node_info(node, axis=axis))
    rw.define(node.var, out, scope, x.nchw)
    return out
