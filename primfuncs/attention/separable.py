"""Separable self-attention (MobileViT-v2's LinearSelfAttention).

On the map ``[B, 1 + 2 d, P, N]`` of the qkv conv (P pixels per patch, N patches), channel
``q_offset`` the query, ``d`` keys from ``k_offset``, ``d`` values from ``v_offset``:

    scores[b, p, :] = softmax_n(X[b, q_offset, p, :])
    ctx[b, c, p] = sum_n X[b, k_offset + c, p, n] * scores[b, p, n]
    Y[b, c, p, n] = relu(X[b, v_offset + c, p, n]) * ctx[b, c, p]
"""

from __future__ import annotations

from tvm.script import tirx as T

from .._common import (TEXTURE, accumulator_dtype, blocked, ceildiv, check_dtype, check_positive, check_scope,
                       load_channels, load_pixel, maximum, store_pixel)
from .heads import check_heads


#: Work items of a separable attention work group (at most; fewer for a short row).
SEPARABLE_THREADS = 64


def separable_attention(shape, channels: int, head_dim: int, q_offset: int = 0, k_offset: int | None = None, v_offset: int | None = None,
                        threads: int | None = None, dtype: str = "float32", scope: str = TEXTURE):
    """``Y`` (NCHW4c ``(B, ceil(d / 4), P, N, 4)``) of the comment above from the NCHW4c map
    ``shape`` ``(B, C4, P, N, 4)`` holding ``channels`` channels (``k_offset`` defaults to
    ``q_offset + 1``, ``v_offset`` to ``k_offset + d``: timm's split ``[1, d, d]``). One launch:
    a work group of ``threads`` items (default: the power of two covering ``N``, at most
    :data:`SEPARABLE_THREADS`) per (sample, channel block, row ``p``), item ``t`` owning tokens
    ``t, t + threads, ...``: the row's max of q, then each item's sum of ``e = exp(q - max)`` and
    of ``e * k`` over its tokens (5 float32 partials in local memory), then every item adds the
    partials in item order (the same bits in every item), ``ctx = sum(e k) / sum(e)``, and writes
    ``relu(v) * ctx`` for its tokens. Recomputing the row's softmax per channel block costs one
    pixel read per token; float32 max, sums and products whatever the storage. Padded lanes 0."""
    d = head_dim
    k_offset = q_offset + 1 if k_offset is None else k_offset
    v_offset = k_offset + d if v_offset is None else v_offset
    n, c4, h, w = check_heads(shape, channels, 1, d, {"k_offset": k_offset, "v_offset": v_offset})
    check_heads(shape, channels, 1, 1, {"q_offset": q_offset})
    if threads is None:
        threads = 1
        while threads < min(w, SEPARABLE_THREADS):
            threads *= 2
    check_positive(threads=threads)
    check_dtype(dtype)
    check_scope(scope)
    acc = accumulator_dtype(dtype)
    zero, lowest = T.FloatImm(acc, 0.0), T.FloatImm(acc, float("-inf"))
    o4 = blocked(d)
    rounds = ceildiv(w, threads)
    qb, ql = q_offset // 4, q_offset % 4

    def token(r, t):
        return r * threads + t

    @T.macro
    def body(X, Y, vb, vo, vp):
        row_max = T.sblock_alloc_buffer((threads,), acc, scope="shared")
        partial = T.sblock_alloc_buffer((threads, 5), acc, scope="shared")  # sum e, sum e * k (4 lanes)
        # 1. item t: the max of q over its tokens (NaN wins, as np.max)
        for t in T.thread_binding(threads, thread="threadIdx.x"):
            with T.sblock("max"):
                px = T.sblock_alloc_buffer((4,), dtype, scope="local")
                m = T.sblock_alloc_buffer((1,), acc, scope="local")
                m[0] = lowest
                for r in T.serial(rounds):
                    if token(r, t) < w:
                        load_pixel(px, X, vb, qb, vp, token(r, t))
                        m[0] = maximum(m[0], T.Cast(acc, px[ql]))
                row_max[t] = m[0]
        # 2. item t: the row's max (every item adds the same values in the same order), then
        #    sum e and sum e * k over its tokens
        for t in T.thread_binding(threads, thread="threadIdx.x"):
            with T.sblock("context"):
                px = T.sblock_alloc_buffer((4,), dtype, scope="local")
                px1 = T.sblock_alloc_buffer((4,), dtype, scope="local")
                kp = T.sblock_alloc_buffer((4,), dtype, scope="local")
                m = T.sblock_alloc_buffer((2,), acc, scope="local")  # the max, e
                s = T.sblock_alloc_buffer((5,), acc, scope="local")
                m[0] = row_max[0]
                for i in range(1, threads):
                    m[0] = maximum(m[0], row_max[i])
                for i in T.unroll(5):
                    s[i] = zero
                for r in T.serial(rounds):
                    if token(r, t) < w:
                        load_pixel(px, X, vb, qb, vp, token(r, t))
                        m[1] = T.exp(T.Cast(acc, px[ql]) - m[0])
                        s[0] = s[0] + m[1]
                        load_channels(kp, px, px1, X, vb, k_offset, vo, vp, token(r, t), c4 - 1)
                        for lane in T.unroll(4):
                            s[1 + lane] = s[1 + lane] + m[1] * T.Cast(acc, kp[lane])
                for i in T.unroll(5):
                    partial[t, i] = s[i]
        # 3. item t: ctx from the partials, then relu(v) * ctx for its tokens
        for t in T.thread_binding(threads, thread="threadIdx.x"):
            with T.sblock("apply"):
                px = T.sblock_alloc_buffer((4,), dtype, scope="local")
                px1 = T.sblock_alloc_buffer((4,), dtype, scope="local")
                vp4 = T.sblock_alloc_buffer((4,), dtype, scope="local")
                ctx = T.sblock_alloc_buffer((5,), acc, scope="local")
                out = T.sblock_alloc_buffer((4,), acc, scope="local")
                for i in T.unroll(5):
                    ctx[i] = zero
                for k in range(threads):
                    for i in T.unroll(5):
                        ctx[i] = ctx[i] + partial[k, i]
                for lane in T.unroll(4):
                    ctx[1 + lane] = ctx[1 + lane] / ctx[0]
                for r in T.serial(rounds):
                    if token(r, t) < w:
                        load_channels(vp4, px, px1, X, vb, v_offset, vo, vp, token(r, t), c4 - 1)
                        for lane in T.unroll(4):
                            out[lane] = T.Select(vo * 4 + lane < d, maximum(T.Cast(acc, vp4[lane]), zero) * ctx[1 + lane], zero)
                        store_pixel(Y, vb, vo, vp, token(r, t), out)

    @T.prim_func(s_tir=True)
    def func(x: T.handle, y: T.handle):
        T.func_attr({"global_symbol": "separable_attention", "tirx.noalias": True})
        X = T.match_buffer(x, (n, c4, h, w, 4), dtype, scope=scope)
        Y = T.match_buffer(y, (n, o4, h, w, 4), dtype, scope=scope)
        for z in T.thread_binding(n * o4 * h, thread="blockIdx.x"):
            with T.sblock("row"):
                vz = T.axis.spatial(n * o4 * h, z)
                body(X, Y, vz // (o4 * h), vz // h % o4, vz % h)

    return func
