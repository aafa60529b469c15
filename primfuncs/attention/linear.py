"""ReLU linear attention (EfficientViT's LiteMLA).

Head t's q, k and v are ``d`` channels from ``offset + t * head_stride`` (LiteMLA interleaves
them per head: ``head_stride = 3 * d``). With ``v`` padded by a row of ones:

    KV[b, t, i, j] = sum_tokens relu(k_i) * v_j   (j < d),   KV[b, t, i, d] = sum_tokens relu(k_i)
    Y[b, t * d + j] = sum_i relu(q_i) KV[b, t, i, j] / (sum_i relu(q_i) KV[b, t, i, d] + eps)
"""

from __future__ import annotations

from tvm.script import tirx as T

from .._common import (BUFFER, LANES, TEXTURE, accumulator_dtype, blocked, ceildiv, check_dtype, check_epsilon,
                       check_positive, check_scope, check_slices, load_pixel, maximum, nchw4c, pixel_grid,
                       pixel_launch, select_params, store_pixel, whole)
from .heads import check_heads, pixels_spanned


def _linear_kv_parts(shape, channels: int, heads: int, d: int, k_offset: int, v_offset: int, stride: int, dtype: str):
    """The macro ``token`` of :func:`linear_kv` and its split form: adds one token's
    ``relu(k_i) * [v; 1]`` to a row's accumulators ``kv`` (``k``: relu(k_i) there). ``bh`` = b * heads + t."""
    n, c4, h, w = shape[:4]
    acc = accumulator_dtype(dtype)
    zero = T.FloatImm(acc, 0.0)
    nv = pixels_spanned(d, v_offset % LANES == 0 and stride % LANES == 0)

    def ck(bh, vi):  # channel of k_i of head t
        return k_offset + (bh % heads) * stride + vi

    def v0(bh):
        return v_offset + (bh % heads) * stride

    def j(bh, vb, lane):
        return (v0(bh) // 4 + vb) * 4 + lane - v0(bh)

    @T.macro
    def token(X, px, k, kv, bh, vi, y, x):
        load_pixel(px, X, bh // heads, ck(bh, vi) // 4, y, x)
        k[0] = maximum(T.Cast(acc, px[ck(bh, vi) % 4]), zero)
        kv[d] = kv[d] + k[0]
        for vb in T.unroll(nv):
            load_pixel(px, X, bh // heads, T.min(v0(bh) // 4 + vb, c4 - 1), y, x)
            for lane in T.unroll(4):
                if 0 <= j(bh, vb, lane) and j(bh, vb, lane) < d:
                    kv[j(bh, vb, lane)] = kv[j(bh, vb, lane)] + k[0] * T.Cast(acc, px[lane])

    return acc, zero, token


def linear_kv(shape, channels: int, heads: int, head_dim: int, k_offset: int, v_offset: int, head_stride: int | None = None,
              dtype: str = "float32", scope: str = TEXTURE):
    """``KV`` (``(N, heads, d, d + 1)``, a buffer) of ReLU linear attention from the NCHW4c map
    ``shape`` holding ``channels`` channels: one work item per row ``(b, t, i)`` walks every token,
    reading the pixel of ``k_i`` and the pixels of head ``t``'s v. Sums in float32. One work group
    per (sample, head): on a wide GPU, the split form (:func:`linear_kv_partials`, :func:`linear_kv_finish`)."""
    d = head_dim
    stride = d if head_stride is None else head_stride
    n, c4, h, w = check_heads(shape, channels, heads, d, {"k_offset": k_offset, "v_offset": v_offset}, stride)
    check_dtype(dtype)
    check_scope(scope)
    acc, zero, token = _linear_kv_parts((n, c4, h, w), channels, heads, d, k_offset, v_offset, stride, dtype)
    g = pixel_grid(n * heads, d, 1)
    launch = pixel_launch()

    @T.macro
    def per_row(X, KV, vz, vi):
        px = T.sblock_alloc_buffer((4,), dtype, scope="local")
        k = T.sblock_alloc_buffer((1,), acc, scope="local")
        kv = T.sblock_alloc_buffer((d + 1,), acc, scope="local")
        for jj in T.unroll(d + 1):
            kv[jj] = zero
        for y in range(h):
            for x in range(w):
                token(X, px, k, kv, vz, vi, y, x)
        for jj in T.unroll(d + 1):
            KV[vz // heads, vz % heads, vi, jj] = T.Cast(dtype, kv[jj])

    @T.prim_func(s_tir=True)
    def func(x: T.handle, kv_: T.handle):
        T.func_attr({"global_symbol": "linear_kv", "tirx.noalias": True})
        X = T.match_buffer(x, (n, c4, h, w, 4), dtype, scope=scope)
        KV = T.match_buffer(kv_, (n, heads, d, d + 1), dtype, scope=BUFFER)
        launch(g, d, 1, "row", lambda vz, vi, vw: per_row(X, KV, vz, vi))

    return func


def linear_kv_partials(shape, channels: int, heads: int, head_dim: int, k_offset: int, v_offset: int, slices: int,
                       head_stride: int | None = None, dtype: str = "float32", scope: str = TEXTURE):
    """The split form's first kernel for wide GPUs: ``P[b * heads + t, s]`` (``(N * heads, slices,
    d, d + 1)``, a float32 buffer), :func:`linear_kv`'s sums over the tokens of slice ``s`` only
    (the ``H * W`` tokens cut by ``_common.equal_slices``). One work item per (sample, head, slice, row)."""
    d = head_dim
    stride = d if head_stride is None else head_stride
    n, c4, h, w = check_heads(shape, channels, heads, d, {"k_offset": k_offset, "v_offset": v_offset}, stride)
    check_dtype(dtype)
    check_scope(scope)
    tokens = h * w
    check_slices(tokens, slices, "the map's tokens")
    per = ceildiv(tokens, slices)
    acc, zero, token = _linear_kv_parts((n, c4, h, w), channels, heads, d, k_offset, v_offset, stride, dtype)
    g = pixel_grid(n * heads * slices, d, 1)
    launch = pixel_launch()

    @T.macro
    def per_row(X, P, vz, vi):
        px = T.sblock_alloc_buffer((4,), dtype, scope="local")
        k = T.sblock_alloc_buffer((1,), acc, scope="local")
        kv = T.sblock_alloc_buffer((d + 1,), acc, scope="local")
        for jj in T.unroll(d + 1):
            kv[jj] = zero
        for r in range(per):
            if (vz % slices) * per + r < tokens:
                token(X, px, k, kv, vz // slices, vi, ((vz % slices) * per + r) // w, ((vz % slices) * per + r) % w)
        for jj in T.unroll(d + 1):
            P[vz // slices, vz % slices, vi, jj] = T.Cast("float32", kv[jj])

    @T.prim_func(s_tir=True)
    def func(x: T.handle, p: T.handle):
        T.func_attr({"global_symbol": "linear_kv_partials", "tirx.noalias": True})
        X = T.match_buffer(x, (n, c4, h, w, 4), dtype, scope=scope)
        P = T.match_buffer(p, (n * heads, slices, d, d + 1), "float32", scope=BUFFER)
        launch(g, d, 1, "row", lambda vz, vi, vw: per_row(X, P, vz, vi))

    return func


def linear_kv_finish(batch: int, heads: int, head_dim: int, slices: int, dtype: str = "float32"):
    """The split form's second kernel: ``KV`` as :func:`linear_kv` writes it, the partials ``P`` of
    :func:`linear_kv_partials` added over the slices in slice order. One work item per row."""
    d = head_dim
    check_positive(batch=batch, heads=heads, head_dim=d, slices=slices)
    check_dtype(dtype)
    acc = accumulator_dtype(dtype)
    zero = T.FloatImm(acc, 0.0)
    g = pixel_grid(batch * heads, d, 1)
    launch = pixel_launch()

    @T.macro
    def per_row(P, KV, vz, vi):
        kv = T.sblock_alloc_buffer((d + 1,), acc, scope="local")
        for jj in T.unroll(d + 1):
            kv[jj] = zero
        for k in range(slices):
            for jj in T.unroll(d + 1):
                kv[jj] = kv[jj] + T.Cast(acc, P[vz, k, vi, jj])
        for jj in T.unroll(d + 1):
            KV[vz // heads, vz % heads, vi, jj] = T.Cast(dtype, kv[jj])

    @T.prim_func(s_tir=True)
    def func(p: T.handle, kv_: T.handle):
        T.func_attr({"global_symbol": "linear_kv_finish", "tirx.noalias": True})
        P = T.match_buffer(p, (batch * heads, slices, d, d + 1), "float32", scope=BUFFER)
        KV = T.match_buffer(kv_, (batch, heads, d, d + 1), dtype, scope=BUFFER)
        launch(g, d, 1, "row", lambda vz, vi, vw: per_row(P, KV, vz, vi))

    return func


def _linear_apply_parts(shape, channels: int, heads: int, d: int, q_offset: int, stride: int, epsilon: float, dtype: str):
    """The macro ``pixel`` of :func:`linear_apply` and :func:`linear_attention`: output pixel ``ob``
    (channels ``4 ob .. 4 ob + 3`` of the map's ``heads * d``) at token ``(y, x)`` of sample ``b``
    into ``num`` (padded lanes 0), from the q channels of the map ``X`` and ``kv(b, t, i, j)``
    (``KV[b, t, i, j]``: a Python function of the expressions, so a buffer or shared memory)."""
    n, c4, h, w = shape[:4]
    acc = accumulator_dtype(dtype)
    zero, eps = T.FloatImm(acc, 0.0), T.FloatImm(acc, float(epsilon))
    out = heads * d
    # An output pixel's heads t0 .. t0 + spread (one head when d is a multiple of 4): their q
    # channels overlap at most nq pixels.
    spread = 0 if d % LANES == 0 else (LANES - 1 + d - 1) // d
    nq = pixels_spanned(spread * stride + d, q_offset % LANES == 0 and stride % LANES == 0)

    def head(ob, lane):  # padded lanes: the last head
        return T.min((ob * 4 + lane) // d, heads - 1)

    def col(ob, lane):
        return (ob * 4 + lane) % d

    def q0(ob):  # the first q channel of the pixel's first head
        return q_offset + head(ob, 0) * stride

    def i(ob, qb, k, lane):  # channel k of the qb-th pixel as an index into lane ``lane``'s head's q
        return (q0(ob) // 4 + qb) * 4 + k - q_offset - head(ob, lane) * stride

    @T.macro
    def pixel(X, kv, px, num, den, b, ob, y, x):
        for lane in T.unroll(4):
            num[lane] = zero
            den[lane] = zero
        for qb in T.unroll(nq):
            load_pixel(px, X, b, T.min(q0(ob) // 4 + qb, c4 - 1), y, x)
            for lane in T.unroll(4):
                for k in T.unroll(4):
                    if 0 <= i(ob, qb, k, lane) and i(ob, qb, k, lane) < d:
                        num[lane] = num[lane] + maximum(T.Cast(acc, px[k]), zero) * T.Cast(acc, kv(b, head(ob, lane), i(ob, qb, k, lane), col(ob, lane)))
                        den[lane] = den[lane] + maximum(T.Cast(acc, px[k]), zero) * T.Cast(acc, kv(b, head(ob, lane), i(ob, qb, k, lane), d))
        for lane in T.unroll(4):
            num[lane] = T.Select(ob * 4 + lane < out, num[lane] / (den[lane] + eps), zero)

    return acc, pixel


def linear_apply(shape, channels: int, heads: int, head_dim: int, q_offset: int, head_stride: int | None = None,
                 epsilon: float = 1e-5, dtype: str = "float32", scope: str = TEXTURE):
    """``Y`` (NCHW4c ``(N, ceil(heads * d / 4), H, W, 4)``) of ReLU linear attention from the map
    ``shape`` (its q channels) and ``KV`` ``(N, heads, d, d + 1)`` (:func:`linear_kv`). Sums in
    float32; padded lanes 0."""
    d = head_dim
    stride = d if head_stride is None else head_stride
    n, c4, h, w = check_heads(shape, channels, heads, d, {"q_offset": q_offset}, stride)
    check_epsilon(epsilon)
    check_dtype(dtype)
    check_scope(scope)
    acc, pixel = _linear_apply_parts((n, c4, h, w), channels, heads, d, q_offset, stride, epsilon, dtype)
    o4 = blocked(heads * d)
    g = pixel_grid(n * o4, h, w)
    launch = pixel_launch()

    @T.macro
    def per_pixel(X, KV, Y, vz, vh, vw):
        px = T.sblock_alloc_buffer((4,), dtype, scope="local")
        num = T.sblock_alloc_buffer((4,), acc, scope="local")
        den = T.sblock_alloc_buffer((4,), acc, scope="local")
        pixel(X, lambda b, t, i, j: KV[b, t, i, j], px, num, den, vz // o4, vz % o4, vh, vw)
        store_pixel(Y, vz // o4, vz % o4, vh, vw, num)

    @T.prim_func(s_tir=True)
    def func(x: T.handle, kv_: T.handle, y_: T.handle):
        T.func_attr({"global_symbol": "linear_apply", "tirx.noalias": True})
        X = T.match_buffer(x, (n, c4, h, w, 4), dtype, scope=scope)
        KV = T.match_buffer(kv_, (n, heads, d, d + 1), dtype, scope=BUFFER)
        Y = T.match_buffer(y_, (n, o4, h, w, 4), dtype, scope=scope)
        launch(g, h, w, "pixel", lambda vz, vh, vw: per_pixel(X, KV, Y, vz, vh, vw))

    return func


#: Work items of a :func:`linear_attention` work group (at most: a multiple of ``head_dim``).
LINEAR_ATTENTION_THREADS = 256
#: Maps one :func:`linear_attention` reads at most (EfficientViT: the qkv conv's and the
#: multi-scale aggregation's, concatenated along channels by the module).
LINEAR_ATTENTION_MAX_MAPS = 2
_MAP_NAMES = ("A", "B")


def linear_attention_slices(head_dim: int, threads: int) -> int:
    """Token slices of :func:`linear_attention`'s sums: ``threads // head_dim`` (one item per
    (row, slice))."""
    return threads // head_dim


def linear_attention_shared_bytes(head_dim: int, threads: int) -> int:
    """Local (shared) memory of a :func:`linear_attention` work group: the float32 sums of every
    slice, ``(slices, d, d + 1)``, and ``KV`` ``(d, d + 1)``. Independent of the tokens."""
    return (linear_attention_slices(head_dim, threads) + 1) * head_dim * (head_dim + 1) * 4


def linear_attention(shapes, channels, heads, head_dim: int, q_offset: int, k_offset: int, v_offset: int, head_stride: int | None = None,
                     epsilon: float = 1e-5, threads: int = LINEAR_ATTENTION_THREADS, dtype: str = "float32", scope: str = TEXTURE):
    """ReLU linear attention in one launch for wide GPUs: ``Y`` as :func:`linear_apply` writes it
    (NCHW4c ``(N, sum(heads) * d / 4, H, W, 4)``), from 1 or 2 NCHW4c maps ``shapes`` (same
    ``N, H, W``) holding ``channels[m]`` channels and ``heads[m]`` heads each (head ``t`` of map
    ``m``: q, k, v at ``offset + t * head_stride`` of that map; the heads of map 0 come first in
    ``Y``): the maps a channel concat would join, read where they are. One work group per
    (sample, head) of ``threads // d * d`` items, in three phases with local memory between:
    item ``(slice s, row i)`` adds ``relu(k_i) * [v; 1]`` over the tokens ``s, s + slices, ...``
    (:func:`linear_kv`'s per-token macro) into its float32 sums; the items add the slices in slice
    order into ``KV`` ``(d, d + 1)``; the items walk (output pixel, token) pairs and write
    :func:`linear_apply`'s pixel from ``KV``. ``d`` must be a multiple of 4 (an output pixel's 4
    channels in one head); local memory :func:`linear_attention_shared_bytes`."""
    d = head_dim
    stride = d if head_stride is None else head_stride
    shapes, channels, heads = [nchw4c(s) for s in shapes], [int(c) for c in channels], [int(t) for t in heads]
    maps = len(shapes)
    if not 1 <= maps <= LINEAR_ATTENTION_MAX_MAPS or len(channels) != maps or len(heads) != maps:
        raise ValueError(f"linear_attention takes 1..{LINEAR_ATTENTION_MAX_MAPS} maps with one channel and head count each, "
                         f"got {maps} shapes, channels={channels}, heads={heads}")
    if len({(s[0], s[2], s[3]) for s in shapes}) != 1:
        raise ValueError(f"the maps must share N, H, W, got shapes={shapes}")
    for shape, c, t in zip(shapes, channels, heads):
        check_heads(shape, c, t, d, {"q_offset": q_offset, "k_offset": k_offset, "v_offset": v_offset}, stride)
    if d % LANES:
        raise ValueError(f"head_dim={d} must be a multiple of 4 (an output pixel's channels in one head)")
    if not d <= threads:
        raise ValueError(f"threads={threads} must be >= head_dim={d}")
    check_epsilon(epsilon)
    check_dtype(dtype)
    check_scope(scope)
    n, _, h, w, _ = shapes[0]
    tokens, total = h * w, sum(heads)
    slices = linear_attention_slices(d, threads)
    items, pairs, blocks = slices * d, d * (d + 1), d // LANES  # items; entries of KV; output pixels of a head
    # each map's per-token macro of linear_kv and per-pixel macro of linear_apply
    kv_parts = [_linear_kv_parts(s, c, t, d, k_offset, v_offset, stride, dtype) for s, c, t in zip(shapes, channels, heads)]
    pixels = [_linear_apply_parts(s, c, t, d, q_offset, stride, epsilon, dtype)[1] for s, c, t in zip(shapes, channels, heads)]
    acc, zero = kv_parts[0][:2]
    token_a, pixel_a, token_b, pixel_b = kv_parts[0][2], pixels[0], kv_parts[-1][2], pixels[-1]
    first_b = heads[0]  # Y's first head of map B
    dummy = (n, 1, h, w, 4)  # map B's buffer when there is one map: dropped below

    # The whole regions of the maps (and ``more``), declared: the inferred ones do not survive a
    # print -> parse round trip (tests/upstream defect 16).
    def read_maps(A, B, *more):
        return [whole(A), whole(B)][:maps] + [whole(m) for m in more]

    def token(r, e):  # phase 1: the token of item e in round r
        return r * slices + e // d

    def pair(r, e):  # phase 3: the (output pixel of the head, token) pair of item e in round r, as one index
        return r * items + e

    @T.macro
    def on_map(t, on_a, on_b):  # on_a() where head t of Y is map A's, else on_b() (no B: parse-time)
        if maps == 1:
            on_a()
        elif t < first_b:
            on_a()
        else:
            on_b()

    @T.macro
    def body(A, B, Y, b, t):  # sample b, head t of Y
        sums = T.sblock_alloc_buffer((slices, d, d + 1), acc, scope="shared")
        kv = T.sblock_alloc_buffer((d, d + 1), acc, scope="shared")
        # 1. item (s, i) = (e // d, e % d): relu(k_i) * [v; 1] over tokens s, s + slices, ...
        for e in T.thread_binding(items, thread="threadIdx.x"):
            with T.sblock("sums"):
                T.reads(read_maps(A, B))
                px = T.sblock_alloc_buffer((4,), dtype, scope="local")
                k = T.sblock_alloc_buffer((1,), acc, scope="local")
                row = T.sblock_alloc_buffer((d + 1,), acc, scope="local")
                for jj in T.unroll(d + 1):
                    row[jj] = zero
                for r in T.serial(ceildiv(tokens, slices)):
                    if token(r, e) < tokens:
                        on_map(t, lambda: token_a(A, px, k, row, b * heads[0] + t, e % d, token(r, e) // w, token(r, e) % w),
                               lambda: token_b(B, px, k, row, b * heads[-1] + t - first_b, e % d, token(r, e) // w, token(r, e) % w))
                for jj in T.unroll(d + 1):
                    sums[e // d, e % d, jj] = row[jj]
        # 2. KV: each entry the slices' sums added in slice order
        for e in T.thread_binding(items, thread="threadIdx.x"):
            with T.sblock("kv"):
                s = T.sblock_alloc_buffer((1,), acc, scope="local")
                for r in T.serial(ceildiv(pairs, items)):
                    if r * items + e < pairs:
                        s[0] = zero
                        for sl in range(slices):
                            s[0] = s[0] + sums[sl, (r * items + e) // (d + 1), (r * items + e) % (d + 1)]
                        kv[(r * items + e) // (d + 1), (r * items + e) % (d + 1)] = s[0]
        # 3. item e: the output pixels (block, token) = (p // tokens, p % tokens), p = e, e + items, ...
        for e in T.thread_binding(items, thread="threadIdx.x"):
            with T.sblock("apply"):
                T.reads(read_maps(A, B, kv))
                px = T.sblock_alloc_buffer((4,), dtype, scope="local")
                num = T.sblock_alloc_buffer((4,), acc, scope="local")
                den = T.sblock_alloc_buffer((4,), acc, scope="local")
                for r in T.serial(ceildiv(blocks * tokens, items)):
                    if pair(r, e) < blocks * tokens:
                        # KV of any (sample, head) the macro asks for: this work group's, in local memory
                        on_map(t, lambda: pixel_a(A, lambda bb, tt, i, j: kv[i, j], px, num, den, b, t * blocks + pair(r, e) // tokens,
                                                  pair(r, e) % tokens // w, pair(r, e) % tokens % w),
                               lambda: pixel_b(B, lambda bb, tt, i, j: kv[i, j], px, num, den, b, (t - first_b) * blocks + pair(r, e) // tokens,
                                               pair(r, e) % tokens // w, pair(r, e) % tokens % w))
                        store_pixel(Y, b, t * blocks + pair(r, e) // tokens, pair(r, e) % tokens // w, pair(r, e) % tokens % w, num)

    @T.prim_func(s_tir=True)
    def func(a: T.handle, b_: T.handle, y: T.handle):
        T.func_attr({"global_symbol": "linear_attention", "tirx.noalias": True})
        A = T.match_buffer(a, shapes[0], dtype, scope=scope)
        B = T.match_buffer(b_, shapes[-1] if maps == 2 else dummy, dtype, scope=scope)
        Y = T.match_buffer(y, (n, total * blocks, h, w, 4), dtype, scope=scope)
        for z in T.thread_binding(n * total, thread="blockIdx.x"):
            with T.sblock("head"):
                vz = T.axis.spatial(n * total, z)
                T.reads(read_maps(A, B))
                body(A, B, Y, vz // total, vz % total)

    return select_params(func, [*_MAP_NAMES[:maps], "Y"])
