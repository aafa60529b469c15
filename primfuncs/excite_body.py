"""The kernel body of :mod:`primfuncs.excite`: the pool, the layers and the gate as TIR macros.

:func:`build` turns the sizes :mod:`primfuncs.excite` derived (a namespace ``s``: the map, the
work-group split of each step, the activations as TIR functions) into the PrimFunc of
:func:`~primfuncs.excite.excitation`, :func:`~primfuncs.excite.excitation_split`,
:func:`~primfuncs.excite.depthwise_excitation` or :func:`~primfuncs.excite.pooled_pointwise`. Each
step is one macro builder reading the sizes it needs; the steps and their order are described in
:mod:`primfuncs.excite`'s docstring.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from tvm.script import tirx as T

from ._common import store_pixel
from .conv.direct_body import input_macros
from .conv.geometry import ConvGeometry, ConvWindow, InputLayout
from .epilogue import Epilogue, activate, store_output_pixel

FENCE_FLAGS = 3
#: Bits of the float32 NaN that marks a partial sum not written yet (not a NaN arithmetic makes):
#: the last work group takes each partial sum with ``atomic_xchg(p, sentinel)`` (at the point of
#: coherence, resetting it for the next launch) and takes it again while it reads the sentinel,
#: so a store still on its way is waited for, never read stale; every other work group having
#: stored its partial sums before its ticket, the wait ends whatever the scheduling.
PARTIAL_SENTINEL = 0x7FC0DEAD


@dataclass(frozen=True)
class Depthwise:
    """The depthwise conv (multiplier 1) of :func:`depthwise_excitation`: its geometry, its
    epilogue (bias, activation), the scope of its output ``D`` (and of the gate) and how it reads
    ``X`` (:class:`~primfuncs.conv.geometry.InputLayout`: NCHW4c, or a plain NCHW / NHWC buffer)."""

    geometry: ConvGeometry
    epilogue: Epilogue
    out_scope: str
    input: InputLayout

    def pixel_macro(self, channels: int):
        """``depthwise_pixel``: ``px[i]`` = output pixel ``(oh, ow)`` of channel block ``cb``, the
        window tap by tap (each input pixel read as the direct conv reads it: clamped, 0 in the
        padding), the epilogue applied, padded lanes 0, stored to ``D``."""
        geom, epilogue, win = self.geometry, self.epilogue, ConvWindow(self.geometry, 1, 1)
        load_pixel = input_macros(SimpleNamespace(win=win, zero=T.FloatImm("float32", 0.0), input=self.input))[0]

        @T.macro
        def depthwise_pixel(X, Wdw, Bdw, D, px, i, xp, wp, tmp, vn, cb, oh, ow):
            for lane in T.unroll(4):
                px[i, lane] = T.float32(0)
            for k_h in T.unroll(geom.kh):
                for k_w in T.unroll(geom.kw):
                    load_pixel(X, xp, 0, vn, cb, win.raw_row(oh, k_h), win.raw_col(ow, k_w))
                    for lane in T.vectorized(4):
                        wp[lane] = Wdw[cb, 0, k_h, k_w, lane]
                    for lane in T.unroll(4):
                        px[i, lane] = px[i, lane] + xp[0, lane] * wp[lane]
            store_output_pixel(D, px, i, tmp, epilogue, Bdw, Bdw, vn, cb, oh, ow, channels)

        return depthwise_pixel



def build(s):
    """The PrimFunc of the sizes ``s``: the head (``s.second`` False), the one-work-group
    excitation (``s.split`` None) or the split one (with ``s.dw``: its depthwise conv)."""
    pool = _pool_macro(s, None if s.dw is None else s.dw.pixel_macro(s.channels))
    first_layer = _first_layer_macro(s)
    if not s.second:
        return _head_func(s, pool, _normalize_macro(s), first_layer)
    hidden_units, excite = _hidden_units_macro(s), _excite_macro(s)
    if not s.split:
        return _excitation_func(s, pool, first_layer, hidden_units, excite)
    return _split_func(s, _split_body_macro(s, pool, first_layer, hidden_units, excite))


def _pool_macro(s, depthwise_pixel):
    """Steps 1-2: the pool of a work group's channel blocks over its pixels into ``P`` (the means)."""
    c4, h, w, channels, dtype, dw, cb, span, ps, cs = s.c4, s.h, s.w, s.channels, s.dtype, s.dw, s.cb, s.span, s.ps, s.cs
    ks, slices, nt, u, zero, inv_pixels = s.ks, s.slices, s.nt, s.u, s.zero, s.inv_pixels

    @T.macro
    def pool(X, partial, part2, P, vn, c0, p0, Wdw, Bdw, D):
        # 1. item t sums pixels p0 + t % ps, + ps, ... (span of them) of channel blocks c0 + t // ps, + cs, ...
        # (with a depthwise conv: computes them from X, writes them to D, then sums them)
        for t in T.thread_binding(nt, thread="threadIdx.x"):
            with T.sblock("pool"):
                px = T.sblock_alloc_buffer((u, 4), dtype, scope="local")
                acc = T.sblock_alloc_buffer((4,), "float32", scope="local")
                if dw is not None:
                    xp = T.sblock_alloc_buffer((1, 4), dtype, scope="local")
                    wp = T.sblock_alloc_buffer((4,), "float32", scope="local")
                    tmp = T.sblock_alloc_buffer((4,), "float32", scope="local")
                for r in T.serial(-(-cb // cs)):
                    if t < ps * cs and r * cs + t // ps < cb and c0 + r * cs + t // ps < c4:
                        for lane in T.unroll(4):
                            acc[lane] = zero
                        for q in T.serial(-(-span // (ps * u))):
                            for i in T.unroll(u):  # the loads first, independent of the sums
                                if (q * u + i) * ps + t % ps < span and p0 + (q * u + i) * ps + t % ps < h * w:
                                    if dw is None:
                                        for lane in T.vectorized(4):
                                            px[i, lane] = X[vn, c0 + r * cs + t // ps, (p0 + (q * u + i) * ps + t % ps) // w, (p0 + (q * u + i) * ps + t % ps) % w, lane]
                                    else:
                                        depthwise_pixel(X, Wdw, Bdw, D, px, i, xp, wp, tmp, vn, c0 + r * cs + t // ps,
                                                        (p0 + (q * u + i) * ps + t % ps) // w, (p0 + (q * u + i) * ps + t % ps) % w)
                            for i in T.unroll(u):
                                if (q * u + i) * ps + t % ps < span and p0 + (q * u + i) * ps + t % ps < h * w:
                                    for lane in T.unroll(4):
                                        acc[lane] = acc[lane] + T.Cast("float32", px[i, lane])
                        for lane in T.unroll(4):
                            partial[t % ps, r * cs + t // ps, lane] = acc[lane]
        # 2a. item (cb, k) adds slices k, k + ks, ... of channel block cb
        for t in T.thread_binding(nt, thread="threadIdx.x"):
            with T.sblock("slices"):
                sums = T.sblock_alloc_buffer((4,), "float32", scope="local")
                for r in T.serial(-(-(cb * ks) // nt)):
                    if (r * nt + t) // ks < cb and c0 + (r * nt + t) // ks < c4:
                        for lane in T.unroll(4):
                            sums[lane] = zero
                        for m in T.serial(-(-ps // ks)):
                            if m * ks + (r * nt + t) % ks < ps:
                                for lane in T.unroll(4):
                                    sums[lane] = sums[lane] + partial[m * ks + (r * nt + t) % ks, (r * nt + t) // ks, lane]
                        for lane in T.unroll(4):
                            part2[(r * nt + t) % ks, (r * nt + t) // ks, lane] = sums[lane]
        # 2b. the means of channel blocks c0 + t, + nt, ... (padded lanes and blocks past C4 0, as W1's columns)
        for t in T.thread_binding(nt, thread="threadIdx.x"):
            with T.sblock("mean"):
                sums = T.sblock_alloc_buffer((4,), "float32", scope="local")
                for r in T.serial(-(-cb // nt)):
                    if r * nt + t < cb:
                        for lane in T.unroll(4):
                            sums[lane] = zero
                        if c0 + r * nt + t < c4:
                            for k in range(ks):
                                for lane in T.unroll(4):
                                    sums[lane] = sums[lane] + part2[k, r * nt + t, lane]
                        for lane in T.unroll(4):
                            P[(r * nt + t) * 4 + lane] = T.Select((c0 + r * nt + t) * 4 + lane < channels, sums[lane] * inv_pixels, zero)

    return pool


def _first_layer_macro(s):
    """Step 3a: item (j, k) sums every ``k1``-th pooled channel of a first-layer row (scalar or float4 loads)."""
    c4, rows, w1_rows, cb, lu, k1, nt, zero, unroll1 = s.c4, s.rows, s.w1_rows, s.cb, s.lu, s.k1, s.nt, s.zero, s.unroll1

    @T.macro
    def scalar_layer(W1, P, H1, row0, col0):
        # 3a. item (j, k) sums the pooled channels k, k + k1, ... (W1's columns col0 + k, ...) of row row0 + j
        for t in T.thread_binding(nt, thread="threadIdx.x"):
            with T.sblock("squeeze"):
                s = T.sblock_alloc_buffer((1,), "float32", scope="local")
                if lu > 1:
                    wv = T.sblock_alloc_buffer((lu,), "float32", scope="local")
                for r in T.serial(-(-(rows * k1) // nt)):
                    if (r * nt + t) // k1 < rows and row0 + (r * nt + t) // k1 < w1_rows:
                        s[0] = zero
                        if lu == 1:
                            for c in T.serial(-(-(cb * 4) // k1)):
                                if c * k1 + (r * nt + t) % k1 < cb * 4 and col0 + c * k1 + (r * nt + t) % k1 < c4 * 4:
                                    s[0] = s[0] + W1[row0 + (r * nt + t) // k1, col0 + c * k1 + (r * nt + t) % k1] * P[c * k1 + (r * nt + t) % k1]
                        else:  # the same sums in the same order, lu loads of W1 first
                            for c in T.serial(-(-(cb * 4) // (k1 * lu))):
                                for i in T.unroll(lu):
                                    if (c * lu + i) * k1 + (r * nt + t) % k1 < cb * 4 and col0 + (c * lu + i) * k1 + (r * nt + t) % k1 < c4 * 4:
                                        wv[i] = W1[row0 + (r * nt + t) // k1, col0 + (c * lu + i) * k1 + (r * nt + t) % k1]
                                for i in T.unroll(lu):
                                    if (c * lu + i) * k1 + (r * nt + t) % k1 < cb * 4 and col0 + (c * lu + i) * k1 + (r * nt + t) % k1 < c4 * 4:
                                        s[0] = s[0] + wv[i] * P[(c * lu + i) * k1 + (r * nt + t) % k1]
                        H1[(r * nt + t) // k1, (r * nt + t) % k1] = s[0]

    @T.macro
    def float4_layer(W1, P, H1, row0, col0):
        # 3a. item (j, k) sums the pooled channel blocks k, k + k1, ... of row row0 + j: one float4 of
        # W1 a block (neighbouring items read neighbouring float4s), unroll1 of them loaded first
        for t in T.thread_binding(nt, thread="threadIdx.x"):
            with T.sblock("gemv"):
                s = T.sblock_alloc_buffer((4,), "float32", scope="local")
                wv = T.sblock_alloc_buffer((unroll1, 4), "float32", scope="local")
                for r in T.serial(-(-(rows * k1) // nt)):
                    if (r * nt + t) // k1 < rows and row0 + (r * nt + t) // k1 < w1_rows:
                        for lane in T.unroll(4):
                            s[lane] = zero
                        for q in T.serial(-(-cb // (k1 * unroll1))):
                            for i in T.unroll(unroll1):
                                if (q * unroll1 + i) * k1 + (r * nt + t) % k1 < cb:
                                    for lane in T.vectorized(4):
                                        wv[i, lane] = W1[row0 + (r * nt + t) // k1, col0 + ((q * unroll1 + i) * k1 + (r * nt + t) % k1) * 4 + lane]
                            for i in T.unroll(unroll1):
                                if (q * unroll1 + i) * k1 + (r * nt + t) % k1 < cb:
                                    for lane in T.unroll(4):
                                        s[lane] = s[lane] + wv[i, lane] * P[((q * unroll1 + i) * k1 + (r * nt + t) % k1) * 4 + lane]
                        H1[(r * nt + t) // k1, (r * nt + t) % k1] = s[0] + s[1] + s[2] + s[3]

    return scalar_layer if unroll1 == 1 else float4_layer


def _normalize_macro(s):
    """The head's layer norm of the pooled vector (:class:`~primfuncs.excite.VectorNorm`), in place."""
    channels, cb, nt, zero, norm, ns, count = s.channels, s.cb, s.nt, s.zero, s.norm, s.ns, s.count

    @T.macro
    def norm_sums(P, S, stats, deviations):
        # items t < ns sum channels t, t + ns, ... of P (or their squared deviations from the mean)
        for t in T.thread_binding(nt, thread="threadIdx.x"):
            with T.sblock("norm_sums"):
                acc = T.sblock_alloc_buffer((1,), "float32", scope="local")
                if t < ns:
                    acc[0] = zero
                    for c in T.serial(-(-channels // ns)):
                        if c * ns + t < channels:
                            if deviations:
                                acc[0] = acc[0] + (P[c * ns + t] - stats[0]) * (P[c * ns + t] - stats[0])
                            else:
                                acc[0] = acc[0] + P[c * ns + t]
                    S[t] = acc[0]
        # item 0 adds them in order: the mean, then 1 / sqrt(variance + epsilon)
        for t in T.thread_binding(nt, thread="threadIdx.x"):
            with T.sblock("norm_total"):
                total = T.sblock_alloc_buffer((1,), "float32", scope="local")
                if t == 0:
                    total[0] = zero
                    for k in range(ns):
                        total[0] = total[0] + S[k]
                    if deviations:
                        stats[1] = T.FloatImm("float32", 1.0) / T.sqrt(total[0] / count + T.FloatImm("float32", float(norm.epsilon)))
                    else:
                        stats[0] = total[0] / count

    @T.macro
    def normalize(P, Gamma, Beta, S, stats):
        # the layer norm of the pooled vector P over its channels, in place (padded lanes stay 0)
        norm_sums(P, S, stats, False)
        norm_sums(P, S, stats, True)
        for t in T.thread_binding(nt, thread="threadIdx.x"):
            with T.sblock("norm"):
                for r in T.serial(-(-(cb * 4) // nt)):
                    if r * nt + t < channels:
                        P[r * nt + t] = activate((P[r * nt + t] - stats[0]) * stats[1] * Gamma[r * nt + t] + Beta[r * nt + t],
                                                 norm.activation, "float32", *norm.bounds)

    return normalize


def _hidden_units_macro(s):
    """Step 3b: the hidden units from their ``split_k`` partial sums, bias and activation."""
    hidden, nt, is_split, last, act = s.hidden, s.nt, s.is_split, s.last, s.act

    @T.macro
    def hidden_units(H1, H, B1, ticket, split_k):
        # the hidden units t, t + nt, ...: the split_k partial sums, bias, activation
        for t in T.thread_binding(nt, thread="threadIdx.x"):
            with T.sblock("hidden"):
                s = T.sblock_alloc_buffer((1,), "float32", scope="local")
                go = T.sblock_alloc_buffer((1,), "int32", scope="local")
                go[0] = last
                if is_split:
                    go[0] = ticket[0]
                if go[0] == last:
                    for r in T.serial(-(-hidden // nt)):
                        if r * nt + t < hidden:
                            s[0] = B1[r * nt + t]
                            for k in range(split_k):
                                s[0] = s[0] + H1[r * nt + t, k]
                            H[r * nt + t] = act(s[0])

    return hidden_units


def _excite_macro(s):
    """Step 4: the gate, output block by output block, from all hidden units (or ``k2`` partial sums)."""
    hidden, out_channels, o4, lu, k2, nt, zero, is_split = s.hidden, s.out_channels, s.o4, s.lu, s.k2, s.nt, s.zero, s.is_split
    last, gated = s.last, s.gated

    @T.macro
    def excite(W2, B2, H, Y2, G, ticket, vn):
        # 4a. (k2 > 1) item (o, k) sums hidden units k, k + k2, ... of output block o
        if k2 > 1:
            for t in T.thread_binding(nt, thread="threadIdx.x"):
                with T.sblock("excite_partial"):
                    y = T.sblock_alloc_buffer((4,), "float32", scope="local")
                    wv = T.sblock_alloc_buffer((lu, 4), "float32", scope="local")
                    go = T.sblock_alloc_buffer((1,), "int32", scope="local")
                    go[0] = ticket[0]
                    if go[0] == last:
                        for r in T.serial(-(-(o4 * k2) // nt)):
                            if (r * nt + t) // k2 < o4:
                                for lane in T.unroll(4):
                                    y[lane] = zero
                                for j in T.serial(-(-hidden // (k2 * lu))):
                                    for i in T.unroll(lu):  # lu rows of W2 first, then their sums in order
                                        if (j * lu + i) * k2 + (r * nt + t) % k2 < hidden:
                                            for lane in T.unroll(4):
                                                wv[i, lane] = W2[(j * lu + i) * k2 + (r * nt + t) % k2, (r * nt + t) // k2 * 4 + lane]
                                    for i in T.unroll(lu):
                                        if (j * lu + i) * k2 + (r * nt + t) % k2 < hidden:
                                            for lane in T.unroll(4):
                                                y[lane] = y[lane] + wv[i, lane] * H[(j * lu + i) * k2 + (r * nt + t) % k2]
                                for lane in T.unroll(4):
                                    Y2[(r * nt + t) % k2, (r * nt + t) // k2, lane] = y[lane]
        # 4b. the gate, output blocks t, t + nt, ...: bias, from all hidden units (k2 1) or their k2 partial sums
        for t in T.thread_binding(nt, thread="threadIdx.x"):
            with T.sblock("excite"):
                y = T.sblock_alloc_buffer((4,), "float32", scope="local")
                go = T.sblock_alloc_buffer((1,), "int32", scope="local")
                go[0] = last
                if is_split:
                    go[0] = ticket[0]
                if go[0] == last:
                    for r in T.serial(-(-o4 // nt)):
                        if r * nt + t < o4:
                            for lane in T.unroll(4):
                                y[lane] = B2[r * nt + t, lane]
                            if k2 > 1:
                                for k in range(k2):
                                    for lane in T.unroll(4):
                                        y[lane] = y[lane] + Y2[k, r * nt + t, lane]
                            else:
                                for j in range(hidden):
                                    for lane in T.unroll(4):
                                        y[lane] = y[lane] + W2[j, (r * nt + t) * 4 + lane] * H[j]
                            for lane in T.unroll(4):
                                y[lane] = T.Select((r * nt + t) * 4 + lane < out_channels, gated(y[lane]), zero)
                            store_pixel(G, vn, r * nt + t, 0, 0, y)

    return excite


def _head_func(s, pool, normalize, first_layer):
    """The kernel of :func:`~primfuncs.excite.pooled_pointwise`: steps 1-3, the first layer is the output."""
    n, c4, h, w, hidden, dtype, scope, groups, o4, blocks = s.n, s.c4, s.h, s.w, s.hidden, s.dtype, s.scope, s.groups, s.o4, s.blocks
    rows, w1_rows, cb, ps, ks, k1, nt, zero, norm, ns = s.rows, s.w1_rows, s.cb, s.ps, s.ks, s.k1, s.nt, s.zero, s.norm, s.ns
    act = s.act

    @T.macro
    def head_body(X, Gamma, Beta, W1, B1, Y):
        for b in T.thread_binding(n * groups, thread="blockIdx.x"):
            with T.sblock("sample"):
                vb = T.axis.spatial(n * groups, b)
                partial = T.sblock_alloc_buffer((ps, cb, 4), "float32", scope="shared")
                part2 = T.sblock_alloc_buffer((ks, cb, 4), "float32", scope="shared")
                P = T.sblock_alloc_buffer((cb * 4,), "float32", scope="shared")
                H1 = T.sblock_alloc_buffer((rows, k1), "float32", scope="shared")
                pool(X, partial, part2, P, vb // groups, 0, 0, X, X, X)
                if norm is not None:
                    S = T.sblock_alloc_buffer((ns,), "float32", scope="shared")
                    stats = T.sblock_alloc_buffer((2,), "float32", scope="shared")  # mean, 1 / sqrt(var + eps)
                    normalize(P, Gamma, Beta, S, stats)
                first_layer(W1, P, H1, (vb % groups) * rows, 0)
                # 3b. this group's output blocks t, t + nt, ...: the k1 partial sums, bias, activation
                for t in T.thread_binding(nt, thread="threadIdx.x"):
                    with T.sblock("output"):
                        yv = T.sblock_alloc_buffer((4,), "float32", scope="local")
                        for r in T.serial(-(-blocks // nt)):
                            if r * nt + t < blocks and (vb % groups) * blocks + r * nt + t < o4:
                                for lane in T.unroll(4):
                                    yv[lane] = B1[((vb % groups) * blocks + r * nt + t) * 4 + lane]
                                    for k in range(k1):
                                        yv[lane] = yv[lane] + H1[(r * nt + t) * 4 + lane, k]
                                    yv[lane] = T.Select(((vb % groups) * blocks + r * nt + t) * 4 + lane < hidden, act(yv[lane]), zero)
                                store_pixel(Y, vb // groups, (vb % groups) * blocks + r * nt + t, 0, 0, yv)

    if norm is not None:
        @T.prim_func(s_tir=True)
        def normed_head(x: T.handle, gamma: T.handle, beta: T.handle, w1: T.handle, b1: T.handle, y: T.handle):
            T.func_attr({"global_symbol": "pooled_pointwise", "tirx.noalias": True})
            X = T.match_buffer(x, (n, c4, h, w, 4), dtype, scope=scope)
            Gamma = T.match_buffer(gamma, (c4 * 4,), "float32")
            Beta = T.match_buffer(beta, (c4 * 4,), "float32")
            W1 = T.match_buffer(w1, (w1_rows, c4 * 4), "float32")
            B1 = T.match_buffer(b1, (w1_rows,), "float32")
            Y = T.match_buffer(y, (n, o4, 1, 1, 4), dtype, scope=scope)
            head_body(X, Gamma, Beta, W1, B1, Y)

        return normed_head

    @T.prim_func(s_tir=True)
    def head(x: T.handle, w1: T.handle, b1: T.handle, y: T.handle):
        T.func_attr({"global_symbol": "pooled_pointwise", "tirx.noalias": True})
        X = T.match_buffer(x, (n, c4, h, w, 4), dtype, scope=scope)
        W1 = T.match_buffer(w1, (w1_rows, c4 * 4), "float32")
        B1 = T.match_buffer(b1, (w1_rows,), "float32")
        Y = T.match_buffer(y, (n, o4, 1, 1, 4), dtype, scope=scope)
        head_body(X, X, X, W1, B1, Y)

    return head


def _excitation_func(s, pool, first_layer, hidden_units, excite):
    """The one-work-group-per-sample kernel of :func:`~primfuncs.excite.excitation`."""
    n, c4, h, w, hidden, dtype, scope, o4, rows, ps = s.n, s.c4, s.h, s.w, s.hidden, s.dtype, s.scope, s.o4, s.rows, s.ps
    ks, k1 = s.ks, s.k1

    @T.prim_func(s_tir=True)
    def func(x: T.handle, w1: T.handle, b1: T.handle, w2: T.handle, b2: T.handle, g: T.handle):
        T.func_attr({"global_symbol": "excitation", "tirx.noalias": True})
        X = T.match_buffer(x, (n, c4, h, w, 4), dtype, scope=scope)
        W1 = T.match_buffer(w1, (hidden, c4 * 4), "float32")
        B1 = T.match_buffer(b1, (hidden,), "float32")
        W2 = T.match_buffer(w2, (hidden, o4 * 4), "float32")
        B2 = T.match_buffer(b2, (o4, 4), "float32")
        G = T.match_buffer(g, (n, o4, 1, 1, 4), dtype, scope=scope)
        for b in T.thread_binding(n, thread="blockIdx.x"):
            with T.sblock("sample"):
                vn = T.axis.spatial(n, b)
                partial = T.sblock_alloc_buffer((ps, c4, 4), "float32", scope="shared")
                part2 = T.sblock_alloc_buffer((ks, c4, 4), "float32", scope="shared")
                P = T.sblock_alloc_buffer((c4 * 4,), "float32", scope="shared")
                H1 = T.sblock_alloc_buffer((rows, k1), "float32", scope="shared")
                H = T.sblock_alloc_buffer((hidden,), "float32", scope="shared")
                pool(X, partial, part2, P, vn, 0, 0, X, X, X)
                first_layer(W1, P, H1, 0, 0)
                hidden_units(H1, H, B1, H1, k1)  # 3b (H1 stands for the ticket no one-group kernel has)
                excite(W2, B2, H, H1, G, H1, vn)  # 4

    return func

    return func


def _split_body_macro(s, pool, first_layer, hidden_units, excite):
    """Work group ``b`` of a split excitation: its pool and partial sums, its ticket; the last one finishes."""
    n, hidden, o4, rows, cb, psl, span, ps, ks, k1 = s.n, s.hidden, s.o4, s.rows, s.cb, s.psl, s.span, s.ps, s.ks, s.k1
    slices, kp, k2, nt, ug, zero, last, sentinel = s.slices, s.kp, s.k2, s.nt, s.ug, s.zero, s.last, s.sentinel

    @T.macro
    def split_body(X, W1, B1, W2, B2, Part, Tickets, G, Wdw, Bdw, D):
        for b in T.thread_binding(n * slices, thread="blockIdx.x"):
            with T.sblock("slice"):
                vb = T.axis.spatial(n * slices, b)
                partial = T.sblock_alloc_buffer((ps, cb, 4), "float32", scope="shared")
                part2 = T.sblock_alloc_buffer((ks, cb, 4), "float32", scope="shared")
                P = T.sblock_alloc_buffer((cb * 4,), "float32", scope="shared")
                H1 = T.sblock_alloc_buffer((rows, k1), "float32", scope="shared")
                ticket = T.sblock_alloc_buffer((1,), "int32", scope="shared")
                H2 = T.sblock_alloc_buffer((hidden, kp), "float32", scope="shared")
                H = T.sblock_alloc_buffer((hidden,), "float32", scope="shared")
                Y2 = T.sblock_alloc_buffer((k2, o4, 4), "float32", scope="shared")
                # 1-3a. this work group's pool and its channels' share of the first layer
                pool(X, partial, part2, P, vb // slices, (vb % slices) // psl * cb, (vb % slices) % psl * span, Wdw, Bdw, D)
                first_layer(W1, P, H1, 0, (vb % slices) // psl * cb * 4)
                # 3b. its partial sums to global memory, each item fencing its stores before the barrier
                for t in T.thread_binding(nt, thread="threadIdx.x"):
                    with T.sblock("partials"):
                        s = T.sblock_alloc_buffer((1,), "float32", scope="local")
                        for r in T.serial(-(-hidden // nt)):
                            if r * nt + t < hidden:
                                s[0] = zero
                                for k in range(k1):
                                    s[0] = s[0] + H1[r * nt + t, k]
                                Part[vb // slices, vb % slices, r * nt + t] = s[0]
                        T.evaluate(T.call_extern("void", "mem_fence", T.int32(FENCE_FLAGS)))
                T.evaluate(T.tvm_storage_sync("shared"))
                # its ticket: the last one to be drawn sees every other group's partial sums written
                for t in T.thread_binding(nt, thread="threadIdx.x"):
                    with T.sblock("ticket"):
                        drawn = T.sblock_alloc_buffer((1,), "int32", scope="local")
                        if t == 0:
                            drawn[0] = T.call_extern("int32", "atomic_inc", T.address_of(Tickets[vb // slices]))
                            ticket[0] = drawn[0]
                            if drawn[0] == last:  # every ticket is drawn: the next launch starts from 0
                                T.evaluate(T.call_extern("int32", "atomic_xchg", T.address_of(Tickets[vb // slices]), 0))
                # 5. the last group: the slices' partial sums of hidden unit j, items k, k + kp, ...
                for t in T.thread_binding(nt, thread="threadIdx.x"):
                    with T.sblock("gather"):
                        s = T.sblock_alloc_buffer((1,), "float32", scope="local")
                        v = T.sblock_alloc_buffer((ug,), "float32", scope="local")
                        go = T.sblock_alloc_buffer((1,), "int32", scope="local")
                        go[0] = ticket[0]
                        if go[0] == last:
                            for r in T.serial(-(-(hidden * kp) // nt)):
                                if (r * nt + t) // kp < hidden:
                                    s[0] = zero
                                    for q in T.serial(-(-slices // (kp * ug))):
                                        # taken from where atomics meet (NVIDIA: L2), the sentinel left, ug in flight
                                        for i in T.unroll(ug):
                                            if (q * ug + i) * kp + (r * nt + t) % kp < slices:
                                                v[i] = T.call_extern("float32", "atomic_xchg", T.address_of(Part[vb // slices, (q * ug + i) * kp + (r * nt + t) % kp, (r * nt + t) // kp]), sentinel)
                                        for i in T.unroll(ug):
                                            if (q * ug + i) * kp + (r * nt + t) % kp < slices:
                                                # a store still on its way: the sentinel, taken again till it lands
                                                while T.call_extern("int32", "as_int", v[i]) == PARTIAL_SENTINEL:
                                                    v[i] = T.call_extern("float32", "atomic_xchg", T.address_of(Part[vb // slices, (q * ug + i) * kp + (r * nt + t) % kp, (r * nt + t) // kp]), sentinel)
                                                s[0] = s[0] + v[i]
                                    H2[(r * nt + t) // kp, (r * nt + t) % kp] = s[0]
                hidden_units(H2, H, B1, ticket, kp)
                excite(W2, B2, H, Y2, G, ticket, vb // slices)

    return split_body


def _split_func(s, split_body):
    """The kernel of :func:`~primfuncs.excite.excitation_split`, or with ``dw`` of :func:`~primfuncs.excite.depthwise_excitation`."""
    n, c4, h, w, hidden, dtype, scope, dw, o4, slices = s.n, s.c4, s.h, s.w, s.hidden, s.dtype, s.scope, s.dw, s.o4, s.slices

    if dw is None:
        @T.prim_func(s_tir=True)
        def spread(x: T.handle, w1: T.handle, b1: T.handle, w2: T.handle, b2: T.handle, part: T.handle, tick: T.handle, g: T.handle):
            T.func_attr({"global_symbol": "excitation_split", "tirx.noalias": True})
            X = T.match_buffer(x, (n, c4, h, w, 4), dtype, scope=scope)
            W1 = T.match_buffer(w1, (hidden, c4 * 4), "float32")
            B1 = T.match_buffer(b1, (hidden,), "float32")
            W2 = T.match_buffer(w2, (hidden, o4 * 4), "float32")
            B2 = T.match_buffer(b2, (o4, 4), "float32")
            Part = T.match_buffer(part, (n, slices, hidden), "float32")
            Tickets = T.match_buffer(tick, (n,), "int32")
            G = T.match_buffer(g, (n, o4, 1, 1, 4), dtype, scope=scope)
            split_body(X, W1, B1, W2, B2, Part, Tickets, G, X, X, X)

        return spread

    geom = dw.geometry

    @T.prim_func(s_tir=True)
    def fused(x: T.handle, wdw: T.handle, bdw: T.handle, w1: T.handle, b1: T.handle, w2: T.handle, b2: T.handle, part: T.handle,
              tick: T.handle, d: T.handle, g: T.handle):
        T.func_attr({"global_symbol": "depthwise_excitation", "tirx.noalias": True})
        X = T.match_buffer(x, dw.input.shape(geom, geom.h, geom.w), dtype, scope=scope)
        Wdw = T.match_buffer(wdw, (c4, 1, geom.kh, geom.kw, 4), "float32")
        Bdw = T.match_buffer(bdw, (c4, 4), "float32")
        W1 = T.match_buffer(w1, (hidden, c4 * 4), "float32")
        B1 = T.match_buffer(b1, (hidden,), "float32")
        W2 = T.match_buffer(w2, (hidden, o4 * 4), "float32")
        B2 = T.match_buffer(b2, (o4, 4), "float32")
        Part = T.match_buffer(part, (n, slices, hidden), "float32")
        Tickets = T.match_buffer(tick, (n,), "int32")
        D = T.match_buffer(d, (n, c4, h, w, 4), dtype, scope=dw.out_scope)
        G = T.match_buffer(g, (n, o4, 1, 1, 4), dtype, scope=dw.out_scope)
        split_body(X, W1, B1, W2, B2, Part, Tickets, G, Wdw, Bdw, D)

    return fused
