"""``matmul`` on plain tensors (tokens, channels-last maps, heads) as our tiled GEMM
(``primfuncs.gemm``), in buffer placement: no layout transform on either side.

Registered after ``rules.matmul`` (the classifier GEMV and the Linear run as a 1x1 conv on
blocked activations keep the nodes they took before); this rule takes the rest: a Linear by a
constant ``[K, N]`` (as the importer writes ``MatMul``, ``Gemm`` and ``Linear``: the constant
already transposed by constant folding) on ``[..., M, K]`` of any rank, with the linear steps
after it (bias add, per-column scale) folded into the weight and bias; and the batched product
of two activations ``[B..., M, K] x [B..., K, N]`` with a transpose of the last two axes of
either operand (``permute_dims``) folded into the kernel's read (Q Kᵀ, attention x V, Kᵀ V), and
a scalar multiply of an operand (attention's ``q * scale``) or a uniform scale after a batched
product folded into the kernel's ``alpha``. Then a residual add of an activation already computed, and a named activation
(``passes.activations``), go into the kernel's epilogue. Every operand is read in its plain
float32 form (upstream's tensors are float32 under every precision; under float16_acc32 the
buffers between two of our kernels are half, ``compiler._half_buffers``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tvm import relax

from primfuncs import epilogue_expr as ex
from primfuncs import gemm as gemm_kernels
from primfuncs.epilogue import Epilogue

from tir_adreno.passes import movement
from tir_adreno.passes.activations import fuse_activation
from tir_adreno.passes.affine import linear_step, other_operand
from tir_adreno.passes.epilogue_chain import Anchor, Chain, chain_epilogue, match_chain, pack_rows
from tir_adreno.passes.graph import Node, const, dtype, permute_axes, same, static_shape
from tir_adreno.passes.kernel_index import kernel
from tir_adreno.passes.op_info import epilogue_info, node_info
from tir_adreno.passes.rewriter import Rewriter
from tir_adreno.passes.rules.base import rule
from tir_adreno.strategy import gemm as strategy
from tir_adreno.strategy.packing import pack_bias


@dataclass
class Operand:
    """A GEMM operand: the activation the kernel reads (``var``, stored ``shape``), transposed or not."""

    var: relax.Var
    shape: tuple
    transposed: bool = False
    scale: float = 1.0  # a scalar multiply read through (attention's ``q * scale``)
    view: tuple = ()  # gather steps from ``shape`` to ``var``'s buffer (movement ops read through)
    producer: object = None  # a plain_elementwise.Producer computing the operand as it is read (``var`` unread)
    producer_config: object = None  # the GemmConfig that folds the producer (strategy.gemm.producer_gemm_config)
    producer_args: tuple = ()  # the producer's inputs as kernel arguments


@dataclass
class GemmTail:
    """What follows the product in the graph and goes into the kernel: the weight (a Linear's, with
    the linear steps after it folded in), the bias, a residual, an activation, the elementwise chain
    after them (also reading a constant tensor: attention biases), the last node."""

    last: Node
    weight: np.ndarray | None = None  # float64 [K, N]
    alpha: float = 1.0  # a product's uniform scale (a batched product's: its weight is no constant)
    bias: np.ndarray | None = None  # float64 [N]
    residual: relax.Var | None = None
    activation: str | None = None
    clip_bounds: tuple | None = None
    chain: Chain | None = None  # the elementwise chain after all that (``passes.epilogue_chain``)

    @property
    def epilogue(self) -> Epilogue:
        return chain_epilogue(self.bias is not None and bool(np.any(self.bias != 0)), self.activation, self.clip_bounds,
                              self.residual is not None, self.chain)

    @property
    def extra_inputs(self) -> list:
        """The activations the kernel reads beside its operands (``Epilogue.extra_kinds``' order): the
        residual, then the chain's operands (a constant's as its values, broadcast to Y's shape)."""
        return ([] if self.residual is None else [self.residual]) + ([] if self.chain is None else list(self.chain.operands))


def _swaps_last_two(node: Node) -> bool:
    """``node`` is a ``permute_dims`` that swaps the last two axes and keeps the others in place."""
    axes = node.attrs.axes if node.op == "relax.permute_dims" else None
    if axes is None:
        return False
    axes = [int(a) for a in axes]
    n = len(axes)
    return n >= 2 and axes == [*range(n - 2), n - 1, n - 2]


def _scalar_factor(rw: Rewriter, var):
    """(x, s) when ``var`` is ``x * s`` (either order) with ``s`` a float32 scalar constant and
    ``var`` read once, else None; None too when the multiply is already in the kernel computing
    ``x`` (that anchor's elementwise chain took it: ``x``'s value is the product's, :func:`_holds_product`)."""
    src = rw.graph.by_var.get(var)
    if src is None or src.op != "relax.multiply" or rw.graph.uses.get(var, 0) != 1:
        return None
    for x, c in (src.args, src.args[::-1]):
        s = const(c)
        if isinstance(x, relax.Var) and s is not None and s.dtype == np.float32 and s.size == 1 and np.isfinite(s).all():
            if static_shape(x) == static_shape(var) and not _holds_product(rw, x, var):
                return x, float(s.reshape(()))
    return None


def _holds_product(rw: Rewriter, x, var) -> bool:
    """Whether ``x`` and the product ``var`` are one kernel's output (the kernel computing ``x``
    took the multiply into its epilogue): folding the scale again would apply it twice."""
    x_expr, var_expr = rw.exprs.get(x), rw.exprs.get(var)
    return x_expr is not None and var_expr is not None and x_expr.same_as(var_expr)


def _operand(rw: Rewriter, var, fold_transpose: bool = True) -> Operand | None:
    """The float32 activation ``var`` (rank >= 2, static) as an operand; a scalar multiply and a
    transpose of its last two axes (in either order, each read once) are folded into the read
    (the nodes, left without readers, are dropped by dead-code elimination). Nothing is emitted
    here (the rule may still back out)."""
    if not isinstance(var, relax.Var) or (var not in rw.values and var not in rw.exprs):
        return None
    shape = static_shape(var)
    if shape is None or len(shape) < 2 or dtype(var) != "float32":
        return None
    scaled = _scalar_factor(rw, var)
    if scaled is not None:
        inner = _operand(rw, scaled[0], fold_transpose)
        if inner is not None:
            return Operand(inner.var, inner.shape, inner.transposed, inner.scale * scaled[1], inner.view)
    src = rw.graph.by_var.get(var)
    if fold_transpose and src is not None and _swaps_last_two(src) and rw.graph.uses.get(var, 0) == 1:
        inner = _operand(rw, src.args[0], fold_transpose=False)
        if inner is not None:
            return Operand(inner.var, inner.shape, not inner.transposed, inner.scale, inner.view)
    return _viewed(rw, var, shape)


def _viewed(rw: Rewriter, var, shape) -> Operand:
    """``var`` read through the movement ops before it that only it reads (the q, k, v of attention:
    squeeze <- split <- transpose <- reshape of the qkv Linear's output), when they read every
    element once found (no pad); else ``var`` as it is."""
    root, steps = movement.read_through(rw, var, shape)
    return Operand(root, shape, view=gemm_kernels.view_buffer(shape, steps)[0]) if steps else Operand(var, shape)


def _weight(expr, k: int) -> np.ndarray | None:
    """A float32 constant ``[K, N]`` (leading dims of size 1 dropped) as float64, else None."""
    w = const(expr)
    if w is None or w.dtype != np.float32 or w.ndim < 2 or any(d != 1 for d in w.shape[:-2]) or w.shape[-2] != k:
        return None
    return w.reshape(w.shape[-2:]).astype(np.float64)


def linear_geometry(node: Node, a_shape) -> gemm_kernels.GemmGeometry | None:
    """The geometry of ``node``, a float32 ``matmul`` of an A of ``a_shape`` by a constant float32
    ``[K, N]`` (a Linear), else None (another product, or one our kernel does not take)."""
    weight = _weight(node.args[1], a_shape[-1]) if a_shape is not None and len(a_shape) >= 2 else None
    if weight is None or dtype(node.var) != "float32":
        return None
    try:
        geom = gemm_kernels.gemm_geometry(a_shape, weight.shape)
    except ValueError:
        return None
    return geom if geom.out_shape == static_shape(node.var) else None


def _residual(rw: Rewriter, user: Node, var) -> relax.Expr | None:
    """The other operand of ``add`` ``user`` when it is an activation of the output's shape that
    exists already (in its plain form, or packed: unpacked once when the kernel is emitted), else None."""
    other = other_operand(user, var) if user.op == "relax.add" else None
    if not isinstance(other, relax.Var) or (other not in rw.values and other not in rw.exprs):
        return None
    if static_shape(other) != static_shape(var) or dtype(other) != "float32":
        return None
    return other


def _step(rw: Rewriter, tail: GemmTail, user: Node, n: int) -> bool:
    """Take ``user`` into the tail: a per-column linear step (a Linear's: folded into its weight and
    bias; a batched product's when its scale is uniform: into alpha and the bias), before the
    residual; or the residual add. True when taken."""
    if tail.residual is None:
        step = linear_step(user, tail.last.var, n, "NHWC")
        if step is not None and (tail.weight is not None or np.all(step[0] == step[0][0])):
            scale, shift = step
            if tail.weight is not None:
                tail.weight = tail.weight * scale[None, :]
            else:
                tail.alpha *= float(scale[0])
            tail.bias = (np.zeros(n) if tail.bias is None else tail.bias) * scale + shift
            return True
        tail.residual = _residual(rw, user, tail.last.var)
        return tail.residual is not None
    return False


def _chain(rw: Rewriter, tail: GemmTail, n: int) -> GemmTail:
    """The elementwise chain after the tail into it, where kernels fuse (operands of the output's
    shape only, two with the residual at most; per-column constants beside the bias)."""
    if rw.fuses:
        operands = 2 - (tail.residual is not None)
        tail.chain = match_chain(rw, tail.last, Anchor(n, "NHWC", ("full",), constant_operand=True, operands=operands))
        tail.last = tail.last if tail.chain is None else tail.chain.last
    return tail


def gemm_tail(rw: Rewriter, node: Node, weight: np.ndarray | None, n: int, bias: np.ndarray | None = None) -> GemmTail:
    """The steps after ``node`` that the kernel takes (each marked fused): linear steps, then a
    residual add, then an activation, then any elementwise chain (:func:`_chain`). ``bias``: the
    product's own before them (float64 ``[N]``: a folded layer norm's ``beta W``)."""
    tail = GemmTail(node, weight, bias=bias)
    while True:
        fused = fuse_activation(rw.graph, tail.last.var)
        if fused is not None:  # the activation ends the linear part
            tail.activation, tail.clip_bounds, tail.last = fused
            return _chain(rw, tail, n)
        user = rw.graph.sole_user(tail.last.var)
        if user is None or static_shape(user.var) != static_shape(node.var) or not _step(rw, tail, user, n):
            return _chain(rw, tail, n)
        user.fused = True
        tail.last = user


@rule("relax.matmul")
def gemm(rw: Rewriter, node: Node):
    """``A @ B`` of plain float32 tensors (B a constant, or an activation whose batch dims broadcast with A's) as our GEMM."""
    if dtype(node.var) != "float32" or static_shape(node.var) is None:
        return None
    a = _operand(rw, node.args[0])
    if a is None:
        return None
    k = a.shape[-2] if a.transposed else a.shape[-1]
    weight = _weight(node.args[1], k)
    b = None if weight is not None else _operand(rw, node.args[1])
    if weight is None and b is None:
        return None
    b_shape = weight.shape if weight is not None else b.shape
    try:
        geom = gemm_kernels.gemm_geometry(a.shape, b_shape, a.transposed, b is not None and b.transposed)
    except ValueError:  # a broadcast of batch dims our kernel does not take: left to upstream
        return None
    if geom.out_shape != static_shape(node.var):
        return None
    tail = gemm_tail(rw, node, weight, geom.n)
    return _emit(rw, node, a, b, geom, tail, _output_permute(rw, tail))


def _output_permute(rw: Rewriter, tail: GemmTail) -> Node | None:
    """The ``permute_dims`` that is the only reader of the product (and its epilogue) and keeps the
    last axis last (attention x V ``[N, heads, L, d]`` -> ``[N, L, heads, d]``): the kernel stores
    in its order, no transpose kernel after it. None with a residual or a chain's operand (read in the product's order)."""
    user = rw.graph.sole_user(tail.last.var)
    axes = permute_axes(user)
    if axes is None or tail.extra_inputs or axes[-1] != len(axes) - 1 or axes == tuple(range(len(axes))):
        return None
    return user


def emit_linear(rw: Rewriter, node: Node, a: Operand, geom, weight: np.ndarray, bias: np.ndarray | None = None,
                norm: float | None = None):
    """Linear ``node`` (by ``weight``, float64 ``[K, N]``; ``bias`` the product's own) as the GEMM
    reading ``a``, with its tail (:func:`gemm_tail`) and output permute, for a pattern anchored
    before it (the product marked fused, its value set)."""
    tail = gemm_tail(rw, node, weight, geom.n, bias=bias)
    permute = _output_permute(rw, tail)
    node.fused = True
    out = _emit(rw, node, a, None, geom, tail, permute, norm)
    if permute is None and same(tail.last.var, node.var):
        rw.exprs[node.var] = out
    return out


def tail_args(rw: Rewriter, tail: GemmTail) -> list:
    """``tail``'s kernel inputs in the epilogue's order: the packed per-column rows (the bias, the
    chain's constants), then the residual and the chain's operands (a constant as its values,
    broadcast to Y's shape)."""
    rows = pack_rows(tail.bias if tail.epilogue.bias else None, tail.chain, lambda r: pack_bias(r.astype(np.float32)))
    extras = [relax.const(np.ascontiguousarray(x, np.float32)) if isinstance(x, np.ndarray) else rw.expr(x) for x in tail.extra_inputs]
    return ([] if rows is None else [relax.const(rows)]) + extras


def _emit(rw: Rewriter, node: Node, a: Operand, b: Operand | None, geom, tail: GemmTail, permute: Node | None = None,
          norm: float | None = None):
    """The GEMM kernel of ``node`` (``a @ b``, or ``a`` by ``tail.weight``) with ``tail`` in it, stored
    through ``permute``; ``norm``: the epsilon of a layer norm over ``a``'s rows folded in
    (``passes.patterns.layer_norm_gemm``: ``tail.weight`` is ``diag(gamma) W`` with the tail's steps,
    and the kernel reads its column sums, taken here of that final weight, after it)."""
    epilogue = tail.epilogue
    # Plain tensors are float32 under every precision (upstream's side): the kernel is float32.
    kwargs = strategy.gemm_kwargs(geom, "float32", rw.profile, a.producer_config)
    if rw.dtype != "float32":
        kwargs["dtype"] = "float32"
    alpha = a.scale * (b.scale if b is not None else 1.0) * tail.alpha
    if alpha != 1.0:
        kwargs["alpha"] = alpha
    if permute is not None:
        kwargs["out_perm"] = permute_axes(permute)
    if norm is not None:
        kwargs["norm_eps"] = norm
    for name, operand in (("a_view", a), ("b_view", b)):
        if operand is not None and operand.view:
            kwargs[name] = operand.view
    if a.producer is not None:
        kwargs["a_producer"] = a.producer
    func = kernel(gemm_kernels.gemm, geom.a_shape, geom.b_shape, trans_a=geom.trans_a, trans_b=geom.trans_b, epilogue=epilogue, **kwargs)
    b_arg = relax.const(np.ascontiguousarray(tail.weight.astype(np.float32))) if tail.weight is not None else rw.expr(b.var)
    args = [*a.producer_args, b_arg] if a.producer is not None else [rw.expr(a.var), b_arg]
    if norm is not None:  # WeightSum: the column sums of the folded weight, in float64
        args.append(relax.const(pack_bias(tail.weight.sum(axis=0).astype(np.float32))))
    args += tail_args(rw, tail)
    info = node_info(node, trans_a=geom.trans_a, trans_b=geom.trans_b, alpha=alpha, config=str(kwargs["config"]))
    info["attrs"]["epilogue"] = epilogue_info(epilogue)
    if norm is not None:
        info["attrs"]["norm_eps"] = norm
    # the operands as stored, for ``tir-adreno kernel --check``'s reference (tools.workbench)
    info["gemm"] = {"a_shape": list(geom.a_shape), "b_shape": list(geom.b_shape), "trans_a": geom.trans_a,
                    "trans_b": geom.trans_b, "alpha": alpha, **({"out_perm": list(kwargs["out_perm"])} if permute is not None else {}),
                    **({"views": True} if "a_view" in kwargs or "b_view" in kwargs else {}),
                    **({"producer": ex.describe(a.producer.expr)} if a.producer is not None else {}),
                    **({"norm_eps": norm} if norm is not None else {})}
    out_shape = gemm_kernels.stored_out_shape(geom, kwargs.get("out_perm"))
    out = rw.emit_kernel(func, args, out_shape, dtype="float32", hint="gemm", op_info=info)
    if permute is not None:
        permute.fused = True
        rw.exprs[permute.var] = out
    elif not same(tail.last.var, node.var):
        rw.exprs[tail.last.var] = out
    return out
