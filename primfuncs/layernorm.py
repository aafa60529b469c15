"""Per-sample norms of NCHW4c tensors: layer norm over the channels (ConvNeXt's LayerNorm between
permutes) and group norm over (C / groups, H, W) (:func:`group_norm`; MobileViT-v2's GroupNorm1).

Layer norm: one work item per pixel ``(n, h, w)`` walks its ``C/4`` channel blocks three times:
the mean, then the variance around it (two passes: no cancellation of
``E[x^2] - E[x]^2``), then ``(x - mean) / sqrt(var + eps) * gamma + beta``, all in
float32 registers. Padded lanes (channels ``>= C``) are left out of the statistics
and written as ``beta``'s zero padding (gamma and beta are zero-padded ``(C/4, 4)``). On a wide GPU
a small map leaves that kernel's few items walking hundreds of blocks in series:
:func:`layer_norm_channels_wide` gives each pixel a work group instead, built from the group
norm's macros (:func:`_slice_parts`).

Every norm here takes an ``epilogue`` (:class:`~primfuncs.epilogue.Epilogue`, the convs' and the
pools': an elementwise chain's expression over the normalized pixel, per-channel constants in
``Bias`` and one other activation in ``Residual``), applied to each output pixel before its store.
"""

from __future__ import annotations

from tvm.script import tirx as T

from ._common import (BUFFER, LANES, TEXTURE, ceildiv, check_channels, check_dtype, check_epsilon, check_positive, check_scope,
                      check_slices, load_pixel, nchw4c, pixel_grid, pixel_launch, select_params, store_pixel)
from .epilogue import ACTIVATIONS, activate, check_map_epilogue, map_epilogue_inputs, store_output_pixel


def _check_layer_norm(shape, channels: int, epsilon: float, dtype: str, scope: str):
    """(n, c4, h, w) of a layer norm's NCHW4c ``shape``; ValueError / TypeError naming a bad argument."""
    shape = nchw4c(shape)
    n, c4, h, w, _ = shape
    check_positive(N=n, C4=c4, H=h, W=w, channels=channels)
    check_channels(c4, channels)
    check_epsilon(epsilon)
    check_dtype(dtype)
    check_scope(scope)
    return n, c4, h, w


def layer_norm_channels(shape, channels: int, epsilon: float = 1e-5, dtype: str = "float32", scope: str = TEXTURE, epilogue=None):
    """``Y[n, :, h, w] = epilogue(layer_norm(X[n, :, h, w]) * Gamma + Beta)`` over the ``channels``
    real channels of NCHW4c ``shape`` ``(N, C/4, H, W, 4)``; ``Gamma``/``Beta`` ``(C/4, 4)`` buffers;
    ``epilogue`` (None: none) reads ``Bias``/``Residual`` as the pools' does (module doc)."""
    n, c4, h, w = _check_layer_norm(shape, channels, epsilon, dtype, scope)
    check_map_epilogue(epilogue, "layer norm")
    spec, bias_shape, residual_shape, residual_scope = map_epilogue_inputs(epilogue, (n, c4, h, w, 4), scope)
    g = pixel_grid(n, h, w)
    # The mean and variance are float32 whatever the storage (docs/precision.md: statistics stay float32).
    acc = "float32"
    zero, count = T.FloatImm(acc, 0.0), T.FloatImm(acc, float(channels))

    def wide(v):  # a stored value in the statistics' dtype (no cast where they agree: float32 source unchanged)
        return v if dtype == acc else T.Cast(acc, v)

    def narrow(v):
        return v if dtype == acc else T.Cast(dtype, v)

    launch = pixel_launch()

    @T.macro
    def per_pixel(X, Gamma, Beta, Bias, Residual, Y, vn, vh, vw):
        px = T.sblock_alloc_buffer((4,), dtype, scope="local")
        out = T.sblock_alloc_buffer((4,), dtype, scope="local")
        gb = T.sblock_alloc_buffer((2, 4), dtype, scope="local")
        stats = T.sblock_alloc_buffer((2,), acc, scope="local")  # mean, variance
        stats[0] = zero
        for cb in range(c4):
            load_pixel(px, X, vn, cb, vh, vw)
            for lane in T.unroll(4):
                stats[0] = stats[0] + T.Select(cb * 4 + lane < channels, wide(px[lane]), zero)
        stats[0] = stats[0] / count
        stats[1] = zero
        for cb in range(c4):
            load_pixel(px, X, vn, cb, vh, vw)
            for lane in T.unroll(4):
                stats[1] = stats[1] + T.Select(cb * 4 + lane < channels, (wide(px[lane]) - stats[0]) * (wide(px[lane]) - stats[0]), zero)
        stats[1] = T.FloatImm(acc, 1.0) / T.sqrt(stats[1] / count + T.FloatImm(acc, float(epsilon)))
        for cb in range(c4):
            load_pixel(px, X, vn, cb, vh, vw)
            for lane in T.vectorized(4):
                gb[0, lane] = Gamma[cb, lane]
            for lane in T.vectorized(4):
                gb[1, lane] = Beta[cb, lane]
            for lane in T.unroll(4):
                out[lane] = narrow((wide(px[lane]) - stats[0]) * stats[1]) * gb[0, lane] + gb[1, lane]
            store_normalized(Y, out, epilogue, Bias, Residual, vn, cb, vh, vw, channels)

    @T.prim_func(s_tir=True)
    def func(x: T.handle, gamma: T.handle, beta: T.handle, bias: T.handle, residual: T.handle, y: T.handle):
        T.func_attr({"global_symbol": "layer_norm_channels", "tirx.noalias": True})
        X = T.match_buffer(x, (n, c4, h, w, 4), dtype, scope=scope)
        Gamma = T.match_buffer(gamma, (c4, 4), dtype, scope=BUFFER)
        Beta = T.match_buffer(beta, (c4, 4), dtype, scope=BUFFER)
        Bias = T.match_buffer(bias, bias_shape, dtype, scope=BUFFER)
        Residual = T.match_buffer(residual, residual_shape, dtype, scope=residual_scope)
        Y = T.match_buffer(y, (n, c4, h, w, 4), dtype, scope=scope)
        launch(g, h, w, "pixel", lambda vz, vh, vw: per_pixel(X, Gamma, Beta, Bias, Residual, Y, vz, vh, vw))

    return _norm_params(func, spec)


@T.macro
def store_normalized(Y, out, epilogue, Bias, Residual, n, c, h, w, channels):
    # the pixel as it is, or through the epilogue (a (1, 4) row of Y's dtype, as the convs' store takes it)
    if epilogue is None:
        store_pixel(Y, n, c, h, w, out)
    else:
        px = T.sblock_alloc_buffer((1, 4), Y.dtype, scope="local")
        tmp = T.sblock_alloc_buffer((4,), Y.dtype, scope="local")
        for lane in T.unroll(4):
            px[0, lane] = T.Cast(Y.dtype, out[lane])
        store_output_pixel(Y, px, 0, tmp, epilogue, Bias, Residual, n, c, h, w, channels)


def _norm_params(func, spec):
    """``func``'s parameters: the norm's own, the epilogue's inputs ``spec`` reads (none without one), ``Y``."""
    own = [p.name for p in func.params if p.name not in ("Bias", "Residual", "Y")]
    return select_params(func, spec.params(own, "Y"))


def layer_norm_channels_wide(shape, channels: int, epsilon: float = 1e-5, dtype: str = "float32", scope: str = TEXTURE,
                            threads: int | None = None, epilogue=None):
    """:func:`layer_norm_channels`' ``Y`` with each pixel's channels spread over a work group: one
    work group of ``threads`` items (default: :func:`layer_norm_threads`) per pixel ``(n, h, w)``,
    item ``t`` taking channel blocks ``t, t + threads, ...``, built from the group norm's macros
    (:func:`_slice_parts`: float32 partial sums in shared memory added by item 0 in item order,
    the mean, then the squared deviations from it, then the normalized pixels). The same formula
    as the one kernel (``(x - mean) / sqrt(M2 / C + eps) * gamma + beta``, two passes), float32
    whatever ``dtype`` is; padded lanes are left out and written as 0. For a wide GPU, where one
    work item per pixel walking all ``C/4`` blocks leaves most of it idle on a small map
    (``strategy.norm.layer_norm_schedule`` picks the form). ``epilogue`` as :func:`layer_norm_channels` takes it."""
    n, c4, h, w = _check_layer_norm(shape, channels, epsilon, dtype, scope)
    check_map_epilogue(epilogue, "layer norm")
    spec, bias_shape, residual_shape, residual_scope = map_epilogue_inputs(epilogue, (n, c4, h, w, 4), scope)
    threads = layer_norm_threads(c4) if threads is None else threads
    check_positive(threads=threads)
    f32 = "float32"

    def at(vb, p):
        """(n, channel block, row, column) of block ``p`` of pixel ``vb`` (= (n * h + row) * w + column)."""
        return vb // (h * w), p, vb // w % h, vb % w

    def real(p, vb, lane):
        return p * 4 + lane < channels

    def inside(first, q):
        return q < c4

    def count(first):
        return T.FloatImm(f32, float(channels))

    slice_stats, normalize, set_rstd = _slice_parts(dtype, threads, ceildiv(c4, threads), at, real, inside, count, epsilon,
                                                    epilogue=epilogue, channels=channels)

    @T.prim_func(s_tir=True)
    def func(x: T.handle, gamma: T.handle, beta: T.handle, bias: T.handle, residual: T.handle, y: T.handle):
        T.func_attr({"global_symbol": "layer_norm_channels_wide", "tirx.noalias": True})
        X = T.match_buffer(x, (n, c4, h, w, 4), dtype, scope=scope)
        Gamma = T.match_buffer(gamma, (c4, 4), dtype, scope=BUFFER)
        Beta = T.match_buffer(beta, (c4, 4), dtype, scope=BUFFER)
        Bias = T.match_buffer(bias, bias_shape, dtype, scope=BUFFER)
        Residual = T.match_buffer(residual, residual_shape, dtype, scope=residual_scope)
        Y = T.match_buffer(y, (n, c4, h, w, 4), dtype, scope=scope)
        for b in T.thread_binding(n * h * w, thread="blockIdx.x"):
            with T.sblock("pixel"):
                vb = T.axis.spatial(n * h * w, b)
                sums = T.sblock_alloc_buffer((threads,), f32, scope="shared")
                squares = T.sblock_alloc_buffer((threads,), f32, scope="shared")
                stats = T.sblock_alloc_buffer((2,), f32, scope="shared")  # mean, 1 / sqrt(var + eps)
                slice_stats(X, sums, squares, stats, vb, 0, set_rstd)
                normalize(X, Gamma, Beta, Bias, Residual, Y, stats, vb, 0)

    return _norm_params(func, spec)


#: Most work items of a :func:`layer_norm_channels_wide` work group (a pixel's channel blocks
#: beyond it take several rounds).
LAYER_NORM_MAX_THREADS = 64


def layer_norm_threads(c4: int) -> int:
    """Work items of :func:`layer_norm_channels_wide` for ``c4`` channel blocks: the power of two
    that covers them, at most :data:`LAYER_NORM_MAX_THREADS` (item 0's in-order sum of the
    items' partials grows with it)."""
    threads = 1
    while threads < min(int(c4), LAYER_NORM_MAX_THREADS):
        threads *= 2
    return threads


#: Work items of each work group of the group norm kernels (:func:`group_norm` and its split form).
GROUP_NORM_THREADS = 64
#: The statistics the split form passes between its kernels, per pixel slice: count, mean, M2.
PARTIAL_FIELDS = 3


def _check_group_norm(shape, channels: int, groups: int, threads: int, epsilon: float = 0.0, activation: str | None = None,
                      dtype: str = "float32", scope: str = TEXTURE, clip_min: float = 0.0, clip_max: float = 6.0):
    """(n, c4, h, w) of a group norm's NCHW4c ``shape``; ValueError / TypeError naming a bad argument."""
    shape = nchw4c(shape)
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
    return n, c4, h, w


def group_norm_pixels(shape, groups: int) -> int:
    """Pixels (4 channels each) of one (sample, group) of NCHW4c ``shape``."""
    _, c4, h, w, _ = (int(d) for d in shape)
    return c4 // groups * h * w


def _imin(a, b):
    return min(a, b) if isinstance(a, int) and isinstance(b, int) else T.min(a, b)


def _imax(a, b):
    return max(a, b) if isinstance(a, int) and isinstance(b, int) else T.max(a, b)


def _slice_parts(dtype, threads, rounds, at, real, inside, count, epsilon=0.0, activation=None, clip_min=0.0, clip_max=6.0,
                 epilogue=None, channels=None):
    """The two macros every work-group norm kernel (the group norms, :func:`layer_norm_channels_wide`)
    is made of, over a slice of a set ``vb`` of pixels: ``slice_stats`` (the mean and the sum of
    squared deviations M2 of the slice, two passes, then ``finish(stats, m2)`` by item 0) and
    ``normalize`` (the slice's pixels normalized with the mean and 1 / std in ``stats``); and
    ``set_rstd`` (``stats[1]`` from the whole set's M2). Item ``t`` of the work group takes the
    slice's pixels ``t, t + threads, ...`` (``rounds`` of them). ``at(vb, p)``: (n, channel block,
    row, column) of pixel ``p`` of the set; ``real(p, vb, lane)``: that lane holds a channel;
    ``inside(first, q)``: offset ``q`` lies in the slice from pixel ``first``; ``count(first)``: the
    float32 count of the slice's real elements (``count(0)``: the set's). ``epilogue`` (None: none)
    on each normalized pixel of the ``channels`` real ones (:func:`store_normalized`). A fresh set per
    kernel (block names of a macro's second expansion get suffixes)."""
    zero, f32 = T.FloatImm("float32", 0.0), "float32"

    def act(x):
        return activate(x, activation, f32, clip_min, clip_max)

    def value(x, stats):
        return x

    def squared_deviation(x, stats):
        return (x - stats[0]) * (x - stats[0])

    @T.macro
    def slice_sums(X, partial, stats, vb, first, term):
        # item t adds term(x, stats) over the real lanes x of its pixels of the slice into partial[t]
        for t in T.thread_binding(threads, thread="threadIdx.x"):
            with T.sblock("sum"):
                px = T.sblock_alloc_buffer((4,), dtype, scope="local")
                acc = T.sblock_alloc_buffer((1,), f32, scope="local")
                acc[0] = zero
                for r in T.serial(rounds):
                    if inside(first, r * threads + t):
                        load_pixel(px, X, *at(vb, first + r * threads + t))
                        for lane in T.unroll(4):
                            acc[0] = acc[0] + T.Select(real(first + r * threads + t, vb, lane), term(T.Cast(f32, px[lane]), stats), zero)
                partial[t] = acc[0]

    @T.macro
    def add_up(partial, then):
        # item 0 adds the items' partial sums in order and hands the total to ``then``
        for t in T.thread_binding(threads, thread="threadIdx.x"):
            with T.sblock("total"):
                if t == 0:
                    total = T.sblock_alloc_buffer((1,), f32, scope="local")
                    total[0] = zero
                    for k in range(threads):
                        total[0] = total[0] + partial[k]
                    then(total[0])

    @T.macro
    def set_mean(stats, total, first):
        stats[0] = total / count(first)

    @T.macro
    def slice_stats(X, sums, squares, stats, vb, first, finish):
        # 1. item t sums the real lanes of its pixels of the slice
        slice_sums(X, sums, stats, vb, first, value)
        # 2. the slice's mean
        add_up(sums, lambda total: set_mean(stats, total, first))
        # 3. item t sums its squared deviations from that mean (two passes: no E[x^2] - E[x]^2)
        slice_sums(X, squares, stats, vb, first, squared_deviation)
        # 4. the slice's M2, handed to ``finish``
        add_up(squares, lambda total: finish(stats, total))

    @T.macro
    def normalize(X, Gamma, Beta, Bias, Residual, Y, stats, vb, first):
        # item t normalizes, scales and shifts its pixels of the slice (stats: mean, 1 / std)
        for t in T.thread_binding(threads, thread="threadIdx.x"):
            with T.sblock("normalize"):
                px = T.sblock_alloc_buffer((4,), dtype, scope="local")
                gb = T.sblock_alloc_buffer((2, 4), dtype, scope="local")
                out = T.sblock_alloc_buffer((4,), f32, scope="local")
                for r in T.serial(rounds):
                    if inside(first, r * threads + t):
                        load_pixel(px, X, *at(vb, first + r * threads + t))
                        for lane in T.vectorized(4):
                            gb[0, lane] = Gamma[at(vb, first + r * threads + t)[1], lane]
                        for lane in T.vectorized(4):
                            gb[1, lane] = Beta[at(vb, first + r * threads + t)[1], lane]
                        for lane in T.unroll(4):
                            out[lane] = T.Select(real(first + r * threads + t, vb, lane),
                                                 act((T.Cast(f32, px[lane]) - stats[0]) * stats[1] * T.Cast(f32, gb[0, lane]) + T.Cast(f32, gb[1, lane])),
                                                 zero)
                        store_normalized(Y, out, epilogue, Bias, Residual, *at(vb, first + r * threads + t), channels)

    @T.macro
    def set_rstd(stats, m2):
        stats[1] = T.FloatImm(f32, 1.0) / T.sqrt(m2 / count(0) + T.FloatImm(f32, float(epsilon)))

    return slice_stats, normalize, set_rstd


def _group_norm_parts(n, c4, h, w, channels, groups, dtype, threads, per, epsilon=0.0, activation=None, clip_min=0.0, clip_max=6.0,
                      epilogue=None):
    """The group norm's pixel sets (one per (sample, group), cut into slices of ``per`` pixels; the
    whole group: ``per = pixels``) and its :func:`_slice_parts` over them: (pixels, count,
    slice_stats, normalize, set_rstd)."""
    bpg = c4 // groups  # channel blocks per group
    pixels = bpg * h * w
    f32 = "float32"
    pad = 4 * c4 - channels  # padded lanes of the last channel block (groups = 1 only)

    def at(vb, p):
        """(n, channel block, row, column) of pixel ``p`` of group ``vb`` (= n * groups + g)."""
        return vb // groups, vb % groups * bpg + p // (h * w), p // w % h, p % w

    def real(p, vb, lane):
        return (vb % groups * bpg + p // (h * w)) * 4 + lane < channels

    def count(first):
        """float32 count of the real elements of the slice from pixel ``first``: 4 per pixel but
        the padded lanes of the last block's pixels (exact below 2^24)."""
        end = _imin(first + per, pixels)
        real_ = 4 * (end - first) - pad * _imax(0, end - _imax(first, (c4 - 1) * h * w))
        return T.FloatImm(f32, float(real_)) if isinstance(real_, int) else T.Cast(f32, real_)

    def inside(first, q):
        """Item offset ``q`` lies in the slice from pixel ``first`` (only the last slice can be short)."""
        return q < per if pixels % per == 0 else T.And(q < per, first + q < pixels)

    slice_stats, normalize, set_rstd = _slice_parts(dtype, threads, ceildiv(per, threads), at, real, inside, count, epsilon, activation,
                                                    clip_min, clip_max, epilogue, channels)
    return pixels, count, slice_stats, normalize, set_rstd


def group_norm(shape, channels: int, groups: int, epsilon: float = 1e-5, activation: str | None = None, dtype: str = "float32",
               scope: str = TEXTURE, threads: int = GROUP_NORM_THREADS, clip_min: float = 0.0, clip_max: float = 6.0, epilogue=None):
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
    ``dtype`` is, and never leave the kernel (no intermediate tensor to round).

    On a wide GPU one work group per (sample, group) leaves most of it idle: the split form
    (:func:`group_norm_partials` then :func:`group_norm_apply`) spreads the same work over
    many work groups (``strategy.norm.group_norm_schedule`` picks the form). ``epilogue`` after the
    activation, as :func:`layer_norm_channels` takes it."""
    n, c4, h, w = _check_group_norm(shape, channels, groups, threads, epsilon, activation, dtype, scope, clip_min, clip_max)
    check_map_epilogue(epilogue, "group norm")
    spec, bias_shape, residual_shape, residual_scope = map_epilogue_inputs(epilogue, (n, c4, h, w, 4), scope)
    pixels = group_norm_pixels(shape, groups)
    _, _, slice_stats, normalize, set_rstd = _group_norm_parts(n, c4, h, w, channels, groups, dtype, threads, pixels, epsilon,
                                                               activation, clip_min, clip_max, epilogue)
    f32 = "float32"

    @T.prim_func(s_tir=True)
    def func(x: T.handle, gamma: T.handle, beta: T.handle, bias: T.handle, residual: T.handle, y: T.handle):
        T.func_attr({"global_symbol": "group_norm", "tirx.noalias": True})
        X = T.match_buffer(x, (n, c4, h, w, 4), dtype, scope=scope)
        Gamma = T.match_buffer(gamma, (c4, 4), dtype, scope=BUFFER)
        Beta = T.match_buffer(beta, (c4, 4), dtype, scope=BUFFER)
        Bias = T.match_buffer(bias, bias_shape, dtype, scope=BUFFER)
        Residual = T.match_buffer(residual, residual_shape, dtype, scope=residual_scope)
        Y = T.match_buffer(y, (n, c4, h, w, 4), dtype, scope=scope)
        for b in T.thread_binding(n * groups, thread="blockIdx.x"):
            with T.sblock("group"):
                vb = T.axis.spatial(n * groups, b)
                sums = T.sblock_alloc_buffer((threads,), f32, scope="shared")
                squares = T.sblock_alloc_buffer((threads,), f32, scope="shared")
                stats = T.sblock_alloc_buffer((2,), f32, scope="shared")  # mean, 1 / sqrt(var + eps)
                slice_stats(X, sums, squares, stats, vb, 0, set_rstd)
                normalize(X, Gamma, Beta, Bias, Residual, Y, stats, vb, 0)

    return _norm_params(func, spec)


def group_norm_partials(shape, channels: int, groups: int, slices: int, dtype: str = "float32", scope: str = TEXTURE,
                        threads: int = GROUP_NORM_THREADS):
    """The statistics kernel of the split group norm: ``P[n * groups + g, s] = (count, mean, M2)``
    (``(N * groups, slices, 3)``, a float32 buffer whatever ``dtype`` is) of the real elements of
    pixel slice ``s`` of each (sample, group) of NCHW4c ``shape``, the group's pixels cut into
    ``slices`` slices of ``ceil(pixels / slices)`` (``_common.equal_slices``). One work group of
    ``threads`` items per slice, two passes over it as in :func:`group_norm` (the mean, then the
    squared deviations from it: no ``E[x^2] - E[x]^2`` cancellation)."""
    n, c4, h, w = _check_group_norm(shape, channels, groups, threads, dtype=dtype, scope=scope)
    pixels = group_norm_pixels(shape, groups)
    check_slices(pixels, slices, "a group's pixels")
    per = ceildiv(pixels, slices)
    _, count, slice_stats, _, _ = _group_norm_parts(n, c4, h, w, channels, groups, dtype, threads, per)
    f32 = "float32"

    @T.macro
    def store_partial(P, stats, m2, vb, vs):
        P[vb, vs, 0] = count(vs * per)
        P[vb, vs, 1] = stats[0]
        P[vb, vs, 2] = m2

    @T.prim_func(s_tir=True)
    def func(x: T.handle, p: T.handle):
        T.func_attr({"global_symbol": "group_norm_partials", "tirx.noalias": True})
        X = T.match_buffer(x, (n, c4, h, w, 4), dtype, scope=scope)
        P = T.match_buffer(p, (n * groups, slices, PARTIAL_FIELDS), f32, scope=BUFFER)
        for b in T.thread_binding(n * groups * slices, thread="blockIdx.x"):
            with T.sblock("slice"):
                vb = T.axis.spatial(n * groups, b // slices)
                vs = T.axis.spatial(slices, b % slices)
                sums = T.sblock_alloc_buffer((threads,), f32, scope="shared")
                squares = T.sblock_alloc_buffer((threads,), f32, scope="shared")
                stats = T.sblock_alloc_buffer((2,), f32, scope="shared")  # the slice's mean (and unused)
                slice_stats(X, sums, squares, stats, vb, vs * per, lambda st, m2: store_partial(P, st, m2, vb, vs))

    return func


def partials_fold_macros(slices: int, items: int, epsilon: float):
    """``(fold_item, combine)``: the statistics of a (sample, group) ``vb`` from its ``slices``
    partials ``P[vb, s] = (count, mean, M2)`` (:func:`group_norm_partials`) over a work group of
    ``items`` items, by Chan's parallel formula (``n = na + nb``, ``d = mb - ma``,
    ``mean = ma + d nb / n``, ``M2 = M2a + M2b + d^2 na nb / n``; float32, in a fixed order):
    ``fold_item(P, folded, vb, k, t)``: item ``t`` folds partials ``t, t + items, ...`` into
    ``folded[3 k + f, t]`` (items past the partials do nothing); then, after a barrier,
    ``combine(folded, k, stats, s)`` (one item) folds the items' results in item order into
    ``stats[s] = mean`` and ``stats[s + 1] = 1 / sqrt(M2 / count + epsilon)``. Every work group
    gets the same bits. Shared by :func:`group_norm_apply` and the 1x1 conv that reads a group
    norm folded in (``primfuncs.conv.norm``)."""
    f32 = "float32"
    used = min(items, slices)  # items that fold at least one partial
    folds = ceildiv(slices, items)
    one, eps = T.FloatImm(f32, 1.0), T.FloatImm(f32, float(epsilon))

    @T.macro
    def chan(acc, nb, mb, m2b):
        # acc: count, mean, M2 of the folded partials, then scratch: new count, delta
        acc[3] = acc[0] + nb
        acc[4] = mb - acc[1]
        acc[1] = acc[1] + acc[4] * (nb / acc[3])
        acc[2] = acc[2] + m2b + acc[4] * acc[4] * (acc[0] * nb / acc[3])
        acc[0] = acc[3]

    @T.macro
    def fold_item(P, folded, vb, k, t):
        if t < used:
            acc = T.sblock_alloc_buffer((5,), f32, scope="local")
            for f in T.unroll(PARTIAL_FIELDS):
                acc[f] = P[vb, t, f]
            for j in T.serial(folds - 1):
                if t + (j + 1) * items < slices:
                    chan(acc, P[vb, t + (j + 1) * items, 0], P[vb, t + (j + 1) * items, 1], P[vb, t + (j + 1) * items, 2])
            for f in T.unroll(PARTIAL_FIELDS):
                folded[k * PARTIAL_FIELDS + f, t] = acc[f]

    @T.macro
    def combine(folded, k, stats, s):
        acc = T.sblock_alloc_buffer((5,), f32, scope="local")
        for f in T.unroll(PARTIAL_FIELDS):
            acc[f] = folded[k * PARTIAL_FIELDS + f, 0]
        for j in T.serial(used - 1):
            chan(acc, folded[k * PARTIAL_FIELDS, j + 1], folded[k * PARTIAL_FIELDS + 1, j + 1], folded[k * PARTIAL_FIELDS + 2, j + 1])
        stats[s] = acc[1]
        stats[s + 1] = one / T.sqrt(acc[2] / acc[0] + eps)

    return fold_item, combine


def group_norm_apply(shape, channels: int, groups: int, slices: int, epsilon: float = 1e-5, activation: str | None = None,
                     dtype: str = "float32", scope: str = TEXTURE, threads: int = GROUP_NORM_THREADS, clip_min: float = 0.0,
                     clip_max: float = 6.0, epilogue=None):
    """The normalizing kernel of the split group norm: :func:`group_norm`'s ``Y`` from ``X`` and the
    partials ``P`` of :func:`group_norm_partials` (same ``slices``). One work group of ``threads``
    items per (sample, group, slice): each combines all of its group's partials
    (:func:`partials_fold_macros`: Chan's parallel formula, so every work group gets the same bits), then normalizes,
    scales, shifts and activates its own slice's pixels (then ``epilogue``, as :func:`group_norm`'s)."""
    n, c4, h, w = _check_group_norm(shape, channels, groups, threads, epsilon, activation, dtype, scope, clip_min, clip_max)
    check_map_epilogue(epilogue, "group norm")
    spec, bias_shape, residual_shape, residual_scope = map_epilogue_inputs(epilogue, (n, c4, h, w, 4), scope)
    pixels = group_norm_pixels(shape, groups)
    check_slices(pixels, slices, "a group's pixels")
    per = ceildiv(pixels, slices)
    _, count, _, normalize, _ = _group_norm_parts(n, c4, h, w, channels, groups, dtype, threads, per, epsilon, activation,
                                                  clip_min, clip_max, epilogue)
    f32 = "float32"
    fold_item, combine = partials_fold_macros(slices, threads, epsilon)

    @T.prim_func(s_tir=True)
    def func(x: T.handle, p: T.handle, gamma: T.handle, beta: T.handle, bias: T.handle, residual: T.handle, y: T.handle):
        T.func_attr({"global_symbol": "group_norm_apply", "tirx.noalias": True})
        X = T.match_buffer(x, (n, c4, h, w, 4), dtype, scope=scope)
        P = T.match_buffer(p, (n * groups, slices, PARTIAL_FIELDS), f32, scope=BUFFER)
        Gamma = T.match_buffer(gamma, (c4, 4), dtype, scope=BUFFER)
        Beta = T.match_buffer(beta, (c4, 4), dtype, scope=BUFFER)
        Bias = T.match_buffer(bias, bias_shape, dtype, scope=BUFFER)
        Residual = T.match_buffer(residual, residual_shape, dtype, scope=residual_scope)
        Y = T.match_buffer(y, (n, c4, h, w, 4), dtype, scope=scope)
        for b in T.thread_binding(n * groups * slices, thread="blockIdx.x"):
            with T.sblock("slice"):
                vb = T.axis.spatial(n * groups, b // slices)
                vs = T.axis.spatial(slices, b % slices)
                folded = T.sblock_alloc_buffer((PARTIAL_FIELDS, threads), f32, scope="shared")
                stats = T.sblock_alloc_buffer((2,), f32, scope="shared")  # mean, 1 / sqrt(var + eps)
                # 1. item t folds partials t, t + threads, ...
                for t in T.thread_binding(threads, thread="threadIdx.x"):
                    with T.sblock("fold"):
                        fold_item(P, folded, vb, 0, t)
                # 2. item 0 folds the items' results in order: the group's mean and 1 / std
                for t in T.thread_binding(threads, thread="threadIdx.x"):
                    with T.sblock("combine"):
                        if t == 0:
                            combine(folded, 0, stats, 0)
                normalize(X, Gamma, Beta, Bias, Residual, Y, stats, vb, vs * per)

    return _norm_params(func, spec)
