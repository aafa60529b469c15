"""Attention on an NCHW4c feature map's tokens: EdgeNeXt's transposed ("cross-covariance") attention
(XCA) and EfficientViT's ReLU linear attention (LiteMLA, at the end of the module).

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
- :func:`xca_apply`: one work item per output pixel (4 channels of one token) reads the pixels of
  the ``v`` channels its heads own and ``A``'s rows: the output is NCHW4c again.

Channel ranges need not be aligned to the 4-lane pixel (EdgeNeXt-XXS has ``d = 22, 42``): the
kernels walk the pixels a range overlaps and mask lanes outside it.
"""

from __future__ import annotations

from tvm.script import tirx as T

from ._common import (BUFFER, LANES, TEXTURE, accumulator_dtype, blocked, ceildiv, check_channels, check_dtype, check_epsilon,
                      check_positive, check_scope, check_slices, load_channels, load_pixel, maximum, nchw4c, pixel_grid, pixel_launch,
                      select_params, store_pixel, whole)


def _check_heads(shape, channels: int, heads: int, head_dim: int, offsets: dict, head_stride: int | None = None) -> tuple[int, int, int, int]:
    shape = nchw4c(shape)
    n, c4, h, w, _ = shape
    stride = head_dim if head_stride is None else head_stride
    check_positive(N=n, C4=c4, H=h, W=w, heads=heads, head_dim=head_dim)
    check_channels(c4, channels)
    if stride < head_dim:
        raise ValueError(f"head_stride={stride} must be >= head_dim={head_dim}")
    for name, offset in offsets.items():
        if not 0 <= offset <= channels - (heads - 1) * stride - head_dim:
            raise ValueError(f"{name}={offset}: the heads' channels [{name} + t * {stride}, ... + {head_dim}) must lie in [0, {channels})")
    return n, c4, h, w


def _pixels_spanned(channels: int, aligned: bool = False) -> int:
    """How many 4-lane pixels a range of ``channels`` consecutive channels may overlap (``aligned``:
    the range starts on a pixel)."""
    return ceildiv(channels, LANES) if aligned else (channels + 2) // LANES + 1


def _xca_parts(shape, channels: int, heads: int, d: int, q_offset: int, k_offset: int, epsilon: float, dtype: str):
    """The macros of XCA's weights, shared by :func:`xca_weights` and its split form: ``token``
    adds one token's products to a row's accumulators (``q``: q_i there and |q_i|^2, ``dot``,
    ``kk``: |k_j|^2), ``softmax_row`` turns them into the row of ``A``. ``bh`` = b * heads + t."""
    n, c4, h, w = shape[:4]
    acc = accumulator_dtype(dtype)
    zero, eps = T.FloatImm(acc, 0.0), T.FloatImm(acc, float(epsilon))
    nk = _pixels_spanned(d)

    # Index expressions as functions of the work item (a scalar bound in a block becomes a
    # buffer the well-formedness check refuses: tests/upstream defect 11).
    def cq(bh, vi):  # channel of q_i
        return q_offset + (bh % heads) * d + vi

    def k0(bh):  # channel of k_0 of head t
        return k_offset + (bh % heads) * d

    def j(bh, kb, lane):  # k index of lane ``lane`` of the ``kb``-th pixel head t's k overlaps
        return (k0(bh) // 4 + kb) * 4 + lane - k0(bh)

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
    n, c4, h, w = _check_heads(shape, channels, heads, d, {"q_offset": q_offset, "k_offset": k_offset})
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
    ``_common.equal_slices``). One work item per (sample, head, slice, row)."""
    d = head_dim
    n, c4, h, w = _check_heads(shape, channels, heads, d, {"q_offset": q_offset, "k_offset": k_offset})
    check_dtype(dtype)
    check_scope(scope)
    tokens = h * w
    check_slices(tokens, slices, "the map's tokens")
    per = ceildiv(tokens, slices)
    acc, zero, token, _ = _xca_parts((n, c4, h, w), channels, heads, d, q_offset, k_offset, 0.0, dtype)
    g = pixel_grid(n * heads * slices, d, 1)
    launch = pixel_launch()

    @T.macro
    def per_row(X, P, vz, vi):
        px = T.sblock_alloc_buffer((4,), dtype, scope="local")
        q = T.sblock_alloc_buffer((2,), acc, scope="local")
        dot = T.sblock_alloc_buffer((d,), acc, scope="local")
        kk = T.sblock_alloc_buffer((d,), acc, scope="local")
        q[1] = zero
        for jj in T.unroll(d):
            dot[jj] = zero
            kk[jj] = zero
        for r in range(per):
            if (vz % slices) * per + r < tokens:
                token(X, px, q, dot, kk, vz // slices, vi, ((vz % slices) * per + r) // w, ((vz % slices) * per + r) % w)
        for jj in T.unroll(d):
            P[vz // slices, vz % slices, vi, jj] = T.Cast("float32", dot[jj])
            P[vz // slices, vz % slices, vi, d + jj] = T.Cast("float32", kk[jj])
        P[vz // slices, vz % slices, vi, 2 * d] = T.Cast("float32", q[1])

    @T.prim_func(s_tir=True)
    def func(x: T.handle, p: T.handle):
        T.func_attr({"global_symbol": "xca_partials", "tirx.noalias": True})
        X = T.match_buffer(x, (n, c4, h, w, 4), dtype, scope=scope)
        P = T.match_buffer(p, (n * heads, slices, d, 2 * d + 1), "float32", scope=BUFFER)
        launch(g, d, 1, "row", lambda vz, vi, vw: per_row(X, P, vz, vi))

    return func


def xca_finish(batch: int, heads: int, head_dim: int, slices: int, epsilon: float = 1e-12, dtype: str = "float32"):
    """The split form's second kernel: ``A`` as :func:`xca_weights` writes it, from the partials
    ``P`` of :func:`xca_partials` (added over the slices in slice order: the same bits whatever
    ran where) and ``Temperature``. One work item per row."""
    d = head_dim
    check_positive(batch=batch, heads=heads, head_dim=d, slices=slices)
    check_epsilon(epsilon)
    check_dtype(dtype)
    acc, zero, _, softmax_row = _xca_parts((batch, 1, 1, 1), 4, heads, d, 0, 0, epsilon, dtype)
    g = pixel_grid(batch * heads, d, 1)
    launch = pixel_launch()

    @T.macro
    def per_row(P, Temperature, A, vz, vi):
        q = T.sblock_alloc_buffer((2,), acc, scope="local")
        dot = T.sblock_alloc_buffer((d,), acc, scope="local")
        kk = T.sblock_alloc_buffer((d,), acc, scope="local")
        s = T.sblock_alloc_buffer((2,), acc, scope="local")
        q[1] = zero
        for jj in T.unroll(d):
            dot[jj] = zero
            kk[jj] = zero
        for k in range(slices):
            for jj in T.unroll(d):
                dot[jj] = dot[jj] + T.Cast(acc, P[vz, k, vi, jj])
                kk[jj] = kk[jj] + T.Cast(acc, P[vz, k, vi, d + jj])
            q[1] = q[1] + T.Cast(acc, P[vz, k, vi, 2 * d])
        softmax_row(Temperature, A, q, dot, kk, s, vz, vi)

    @T.prim_func(s_tir=True)
    def func(p: T.handle, temperature: T.handle, a: T.handle):
        T.func_attr({"global_symbol": "xca_finish", "tirx.noalias": True})
        P = T.match_buffer(p, (batch * heads, slices, d, 2 * d + 1), "float32", scope=BUFFER)
        Temperature = T.match_buffer(temperature, (heads,), dtype, scope=BUFFER)
        A = T.match_buffer(a, (batch, heads, d, d), dtype, scope=BUFFER)
        launch(g, d, 1, "row", lambda vz, vi, vw: per_row(P, Temperature, A, vz, vi))

    return func


def xca_apply(shape, channels: int, heads: int, head_dim: int, v_offset: int, dtype: str = "float32", scope: str = TEXTURE):
    """``Y[b, t * d + i, h, w] = sum_j A[b, t, i, j] * X[b, v_offset + t * d + j, h, w]``: NCHW4c
    ``(N, ceil(heads * d / 4), H, W, 4)`` from the map ``shape`` (``channels`` channels) and
    ``A`` ``(N, heads, d, d)`` (a buffer, :func:`xca_weights`). Sums in float32; padded lanes 0."""
    d = head_dim
    n, c4, h, w = _check_heads(shape, channels, heads, d, {"v_offset": v_offset})
    check_dtype(dtype)
    check_scope(scope)
    acc = accumulator_dtype(dtype)
    zero = T.FloatImm(acc, 0.0)
    out = heads * d
    o4 = blocked(out)
    # The 4 channels of an output pixel belong to heads t0 .. t0 + spread; their v channels
    # [v_offset + t0 * d, v_offset + (t0 + spread + 1) * d) overlap at most nv pixels.
    spread = (LANES - 1 + d - 1) // d
    nv = _pixels_spanned((spread + 1) * d)
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


# -- ReLU linear attention (EfficientViT's LiteMLA) ------------------------------------------------
#
# Head t's q, k and v are ``d`` channels from ``offset + t * head_stride`` (LiteMLA interleaves
# them per head: ``head_stride = 3 * d``). With ``v`` padded by a row of ones:
#
#     KV[b, t, i, j] = sum_tokens relu(k_i) * v_j   (j < d),   KV[b, t, i, d] = sum_tokens relu(k_i)
#     Y[b, t * d + j] = sum_i relu(q_i) KV[b, t, i, j] / (sum_i relu(q_i) KV[b, t, i, d] + eps)


def _linear_kv_parts(shape, channels: int, heads: int, d: int, k_offset: int, v_offset: int, stride: int, dtype: str):
    """The macro ``token`` of :func:`linear_kv` and its split form: adds one token's
    ``relu(k_i) * [v; 1]`` to a row's accumulators ``kv`` (``k``: relu(k_i) there). ``bh`` = b * heads + t."""
    n, c4, h, w = shape[:4]
    acc = accumulator_dtype(dtype)
    zero = T.FloatImm(acc, 0.0)
    nv = _pixels_spanned(d, v_offset % LANES == 0 and stride % LANES == 0)

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
    n, c4, h, w = _check_heads(shape, channels, heads, d, {"k_offset": k_offset, "v_offset": v_offset}, stride)
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
    n, c4, h, w = _check_heads(shape, channels, heads, d, {"k_offset": k_offset, "v_offset": v_offset}, stride)
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
    nq = _pixels_spanned(spread * stride + d, q_offset % LANES == 0 and stride % LANES == 0)

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
    n, c4, h, w = _check_heads(shape, channels, heads, d, {"q_offset": q_offset}, stride)
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
        _check_heads(shape, c, t, d, {"q_offset": q_offset, "k_offset": k_offset, "v_offset": v_offset}, stride)
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


# -- separable self-attention (MobileViT-v2's LinearSelfAttention) --------------------------------
#
# On the map ``[B, 1 + 2 d, P, N]`` of the qkv conv (P pixels per patch, N patches), channel
# ``q_offset`` the query, ``d`` keys from ``k_offset``, ``d`` values from ``v_offset``:
#
#     scores[b, p, :] = softmax_n(X[b, q_offset, p, :])
#     ctx[b, c, p] = sum_n X[b, k_offset + c, p, n] * scores[b, p, n]
#     Y[b, c, p, n] = relu(X[b, v_offset + c, p, n]) * ctx[b, c, p]

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
    n, c4, h, w = _check_heads(shape, channels, 1, d, {"k_offset": k_offset, "v_offset": v_offset})
    _check_heads(shape, channels, 1, 1, {"q_offset": q_offset})
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
