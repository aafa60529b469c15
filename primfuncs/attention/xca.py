"""EdgeNeXt's transposed ("cross-covariance") attention (XCA) on an NCHW4c feature map's tokens.

The tokens of a ``[B, N, C]`` sequence with ``N = H * W`` are the pixels of the NCHW4c map of
``[B, C, H, W]`` (the token layout, docs/kernels.md): token ``(h, w)`` holds its ``C`` channels in
``C/4`` RGBA pixels, one per array layer. q, k and v are channel ranges of one such map (the
``qkv`` Linear's output: ``q = [q_offset, q_offset + heads * d)``, likewise k and v), head ``t``
owning ``d`` consecutive channels of each. XCA attends over channels, not tokens:

    A[b, t] = softmax_j(temperature[t] * q_i . k_j / (max(|q_i|, eps) * max(|k_j|, eps)))  (d x d)
    Y[b, t * d + i, h, w] = sum_j A[b, t, i, j] * v_j[h, w]

``q_i`` being channel ``i`` of head ``t`` over all ``N`` tokens (the L2 normalization along the
tokens folds into the dot products). Two kernels, no transpose of the map:

- :func:`xca_weights`: one work item per row ``(b, t, i)`` walks every token once, reading the
  pixel of ``q_i`` and the pixels of head ``t``'s ``k`` channels, and keeps the ``d`` dot products
  and squared norms in float32 registers, then the row's softmax; ``A`` is a small buffer.
- on a wide GPU, the split form in its place: :func:`xca_partials`, one work item per (sample,
  head, token slice, row, k pixel) with the 4 lanes' partial sums of that pixel, then
  :func:`xca_finish`, a work group per row adding the slices' partials (an item per logit) and
  taking the row's softmax from local memory (items walking every slice and k pixel in series
  left a 224x224 XCiT-nano's statistics latency-bound at 52 us a layer on an H100; now 15 us).
- :func:`xca_apply`: one work item per output pixel (4 channels of one token) reads the pixels of
  the ``v`` channels its heads own and ``A``'s rows: the output is NCHW4c again.

Channel ranges need not be aligned to the 4-lane pixel (EdgeNeXt-XXS has ``d = 22, 42``): the
kernels walk the pixels a range overlaps and mask lanes outside it.
"""

from __future__ import annotations

from tvm.script import tirx as T

from .._common import (BUFFER, LANES, TEXTURE, accumulator_dtype, blocked, ceildiv, check_dtype, check_epsilon,
                       check_positive, check_scope, check_slices, load_pixel, maximum, pixel_grid, pixel_launch,
                       store_pixel)
from ..rows import MAX_THREADS
from .heads import check_heads, pixels_spanned


def _head_channels(heads: int, d: int, q_offset: int, k_offset: int):
    """Index expressions as functions of the work item (a scalar bound in a block becomes a buffer
    the well-formedness check refuses: tests/upstream defect 11): ``cq(bh, i)`` the channel of
    q_i, ``k0(bh)`` that of k_0 of head t, ``j(bh, kb, lane)`` the k index of lane ``lane`` of
    the ``kb``-th pixel head t's k overlaps (``bh`` = b * heads + t)."""

    def cq(bh, vi):
        return q_offset + (bh % heads) * d + vi

    def k0(bh):
        return k_offset + (bh % heads) * d

    def j(bh, kb, lane):
        return (k0(bh) // 4 + kb) * 4 + lane - k0(bh)

    return cq, k0, j


def _xca_parts(shape, channels: int, heads: int, d: int, q_offset: int, k_offset: int, epsilon: float, dtype: str):
    """The macros of :func:`xca_weights`: ``token``
    adds one token's products to a row's accumulators (``q``: q_i there and |q_i|^2, ``dot``,
    ``kk``: |k_j|^2), ``softmax_row`` turns them into the row of ``A``. ``bh`` = b * heads + t."""
    n, c4, h, w = shape[:4]
    acc = accumulator_dtype(dtype)
    zero, eps = T.FloatImm(acc, 0.0), T.FloatImm(acc, float(epsilon))
    nk = pixels_spanned(d)
    cq, k0, j = _head_channels(heads, d, q_offset, k_offset)

    @T.macro
    def token(X, px, q, dot, kk, bh, vi, y, x):
        load_pixel(px, X, bh // heads, cq(bh, vi) // 4, y, x)
        q[0] = T.Cast(acc, px[cq(bh, vi) % 4])
        q[1] = q[1] + q[0] * q[0]
        for kb in T.unroll(nk):
            # pixel k0 // 4 + kb: its lanes that are channels of head t's k
            load_pixel(px, X, bh // heads, T.min(k0(bh) // 4 + kb, c4 - 1), y, x)
            for lane in T.unroll(4):
                if 0 <= j(bh, kb, lane) and j(bh, kb, lane) < d:
                    dot[j(bh, kb, lane)] = dot[j(bh, kb, lane)] + q[0] * T.Cast(acc, px[lane])
                    kk[j(bh, kb, lane)] = kk[j(bh, kb, lane)] + T.Cast(acc, px[lane]) * T.Cast(acc, px[lane])

    @T.macro
    def softmax_row(Temperature, A, q, dot, kk, s, bh, vi):
        q[1] = maximum(T.sqrt(q[1]), eps)
        for jj in T.unroll(d):
            dot[jj] = dot[jj] / (q[1] * maximum(T.sqrt(kk[jj]), eps)) * T.Cast(acc, Temperature[bh % heads])
        s[0] = dot[0]
        for jj in T.unroll(d):
            s[0] = maximum(s[0], dot[jj])
        s[1] = zero
        for jj in T.unroll(d):
            dot[jj] = T.exp(dot[jj] - s[0])
            s[1] = s[1] + dot[jj]
        for jj in T.unroll(d):
            A[bh // heads, bh % heads, vi, jj] = T.Cast(dtype, dot[jj] / s[1])

    return acc, zero, token, softmax_row


def xca_weights(shape, channels: int, heads: int, head_dim: int, q_offset: int, k_offset: int, epsilon: float = 1e-12,
                dtype: str = "float32", scope: str = TEXTURE):
    """``A[b, t, i, j]`` (``(N, heads, d, d)``, a buffer) of the module docstring from the NCHW4c
    map ``shape`` ``(N, C4, H, W, 4)`` holding ``channels`` channels, and ``Temperature[t]``
    (``(heads,)``, a buffer). Dots, norms and the softmax in float32. One work group per (sample,
    head): on a wide GPU, the split form (:func:`xca_partials`, :func:`xca_finish`)."""
    d = head_dim
    n, c4, h, w = check_heads(shape, channels, heads, d, {"q_offset": q_offset, "k_offset": k_offset})
    check_epsilon(epsilon)
    check_dtype(dtype)
    check_scope(scope)
    acc, zero, token, softmax_row = _xca_parts((n, c4, h, w), channels, heads, d, q_offset, k_offset, epsilon, dtype)
    g = pixel_grid(n * heads, d, 1)
    launch = pixel_launch()

    @T.macro
    def per_row(X, Temperature, A, vz, vi):
        px = T.sblock_alloc_buffer((4,), dtype, scope="local")
        q = T.sblock_alloc_buffer((2,), acc, scope="local")  # q_i at this token, |q_i|^2
        dot = T.sblock_alloc_buffer((d,), acc, scope="local")
        kk = T.sblock_alloc_buffer((d,), acc, scope="local")
        s = T.sblock_alloc_buffer((2,), acc, scope="local")  # max, then sum of the softmax
        q[1] = zero
        for jj in T.unroll(d):
            dot[jj] = zero
            kk[jj] = zero
        for y in range(h):
            for x in range(w):
                token(X, px, q, dot, kk, vz, vi, y, x)
        softmax_row(Temperature, A, q, dot, kk, s, vz, vi)

    @T.prim_func(s_tir=True)
    def func(x: T.handle, temperature: T.handle, a: T.handle):
        T.func_attr({"global_symbol": "xca_weights", "tirx.noalias": True})
        X = T.match_buffer(x, (n, c4, h, w, 4), dtype, scope=scope)
        Temperature = T.match_buffer(temperature, (heads,), dtype, scope=BUFFER)
        A = T.match_buffer(a, (n, heads, d, d), dtype, scope=BUFFER)
        launch(g, d, 1, "row", lambda vz, vi, vw: per_row(X, Temperature, A, vz, vi))

    return func


def xca_partials(shape, channels: int, heads: int, head_dim: int, q_offset: int, k_offset: int, slices: int, dtype: str = "float32",
                 scope: str = TEXTURE):
    """The split form's first kernel for wide GPUs: ``P[b * heads + t, s, i]`` (``(N * heads, slices,
    d, 2 d + 1)``, a float32 buffer) holds row ``i``'s ``d`` dot products q_i . k_j, the ``d``
    squared norms |k_j|^2 and |q_i|^2 over the tokens of slice ``s`` (the ``H * W`` tokens cut by
    ``_common.equal_slices``). One work item per (sample, head, slice, row, pixel of head ``t``'s
    k): two pixel reads per token (q_i's, the k pixel's), the 4 lanes of that pixel's products
    (a row's items in series walked every k pixel: latency-bound on a wide GPU)."""
    d = head_dim
    n, c4, h, w = check_heads(shape, channels, heads, d, {"q_offset": q_offset, "k_offset": k_offset})
    check_dtype(dtype)
    check_scope(scope)
    tokens = h * w
    check_slices(tokens, slices, "the map's tokens")
    per = ceildiv(tokens, slices)
    acc = accumulator_dtype(dtype)
    zero = T.FloatImm(acc, 0.0)
    nk = pixels_spanned(d)
    g = pixel_grid(n * heads * slices, d, nk)
    launch = pixel_launch()

    cq, k0, j = _head_channels(heads, d, q_offset, k_offset)

    @T.macro
    def token(X, pq, pk, q, dot, kk, bh, vi, kb, y, x):
        load_pixel(pq, X, bh // heads, cq(bh, vi) // 4, y, x)
        q[0] = T.Cast(acc, pq[cq(bh, vi) % 4])
        q[1] = q[1] + q[0] * q[0]
        load_pixel(pk, X, bh // heads, T.min(k0(bh) // 4 + kb, c4 - 1), y, x)
        for lane in T.unroll(4):
            dot[lane] = dot[lane] + q[0] * T.Cast(acc, pk[lane])
            kk[lane] = kk[lane] + T.Cast(acc, pk[lane]) * T.Cast(acc, pk[lane])

    @T.macro
    def per_item(X, P, vz, vi, kb):
        pq = T.sblock_alloc_buffer((4,), dtype, scope="local")
        pk = T.sblock_alloc_buffer((4,), dtype, scope="local")
        q = T.sblock_alloc_buffer((2,), acc, scope="local")  # q_i at this token, |q_i|^2
        dot = T.sblock_alloc_buffer((4,), acc, scope="local")
        kk = T.sblock_alloc_buffer((4,), acc, scope="local")
        q[1] = zero
        for lane in T.unroll(4):
            dot[lane] = zero
            kk[lane] = zero
        for r in range(per):
            if (vz % slices) * per + r < tokens:
                token(X, pq, pk, q, dot, kk, vz // slices, vi, kb, ((vz % slices) * per + r) // w, ((vz % slices) * per + r) % w)
        for lane in T.unroll(4):
            # the lanes of the pixel that are channels of head t's k
            if 0 <= j(vz // slices, kb, lane) and j(vz // slices, kb, lane) < d:
                P[vz // slices, vz % slices, vi, j(vz // slices, kb, lane)] = T.Cast("float32", dot[lane])
                P[vz // slices, vz % slices, vi, d + j(vz // slices, kb, lane)] = T.Cast("float32", kk[lane])
        if kb == 0:
            P[vz // slices, vz % slices, vi, 2 * d] = T.Cast("float32", q[1])

    @T.prim_func(s_tir=True)
    def func(x: T.handle, p: T.handle):
        T.func_attr({"global_symbol": "xca_partials", "tirx.noalias": True})
        X = T.match_buffer(x, (n, c4, h, w, 4), dtype, scope=scope)
        P = T.match_buffer(p, (n * heads, slices, d, 2 * d + 1), "float32", scope=BUFFER)
        launch(g, d, nk, "item", lambda vz, vi, kb: per_item(X, P, vz, vi, kb))

    return func


def xca_finish(batch: int, heads: int, head_dim: int, slices: int, epsilon: float = 1e-12, dtype: str = "float32"):
    """The split form's second kernel: ``A`` as :func:`xca_weights` writes it, from the partials
    ``P`` of :func:`xca_partials` (added over the slices in slice order: the same bits whatever
    ran where) and ``Temperature``. A work group per row ``(b, t, i)``, item ``j`` its logit
    ``q_i . k_j / (|q_i| |k_j|) * temperature[t]``; the row's max and sum from local memory, in
    ``j`` order as :func:`xca_weights` takes them."""
    d = head_dim
    check_positive(batch=batch, heads=heads, head_dim=d, slices=slices)
    check_epsilon(epsilon)
    check_dtype(dtype)
    if d > MAX_THREADS:
        raise ValueError(f"xca_finish: head_dim {d} is more than a work group's {MAX_THREADS} items (one per column of a row)")
    acc = accumulator_dtype(dtype)
    zero, eps = T.FloatImm(acc, 0.0), T.FloatImm(acc, float(epsilon))
    rows = batch * heads * d

    @T.prim_func(s_tir=True)
    def func(p: T.handle, temperature: T.handle, a: T.handle):
        T.func_attr({"global_symbol": "xca_finish", "tirx.noalias": True})
        P = T.match_buffer(p, (batch * heads, slices, d, 2 * d + 1), "float32", scope=BUFFER)
        Temperature = T.match_buffer(temperature, (heads,), dtype, scope=BUFFER)
        A = T.match_buffer(a, (batch, heads, d, d), dtype, scope=BUFFER)
        for b in T.thread_binding(rows, thread="blockIdx.x"):
            with T.sblock("row"):
                vr = T.axis.spatial(rows, b)
                logit = T.sblock_alloc_buffer((d,), acc, scope="shared")
                e = T.sblock_alloc_buffer((d,), acc, scope="shared")
                for t in T.thread_binding(d, thread="threadIdx.x"):
                    with T.sblock("logits"):
                        s = T.sblock_alloc_buffer((3,), acc, scope="local")  # q_i . k_j, |k_j|^2, |q_i|^2
                        s[0] = zero
                        s[1] = zero
                        s[2] = zero
                        for k in range(slices):
                            s[0] = s[0] + T.Cast(acc, P[vr // d, k, vr % d, t])
                            s[1] = s[1] + T.Cast(acc, P[vr // d, k, vr % d, d + t])
                            s[2] = s[2] + T.Cast(acc, P[vr // d, k, vr % d, 2 * d])
                        logit[t] = s[0] / (maximum(T.sqrt(s[2]), eps) * maximum(T.sqrt(s[1]), eps)) * T.Cast(
                            acc, Temperature[(vr // d) % heads])
                for t in T.thread_binding(d, thread="threadIdx.x"):
                    with T.sblock("exps"):
                        m = T.sblock_alloc_buffer((1,), acc, scope="local")
                        m[0] = logit[0]
                        for k in range(d):
                            m[0] = maximum(m[0], logit[k])
                        e[t] = T.exp(logit[t] - m[0])
                for t in T.thread_binding(d, thread="threadIdx.x"):
                    with T.sblock("write"):
                        total = T.sblock_alloc_buffer((1,), acc, scope="local")
                        total[0] = zero
                        for k in range(d):
                            total[0] = total[0] + e[k]
                        A[vr // (heads * d), (vr // d) % heads, vr % d, t] = T.Cast(dtype, e[t] / total[0])

    return func


def xca_apply(shape, channels: int, heads: int, head_dim: int, v_offset: int, dtype: str = "float32", scope: str = TEXTURE):
    """``Y[b, t * d + i, h, w] = sum_j A[b, t, i, j] * X[b, v_offset + t * d + j, h, w]``: NCHW4c
    ``(N, ceil(heads * d / 4), H, W, 4)`` from the map ``shape`` (``channels`` channels) and
    ``A`` ``(N, heads, d, d)`` (a buffer, :func:`xca_weights`). Sums in float32; padded lanes 0."""
    d = head_dim
    n, c4, h, w = check_heads(shape, channels, heads, d, {"v_offset": v_offset})
    check_dtype(dtype)
    check_scope(scope)
    acc = accumulator_dtype(dtype)
    zero = T.FloatImm(acc, 0.0)
    out = heads * d
    o4 = blocked(out)
    # The 4 channels of an output pixel belong to heads t0 .. t0 + spread; their v channels
    # [v_offset + t0 * d, v_offset + (t0 + spread + 1) * d) overlap at most nv pixels.
    spread = (LANES - 1 + d - 1) // d
    nv = pixels_spanned((spread + 1) * d)
    g = pixel_grid(n * o4, h, w)

    def head(vz, lane):  # the head of output lane ``lane`` (padded lanes: the last head)
        return T.min(((vz % o4) * 4 + lane) // d, heads - 1)

    def row(vz, lane):
        return ((vz % o4) * 4 + lane) % d

    def v0(vz):  # the first v channel of the pixel's first head
        return v_offset + head(vz, 0) * d

    def j(vz, vb, k, lane):  # channel k of the vb-th pixel as an index into lane ``lane``'s head's v
        return (v0(vz) // 4 + vb) * 4 + k - v_offset - head(vz, lane) * d

    launch = pixel_launch()

    @T.macro
    def per_pixel(X, A, Y, vz, vh, vw):
        px = T.sblock_alloc_buffer((4,), dtype, scope="local")
        y = T.sblock_alloc_buffer((4,), acc, scope="local")
        for lane in T.unroll(4):
            y[lane] = zero
        for vb in T.unroll(nv):
            load_pixel(px, X, vz // o4, T.min(v0(vz) // 4 + vb, c4 - 1), vh, vw)
            for lane in T.unroll(4):
                for k in T.unroll(4):
                    y[lane] = y[lane] + T.Select(
                        0 <= j(vz, vb, k, lane) and j(vz, vb, k, lane) < d,
                        T.Cast(acc, A[vz // o4, head(vz, lane), row(vz, lane), T.max(T.min(j(vz, vb, k, lane), d - 1), 0)]) * T.Cast(acc, px[k]),
                        zero)
        for lane in T.unroll(4):
            y[lane] = T.Select((vz % o4) * 4 + lane < out, y[lane], zero)
        store_pixel(Y, vz // o4, vz % o4, vh, vw, y)

    @T.prim_func(s_tir=True)
    def func(x: T.handle, a: T.handle, y_: T.handle):
        T.func_attr({"global_symbol": "xca_apply", "tirx.noalias": True})
        X = T.match_buffer(x, (n, c4, h, w, 4), dtype, scope=scope)
        A = T.match_buffer(a, (n, heads, d, d), dtype, scope=BUFFER)
        Y = T.match_buffer(y_, (n, o4, h, w, 4), dtype, scope=scope)
        launch(g, h, w, "pixel", lambda vz, vh, vw: per_pixel(X, A, Y, vz, vh, vw))

    return func
