"""Channel gathers on NCHW4c tensors: ShuffleNet's channel split (a slice of channels) and
channel shuffle (reshape -> transpose -> reshape), which move channels across the 4-lane
blocks, so neither is a view of the blocked tensor.

One work item per output pixel: output lane ``c`` reads the input pixel holding channel
``source(c)`` (one texture read per lane) and takes that lane. Padded output lanes are zero.
"""

from __future__ import annotations

from tvm.script import tirx as T

from ._common import LANES, TEXTURE, blocked, check_dtype, check_positive, check_scope, pixel_grid, pixel_launch, store_pixel


def _gather(shape, channels_in: int, channels_out: int, source, name: str, dtype: str, scope: str):
    shape = tuple(int(d) for d in shape)
    if len(shape) != 5 or shape[4] != LANES:
        raise ValueError(f"shape must be NCHW4c (N, C4, H, W, 4), got {shape}")
    n, c4, h, w, _ = shape
    check_positive(N=n, C4=c4, H=h, W=w, channels_out=channels_out)
    if blocked(channels_in) != c4:
        raise ValueError(f"channels_in={channels_in} does not fill C4={c4} blocks of 4")
    check_dtype(dtype)
    check_scope(scope)
    o4 = blocked(channels_out)
    g = pixel_grid(n * o4, h, w)

    def src(c):  # padded output lanes read a real channel (then zeroed)
        return source(T.min(c, channels_out - 1))

    launch = pixel_launch()

    @T.macro
    def per_pixel(X, Y, vz, vh, vw):
        px = T.sblock_alloc_buffer((4, 4), dtype, scope="local")
        out = T.sblock_alloc_buffer((4,), dtype, scope="local")
        for lane in T.unroll(4):
            for k in T.vectorized(4):
                px[lane, k] = X[vz // o4, src((vz % o4) * 4 + lane) // 4, vh, vw, k]
        for lane in T.unroll(4):
            out[lane] = T.Select((vz % o4) * 4 + lane < channels_out, px[lane, src((vz % o4) * 4 + lane) % 4], T.FloatImm(dtype, 0.0))
        store_pixel(Y, vz // o4, vz % o4, vh, vw, out)

    @T.prim_func(s_tir=True)
    def func(x: T.handle, y: T.handle):
        T.func_attr({"global_symbol": name, "tirx.noalias": True})
        X = T.match_buffer(x, (n, c4, h, w, 4), dtype, scope=scope)
        Y = T.match_buffer(y, (n, o4, h, w, 4), dtype, scope=scope)
        launch(g, h, w, "pixel", lambda vz, vh, vw: per_pixel(X, Y, vz, vh, vw))

    return func


def slice_channels(shape, channels_in: int, begin: int, end: int, dtype: str = "float32", scope: str = TEXTURE):
    """``Y = X[:, begin:end]`` (channels) of NCHW4c ``shape`` holding ``channels_in`` channels."""
    if not 0 <= begin < end <= channels_in:
        raise ValueError(f"need 0 <= begin < end <= channels_in, got begin={begin}, end={end}, channels_in={channels_in}")
    return _gather(shape, channels_in, end - begin, lambda c: c + begin, "slice_channels", dtype, scope)


def channel_shuffle(shape, channels: int, groups: int, dtype: str = "float32", scope: str = TEXTURE):
    """ShuffleNet's shuffle, ``reshape(N, g, C/g, H, W) -> transpose(1, 2) -> reshape(N, C, H, W)``:
    output channel ``c`` is input channel ``(c % g) * (C / g) + c // g``."""
    if groups < 1 or channels % groups:
        raise ValueError(f"groups={groups} must divide channels={channels}")
    per = channels // groups
    return _gather(shape, channels, channels, lambda c: (c % groups) * per + c // groups, "channel_shuffle", dtype, scope)
