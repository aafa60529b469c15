"""Softmax attention on plain tensors in one kernel: ``Y = post(softmax(pre(alpha Q Kᵀ)) V)``.

The three launches the matmul family would make of multi-head attention (``Q Kᵀ``, the softmax
of its rows, the product with ``V``: ``primfuncs.gemm`` twice and ``primfuncs.rows.softmax``)
are one here, as PyTorch's ``scaled_dot_product_attention``:

    S[b, i, j] = pre(alpha * sum_e op(Q)[b, i, e] * op(K)[b, e, j])      (the scores)
    P[b, i, j] = exp(S[b, i, j] - max_j S[b, i]) / sum_j exp(S[b, i, j] - max_j S[b, i])
    Y[b, i, c] = post(out_scale * sum_j P[b, i, j] * op(V)[b, j, c])

Shapes and reads are the GEMM's (``primfuncs.gemm_parts``): ``Q [B..., Lq, d]`` (or stored
transposed), ``K`` stored ``[B..., Lk, d]`` (``trans_k``, as attention reads it) or
``[B..., d, Lk]``, ``V [B..., Lk, dv]`` (or transposed), batch dims that broadcast (multi-query
attention's shared K and V), each operand read through gather steps (``*_view``: q, k and v split
out of one qkv tensor, read in place) and ``Y`` stored with its axes permuted (``out_perm``).
``pre`` and ``post`` are :class:`primfuncs.epilogue.Epilogue` s as a GEMM's: a per-column bias,
a residual, an activation and an elementwise expression (attention biases: a constant operand of
the scores' shape), evaluated per element in float32.

One work group per query row ``(b, i)`` of ``threads`` items, everything in float32 whatever the
storage (docs/precision.md): the items load the row of ``Q`` into local memory, item ``t`` computes
the scores ``j = t, t + threads, ...`` into a local row of ``Lk`` floats, each item's max and then
its sum of exponentials go to local memory and every item combines all ``threads`` of them (a
one-level combine: ``threads`` <= 64), then item ``t`` computes the output columns ``c = t, t +
threads, ...``, reading the probabilities from local memory and ``V``'s column ``c``.
"""

from __future__ import annotations

import dataclasses
import math

from tvm.script import tirx as T

from .._common import ceildiv, check_dtype, maximum, select_params, unravel
from ..epilogue import BIAS, EXTRA_BUFFERS, Epilogue, activate, check_epilogue, expression
from ..gemm_parts import GemmGeometry, gemm_geometry, indexers, stored_out_shape
from ..gather import read_view
from ..rows import _wide, check_threads

F32 = "float32"
#: Most keys a query row may have: its scores and probabilities stay in local memory (16 KiB of float32).
MAX_KEYS = 2048
#: Longest query/key vector ``d``: the query row stays in local memory.
MAX_HEAD_DIM = 1024
#: Most items per query row: each combines every item's partial max and sum (a one-level combine).
MAX_THREADS = 64
#: The score epilogue's buffers are these names (the output epilogue's are ``Bias``, ``Residual``, ``Residual2``).
SCORE_BUFFERS = ("ScoreBias", "ScoreResidual", "ScoreResidual2")


def attention_geometry(q_shape, k_shape, v_shape, trans_q: bool = False, trans_k: bool = True,
                       trans_v: bool = False) -> tuple[GemmGeometry, GemmGeometry]:
    """(scores, output): the two products' :class:`GemmGeometry` (``op(Q) op(K)`` and ``P op(V)``,
    ``P`` of the scores' shape); ValueError for shapes that do not chain or exceed
    :data:`MAX_KEYS` / :data:`MAX_HEAD_DIM`, or ``K``/``V`` without batch dims."""
    if len(tuple(k_shape)) < 3 or len(tuple(v_shape)) < 3:
        raise ValueError(f"attention's K and V are activations with batch dims (rank >= 3), got K {tuple(k_shape)}, V {tuple(v_shape)}")
    scores = gemm_geometry(q_shape, k_shape, trans_q, trans_k)
    if scores.rows_folded:
        raise ValueError(f"attention's Q needs K's batch rank, got Q {tuple(q_shape)}, K {tuple(k_shape)}")
    out = gemm_geometry(scores.out_shape, v_shape, False, trans_v)
    if out.out_shape[:-1] != scores.out_shape[:-1]:
        raise ValueError(f"attention's V {tuple(v_shape)} broadcasts the scores {scores.out_shape} to {out.out_shape[:-1]}")
    if scores.n > MAX_KEYS or scores.k > MAX_HEAD_DIM:
        raise ValueError(f"attention with {scores.n} keys of length {scores.k}: the kernel keeps a query row and its "
                         f"scores in local memory (at most {MAX_KEYS} keys of {MAX_HEAD_DIM})")
    return scores, out


def shared_bytes(keys: int, head_dim: int, threads: int) -> int:
    """Local memory a work group of :func:`scaled_dot_product_attention` takes: the query row, the
    scores and probabilities (float32), the items' partial maxima and sums."""
    return (head_dim + 2 * keys + 2 * threads) * 4


def _check_part(epilogue, name: str) -> Epilogue:
    epilogue = check_epilogue(epilogue, reads_second=True)
    if epilogue.out_layout != "NCHW4c" or epilogue.residual_layout != "NCHW4c" or epilogue.out_scope or epilogue.residual_scope:
        raise ValueError(f"{name}: attention runs on plain buffers, no layout or scope of its own, got {epilogue!r}")
    if any(kind != "full" for kind in epilogue.operand_kinds):
        raise ValueError(f"{name}'s expression reads operands of its product's shape, got kinds {epilogue.operand_kinds!r}")
    return epilogue


def _finish(epilogue: Epilogue, v, Bias, Extra, Extra2, index, col, dtype: str):
    """``v`` (float32: element ``index`` of a product, column ``col``) through ``epilogue``: bias and
    residual added, the activation, then the expression; ``Bias`` packed ``(ceil(N/4), 4)`` a row
    (``strategy.packing.pack_bias``), ``Extra``/``Extra2`` the activation buffers in order."""
    zero = T.FloatImm(F32, 0.0)
    extras = (Extra, Extra2)[:len(epilogue.extra_kinds)]
    base = (v + (_wide(Bias[col // 4, col % 4], dtype) if epilogue.bias else zero)
            + (_wide(Extra[index], dtype) if epilogue.residual else zero))
    operands = tuple(_wide(buf[index], dtype) for buf in extras)[int(epilogue.residual):]
    return expression(epilogue, activate(base, epilogue.activation, F32, epilogue.clip_min, epilogue.clip_max,
                                         epilogue.activation_params),
                      operands, lambda e: _wide(Bias[col // 4, (int(epilogue.bias) + e) * 4 + col % 4], dtype), F32)


def _stored_output(product: GemmGeometry, trans_out: bool, out_perm):
    """(Y's stored shape, its indexer ``at_y(vb, i, c)`` of output row ``i``, column ``c`` of product
    ``vb``): the product's ``[B..., Lq, dv]``, its last two axes swapped with ``trans_out``, then
    its axes permuted by ``out_perm`` (``gemm_parts.stored_out_shape``: the last stays last)."""
    batch, (lq, dv) = product.out_shape[:-2], product.out_shape[-2:]
    shape = stored_out_shape(dataclasses.replace(product, out_shape=(*batch, *((dv, lq) if trans_out else (lq, dv)))), out_perm)

    def at_y(vb, i, c):
        index = (*unravel(vb, batch), *((c, i) if trans_out else (i, c)))
        return index if out_perm is None else tuple(index[a] for a in out_perm)

    return shape, at_y


def _params(epilogue: Epilogue, names) -> list[str]:
    return [names[0]] * epilogue.reads_bias + list(names[1:1 + len(epilogue.extra_kinds)])


def scaled_dot_product_attention(q_shape, k_shape, v_shape, trans_q: bool = False, trans_k: bool = True, trans_v: bool = False,
                                 alpha: float = 1.0, pre: Epilogue = Epilogue(), post: Epilogue = Epilogue(), out_perm=None,
                                 out_scale: float = 1.0, trans_out: bool = False,
                                 q_view=None, k_view=None, v_view=None, threads: int = 64, dtype: str = "float32"):
    """``Y = post(softmax(pre(alpha op(Q) op(K))) op(V))`` (the module docstring), plain buffers of
    ``dtype``, float32 arithmetic. Parameters ``Q, K, V``, then ``pre``'s inputs (``ScoreBias``,
    ``ScoreResidual``, ``ScoreResidual2``: the scores' shape), then ``post``'s (``Bias``,
    ``Residual``, ``Residual2``: ``Y``'s stored shape), then ``Y`` (:func:`stored_out_shape` of
    ``out_perm``). ``out_scale``: a constant ``P op(V)`` is scaled by before ``post`` (a uniform
    scale of ``V`` or after the product). ``trans_out``: ``Y`` is the product transposed (its last two
    axes swapped, before ``out_perm``): ``V' Pᵀ`` as EfficientViT writes it (``v @ attn.transpose(-2, -1)``),
    so a per-column bias runs along the queries. ``threads``: items per query row (a power of two, at most 64)."""
    scores, out = attention_geometry(q_shape, k_shape, v_shape, trans_q, trans_k, trans_v)
    pre, post = _check_part(pre, "pre"), _check_part(post, "post")
    check_dtype(dtype)
    check_threads(threads)
    if threads > MAX_THREADS:
        raise ValueError(f"threads must be at most {MAX_THREADS} (each item combines every item's partials), got {threads}")
    if not (math.isfinite(alpha) and math.isfinite(out_scale)):
        raise ValueError(f"alpha and out_scale must be finite, got {alpha}, {out_scale}")
    q_view, q_buffer = read_view(scores.a_shape, q_view, "q_view")
    k_view, k_buffer = read_view(scores.b_shape, k_view, "k_view")
    v_view, v_buffer = read_view(out.b_shape, v_view, "v_view")
    at_q, at_k, at_s = indexers(scores, None, q_view, k_view)
    _, at_v, _ = indexers(out, out_perm, (), v_view)
    y_shape, at_y = _stored_output(out, trans_out, out_perm)
    lq, d, lk, dv = scores.m, scores.k, scores.n, out.n
    rows = scores.batch * lq
    q_rounds, k_rounds, c_rounds = ceildiv(d, threads), ceildiv(lk, threads), ceildiv(dv, threads)
    lowest, zero = T.FloatImm(F32, -math.inf), T.FloatImm(F32, 0.0)
    scale, v_scale = T.FloatImm(F32, float(alpha)), T.FloatImm(F32, float(out_scale))

    @T.macro
    def query_row(Q, q_row, vb, vi):
        # q_row = the query row (float32)
        for t in T.thread_binding(threads, thread="threadIdx.x"):
            with T.sblock("query"):
                for r in T.serial(q_rounds):
                    if r * threads + t < d:
                        q_row[r * threads + t] = _wide(Q[at_q(vb, vi, r * threads + t)], dtype)

    @T.macro
    def score_row(K, SBias, SRes, SRes2, q_row, s_row, part_max, vb, vi):
        # item t: the scores j = t, t + threads, ... into s_row, their max into part_max[t]
        for t in T.thread_binding(threads, thread="threadIdx.x"):
            with T.sblock("scores"):
                acc = T.sblock_alloc_buffer((2,), F32, scope="local")
                acc[1] = lowest
                for r in T.serial(k_rounds):
                    if r * threads + t < lk:
                        acc[0] = zero
                        for e in T.serial(d):
                            acc[0] = acc[0] + q_row[e] * _wide(K[at_k(vb, e, r * threads + t)], dtype)
                        # the score kept in a register too: reading s_row back would ask a barrier inside the branch
                        acc[0] = _finish(pre, acc[0] * scale, SBias, SRes, SRes2, at_s(vb, vi, r * threads + t), r * threads + t, dtype)
                        s_row[r * threads + t] = acc[0]
                        acc[1] = maximum(acc[1], acc[0])
                part_max[t] = acc[1]

    @T.macro
    def exponentials(s_row, p_row, part_max, part_sum):
        # item t: its scores' exp(s - row max) into p_row (s_row is only read: no barrier inside the loop), their sum into part_sum[t]
        for t in T.thread_binding(threads, thread="threadIdx.x"):
            with T.sblock("exponentials"):
                acc = T.sblock_alloc_buffer((3,), F32, scope="local")
                acc[0] = part_max[0]
                for u in T.serial(1, threads):
                    acc[0] = maximum(acc[0], part_max[u])
                acc[1] = zero
                for r in T.serial(k_rounds):
                    if r * threads + t < lk:
                        acc[2] = T.exp(s_row[r * threads + t] - acc[0])
                        p_row[r * threads + t] = acc[2]
                        acc[1] = acc[1] + acc[2]
                part_sum[t] = acc[1]

    @T.macro
    def output_row(V, Bias, Res, Res2, Y, p_row, part_sum, vb, vi):
        # item t: output columns c = t, t + threads, ...: P's row times V's column c, over the row's sum
        for t in T.thread_binding(threads, thread="threadIdx.x"):
            with T.sblock("output"):
                acc = T.sblock_alloc_buffer((2,), F32, scope="local")
                acc[1] = part_sum[0]
                for u in T.serial(1, threads):
                    acc[1] = acc[1] + part_sum[u]
                for r in T.serial(c_rounds):
                    if r * threads + t < dv:
                        acc[0] = zero
                        for j in T.serial(lk):
                            acc[0] = acc[0] + p_row[j] * _wide(V[at_v(vb, j, r * threads + t)], dtype)
                        Y[at_y(vb, vi, r * threads + t)] = T.Cast(dtype, _finish(
                            post, acc[0] * v_scale / acc[1], Bias, Res, Res2, at_y(vb, vi, r * threads + t),
                            vi if trans_out else r * threads + t, dtype))

    @T.prim_func(s_tir=True)
    def func(q: T.handle, k: T.handle, v: T.handle, score_bias: T.handle, score_res: T.handle, score_res2: T.handle,
             bias: T.handle, res: T.handle, res2: T.handle, y: T.handle):
        T.func_attr({"global_symbol": "softmax_attention", "tirx.noalias": True})
        Q = T.match_buffer(q, q_buffer, dtype)
        K = T.match_buffer(k, k_buffer, dtype)
        V = T.match_buffer(v, v_buffer, dtype)
        ScoreBias = T.match_buffer(score_bias, pre.bias_shape(ceildiv(lk, 4)), dtype)
        ScoreResidual = T.match_buffer(score_res, scores.out_shape, dtype)
        ScoreResidual2 = T.match_buffer(score_res2, scores.out_shape, dtype)
        Bias = T.match_buffer(bias, post.bias_shape(ceildiv(lq if trans_out else dv, 4)), dtype)
        Residual = T.match_buffer(res, y_shape, dtype)
        Residual2 = T.match_buffer(res2, y_shape, dtype)
        Y = T.match_buffer(y, y_shape, dtype)
        for g in T.thread_binding(rows, thread="blockIdx.x"):
            with T.sblock("row"):
                vg = T.axis.spatial(rows, g)
                q_row = T.sblock_alloc_buffer((d,), F32, scope="shared")
                s_row = T.sblock_alloc_buffer((lk,), F32, scope="shared")
                p_row = T.sblock_alloc_buffer((lk,), F32, scope="shared")
                part_max = T.sblock_alloc_buffer((threads,), F32, scope="shared")
                part_sum = T.sblock_alloc_buffer((threads,), F32, scope="shared")
                query_row(Q, q_row, vg // lq, vg % lq)
                score_row(K, ScoreBias, ScoreResidual, ScoreResidual2, q_row, s_row, part_max, vg // lq, vg % lq)
                exponentials(s_row, p_row, part_max, part_sum)
                output_row(V, Bias, Residual, Residual2, Y, p_row, part_sum, vg // lq, vg % lq)

    keep = ["Q", "K", "V", *_params(pre, SCORE_BUFFERS), *_params(post, (BIAS, *EXTRA_BUFFERS)), "Y"]
    return select_params(func, keep)
