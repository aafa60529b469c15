"""Channel gathers on NCHW4c tensors: ShuffleNet's channel split (a slice of channels),
channel shuffle (reshape -> transpose -> reshape) and ONNX ``Split`` along channels into groups
of any sizes (MixNet), which move channels across the 4-lane blocks, so none is a view of the
blocked tensor.

One work item per output pixel: output lane ``c`` reads the input pixel holding channel
``source(c)`` (one texture read per lane) and takes that lane. Padded output lanes are zero.
``split_channels`` knows its sources at compile time: an output block reads the one or two
input pixels its 4 channels lie in, and all parts are written by one launch.
"""

from __future__ import annotations

from tvm.script import tirx as T

from ._common import (LANES, TEXTURE, blocked, check_channels, check_dtype, check_positive, check_scope, load_channels, load_pixel,
                      nchw4c, pixel_grid, pixel_launch, select_params, store_pixel, whole)

#: Parts one ``split_channels`` launch writes (a split into more is several launches).
MAX_PARTS = 4
_PART_NAMES = ("Y0", "Y1", "Y2", "Y3")


def _gather(shape, channels_in: int, channels_out: int, source, name: str, dtype: str, scope: str):
    shape = nchw4c(shape)
    n, c4, h, w, _ = shape
    check_positive(N=n, C4=c4, H=h, W=w, channels_out=channels_out)
    check_channels(c4, channels_in, "channels_in")
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


@T.macro(hygienic=False)
def _split_part(X, Y, px0, px1, out, n, ob, h, w, offset, count, last_block):
    """Block ``ob`` of the part of channels ``[offset, offset + count)``: its lanes are input
    channels ``offset + 4 ob + lane`` (:func:`load_channels`). Lanes past ``count`` are 0."""
    load_channels(out, px0, px1, X, n, offset, ob, h, w, last_block)
    for lane in T.unroll(4):
        out[lane] = T.Select(ob * 4 + lane < count, out[lane], T.Cast(X.dtype, 0))
    store_pixel(Y, n, ob, h, w, out)


def split_channels(shape, channels_in: int, sizes, begin: int = 0, dtype: str = "float32", scope: str = TEXTURE):
    """ONNX ``Split`` along channels: from NCHW4c ``shape`` holding ``channels_in`` channels,
    ``len(sizes)`` (2..4) parts of ``sizes`` channels (any sizes), the first from channel
    ``begin`` (a split into more parts is several launches), parameters ``X, Y0, Y1, ...``,
    one launch."""
    shape = nchw4c(shape)
    sizes = tuple(int(s) for s in sizes)
    n, c4, h, w, _ = shape
    check_positive(N=n, C4=c4, H=h, W=w)
    check_channels(c4, channels_in, "channels_in")
    if not 2 <= len(sizes) <= MAX_PARTS or min(sizes) < 1 or begin < 0 or begin + sum(sizes) > channels_in:
        raise ValueError(f"split takes 2..{MAX_PARTS} parts of >= 1 channel within channels_in={channels_in} from begin={begin}, "
                         f"got {sizes}")
    check_dtype(dtype)
    check_scope(scope)
    k = len(sizes)
    offsets = [begin + sum(sizes[:i]) for i in range(k)] + [0] * (MAX_PARTS - k)
    counts = list(sizes) + [1] * (MAX_PARTS - k)
    blocks = [blocked(c) for c in counts]  # unused parts: dummies, dropped below
    first = [sum(blocks[:i]) for i in range(MAX_PARTS)]  # each part's first block in the launch
    total = first[k - 1] + blocks[k - 1]
    g = pixel_grid(n * total, h, w)
    launch = pixel_launch()

    @T.macro
    def per_pixel(X, Y0, Y1, Y2, Y3, vz, vh, vw):
        # Declared: the inferred region (nested mins over the branches) does not survive a
        # print -> parse round trip (tests/upstream defect 16), and tir-adreno dump needs one.
        T.reads(whole(X))
        px0 = T.sblock_alloc_buffer((4,), dtype, scope="local")
        px1 = T.sblock_alloc_buffer((4,), dtype, scope="local")
        out = T.sblock_alloc_buffer((4,), dtype, scope="local")
        # The `k ==` tests run at parse time: no branch names a dropped part (as concat_channels).
        if vz % total < first[1]:
            _split_part(X, Y0, px0, px1, out, vz // total, vz % total, vh, vw, offsets[0], counts[0], c4 - 1)
        elif k == 2:
            _split_part(X, Y1, px0, px1, out, vz // total, vz % total - first[1], vh, vw, offsets[1], counts[1], c4 - 1)
        elif vz % total < first[2]:
            _split_part(X, Y1, px0, px1, out, vz // total, vz % total - first[1], vh, vw, offsets[1], counts[1], c4 - 1)
        elif k == 3:
            _split_part(X, Y2, px0, px1, out, vz // total, vz % total - first[2], vh, vw, offsets[2], counts[2], c4 - 1)
        elif vz % total < first[3]:
            _split_part(X, Y2, px0, px1, out, vz // total, vz % total - first[2], vh, vw, offsets[2], counts[2], c4 - 1)
        else:
            _split_part(X, Y3, px0, px1, out, vz // total, vz % total - first[3], vh, vw, offsets[3], counts[3], c4 - 1)

    @T.prim_func(s_tir=True)
    def func(x: T.handle, y0: T.handle, y1: T.handle, y2: T.handle, y3: T.handle):
        T.func_attr({"global_symbol": "split_channels", "tirx.noalias": True})
        X = T.match_buffer(x, (n, c4, h, w, 4), dtype, scope=scope)
        Y0 = T.match_buffer(y0, (n, blocks[0], h, w, 4), dtype, scope=scope)
        Y1 = T.match_buffer(y1, (n, blocks[1], h, w, 4), dtype, scope=scope)
        Y2 = T.match_buffer(y2, (n, blocks[2], h, w, 4), dtype, scope=scope)
        Y3 = T.match_buffer(y3, (n, blocks[3], h, w, 4), dtype, scope=scope)
        launch(g, h, w, "split", lambda vz, vh, vw: per_pixel(X, Y0, Y1, Y2, Y3, vz, vh, vw))

    return select_params(func, ["X", *_PART_NAMES[:k]])
