"""Softmax attention of any export in one kernel: the batched product ``Q Kᵀ``, the elementwise
steps after it (a scale, attention biases), the softmax over its last axis and the product of the
probabilities with ``V``, as PyTorch's ``scaled_dot_product_attention``:

    scores = (q @ kᵀ) [* scale] [+ bias ...]    (``relax.matmul`` of two activations: the anchor)
    probs = softmax(scores, axis=-1)            (read by the next product alone)
    out = probs @ v [...]                       (its tail: a scale, a residual, a permute)
    or out = v' @ probsᵀ [...]                  (EfficientViT's ``v @ attn.transpose(-2, -1)``: the
                                                 kernel stores the product transposed, ``trans_out``)

runs as one ``softmax_attention`` kernel (``primfuncs.attention.scaled_dot_product_attention``)
instead of two ``gemm`` launches and a ``softmax_rows`` between them, where
``strategy.attention.softmax_attention_threads`` says the row fits. Everything the GEMM rule reads
through is read through here too, by the same helpers (``rules.gemm``): q, k and v views of one
qkv tensor, transposes of the last two axes, scalar multiplies (into ``alpha`` and
``out_scale``), the scores' tail (per-column linear steps, an elementwise chain with a constant
operand: EfficientViT's and LeViT's attention biases) and the output's (linear steps, a residual,
an activation, a chain, a permute of the leading axes). Anything else (another reader of the
scores or the probabilities, a ``V`` not computed yet, a tail that stops before the softmax)
declines, and the GEMM and softmax rules take the nodes as before."""

from __future__ import annotations

import math

from tvm import relax

from primfuncs import attention as kernels
from primfuncs.gemm import view_buffer

from tir_adreno.passes import movement
from tir_adreno.passes.graph import Node, const, dtype, permute_axes, same, static_shape
from tir_adreno.passes.kernel_index import kernel
from tir_adreno.passes.op_info import epilogue_info, node_info
from tir_adreno.passes.patterns.base import Match, Plan, pattern
from tir_adreno.passes.rewriter import Rewriter
from tir_adreno.passes.rules.gemm import Operand, _operand, _output_permute, _swaps_last_two, gemm_tail, tail_args
from tir_adreno.strategy.attention import softmax_attention_threads

#: The elementwise steps the walk from the scores to the softmax passes (the GEMM tail takes them).
SCORE_STEPS = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide")
#: Most such steps (a scale, a bias, a mask: a few).
MAX_SCORE_STEPS = 4


def _activation_product(node: Node | None) -> bool:
    return (node is not None and node.op == "relax.matmul" and dtype(node.var) == "float32"
            and all(isinstance(a, relax.Var) and const(a) is None for a in node.args))


def _match(g, node: Node) -> Match | None:
    """A float32 product of two activations whose scores reach a softmax over their last axis
    through at most :data:`MAX_SCORE_STEPS` elementwise steps of the scores' shape (each read once),
    the softmax read by one product of two activations as its left operand (``P V``), or through a
    transpose of its last two axes as its right one (``V' Pᵀ``)."""
    shape = static_shape(node.var)
    if not _activation_product(node) or shape is None or len(shape) < 3:
        return None
    last = node
    for _ in range(MAX_SCORE_STEPS + 1):
        user = g.sole_user(last.var)
        if user is None or static_shape(user.var) != shape:
            return None
        if user.op == "relax.nn.softmax":
            break
        if user.op not in SCORE_STEPS:
            return None
        last = user
    else:
        return None
    if int(user.attrs.axis) % len(shape) != len(shape) - 1:
        return None
    reader, transposed = g.sole_user(user.var), None
    if reader is not None and _swaps_last_two(reader):  # v' @ probsᵀ
        transposed, reader = reader, g.sole_user(reader.var)
    if not _activation_product(reader) or not same(reader.args[1 if transposed else 0], (transposed or user).var):
        return None
    out = static_shape(reader.var)
    return Match(node, {"softmax": user, "reader": reader, "transposed": transposed, "keys": shape[-1],
                        "value_dim": (out[-2] if transposed else out[-1]) if out else 0})


def _plan(match: Match, profile, records, precision) -> Plan | None:
    """The kernel's ``threads`` (``strategy.attention.softmax_attention_threads``) for the scores'
    rows and the head length of ``Q`` (its axis that is not the queries': ``Q`` may be stored
    transposed; ``emit`` checks the geometry again)."""
    q_shape, scores = static_shape(match.anchor.args[0]), static_shape(match.anchor.var)
    head_dim = (q_shape[-1] if q_shape[-2] == scores[-2] else q_shape[-2]) if q_shape and len(q_shape) >= 2 else 0
    threads = softmax_attention_threads(profile, math.prod(scores[:-1]), match.keys, head_dim, match.value_dim)
    return Plan(match, threads) if threads is not None else None


@pattern("relax.matmul", match=_match, plan=_plan, before=("gemm", "matmul"))
def softmax_attention(rw: Rewriter, plan: Plan):
    """The attention's one kernel (the softmax, the second product and both tails marked fused),
    else None with every mark as it was."""
    node, soft, reader = plan.match.anchor, plan.match.softmax, plan.match.reader
    marks = rw.graph.fused_marks()
    out = _emit(rw, node, soft, reader, plan.match.transposed, plan.decision)
    if out is None:
        rw.graph.restore_fused(marks)
    return out


def _value_operand(rw: Rewriter, var) -> Operand | None:
    """``V`` as the GEMM rule reads an operand, or, where the export computes ``v`` after the scores
    (EfficientViT: the split of the qkv output reshaped after the softmax), through the movement ops
    between it and a tensor computed already (their kernels, left without readers, are dropped)."""
    found = _operand(rw, var)
    shape = static_shape(var)
    if found is not None or shape is None or len(shape) < 2 or dtype(var) != "float32":
        return found
    root, steps = movement.read_through(rw, var, shape)
    if not steps or (root not in rw.values and root not in rw.exprs):
        return None
    return Operand(root, shape, view=view_buffer(shape, steps)[0])


def _emit(rw: Rewriter, node: Node, soft: Node, reader: Node, transposed: Node | None, threads: int):
    q, k, v = _operand(rw, node.args[0]), _operand(rw, node.args[1]), _value_operand(rw, reader.args[0 if transposed else 1])
    if q is None or k is None or v is None:
        return None  # an operand not computed yet (V after the scores) or not plain float32
    trans_v = v.transposed != bool(transposed)  # v' @ probsᵀ reads v' as op(V)ᵀ
    try:
        scores, product = kernels.attention_geometry(q.shape, k.shape, v.shape, q.transposed, k.transposed, trans_v)
    except ValueError:
        return None
    out_shape = product.out_shape[:-2] + (product.out_shape[-2:][::-1] if transposed else product.out_shape[-2:])
    if scores.out_shape != static_shape(node.var) or out_shape != static_shape(reader.var):
        return None
    pre = gemm_tail(rw, node, None, scores.n)
    if not same(pre.last.var, soft.args[0]):
        return None  # the scores' tail stopped before the softmax (a step it cannot take)
    soft.fused = reader.fused = True
    if transposed is not None:
        transposed.fused = True
    post = gemm_tail(rw, reader, None, out_shape[-1])
    permute = _output_permute(rw, post)
    kwargs = {"alpha": q.scale * k.scale * pre.alpha, "out_scale": v.scale * post.alpha, "threads": threads,
              "pre": pre.epilogue, "post": post.epilogue, "trans_out": transposed is not None, "dtype": "float32",  # plain tensors: float32 kernels (rules.gemm)
              **({"out_perm": permute_axes(permute)} if permute is not None else {}),
              **{name: o.view for name, o in (("q_view", q), ("k_view", k), ("v_view", v)) if o.view}}
    func = kernel(kernels.scaled_dot_product_attention, q.shape, k.shape, v.shape, trans_q=q.transposed,
                  trans_k=k.transposed, trans_v=trans_v, **kwargs)
    args = [rw.expr(q.var), rw.expr(k.var), rw.expr(v.var), *tail_args(rw, pre), *tail_args(rw, post)]
    info = node_info(node, alpha=kwargs["alpha"], out_scale=kwargs["out_scale"], threads=threads, trans_q=q.transposed,
                     trans_k=k.transposed, trans_v=trans_v, trans_out=transposed is not None, views=bool(q.view or k.view or v.view))
    info["attrs"].update(pre=epilogue_info(pre.epilogue), post=epilogue_info(post.epilogue))
    stored = out_shape if permute is None else tuple(out_shape[a] for a in permute_axes(permute))
    out = rw.emit_kernel(func, args, stored, dtype="float32", hint="attention", op_info=info)
    last = permute if permute is not None else post.last
    if permute is not None:
        permute.fused = True
    rw.exprs[last.var] = out
    return out

