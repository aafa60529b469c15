"""Layer norm over the channels of an NCHW4c tensor (ConvNeXt's LayerNorm between permutes).

One work item per pixel ``(n, h, w)`` walks its ``C/4`` channel blocks three times:
the mean, then the variance around it (two passes: no cancellation of
``E[x^2] - E[x]^2``), then ``(x - mean) / sqrt(var + eps) * gamma + beta``, all in
float32 registers. Padded lanes (channels ``>= C``) are left out of the statistics
and written as ``beta``'s zero padding (gamma and beta are zero-padded ``(C/4, 4)``).
"""

from __future__ import annotations

from tvm.script import tirx as T

from ._common import (BUFFER, LANES, TEXTURE, check_channels, check_dtype, check_epsilon, check_positive, check_scope, load_pixel,
                      pixel_grid, pixel_launch, store_pixel)


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
