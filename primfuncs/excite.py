"""The excitation of a squeeze-excitation block as one kernel: the pool and the two 1x1 convs.

A squeeze-excitation (SE) block pools a feature map ``X`` to ``P = mean_hw(X)`` (``[N, C, 1, 1]``),
computes the gate ``G = gate(W2 @ act(W1 @ P + b1) + b2)`` (``[N, O, 1, 1]``, ``O = C`` in an SE
block) and multiplies the feature map by it. The two 1x1 convs are tiny (a few thousand to a few
hundred thousand multiply-adds) but were a launch each, and the pool a third; here all of it is
one work group of ``T`` items per sample, four steps with a barrier between each:

1. the pool: the items split into ``slices`` pixel slices x ``T / slices`` channel-block slices
   (:func:`pool_split`); each sums its pixels of its channel blocks into shared partial sums;
2. the means: item ``t`` adds the partial sums of channel blocks ``t, t + T, ...`` into ``P``;
3. the hidden layer: item ``t`` computes units ``t, t + T, ...``:
   ``H[j] = act(b1[j] + sum_c W1[j, c] P[c])`` into shared memory;
4. the gate: item ``t`` computes output blocks ``t, t + T, ...`` of four channels from all of ``H``
   and writes them: ``G[o] = gate(b2[o] + sum_j W2[o, j] H[j])``.

A ``[N, C, 1, 1]`` input is a vector pooled already (the SE rule's form when the pool has other
users). Weights and biases are float32 buffers (``W1: (S, C4 * 4)``, ``b1: (S,)``,
``W2: (O4 * 4, S)``, ``b2: (O4, 4)``, zero padded) and the arithmetic is float32 whatever the
activations' dtype. Padded input lanes never reach a sum; padded output lanes are written as 0.
"""

from __future__ import annotations

from tvm.script import tirx as T

from ._common import LANES, TEXTURE, check_channels, check_dtype, check_positive, check_scope, load_pixel, store_pixel
from .epilogue import ACTIVATIONS, activate

#: Work items of the one work group per sample.
THREADS = 64
#: Partial pool sums (pixels of 4 floats) in shared memory: 16 KiB.
SHARED_PIXELS = 1024


def _check_nchw4c(shape) -> tuple[int, int, int, int]:
    shape = tuple(int(d) for d in shape)
    if len(shape) != 5 or shape[4] != LANES:
        raise ValueError(f"shape must be NCHW4c (N, C4, H, W, 4), got {shape}")
    return shape[:4]


def pool_split(c4: int, pixels: int, threads: int = THREADS) -> tuple[int, int]:
    """(pixel slices, channel slices) of the pool step's work items: as many pixel slices as the
    shared partial sums allow (``slices x C4`` pixels of float32 in at most 16 KiB), the rest of
    the work group over channel blocks."""
    slices = max(1, min(threads, SHARED_PIXELS // c4, pixels))
    return slices, max(1, threads // slices)


def _check_activation(name: str, value) -> None:
    if value not in ACTIVATIONS:
        raise ValueError(f"{name} must be one of {ACTIVATIONS}, got {value!r}")


def excitation(shape, channels: int, hidden: int, out_channels: int, activation: str | None = "relu",
               gate: str | None = "sigmoid", bounds=(0.0, 6.0), gate_bounds=(0.0, 6.0), dtype: str = "float32",
               scope: str = TEXTURE, threads: int = THREADS):
    """``G = gate(W2 @ activation(W1 @ mean_hw(X) + b1) + b2)`` per sample of the NCHW4c feature map
    ``shape`` holding ``channels``; ``hidden`` units, ``out_channels`` outputs (NCHW4c
    ``[N, out_channels, 1, 1]``); ``bounds``/``gate_bounds``: the clip bounds when an activation is
    ``"clip"``. A ``[N, C, 1, 1]`` input is an already pooled vector (the mean of one pixel)."""
    n, c4, h, w = _check_nchw4c(shape)
    check_positive(N=n, C4=c4, H=h, W=w, hidden=hidden, out_channels=out_channels, threads=threads)
    check_channels(c4, channels)
    _check_activation("activation", activation)
    _check_activation("gate", gate)
    check_dtype(dtype)
    check_scope(scope)
    o4 = -(-out_channels // LANES)
    ps, cs = pool_split(c4, h * w, threads)
    nt = threads
    zero = T.FloatImm("float32", 0.0)
    inv_pixels = T.FloatImm("float32", 1.0 / (h * w))

    def act(x):
        return activate(x, activation, "float32", *bounds)

    def gated(x):
        return activate(x, gate, "float32", *gate_bounds)

    @T.prim_func(s_tir=True)
    def func(x: T.handle, w1: T.handle, b1: T.handle, w2: T.handle, b2: T.handle, g: T.handle):
        T.func_attr({"global_symbol": "excitation", "tirx.noalias": True})
        X = T.match_buffer(x, (n, c4, h, w, 4), dtype, scope=scope)
        W1 = T.match_buffer(w1, (hidden, c4 * 4), "float32")
        B1 = T.match_buffer(b1, (hidden,), "float32")
        W2 = T.match_buffer(w2, (o4 * 4, hidden), "float32")
        B2 = T.match_buffer(b2, (o4, 4), "float32")
        G = T.match_buffer(g, (n, o4, 1, 1, 4), dtype, scope=scope)
        for b in T.thread_binding(n, thread="blockIdx.x"):
            with T.sblock("sample"):
                vn = T.axis.spatial(n, b)
                partial = T.sblock_alloc_buffer((ps, c4, 4), "float32", scope="shared")
                P = T.sblock_alloc_buffer((c4, 4), "float32", scope="shared")
                H = T.sblock_alloc_buffer((hidden,), "float32", scope="shared")
                # 1. the pool: item t sums pixels t % ps, t % ps + ps, ... of channel blocks t // ps, + cs, ...
                for t in T.thread_binding(nt, thread="threadIdx.x"):
                    with T.sblock("pool"):
                        px = T.sblock_alloc_buffer((4,), dtype, scope="local")
                        acc = T.sblock_alloc_buffer((4,), "float32", scope="local")
                        for r in T.serial(-(-c4 // cs)):
                            if t < ps * cs and r * cs + t // ps < c4:
                                for lane in T.unroll(4):
                                    acc[lane] = zero
                                for q in T.serial(-(-(h * w) // ps)):
                                    if q * ps + t % ps < h * w:
                                        load_pixel(px, X, vn, r * cs + t // ps, (q * ps + t % ps) // w, (q * ps + t % ps) % w)
                                        for lane in T.unroll(4):
                                            acc[lane] = acc[lane] + T.Cast("float32", px[lane])
                                for lane in T.unroll(4):
                                    partial[t % ps, r * cs + t // ps, lane] = acc[lane]
                # 2. the means of the channel blocks t, t + nt, ...
                for t in T.thread_binding(nt, thread="threadIdx.x"):
                    with T.sblock("mean"):
                        sums = T.sblock_alloc_buffer((4,), "float32", scope="local")
                        for r in T.serial(-(-c4 // nt)):
                            if r * nt + t < c4:
                                for lane in T.unroll(4):
                                    sums[lane] = zero
                                for k in range(ps):
                                    for lane in T.unroll(4):
                                        sums[lane] = sums[lane] + partial[k, r * nt + t, lane]
                                for lane in T.unroll(4):
                                    P[r * nt + t, lane] = sums[lane] * inv_pixels
                # 3. the hidden layer, units t, t + nt, ...
                for t in T.thread_binding(nt, thread="threadIdx.x"):
                    with T.sblock("squeeze"):
                        s = T.sblock_alloc_buffer((1,), "float32", scope="local")
                        for r in T.serial(-(-hidden // nt)):
                            if r * nt + t < hidden:
                                s[0] = B1[r * nt + t]
                                for cb in range(c4):
                                    for lane in T.unroll(4):
                                        s[0] = s[0] + T.Select(cb * 4 + lane < channels, W1[r * nt + t, cb * 4 + lane] * P[cb, lane], zero)
                                H[r * nt + t] = act(s[0])
                # 4. the gate, output blocks t, t + nt, ..., from all hidden units
                for t in T.thread_binding(nt, thread="threadIdx.x"):
                    with T.sblock("excite"):
                        y = T.sblock_alloc_buffer((4,), "float32", scope="local")
                        for r in T.serial(-(-o4 // nt)):
                            if r * nt + t < o4:
                                for lane in T.unroll(4):
                                    y[lane] = B2[r * nt + t, lane]
                                for j in range(hidden):
                                    for lane in T.unroll(4):
                                        y[lane] = y[lane] + W2[(r * nt + t) * 4 + lane, j] * H[j]
                                for lane in T.unroll(4):
                                    y[lane] = T.Select((r * nt + t) * 4 + lane < out_channels, gated(y[lane]), zero)
                                store_pixel(G, vn, r * nt + t, 0, 0, y)

    return func
