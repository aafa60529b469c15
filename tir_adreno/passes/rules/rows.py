"""Softmax, layer norm, RMS norm, batch norm and reductions of PLAIN tensors (the token layout: tokens
``[N, L, C]``, heads ``[B, heads, L, d]``, channels-last maps, ``[N, C]``) as our row kernels
(``primfuncs.rows``), read and written as the plain row-major buffers they are: no layout
transform on either side.

Each rule takes its op only when the input has no blocked form in the rewriter (an upstream op's
output, a GEMM's, a model input): an op on a blocked map stays with the map rules registered
after these (``pool.softmax``, ``pool.reduction``, ``layer_norm.layer_norm``,
``elementwise.batch_norm``), which read it where it is. The kernels are float32 under every
precision (plain tensors are float32, as the GEMM rule's; under float16_acc32 the buffers
between two of our kernels are half, ``storage.half_buffers``, and the statistics stay float32).
A batch norm right after a Linear is folded into the Linear's weight before the rules
(``passes.linear_norm``); the one left here is a per-channel affine kernel.

Softmax, the layer norm and the reductions read their input in place through the movement ops before it that only it reads (a channel
chunk of a Linear's output, a transpose: ``movement.read_through``, the row kernel's ``x_view``),
so no gather kernel runs before it.

The elementwise chain after a softmax, layer norm, RMS norm or batch norm (an affine, a layer
scale, an activation, a residual add) goes into its kernel's expression epilogue
(``passes.epilogue_chain``; :func:`_emit_norm`): one launch for both. A norm without a chain
keeps the kernel and arguments it had before.
"""

from __future__ import annotations

import math

import numpy as np
from tvm import relax

from primfuncs import rows as kernels

from tir_adreno.passes import movement
from tir_adreno.passes.affine import batch_norm_affine, batch_norm_output
from tir_adreno.passes.epilogue_chain import Anchor, Chain, chain_only, match_chain
from tir_adreno.passes.graph import Node, const, dtype, same, scalar, static_shape
from tir_adreno.passes.kernel_index import kernel
from tir_adreno.passes.op_info import epilogue_info, node_info
from tir_adreno.passes.rewriter import Rewriter
from tir_adreno.passes.rules.base import rule
from tir_adreno.strategy.norm import row_threads


def plain_input(rw: Rewriter, var) -> tuple | None:
    """The static shape of ``var`` when it is a float32 tensor the rewriter holds only in its plain
    form (no blocked NCHW4c form exists: that one is the map rules'), else None."""
    if not isinstance(var, relax.Var) or (var not in rw.values and var not in rw.exprs):
        return None
    value = rw.values.get(var)
    if value is not None and value.blocked:
        return None
    shape = static_shape(var)
    if shape is None or not shape or min(shape) < 1 or dtype(var) != "float32":
        return None
    return shape


def _axes(attr, rank: int) -> tuple | None:
    """Sorted non-negative axes of an ``axis``/``axes`` attribute (None: every axis) when they are
    consecutive, else None."""
    axes = sorted(range(rank)) if attr is None else sorted(int(a) % rank for a in attr)
    return tuple(axes) if axes and axes == list(range(axes[0], axes[0] + len(axes))) else None


def _viewed(rw: Rewriter, var, shape) -> tuple[relax.Expr, dict]:
    """(the argument, the factory's ``x_view`` keyword) of input ``var``: read in place through the
    movement ops before it that only it reads (a channel chunk of a Linear's output, a transpose:
    ``movement.read_through``), so no gather kernel runs before the row kernel; else as it is."""
    root, steps = movement.read_through(rw, var, shape)
    return rw.expr(root), ({"x_view": steps} if steps else {})


def _float32(rw: Rewriter) -> dict:
    """The factory keyword that builds a kernel float32 under a half precision (the emitter gives a
    call naming no dtype the precision's; float32 calls stay as written)."""
    return {} if rw.dtype == "float32" else {"dtype": "float32"}


def _emit(rw: Rewriter, node: Node, func, args, out_shape, hint: str, **attrs):
    return rw.emit_kernel(func, args, out_shape, dtype="float32", hint=hint, op_info=node_info(node, **attrs))


def _norm_chain(rw: Rewriter, last: Node, shape) -> Chain | None:
    """The elementwise chain after a norm whose value ``last`` holds (``passes.epilogue_chain``: an
    affine, a layer scale, a residual add, an activation ...), its nodes marked fused, where kernels
    fuse: per-channel constants along the last axis, an operand of the output's shape (an activation,
    or a constant tensor broadcast to it)."""
    if not rw.fuses:
        return None
    return match_chain(rw, last, Anchor(shape[-1], "NHWC", ("full",), constant_operand=True))


def _norm_epilogue(rw: Rewriter, chain: Chain | None) -> tuple[dict, list]:
    """(the factory's ``epilogue`` keyword, the kernel's extra arguments) of ``chain``: nothing
    without one, so a norm without a chain keeps its kernel and arguments."""
    if chain is None:
        return {}, []
    epilogue, rows = chain_only(chain)
    args = [relax.const(rows)] if rows is not None else []
    if isinstance(chain.operand, np.ndarray):  # a constant operand comes as its values (broadcast to Y's shape)
        args.append(relax.const(np.ascontiguousarray(chain.operand, np.float32)))
    elif chain.operand is not None:
        args.append(rw.expr(chain.operand))
    return {"epilogue": epilogue}, args


def _emit_norm(rw: Rewriter, node: Node, last: Node, func_of, args, shape, hint: str, **attrs):
    """The norm kernel ``func_of(**epilogue keyword)`` of ``node`` (its value ``last``'s) with the
    elementwise chain after it (:func:`_norm_chain`) in its epilogue: one launch for both."""
    chain = _norm_chain(rw, last, shape)
    epilogue, extra = _norm_epilogue(rw, chain)
    info = node_info(node, **attrs)
    if epilogue:
        info["attrs"]["epilogue"] = epilogue_info(epilogue["epilogue"])
    out = rw.emit_kernel(func_of(**epilogue), args + extra, shape, dtype="float32", hint=hint, op_info=info)
    end = last if chain is None else chain.last
    if not same(end.var, node.var):
        rw.exprs[end.var] = out
    return out


@rule("relax.nn.softmax")
def softmax_rows(rw: Rewriter, node: Node):
    """Softmax over any axis of a plain tensor: one ``softmax_rows`` kernel (a work group per row),
    the elementwise chain after it in its epilogue."""
    shape = plain_input(rw, node.args[0])
    if shape is None:
        return None
    axis = int(node.attrs.axis) % len(shape)
    threads = row_threads(rw.profile, shape[axis])
    x, view = _viewed(rw, node.args[0], shape)
    return _emit_norm(rw, node, node, lambda **epilogue: kernel(kernels.softmax, shape, axis, threads=threads, **epilogue, **view,
                                                                **_float32(rw)),
                      [x], shape, "softmax_rows", axis=axis, viewed=bool(view))


@rule("relax.nn.layer_norm")
def layer_norm_rows(rw: Rewriter, node: Node):
    """Layer norm over the trailing axes of a plain tensor (ONNX ``LayerNormalization``'s
    ``axis``: a transformer's norm on tokens) with constant gamma and beta: one ``layer_norm_rows``
    kernel."""
    x_var, gamma, beta = node.args
    shape = plain_input(rw, x_var)
    axes = _axes(node.attrs.axes, len(shape)) if shape is not None else None
    if axes is None or axes[-1] != len(shape) - 1:
        return None
    normalized = shape[axes[0]:]
    size = math.prod(normalized)
    g = const(gamma) if bool(node.attrs.scale) else np.ones(size, np.float32)
    b = const(beta) if bool(node.attrs.center) else np.zeros(size, np.float32)
    if g is None or b is None or g.size != size or b.size != size:
        return None
    eps = float(node.attrs.epsilon)
    params = [relax.const(v.reshape(normalized).astype(np.float32)) for v in (g, b)]
    x, view = _viewed(rw, x_var, shape)
    return _emit_norm(rw, node, node, lambda **epilogue: kernel(kernels.layer_norm, shape, axes[0], eps, threads=row_threads(rw.profile, size),
                                                                **epilogue, **view, **_float32(rw)),
                      [x, *params], shape, "layer_norm_rows", axis=axes[0], epsilon=eps, viewed=bool(view))


def _next(rw: Rewriter, var, op: str) -> Node | None:
    """The sole reader of ``var`` when it is ``op``, else None."""
    user = rw.graph.sole_user(var)
    return user if user is not None and user.op == op else None


def _other(node: Node, var):
    """The operand of binary ``node`` that is not ``var`` (None when neither or both are)."""
    a, b = node.args
    return b if same(a, var) and not same(b, var) else a if same(b, var) and not same(a, var) else None


def _rms_chain(rw: Rewriter, node: Node, shape):
    """(nodes, first normalized axis, epsilon, gamma) of the RMS norm that squaring ``node`` starts,
    as torch exports it and TVM's importer writes it: ``x ** 2 -> mean over trailing axes (kept)
    -> + eps -> sqrt -> x / that`` then optionally ``* gamma`` (a constant of the normalized axes'
    shape, either operand order); else None."""
    x = node.args[0]
    mean = _next(rw, node.var, "relax.mean")
    axes = _axes(mean.attrs.axis, len(shape)) if mean is not None and bool(mean.attrs.keepdims) else None
    add = _next(rw, mean.var, "relax.add") if axes is not None and axes[-1] == len(shape) - 1 else None
    eps = scalar(_other(add, mean.var)) if add is not None else None
    root = _next(rw, add.var, "relax.sqrt") if eps is not None and eps >= 0 else None
    div = _next(rw, root.var, "relax.divide") if root is not None else None
    if div is None or not same(div.args[0], x) or not same(div.args[1], root.var):
        return None
    nodes, normalized = [node, mean, add, root, div], shape[axes[0]:]
    gamma = np.ones(normalized, np.float32)
    mul = _next(rw, div.var, "relax.multiply")
    g = const(_other(mul, div.var)) if mul is not None and static_shape(mul.var) == shape else None
    if g is not None and g.dtype == np.float32 and g.size == math.prod(normalized) and g.shape[-len(normalized):] == normalized:
        nodes, gamma = nodes + [mul], g.reshape(normalized)
    return nodes, axes[0], eps, gamma


@rule("relax.power")
def rms_norm_rows(rw: Rewriter, node: Node):
    """An RMS norm (``x / sqrt(mean(x ** 2) + eps) * gamma`` over trailing axes of a plain tensor, as
    exported) as one ``rms_norm_rows`` kernel; the chain's nodes are taken with it."""
    shape = plain_input(rw, node.args[0])
    chain = _rms_chain(rw, node, shape) if shape is not None and scalar(node.args[1]) == 2.0 else None
    if chain is None:
        return None
    nodes, axis, eps, gamma = chain
    for m in nodes[1:]:
        m.fused = True
    threads = row_threads(rw.profile, math.prod(shape[axis:]))
    return _emit_norm(rw, node, nodes[-1], lambda **epilogue: kernel(kernels.layer_norm, shape, axis, eps, threads=threads, rms=True,
                                                                     **epilogue, **_float32(rw)),
                      [rw.expr(node.args[0]), relax.const(gamma)], shape, "rms_norm_rows", axis=axis, epsilon=eps)


@rule("relax.mean", "relax.sum", "relax.max", "relax.min")
def reduction_rows(rw: Rewriter, node: Node):
    """A reduction over consecutive axes of a plain tensor (a token mean, a channels-last map's
    global pool): one ``<op>_rows`` kernel, one value per row."""
    shape = plain_input(rw, node.args[0])
    axes = _axes(node.attrs.axis, len(shape)) if shape is not None else None
    out_shape = static_shape(node.var)
    keepdims = bool(node.attrs.keepdims)
    if axes is None or not out_shape or kernels.rows_of(shape, axes).reduced_shape(keepdims) != out_shape:
        return None  # a 0-d result (every axis dropped) stays upstream's
    op, length = node.op.split(".")[-1], math.prod(shape[a] for a in axes)
    x, view = _viewed(rw, node.args[0], shape)
    func = kernel(kernels.reduce, shape, axes, op, keepdims, threads=row_threads(rw.profile, length), **view, **_float32(rw))
    return _emit(rw, node, func, [x], out_shape, f"{op}_rows", axis=axes, keepdims=keepdims, viewed=bool(view))


@rule("relax.nn.batch_norm")
def batch_norm_rows(rw: Rewriter, node: Node):
    """Inference batch norm on a plain tensor along any axis (BatchNorm1d on tokens ``[L, C]`` or
    ``[N, C, L]``) that no Linear took (``passes.linear_norm``): one ``channel_affine`` kernel."""
    shape = plain_input(rw, node.args[0])
    getter = batch_norm_output(rw.graph, node)
    if shape is None or getter is None or bool(node.attrs.training):
        return None
    folded = batch_norm_affine(node)
    axis = int(node.attrs.axis) % len(shape)
    if folded is None or any(np.size(v) != shape[axis] for v in folded):
        return None
    scale, shift = (relax.const(np.ascontiguousarray(v, np.float32).reshape(-1)) for v in folded)
    getter.fused = True
    return _emit_norm(rw, node, getter, lambda **epilogue: kernel(kernels.channel_affine, shape, axis, **epilogue, **_float32(rw)),
                      [rw.expr(node.args[0]), scale, shift], shape, "channel_affine", axis=axis, epsilon=float(node.attrs.epsilon))
