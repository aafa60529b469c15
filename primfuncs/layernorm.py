"""Per-sample norms of NCHW4c tensors: layer norm over the channels (ConvNeXt's LayerNorm between
permutes) and group norm over (C / groups, H, W) (:func:`group_norm`; MobileViT-v2's GroupNorm1).

Layer norm: one work item per pixel ``(n, h, w)`` walks its ``C/4`` channel blocks three times:
the mean, then the variance around it (two passes: no cancellation of
``E[x^2] - E[x]^2``), then ``(x - mean) / sqrt(var + eps) * gamma + beta``, all in
float32 registers. Padded lanes (channels ``>= C``) are left out of the statistics
and written as ``beta``'s zero padding (gamma and beta are zero-padded ``(C/4, 4)``).
"""

from __future__ import annotations

from tvm.script import tirx as T

from ._common import (BUFFER, LANES, TEXTURE, ceildiv, check_channels, check_dtype, check_epsilon, check_positive, check_scope,
                      load_pixel, pixel_grid, pixel_launch, store_pixel)
from .epilogue import ACTIVATIONS, activate


def layer_norm_channels(shape, channels: int, epsilon: float = 1e-5, dtype: str = "float32", scope: str = TEXTURE):
    """``Y[n, :, h, w] = layer_norm(X[n, :, h, w]) * Gamma + Beta`` over the ``channels``
    real channels of NCHW4c ``shape`` ``(N, C/4, H, W, 4)``; ``Gamma``/``Beta`` ``(C/4, 4)`` buffers."""
    shape = tuple(int(d) for d in shape)
    if len(shape) != 5 or shape[4] != LANES:
        raise ValueError(f"shape must be NCHW4c (N, C4, H, W, 4), got {shape}")
    n, c4, h, w, _ = shape
    check_positive(N=n, C4=c4, H=h, W=w, channels=channels)
    check_channels(c4, channels)
    check_epsilon(epsilon)
    check_dtype(dtype)
    check_scope(scope)
    g = pixel_grid(n, h, w)
    zero, count = T.FloatImm(dtype, 0.0), T.FloatImm(dtype, float(channels))

    launch = pixel_launch()

    @T.macro
    def per_pixel(X, Gamma, Beta, Y, vn, vh, vw):
        px = T.sblock_alloc_buffer((4,), dtype, scope="local")
        out = T.sblock_alloc_buffer((4,), dtype, scope="local")
        gb = T.sblock_alloc_buffer((2, 4), dtype, scope="local")
        stats = T.sblock_alloc_buffer((2,), dtype, scope="local")  # mean, variance
        stats[0] = zero
        for cb in range(c4):
            load_pixel(px, X, vn, cb, vh, vw)
            for lane in T.unroll(4):
                stats[0] = stats[0] + T.Select(cb * 4 + lane < channels, px[lane], zero)
        stats[0] = stats[0] / count
        stats[1] = zero
        for cb in range(c4):
            load_pixel(px, X, vn, cb, vh, vw)
            for lane in T.unroll(4):
                stats[1] = stats[1] + T.Select(cb * 4 + lane < channels, (px[lane] - stats[0]) * (px[lane] - stats[0]), zero)
        stats[1] = T.FloatImm(dtype, 1.0) / T.sqrt(stats[1] / count + T.FloatImm(dtype, float(epsilon)))
        for cb in range(c4):
            load_pixel(px, X, vn, cb, vh, vw)
            for lane in T.vectorized(4):
                gb[0, lane] = Gamma[cb, lane]
            for lane in T.vectorized(4):
                gb[1, lane] = Beta[cb, lane]
            for lane in T.unroll(4):
                out[lane] = (px[lane] - stats[0]) * stats[1] * gb[0, lane] + gb[1, lane]
            store_pixel(Y, vn, cb, vh, vw, out)

    @T.prim_func(s_tir=True)
    def func(x: T.handle, gamma: T.handle, beta: T.handle, y: T.handle):
        T.func_attr({"global_symbol": "layer_norm_channels", "tirx.noalias": True})
        X = T.match_buffer(x, (n, c4, h, w, 4), dtype, scope=scope)
        Gamma = T.match_buffer(gamma, (c4, 4), dtype, scope=BUFFER)
        Beta = T.match_buffer(beta, (c4, 4), dtype, scope=BUFFER)
        Y = T.match_buffer(y, (n, c4, h, w, 4), dtype, scope=scope)
        launch(g, h, w, "pixel", lambda vz, vh, vw: per_pixel(X, Gamma, Beta, Y, vz, vh, vw))

    return func


#: Work items of the one work group per (sample, group) of :func:`group_norm`.
GROUP_NORM_THREADS = 64


def group_norm(shape, channels: int, groups: int, epsilon: float = 1e-5, activation: str | None = None, dtype: str = "float32",
               scope: str = TEXTURE, threads: int = GROUP_NORM_THREADS, clip_min: float = 0.0, clip_max: float = 6.0):
    """``Y = act((X - mean) / sqrt(var + epsilon) * Gamma[c] + Beta[c])`` with ``mean``, ``var``
    over the ``(C / groups, H, W)`` elements of each (sample, group) of NCHW4c ``shape``
    ``(N, C/4, H, W, 4)`` holding ``channels`` (``groups = 1``: a layer norm over C, H, W, timm's
    GroupNorm1). ``Gamma``/``Beta``: zero-padded ``(C/4, 4)`` buffers; ``activation`` one of
    :data:`primfuncs.epilogue.ACTIVATIONS` (``clip_min``/``clip_max``: its clip bounds).

    One work group of ``threads`` items per (sample, group); the items split the group's pixels
    (item ``t`` takes ``t, t + threads, ...``) and pass over them three times with a barrier
    between: the sum (float32 partial sums in shared memory, added by item 0 into the mean), the
    sum of squared deviations from that mean (two passes: no cancellation of
    ``E[x^2] - E[x]^2``), then the normalized, scaled and shifted pixels. Groups must start on a
    4-channel block (``C / groups`` a multiple of 4) unless ``groups = 1``; padded lanes are left
    out of the statistics and written as 0. Statistics and arithmetic are float32 whatever
    ``dtype`` is, and never leave the kernel (no intermediate tensor to round)."""
    shape = tuple(int(d) for d in shape)
    if len(shape) != 5 or shape[4] != LANES:
        raise ValueError(f"shape must be NCHW4c (N, C4, H, W, 4), got {shape}")
    n, c4, h, w, _ = shape
    check_positive(N=n, C4=c4, H=h, W=w, channels=channels, groups=groups, threads=threads)
    check_channels(c4, channels)
    if channels % groups or (groups > 1 and (channels // groups) % LANES):
        raise ValueError(f"group_norm needs groups={groups} to divide channels={channels} into groups of a multiple of "
                         f"{LANES} channels (each group whole 4-channel blocks), or groups=1")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    if not clip_min <= clip_max:
        raise ValueError(f"clip needs clip_min <= clip_max, got {clip_min} > {clip_max}")
    check_epsilon(epsilon)
    check_dtype(dtype)
    check_scope(scope)
    bpg = c4 // groups  # channel blocks per group
    pixels = bpg * h * w  # pixels (4 channels each) of one group
    rounds = ceildiv(pixels, threads)
    zero, f32 = T.FloatImm("float32", 0.0), "float32"
    count = T.FloatImm(f32, float(channels // groups * h * w))

    def at(vb, p):
        """(n, channel block, row, column) of pixel ``p`` of group ``vb`` (= n * groups + g)."""
        return vb // groups, vb % groups * bpg + p // (h * w), p // w % h, p % w

    def real(p, vb, lane):
        return (vb % groups * bpg + p // (h * w)) * 4 + lane < channels

    def act(x):
        return activate(x, activation, f32, clip_min, clip_max)

    @T.prim_func(s_tir=True)
    def func(x: T.handle, gamma: T.handle, beta: T.handle, y: T.handle):
        T.func_attr({"global_symbol": "group_norm", "tirx.noalias": True})
        X = T.match_buffer(x, (n, c4, h, w, 4), dtype, scope=scope)
        Gamma = T.match_buffer(gamma, (c4, 4), dtype, scope=BUFFER)
        Beta = T.match_buffer(beta, (c4, 4), dtype, scope=BUFFER)
        Y = T.match_buffer(y, (n, c4, h, w, 4), dtype, scope=scope)
        for b in T.thread_binding(n * groups, thread="blockIdx.x"):
            with T.sblock("group"):
                vb = T.axis.spatial(n * groups, b)
                sums = T.sblock_alloc_buffer((threads,), f32, scope="shared")
                squares = T.sblock_alloc_buffer((threads,), f32, scope="shared")
                stats = T.sblock_alloc_buffer((2,), f32, scope="shared")  # mean, 1 / sqrt(var + eps)
                # 1. item t sums its pixels' real lanes
                for t in T.thread_binding(threads, thread="threadIdx.x"):
                    with T.sblock("sum"):
                        px = T.sblock_alloc_buffer((4,), dtype, scope="local")
                        acc = T.sblock_alloc_buffer((1,), f32, scope="local")
                        acc[0] = zero
                        for r in T.serial(rounds):
                            if r * threads + t < pixels:
                                load_pixel(px, X, *at(vb, r * threads + t))
                                for lane in T.unroll(4):
                                    acc[0] = acc[0] + T.Select(real(r * threads + t, vb, lane), T.Cast(f32, px[lane]), zero)
                        sums[t] = acc[0]
                # 2. the mean
                for t in T.thread_binding(threads, thread="threadIdx.x"):
                    with T.sblock("mean"):
                        if t == 0:
                            total = T.sblock_alloc_buffer((1,), f32, scope="local")
                            total[0] = zero
                            for k in range(threads):
                                total[0] = total[0] + sums[k]
                            stats[0] = total[0] / count
                # 3. item t sums its squared deviations from the mean
                for t in T.thread_binding(threads, thread="threadIdx.x"):
                    with T.sblock("squares"):
                        px = T.sblock_alloc_buffer((4,), dtype, scope="local")
                        acc = T.sblock_alloc_buffer((1,), f32, scope="local")
                        acc[0] = zero
                        for r in T.serial(rounds):
                            if r * threads + t < pixels:
                                load_pixel(px, X, *at(vb, r * threads + t))
                                for lane in T.unroll(4):
                                    acc[0] = acc[0] + T.Select(real(r * threads + t, vb, lane),
                                                               (T.Cast(f32, px[lane]) - stats[0]) * (T.Cast(f32, px[lane]) - stats[0]), zero)
                        squares[t] = acc[0]
                # 4. the inverse standard deviation
                for t in T.thread_binding(threads, thread="threadIdx.x"):
                    with T.sblock("rstd"):
                        if t == 0:
                            total = T.sblock_alloc_buffer((1,), f32, scope="local")
                            total[0] = zero
                            for k in range(threads):
                                total[0] = total[0] + squares[k]
                            stats[1] = T.FloatImm(f32, 1.0) / T.sqrt(total[0] / count + T.FloatImm(f32, float(epsilon)))
                # 5. item t normalizes, scales and shifts its pixels
                for t in T.thread_binding(threads, thread="threadIdx.x"):
                    with T.sblock("normalize"):
                        px = T.sblock_alloc_buffer((4,), dtype, scope="local")
                        gb = T.sblock_alloc_buffer((2, 4), dtype, scope="local")
                        out = T.sblock_alloc_buffer((4,), f32, scope="local")
                        for r in T.serial(rounds):
                            if r * threads + t < pixels:
                                load_pixel(px, X, *at(vb, r * threads + t))
                                for lane in T.vectorized(4):
                                    gb[0, lane] = Gamma[at(vb, r * threads + t)[1], lane]
                                for lane in T.vectorized(4):
                                    gb[1, lane] = Beta[at(vb, r * threads + t)[1], lane]
                                for lane in T.unroll(4):
                                    out[lane] = T.Select(real(r * threads + t, vb, lane),
                                                         act((T.Cast(f32, px[lane]) - stats[0]) * stats[1] * T.Cast(f32, gb[0, lane]) + T.Cast(f32, gb[1, lane])),
                                                         zero)
                                store_pixel(Y, *at(vb, r * threads + t), out)

    return func
