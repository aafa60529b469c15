"""A batch norm on a Linear's output features folded into the Linear at compile time (LeViT's
``Linear + BatchNorm1d``, exported as ``MatMul -> Reshape [L, C] -> BatchNormalization ->
Reshape``), and one on its input features (a classifier head's ``BatchNorm1d -> Linear``:
EfficientViT, SHViT, RepViT).

:func:`fold_linear_norms` rewrites ``batch_norm(matmul(x, W))`` (or with a reshape between them
that keeps the last axis) over the last axis, the Linear's output features, into
``matmul(x, W * scale) + shift`` (reshaped as the norm's input was), weights combined in float64
and rounded to float32 once. The GEMM rule then takes the Linear with the shift as its bias: one
kernel, no norm left. Only where the matmul and the reshape are read by the norm alone (else the
unnormalized product is needed too) and the weight is a float32 constant ``[K, C]``.

:func:`fold_linear_norms` also rewrites ``matmul(batch_norm(x), W)`` with the norm over the last
axis of ``x`` (the Linear's input features) and read by that matmul alone into
``matmul(x, scale[:, None] * W) + shift @ W``: no norm left, and no layout change around an
upstream one (the norm of ``[N, C]`` after a global pool would run upstream on the plain form).
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax.analysis import remove_all_unused

from tir_adreno.passes.affine import batch_norm_affine, batch_norm_output
from tir_adreno.passes.graph import Graph, Node, const, same, static_shape


def _sole_source(g: Graph, var, op: str) -> Node | None:
    """The node computing ``var`` when it is ``op`` and ``var`` is read once, else None."""
    node = g.by_var.get(var)
    return node if node is not None and node.op == op and g.uses.get(var, 0) == 1 else None


def _fold(g: Graph, node: Node):
    """(getter var, matmul node, reshape shape or None, weight, bias) of inference batch norm ``node``
    over the last axis of a Linear's output, else None."""
    getter = batch_norm_output(g, node)
    shape = static_shape(node.args[0])
    if getter is None or shape is None or bool(node.attrs.training) or int(node.attrs.axis) % len(shape) != len(shape) - 1:
        return None
    reshape = _sole_source(g, node.args[0], "relax.reshape")
    matmul = _sole_source(g, reshape.args[0] if reshape is not None else node.args[0], "relax.matmul")
    weight = const(matmul.args[1]) if matmul is not None else None
    out = static_shape(matmul.var) if matmul is not None else None
    if weight is None or weight.dtype != np.float32 or weight.ndim != 2 or out is None or out[-1] != shape[-1]:
        return None
    folded = batch_norm_affine(node)
    if folded is None or any(np.size(v) != shape[-1] for v in folded):
        return None
    scale, shift = (np.asarray(v, np.float64).reshape(-1) for v in folded)
    return getter.var, matmul.args[0], (shape if reshape is not None else None), weight.astype(np.float64) * scale[None, :], shift


def _fold_input(g: Graph, node: Node):
    """(matmul var, norm input, None, weight, bias) of inference batch norm ``node`` over the last
    axis of a Linear's input read by that Linear alone (``matmul(bn(x), W)``, ``W`` a float32
    constant ``[C, M]``), else None."""
    getter = batch_norm_output(g, node)
    shape = static_shape(node.args[0])
    if getter is None or shape is None or len(shape) < 2 or bool(node.attrs.training):
        return None
    if int(node.attrs.axis) % len(shape) != len(shape) - 1:
        return None
    matmul = g.sole_user(getter.var)
    weight = const(matmul.args[1]) if matmul is not None and matmul.op == "relax.matmul" else None
    if weight is None or weight.dtype != np.float32 or weight.ndim != 2 or weight.shape[0] != shape[-1]:
        return None
    if not same(matmul.args[0], getter.var) or static_shape(matmul.var) is None:
        return None
    folded = batch_norm_affine(node)
    if folded is None or any(np.size(v) != shape[-1] for v in folded):
        return None
    scale, shift = (np.asarray(v, np.float64).reshape(-1) for v in folded)
    w = weight.astype(np.float64)
    return matmul.var, node.args[0], None, scale[:, None] * w, shift @ w


@relax.expr_functor.mutator
class _Emitter(relax.PyExprMutator):
    """Rebinds each folded norm's output to the scaled Linear plus its shift."""

    def __init__(self, mod, folds: dict):
        super().__init__(mod)
        self.folds = folds

    def visit_var_binding_(self, binding):
        fold = self.folds.get(binding.var)
        if fold is None:
            return super().visit_var_binding_(binding)
        source, shape, weight, shift = fold
        product = self.builder_.emit(relax.op.matmul(self.visit_expr(source), relax.const(weight.astype(np.float32))))
        value = relax.op.add(product, relax.const(shift.astype(np.float32)))
        if shape is not None:
            value = relax.op.reshape(self.builder_.emit(value), shape)
        self.builder_.emit_normalized(relax.VarBinding(binding.var, self.builder_.normalize(value)))


def fold_linear_norms(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with each batch norm on a Linear's output or input features in ``main`` folded into
    it (the module docstring); ``mod`` itself when there is none."""
    g = Graph(mod["main"], mod)
    folds = {}
    for node in g.nodes:
        if node.op != "relax.nn.batch_norm":
            continue
        found = _fold(g, node) or _fold_input(g, node)
        if found is not None:
            folds[found[0]] = found[1:]
    if not folds:
        return mod
    main = remove_all_unused(_Emitter(mod, folds).visit_expr(mod["main"]))
    functions = {gv: (main if gv.name_hint == "main" else f) for gv, f in mod.functions.items()}
    return tvm.IRModule(functions, attrs=mod.attrs)
