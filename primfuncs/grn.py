"""ConvNeXt-V2's global response norm (GRN) statistics on NCHW4c tensors.

GRN is ``x + beta + gamma * x * Nx`` with ``Nx[n, c] = G[n, c] / (mean_c G[n, :] + eps)`` and
``G[n, c] = ||x[n, c, :, :]||_2``. Exported models compute ``G`` as ``sqrt(sum_hw x * x)``.
:func:`grn_scale` is the step from ``S = sum_hw x * x`` (``[N, C, 1, 1]``) to ``Nx``: the mean over
channels crosses every channel block, so one work item per output block walks all ``C/4`` blocks
of ``S`` (a few hundred numbers) in float32 registers. Padded lanes are left out of the mean and
written as 0.

With ``gamma`` it writes GRN's per-channel scale ``1 + gamma * Nx`` instead: GRN is then
``x * (1 + gamma * Nx) + beta``, which the 1x1 conv after it reads as an input gate (``beta`` goes
into that conv's bias), so GRN is two launches, ``sum_squares_hw`` (``primfuncs.reduce``) and this.
"""

from __future__ import annotations

from tvm.script import tirx as T

from ._common import (BUFFER, LANES, TEXTURE, check_channels, check_dtype, check_epsilon, check_positive, check_scope, load_pixel,
                      pixel_grid, pixel_launch, store_pixel)


def grn_scale(shape, channels: int, epsilon: float, dtype: str = "float32", scope: str = TEXTURE, gamma: bool = False,
              threads: int | None = None):
    """``Y[n, c] = sqrt(S[n, c]) / (mean_c sqrt(S[n, :]) + epsilon)`` over the ``channels`` real
    channels of NCHW4c ``shape`` ``(N, C/4, 1, 1, 4)`` (``S >= 0``: sums of squares), in float32.

    ``gamma``: the kernel takes ``Gamma (C/4, 4)`` (a buffer, like a conv's bias) after ``S`` and
    writes ``Y = 1 + Gamma[c] * Nx``, GRN's scale; ``S`` is then float32 whatever ``dtype`` is (the
    sums of squares of a half tensor overflow half).

    ``threads``: one work group of ``threads`` items per sample (:func:`_grn_group`) instead of one
    work item per block that walks all ``C/4`` blocks itself: ``C`` square roots per sample, not
    ``C^2 / 4``, and a few reads per item (a wide GPU's latency-bound loop)."""
    shape = tuple(int(d) for d in shape)
    if len(shape) != 5 or shape[4] != LANES or shape[2:4] != (1, 1):
        raise ValueError(f"shape must be NCHW4c of [N, C, 1, 1] (N, C4, 1, 1, 4), got {shape}")
    n, c4, _, _, _ = shape
    check_positive(N=n, C4=c4, channels=channels)
    check_channels(c4, channels)
    check_epsilon(epsilon)
    check_dtype(dtype)
    check_scope(scope)
    if not isinstance(gamma, bool):
        raise TypeError(f"gamma must be a bool, got {gamma!r}")
    if threads is not None:
        check_positive(threads=threads)
        return _grn_group(n, c4, channels, epsilon, dtype, scope, gamma, threads)
    g = pixel_grid(n * c4, 1, 1)
    zero = T.FloatImm("float32", 0.0)
    one = T.FloatImm("float32", 1.0)
    s_dtype = "float32" if gamma else dtype

    launch = pixel_launch()

    @T.macro
    def normalized(S, out, vz):
        """``out`` = Nx of block ``vz`` (float32; 0 in padded lanes)."""
        px = T.sblock_alloc_buffer((4,), s_dtype, scope="local")
        mean = T.sblock_alloc_buffer((1,), "float32", scope="local")
        mean[0] = zero
        for cb in range(c4):
            load_pixel(px, S, vz // c4, cb, 0, 0)
            for lane in T.unroll(4):
                mean[0] = mean[0] + T.Select(cb * 4 + lane < channels, T.sqrt(T.Cast("float32", px[lane])), zero)
        mean[0] = mean[0] / T.FloatImm("float32", float(channels)) + T.FloatImm("float32", float(epsilon))
        load_pixel(px, S, vz // c4, vz % c4, 0, 0)
        for lane in T.unroll(4):
            out[lane] = T.Select((vz % c4) * 4 + lane < channels, T.sqrt(T.Cast("float32", px[lane])) / mean[0], zero)

    @T.macro
    def per_block(S, Y, vz):
        out = T.sblock_alloc_buffer((4,), "float32", scope="local")
        normalized(S, out, vz)
        store_pixel(Y, vz // c4, vz % c4, 0, 0, out)

    @T.macro
    def scale_block(S, Gamma, Y, vz):
        out = T.sblock_alloc_buffer((4,), "float32", scope="local")
        normalized(S, out, vz)
        for lane in T.unroll(4):  # padded lanes: Gamma is 0 there, so 1 (times an input lane of 0)
            out[lane] = one + T.Cast("float32", Gamma[vz % c4, lane]) * out[lane]
        store_pixel(Y, vz // c4, vz % c4, 0, 0, out)

    if gamma:
        @T.prim_func(s_tir=True)
        def func_scale(s: T.handle, gm: T.handle, y: T.handle):
            T.func_attr({"global_symbol": "grn_scale", "tirx.noalias": True})
            S = T.match_buffer(s, (n, c4, 1, 1, 4), s_dtype, scope=scope)
            Gamma = T.match_buffer(gm, (c4, 4), dtype, scope=BUFFER)
            Y = T.match_buffer(y, (n, c4, 1, 1, 4), dtype, scope=scope)
            launch(g, 1, 1, "block", lambda vz, vh, vw: scale_block(S, Gamma, Y, vz))

        return func_scale

    @T.prim_func(s_tir=True)
    def func(s: T.handle, y: T.handle):
        T.func_attr({"global_symbol": "grn_scale", "tirx.noalias": True})
        S = T.match_buffer(s, (n, c4, 1, 1, 4), dtype, scope=scope)
        Y = T.match_buffer(y, (n, c4, 1, 1, 4), dtype, scope=scope)
        launch(g, 1, 1, "block", lambda vz, vh, vw: per_block(S, Y, vz))

    return func


def grn_macros(c4: int, channels: int, epsilon: float, gamma: bool):
    """``(sum_roots, mean_of, scale_pixel)``: GRN's scale from the sums of squares ``S`` of one
    sample (``(N, C/4, 1, 1, 4)``, any scope), ``C`` = ``channels`` real lanes of ``c4`` blocks,
    float32: ``sum_roots(S, acc, px, vn, cb)`` adds ``sqrt(S)`` of block ``cb``'s real lanes to
    ``acc[0]``; ``mean_of(partial, count, mean)`` (one item) adds ``partial[0 .. count)`` in order
    into ``mean[0] = mean_c sqrt(S) + epsilon``; ``scale_pixel(S, Gamma, mean, px, out, vn, cb)``
    writes block ``cb``'s ``Nx`` (0 in padded lanes) into ``out``, or with ``gamma`` ``1 + Gamma *
    Nx`` (1 there). Shared by :func:`grn_scale`'s work group form and the tiled conv that reads GRN
    folded in (``primfuncs.conv.tiled``: each work group computes its input's scale itself); a
    fixed order, so every work group gets the same bits."""
    f32 = "float32"
    zero, one = T.FloatImm(f32, 0.0), T.FloatImm(f32, 1.0)

    def real(cb, lane):
        return cb * 4 + lane < channels

    @T.macro
    def sum_roots(S, acc, px, vn, cb):
        load_pixel(px, S, vn, cb, 0, 0)
        for lane in T.unroll(4):
            acc[0] = acc[0] + T.Select(real(cb, lane), T.sqrt(T.Cast(f32, px[lane])), zero)

    @T.macro
    def mean_of(partial, count, mean):
        total = T.sblock_alloc_buffer((1,), f32, scope="local")
        total[0] = zero
        for k in range(count):
            total[0] = total[0] + partial[k]
        mean[0] = total[0] / T.FloatImm(f32, float(channels)) + T.FloatImm(f32, float(epsilon))

    @T.macro
    def scale_pixel(S, Gamma, mean, px, out, vn, cb):
        load_pixel(px, S, vn, cb, 0, 0)
        for lane in T.unroll(4):
            out[lane] = T.Select(real(cb, lane), T.sqrt(T.Cast(f32, px[lane])) / mean[0], zero)
        if gamma:  # padded lanes: Gamma is 0 there, so 1 (times an input lane of 0)
            for lane in T.unroll(4):
                out[lane] = one + T.Cast(f32, Gamma[cb, lane]) * out[lane]

    return sum_roots, mean_of, scale_pixel


def _grn_group(n: int, c4: int, channels: int, epsilon: float, dtype: str, scope: str, gamma: bool, threads: int):
    """:func:`grn_scale` with one work group per sample: item ``t`` sums ``sqrt(S)`` of the real
    lanes of blocks ``t, t + threads, ...``; item 0 adds the items' sums in order (the mean); then
    item ``t`` writes those blocks (``Nx``, or ``1 + Gamma * Nx``; padded lanes 0, or 1)
    (:func:`grn_macros`)."""
    f32 = "float32"
    zero = T.FloatImm(f32, 0.0)
    s_dtype = f32 if gamma else dtype
    rounds = (c4 + threads - 1) // threads
    sum_roots, mean_of, scale_pixel = grn_macros(c4, channels, epsilon, gamma)

    @T.macro
    def body(S, Gamma, Y, vn):
        partial = T.sblock_alloc_buffer((threads,), f32, scope="shared")
        mean = T.sblock_alloc_buffer((1,), f32, scope="shared")
        # 1. item t sums the square roots of its blocks' real lanes
        for t in T.thread_binding(threads, thread="threadIdx.x"):
            with T.sblock("sums"):
                px = T.sblock_alloc_buffer((4,), s_dtype, scope="local")
                acc = T.sblock_alloc_buffer((1,), f32, scope="local")
                acc[0] = zero
                for r in T.serial(rounds):
                    if r * threads + t < c4:
                        sum_roots(S, acc, px, vn, r * threads + t)
                partial[t] = acc[0]
        # 2. item 0: the mean over the channels, plus epsilon
        for t in T.thread_binding(threads, thread="threadIdx.x"):
            with T.sblock("mean"):
                if t == 0:
                    mean_of(partial, threads, mean)
        # 3. item t writes its blocks
        for t in T.thread_binding(threads, thread="threadIdx.x"):
            with T.sblock("scale"):
                px = T.sblock_alloc_buffer((4,), s_dtype, scope="local")
                out = T.sblock_alloc_buffer((4,), f32, scope="local")
                for r in T.serial(rounds):
                    if r * threads + t < c4:
                        scale_pixel(S, Gamma, mean, px, out, vn, r * threads + t)
                        store_pixel(Y, vn, r * threads + t, 0, 0, out)

    if gamma:
        @T.prim_func(s_tir=True)
        def func(s: T.handle, gm: T.handle, y: T.handle):
            T.func_attr({"global_symbol": "grn_scale", "tirx.noalias": True})
            S = T.match_buffer(s, (n, c4, 1, 1, 4), s_dtype, scope=scope)
            Gamma = T.match_buffer(gm, (c4, 4), dtype, scope=BUFFER)
            Y = T.match_buffer(y, (n, c4, 1, 1, 4), dtype, scope=scope)
            for z in T.thread_binding(n, thread="blockIdx.x"):
                with T.sblock("sample"):
                    vn = T.axis.spatial(n, z)
                    body(S, Gamma, Y, vn)

        return func

    @T.prim_func(s_tir=True)
    def func_nx(s: T.handle, y: T.handle):
        T.func_attr({"global_symbol": "grn_scale", "tirx.noalias": True})
        S = T.match_buffer(s, (n, c4, 1, 1, 4), s_dtype, scope=scope)
        Y = T.match_buffer(y, (n, c4, 1, 1, 4), dtype, scope=scope)
        for z in T.thread_binding(n, thread="blockIdx.x"):
            with T.sblock("sample"):
                vn = T.axis.spatial(n, z)
                body(S, None, Y, vn)

    return func_nx
