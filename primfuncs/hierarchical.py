"""EdgeNeXt's hierarchical split depthwise conv (timm ``SplitTransposeBlock``) on NCHW4c tensors.

The block splits its input ``X`` into ``k + 1`` channel chunks and runs ``k`` depthwise convs in
a chain, each on its chunk plus the previous conv's output::

    sp = conv_0(X[chunk 0]);  sp = conv_i(sp + X[chunk i]) for i = 1 .. k-1;  Y = cat(sp_0 .. sp_{k-1}, X[chunk k])

Exported, that is a slice per chunk, an add and a conv per step and a concat: ``3 k + 1`` launches
or so. :func:`hierarchical_depthwise` is one step over the whole map: it reads ``X`` (every
channel) and, from step 1 on, ``P``, the previous step's output map, and writes the whole map
``Y``: channels ``[begin, begin + width)`` are the conv of ``P[c - width] + X[c]`` (the add before
the conv, at every tap; ``X[c]`` alone at step 0), channels before ``begin`` are ``P``'s (the
earlier steps' results), the rest are ``X``'s (the later chunks, the untouched last one). So the
split, the adds and the concat are gone: ``k`` launches, the last one's ``Y`` is the concat.

Chunk boundaries need not be multiples of 4 lanes (EdgeNeXt-XXS: 88 channels in chunks of 30,
168 in chunks of 42): a lane's channel ``c - width`` of ``P`` is read from the one or two pixels
holding it (:func:`load_channels` with a negative offset). One work item per output pixel; blocks
with no lane in the conv's range only copy their centre pixel. Weights ``W (C/4, KH, KW, 4)`` and
``Bias (C/4, 4)`` are buffers over the output's channel positions, zero outside the range
(``tir_adreno.strategy.packing.pack_channel_range``).
Stride 1, no dilation, the output as large as the input (``top + bottom = KH - 1``,
``left + right = KW - 1``): what the block's convs are.
"""

from __future__ import annotations

from tvm.script import tirx as T

from ._common import (BUFFER, LANES, TEXTURE, accumulator_dtype, check_channels, check_dtype, check_positive, check_scope, load_channels,
                      load_pixel, multiply_add, nchw4c, pixel_grid, pixel_launch, select_params, store_pixel)


def _check(shape, channels, begin, width, kernel_size, padding, previous):
    shape = nchw4c(shape)
    n, c4, h, w, _ = shape
    check_positive(N=n, C4=c4, H=h, W=w, width=width)
    check_channels(c4, channels)
    if not 0 <= begin < begin + width <= channels:
        raise ValueError(f"the conv's channels [begin, begin + width) = [{begin}, {begin + width}) must lie in [0, {channels})")
    if previous and begin < width:
        raise ValueError(f"previous=True reads channels [begin - width, begin): needs begin >= width, got begin={begin}, width={width}")
    kh, kw = (int(k) for k in kernel_size)
    check_positive(KH=kh, KW=kw)
    pads = tuple(int(p) for p in padding)
    if len(pads) != 4 or min(pads) < 0 or pads[0] + pads[2] != kh - 1 or pads[1] + pads[3] != kw - 1:
        raise ValueError(f"padding (top, left, bottom, right) must keep the map's size (top + bottom = KH - 1, "
                         f"left + right = KW - 1) for kernel {kh}x{kw}, got {padding}")
    return shape, (kh, kw), pads


def hierarchical_depthwise(shape, channels: int, begin: int, width: int, kernel_size, padding, previous: bool = False,
                           bias: bool = True, addend: bool = False, dtype: str = "float32", scope: str = TEXTURE):
    """One step of the hierarchical split depthwise conv (module docstring) on NCHW4c ``shape``
    ``(N, C/4, H, W, 4)`` holding ``channels`` channels: parameters ``X``, ``P`` (with ``previous``),
    ``W (C/4, KH, KW, 4)``, ``Bias (C/4, 4)`` (with ``bias``), ``A (C/4, H, W, 4)`` (with
    ``addend``), ``Y`` (``shape``)::

        Y[c] = Bias[c] + sum_taps W[c, tap] * (X[c, tap] + P[c - width, tap])   begin <= c < begin + width
        Y[c] = P[c] (previous) or X[c]                                          c < begin
        Y[c] = X[c]                                                             c >= begin + width

    (``P`` term only with ``previous``; zero padding; padded lanes 0), then with ``addend`` ``+ A``
    at every channel (a constant map, the same for every sample: EdgeNeXt's positional encoding,
    added to the block's output). ``padding`` is (top, left, bottom, right); ``kernel_size``
    (KH, KW). ``dtype`` float16 accumulates in float32."""
    (n, c4, h, w, _), (kh, kw), (pt, pl, _, _) = _check(shape, channels, begin, width, kernel_size, padding, previous)
    check_dtype(dtype)
    check_scope(scope)
    acc_dtype = accumulator_dtype(dtype)
    end = begin + width
    g = pixel_grid(n * c4, h, w)
    zero = T.FloatImm(dtype, 0.0)
    launch = pixel_launch()

    @T.macro
    def per_pixel(X, P, W, Bias, A, Y, vz, vh, vw):
        xp = T.sblock_alloc_buffer((4,), dtype, scope="local")  # X at a tap
        pp = T.sblock_alloc_buffer((4,), dtype, scope="local")  # P shifted by width at a tap
        px0 = T.sblock_alloc_buffer((4,), dtype, scope="local")
        px1 = T.sblock_alloc_buffer((4,), dtype, scope="local")
        wp = T.sblock_alloc_buffer((4,), dtype, scope="local")
        cx = T.sblock_alloc_buffer((4,), dtype, scope="local")  # X, P at the output pixel (the copied lanes)
        cp = T.sblock_alloc_buffer((4,), dtype, scope="local")
        ap = T.sblock_alloc_buffer((4,), dtype, scope="local")  # the addend at the output pixel
        acc = T.sblock_alloc_buffer((4,), acc_dtype, scope="local")
        out = T.sblock_alloc_buffer((4,), dtype, scope="local")
        load_pixel(cx, X, vz // c4, vz % c4, vh, vw)
        if previous:
            load_pixel(cp, P, vz // c4, vz % c4, vh, vw)
        for lane in T.unroll(4):
            acc[lane] = T.Cast(acc_dtype, 0)
        if begin < (vz % c4) * 4 + 4 and (vz % c4) * 4 < end:  # a lane of this block is in the conv's range
            if bias:
                for lane in T.vectorized(4):
                    wp[lane] = Bias[vz % c4, lane]
                for lane in T.unroll(4):
                    acc[lane] = T.Cast(acc_dtype, wp[lane])
            for ky in T.unroll(kh):
                for kx in T.unroll(kw):
                    if 0 <= vh + ky - pt and vh + ky - pt < h and 0 <= vw + kx - pl and vw + kx - pl < w:
                        load_pixel(xp, X, vz // c4, vz % c4, vh + ky - pt, vw + kx - pl)
                        if previous:
                            load_channels(pp, px0, px1, P, vz // c4, -width, vz % c4, vh + ky - pt, vw + kx - pl, c4 - 1)
                            for lane in T.unroll(4):
                                xp[lane] = xp[lane] + pp[lane]
                        for lane in T.vectorized(4):
                            wp[lane] = W[vz % c4, ky, kx, lane]
                        for lane in T.unroll(4):
                            acc[lane] = multiply_add(acc[lane], xp[lane], wp[lane])
        for lane in T.unroll(4):
            if previous:
                out[lane] = T.Select(
                    (vz % c4) * 4 + lane < begin, cp[lane],
                    T.Select((vz % c4) * 4 + lane < end, T.Cast(dtype, acc[lane]), T.Select((vz % c4) * 4 + lane < channels, cx[lane], zero)))
            else:
                out[lane] = T.Select(
                    (vz % c4) * 4 + lane < begin, cx[lane],
                    T.Select((vz % c4) * 4 + lane < end, T.Cast(dtype, acc[lane]), T.Select((vz % c4) * 4 + lane < channels, cx[lane], zero)))
        if addend:
            for lane in T.vectorized(4):
                ap[lane] = A[vz % c4, vh, vw, lane]
            for lane in T.unroll(4):
                out[lane] = out[lane] + ap[lane]
        store_pixel(Y, vz // c4, vz % c4, vh, vw, out)

    @T.prim_func(s_tir=True)
    def func(x: T.handle, p: T.handle, wt: T.handle, b: T.handle, a: T.handle, y: T.handle):
        T.func_attr({"global_symbol": "hierarchical_depthwise", "tirx.noalias": True})
        X = T.match_buffer(x, (n, c4, h, w, 4), dtype, scope=scope)
        P = T.match_buffer(p, (n, c4, h, w, 4), dtype, scope=scope)
        W = T.match_buffer(wt, (c4, kh, kw, 4), dtype, scope=BUFFER)
        Bias = T.match_buffer(b, (c4, 4), dtype, scope=BUFFER)
        A = T.match_buffer(a, (c4, h, w, 4), dtype, scope=BUFFER)
        Y = T.match_buffer(y, (n, c4, h, w, 4), dtype, scope=scope)
        launch(g, h, w, "pixel", lambda vz, vh, vw: per_pixel(X, P, W, Bias, A, Y, vz, vh, vw))

    return select_params(func, ["X", *(["P"] if previous else []), "W", *(["Bias"] if bias else []), *(["A"] if addend else []), "Y"])

