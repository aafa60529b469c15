"""The excitation of a squeeze-excitation block as one kernel: two 1x1 convs on a pooled vector.

A squeeze-excitation (SE) block pools a feature map to ``P = [N, C, 1, 1]``, then computes the
gate ``G = gate(W2 @ act(W1 @ P + b1) + b2)`` (``[N, O, 1, 1]``, ``O = C`` in an SE block) and
multiplies the feature map by it. The two 1x1 convs are tiny (a few thousand multiply-adds) but
were two launches each of a full conv kernel; here they are one work group per sample:

1. item ``t`` computes hidden units ``t, t + T, ...``: ``H[j] = act(b1[j] + sum_c W1[j, c] P[c])``
   into shared memory (every item reads the whole of ``P``: ``C / 4`` texture reads);
2. after the barrier, item ``t`` computes output blocks ``t, t + T, ...`` of four channels from
   all of ``H`` and writes them: ``G[o] = gate(b2[o] + sum_j W2[o, j] H[j])``.

Weights and biases are float32 buffers (``W1: (S, C4 * 4)``, ``b1: (S,)``, ``W2: (O4 * 4, S)``,
``b2: (O4, 4)``, zero padded); the arithmetic is float32 whatever the activations' dtype. Padded
input lanes are never read into a sum, padded output lanes are written as 0.
"""

from __future__ import annotations

from tvm.script import tirx as T

from ._common import LANES, TEXTURE, check_channels, check_dtype, check_positive, check_scope, load_pixel, store_pixel
from .epilogue import ACTIVATIONS, activate

#: Work items of the one work group per sample (at most: fewer when both layers are narrower).
THREADS = 64


def _check_vector(shape) -> tuple[int, int]:
    shape = tuple(int(d) for d in shape)
    if len(shape) != 5 or shape[4] != LANES or shape[2:4] != (1, 1):
        raise ValueError(f"shape must be NCHW4c of [N, C, 1, 1] (N, C4, 1, 1, 4), got {shape}")
    return shape[0], shape[1]


def _check_activation(name: str, value) -> None:
    if value not in ACTIVATIONS:
        raise ValueError(f"{name} must be one of {ACTIVATIONS}, got {value!r}")


def excitation(shape, channels: int, hidden: int, out_channels: int, activation: str | None = "relu",
               gate: str | None = "sigmoid", bounds=(0.0, 6.0), gate_bounds=(0.0, 6.0), dtype: str = "float32",
               scope: str = TEXTURE, threads: int = THREADS):
    """``G = gate(W2 @ activation(W1 @ P + b1) + b2)`` per sample of the NCHW4c ``[N, channels, 1, 1]``
    vector ``shape``; ``hidden`` units, ``out_channels`` outputs (NCHW4c ``[N, out_channels, 1, 1]``);
    ``bounds``/``gate_bounds``: the clip bounds when an activation is ``"clip"``."""
    n, c4 = _check_vector(shape)
    check_positive(N=n, C4=c4, hidden=hidden, out_channels=out_channels, threads=threads)
    check_channels(c4, channels)
    _check_activation("activation", activation)
    _check_activation("gate", gate)
    check_dtype(dtype)
    check_scope(scope)
    o4 = -(-out_channels // LANES)
    nt = min(threads, max(hidden, o4))
    zero = T.FloatImm("float32", 0.0)

    def act(x):
        return activate(x, activation, "float32", *bounds)

    def gated(x):
        return activate(x, gate, "float32", *gate_bounds)

    @T.prim_func(s_tir=True)
    def func(p: T.handle, w1: T.handle, b1: T.handle, w2: T.handle, b2: T.handle, g: T.handle):
        T.func_attr({"global_symbol": "excitation", "tirx.noalias": True})
        P = T.match_buffer(p, (n, c4, 1, 1, 4), dtype, scope=scope)
        W1 = T.match_buffer(w1, (hidden, c4 * 4), "float32")
        B1 = T.match_buffer(b1, (hidden,), "float32")
        W2 = T.match_buffer(w2, (o4 * 4, hidden), "float32")
        B2 = T.match_buffer(b2, (o4, 4), "float32")
        G = T.match_buffer(g, (n, o4, 1, 1, 4), dtype, scope=scope)
        for b in T.thread_binding(n, thread="blockIdx.x"):
            with T.sblock("sample"):
                vn = T.axis.spatial(n, b)
                H = T.sblock_alloc_buffer((hidden,), "float32", scope="shared")
                # 1. the hidden layer, units t, t + nt, ... by item t, into shared memory
                for t in T.thread_binding(nt, thread="threadIdx.x"):
                    with T.sblock("squeeze"):
                        px = T.sblock_alloc_buffer((4,), dtype, scope="local")
                        s = T.sblock_alloc_buffer((1,), "float32", scope="local")
                        for r in T.serial(-(-hidden // nt)):
                            if r * nt + t < hidden:
                                s[0] = B1[r * nt + t]
                                for cb in range(c4):
                                    load_pixel(px, P, vn, cb, 0, 0)
                                    for lane in T.unroll(4):
                                        s[0] = s[0] + T.Select(cb * 4 + lane < channels,
                                                               W1[r * nt + t, cb * 4 + lane] * T.Cast("float32", px[lane]), zero)
                                H[r * nt + t] = act(s[0])
                # 2. the gate, output blocks t, t + nt, ... by item t, from all hidden units
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
