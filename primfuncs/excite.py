"""The excitation of a squeeze-excitation block as one kernel: the pool and the two 1x1 convs.

A squeeze-excitation (SE) block pools a feature map ``X`` to ``P = mean_hw(X)`` (``[N, C, 1, 1]``),
computes the gate ``G = gate(W2 @ act(W1 @ P + b1) + b2)`` (``[N, O, 1, 1]``, ``O = C`` in an SE
block) and multiplies the feature map by it. The two 1x1 convs are tiny (a few thousand to a few
hundred thousand multiply-adds) but were a launch each, and the pool a third; here all of it is
one work group of ``T`` items per sample, steps with a barrier between each:

1. the pool: the items split into ``slices`` pixel slices x ``T / slices`` channel-block slices
   (:func:`pool_split`); each sums its pixels of its channel blocks (``UNROLL`` loads in flight)
   into shared partial sums, then the slices' sums are added in two levels (:func:`mean_split`)
   into ``P``, padded lanes 0;
2. the hidden layer ``H[j] = act(b1[j] + sum_c W1[j, c] P[c])``: ``split`` items per unit each sum
   every ``split``-th channel (:func:`row_split`; neighbouring items read neighbouring weights),
   then one item per unit adds the ``split`` partial sums;
3. the gate: item ``t`` computes output blocks ``t, t + T, ...`` of four channels from all of ``H``
   (reading four neighbouring ``W2`` columns per unit, as neighbouring items do) and writes them:
   ``G[o] = gate(b2[o] + sum_j W2[j, o] H[j])``.

:func:`pooled_pointwise` is steps 1 and 2 alone with the second layer's output written: a 1x1 conv
(+ bias, activation) on the mean of a map, such as a classifier head's first conv after its
global pool, its output channels spread over ``groups`` work groups per sample, each pooling the
(small) map itself.

:func:`excitation_split` spreads the same steps over work groups for wide GPUs (one launch; the
last work group to draw a ticket finishes), and :func:`depthwise_excitation` is that kernel with
the depthwise conv whose output it pools: its work groups compute the depthwise output pixels of
their slice (written to their own output too) where they would load them.

A ``[N, C, 1, 1]`` input is a vector pooled already (the SE rule's form when the pool has other
users). Weights and biases are float32 buffers (``W1: (S, C4 * 4)``, ``b1: (S,)``,
``W2: (S, O4 * 4)``, ``b2: (O4, 4)``, zero padded) and the arithmetic is float32 whatever the
activations' dtype. Padded input lanes never reach a sum; padded output lanes are written as 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from tvm.script import tirx as T

from ._common import LANES, TEXTURE, check_channels, check_dtype, check_positive, check_scope, check_slices, nchw4c, store_pixel
from .conv.direct_body import input_macros
from .conv.geometry import ConvGeometry, ConvWindow, InputLayout, conv2d_geometry
from .epilogue import ACTIVATIONS, Epilogue, activate, store_output_pixel

#: Work items of the one work group per sample (CPU OpenCL; the strategy picks more on GPUs).
THREADS = 64
#: Partial pool sums (pixels of 4 floats) in shared memory: 16 KiB.
SHARED_PIXELS = 1024
#: Pixels each pool item loads before it adds them: loads in flight on a GPU.
UNROLL = 4
#: At most this many items share one unit's sum (a warp's reads of one weight row).
MAX_SPLIT = 32
#: Global loads each item of a split excitation (:func:`excitation_split`,
#: :func:`depthwise_excitation`) issues before it adds them, where a loop of dependent adds would
#: otherwise wait for one load at a time: its share of the first layer (``W1``), the last work
#: group's gather of the partial sums and its second layer (``W2``, read by that one work group).
#: 1: one load in flight per item (the kernel before issue 21's tail change; the one-work-group
#: kernels keep that form: their OpenCL is unchanged). The factories' ``loads`` default (None) is
#: this value when called; ``strategy.pool`` passes it explicitly (kernels are keyed by their arguments).
SPLIT_LOADS = 4


def _check_nchw4c(shape) -> tuple[int, int, int, int]:
    return nchw4c(shape)[:4]


def pool_split(c4: int, pixels: int, threads: int = THREADS) -> tuple[int, int]:
    """(pixel slices, channel slices) of the pool step's work items: as many pixel slices as the
    shared partial sums allow (``slices x C4`` pixels of float32 in at most 16 KiB), the rest of
    the work group over channel blocks."""
    slices = max(1, min(threads, SHARED_PIXELS // c4, pixels))
    return slices, max(1, threads // slices)


def _pow2_floor(x: int) -> int:
    return 1 << (max(1, x).bit_length() - 1)


def mean_split(c4: int, slices: int, threads: int = THREADS) -> int:
    """Items per channel block adding the pool's ``slices`` partial sums (first level): the work
    group over the channel blocks, at most ``slices``, their sums in at most 4 KiB."""
    return max(1, min(slices, threads // c4, SHARED_PIXELS // 4 // c4))


def row_split(rows: int, length: int, threads: int = THREADS) -> int:
    """Items per row of a ``rows x length`` matrix-vector product: a power of two, at most
    :data:`MAX_SPLIT` and ``length``, with ``rows x split`` within the work group when it can."""
    return max(1, min(MAX_SPLIT, _pow2_floor(threads // rows) if rows <= threads else 1, _pow2_floor(length)))


def shared_bytes(c4: int, pixels: int, rows: int, threads: int = THREADS) -> int:
    """Shared (local) memory of a work group pooling ``c4`` channel blocks of ``pixels`` pixels and
    computing ``rows`` first-layer rows: the pool's partial sums, their first-level sums, the
    means, the rows' partial sums and the rows."""
    ps, _ = pool_split(c4, pixels, threads)
    ks = mean_split(c4, ps, threads)
    k1 = row_split(rows, 4 * c4, threads)
    return 4 * (4 * c4 * (ps + ks + 1) + rows * (k1 + 1))


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
    check_positive(hidden=hidden, out_channels=out_channels)
    _check_activation("gate", gate)
    return _pooled_mlp(shape, channels, hidden, out_channels, activation, gate, bounds, gate_bounds, dtype, scope, threads, 1)


@dataclass(frozen=True)
class VectorNorm:
    """The layer norm over the channels of :func:`pooled_pointwise`'s vector before its 1x1 conv
    (EfficientViT's LayerNorm -> Hardswish -> Linear, ConvNeXt's pool -> LayerNorm -> Linear):
    ``activation((P - mean) / sqrt(var + epsilon) * Gamma + Beta)`` (``Gamma``/``Beta`` with any
    per-channel steps after the norm folded in; ``bounds``: the clip bounds of a ``"clip"``)."""

    epsilon: float
    activation: str | None = None
    bounds: tuple = (0.0, 6.0)


#: Work items of :func:`pooled_pointwise`'s layer norm statistics (:class:`VectorNorm`): each sums
#: every ``NORM_ITEMS``-th channel, then one item adds their sums in order.
NORM_ITEMS = 32


def pooled_pointwise(shape, channels: int, out_channels: int, activation: str | None = None, bounds=(0.0, 6.0),
                     dtype: str = "float32", scope: str = TEXTURE, threads: int = THREADS, groups: int = 1,
                     unroll: int = 1, norm: VectorNorm | None = None):
    """``Y = activation(W @ mean_hw(X) + b)`` per sample of the NCHW4c feature map ``shape`` holding
    ``channels``: a 1x1 conv of ``out_channels`` on the global average pool (NCHW4c
    ``[N, out_channels, 1, 1]``; ``W: (O4 * 4, C4 * 4)``, ``b: (O4 * 4,)``), its output blocks
    split over ``groups`` work groups per sample, each pooling the whole map. A ``[N, C, 1, 1]``
    ``shape`` is the vector itself: a matrix-vector product (a classifier's Linear).

    ``unroll`` > 1 (the wide GPUs' head GEMV): the conv's items read four neighbouring weights
    (one float4) per step, ``unroll`` such loads in flight before they are added; 1: one weight
    per step (the form CPU OpenCL and mobile GPUs run). ``norm`` (:class:`VectorNorm`): the pooled
    vector is layer normalized over its channels first (float32 statistics, two passes, every
    work group computing them itself), scaled and shifted by ``Gamma``/``Beta`` (float32
    ``(C4 * 4,)`` buffers, zero padded; arguments ``X, Gamma, Beta, W, b, Y``) and activated."""
    check_positive(unroll=unroll)
    if norm is not None:
        if not isinstance(norm, VectorNorm):
            raise ValueError(f"norm must be a VectorNorm, got {norm!r}")
        _check_activation("norm activation", norm.activation)
        if not norm.epsilon >= 0:
            raise ValueError(f"norm epsilon must be >= 0, got {norm.epsilon}")
    return _pooled_mlp(shape, channels, out_channels, None, activation, None, bounds, (0.0, 6.0), dtype, scope, threads, groups,
                       head=(unroll, norm))


def excitation_split(shape, channels: int, hidden: int, out_channels: int, activation: str | None = "relu",
                     gate: str | None = "sigmoid", bounds=(0.0, 6.0), gate_bounds=(0.0, 6.0), dtype: str = "float32",
                     scope: str = TEXTURE, threads: int = THREADS, channel_blocks: int = 1, pixel_slices: int = 1,
                     loads: int | None = None):
    """:func:`excitation` spread over ``ceil(C4 / channel_blocks) x pixel_slices`` work groups per
    sample (one launch; for wide GPUs, where one work group per sample leaves all compute units
    but one idle). Work group ``s`` pools its ``channel_blocks`` channel blocks over its slice of
    the pixels (:func:`~primfuncs._common.equal_slices`) and writes its share of the first layer,
    ``W1[:, its channels] @ its pool`` (``hidden`` partial sums), to ``partials[n, s]``; then,
    after a memory fence and a barrier, it takes a ticket (``atomic_inc(tickets[n])``). The work group
    that draws the last ticket, all others' partial sums being written, adds them (bias,
    activation) and computes the gate as :func:`excitation` does; it resets ``tickets[n]`` to 0
    for the next launch (CUDA's threadFenceReduction; no work group waits for another, so none
    needs the others resident; the partial sums are taken with atomics: :data:`PARTIAL_SENTINEL`).
    Arguments ``X, W1, b1, W2, b2, partials, tickets, G``: ``partials`` float32
    ``(N, slices, hidden)`` filled with :data:`PARTIAL_SENTINEL`'s bits, ``tickets`` int32
    ``(N,)`` zero, before the first launch; each launch leaves them so. ``loads``: global loads in
    flight per item where an item's sums would wait on one at a time (default :data:`SPLIT_LOADS`)."""
    _check_split(shape, hidden, out_channels, gate, channel_blocks, pixel_slices)
    return _pooled_mlp(shape, channels, hidden, out_channels, activation, gate, bounds, gate_bounds, dtype, scope, threads, 1,
                       (channel_blocks, pixel_slices, _split_loads(loads)))


def _split_loads(loads: int | None) -> int:
    loads = SPLIT_LOADS if loads is None else loads
    check_positive(loads=loads)
    return loads


def _check_split(shape, hidden, out_channels, gate, channel_blocks, pixel_slices) -> None:
    """The arguments of a split excitation of the NCHW4c map ``shape``, ValueError naming the culprit."""
    check_positive(hidden=hidden, out_channels=out_channels, channel_blocks=channel_blocks)
    _check_activation("gate", gate)
    n, c4, h, w = _check_nchw4c(shape)
    if channel_blocks > c4:
        raise ValueError(f"channel_blocks={channel_blocks} exceeds the input's {c4} channel blocks")
    check_slices(h * w, pixel_slices, "the pixels")


@dataclass(frozen=True)
class _Depthwise:
    """The depthwise conv (multiplier 1) of :func:`depthwise_excitation`: its geometry, its
    epilogue (bias, activation) and the scope of its output ``D`` (and of the gate)."""

    geometry: ConvGeometry
    epilogue: Epilogue
    out_scope: str

    def pixel_macro(self, channels: int):
        """``depthwise_pixel``: ``px[i]`` = output pixel ``(oh, ow)`` of channel block ``cb``, the
        window tap by tap (each input pixel read as the direct conv reads it: clamped, 0 in the
        padding), the epilogue applied, padded lanes 0, stored to ``D``."""
        geom, epilogue, win = self.geometry, self.epilogue, ConvWindow(self.geometry, 1, 1)
        load_pixel = input_macros(SimpleNamespace(win=win, zero=T.FloatImm("float32", 0.0),
                                                  input=InputLayout(geom, "NCHW4c", TEXTURE)))[0]

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


def depthwise_excitation(data_shape, weight_shape, hidden: int, out_channels: int, strides=1, padding=0, dilation=1,
                         dw_epilogue: Epilogue = Epilogue(), activation: str | None = "relu", gate: str | None = "sigmoid",
                         bounds=(0.0, 6.0), gate_bounds=(0.0, 6.0), dtype: str = "float32", scope: str = TEXTURE,
                         out_scope: str | None = None, threads: int = THREADS, channel_blocks: int = 1, pixel_slices: int = 1,
                         loads: int | None = None):
    """A depthwise conv (multiplier 1, NCHW ``data_shape``, weights ``(C, 1, KH, KW)``, its
    ``dw_epilogue``: bias, activation) and the excitation of its output in one launch: the work
    groups of :func:`excitation_split` (``channel_blocks`` x a slice of the output pixels each)
    compute the depthwise output pixels they pool instead of loading them, write them to ``D``
    (``[N, C/4, OH, OW, 4]``, padded lanes 0) and sum them; the rest is :func:`excitation_split`'s
    (partial first-layer sums, the ticket, the last work group writes the gate ``G``; ``loads`` as there).
    Arguments ``X, W_dw, Bias_dw, W1, b1, W2, b2, partials, tickets, D, G``: ``W_dw``
    ``(C/4, 1, KH, KW, 4)`` and ``Bias_dw`` ``(C/4, 4)`` float32 buffers (zero where there is no
    bias), the rest as :func:`excitation_split` takes them. ``X`` in ``scope``, ``D`` and ``G`` in
    ``out_scope`` (default ``scope``). Float32 arithmetic (half images of the float32 kernel,
    float16_acc32: the pool sums the depthwise outputs before they are rounded to half)."""
    data_shape = tuple(int(d) for d in data_shape)
    if len(data_shape) != 4:
        raise ValueError(f"data_shape must be NCHW (4-d), got {data_shape}")
    geom = conv2d_geometry(data_shape, weight_shape, strides, padding, dilation, groups=data_shape[1])
    if geom.o != geom.c:
        raise ValueError(f"weight_shape {tuple(weight_shape)} must have O = C = {geom.c} (depthwise multiplier 1)")
    if not isinstance(dw_epilogue, Epilogue) or dw_epilogue.residual:
        raise ValueError(f"dw_epilogue must be an Epilogue without residual, got {dw_epilogue!r}")
    if dtype != "float32":
        raise TypeError(f"dtype must be float32 (half images of this float32 kernel: float16_acc32), got {dtype!r}")
    check_scope(scope)
    out_scope = check_scope(out_scope or scope)
    shape = (geom.n, geom.c4, geom.oh, geom.ow, LANES)  # the pooled map: the depthwise output
    _check_split(shape, hidden, out_channels, gate, channel_blocks, pixel_slices)
    return _pooled_mlp(shape, geom.c, hidden, out_channels, activation, gate, bounds, gate_bounds, dtype, scope, threads, 1,
                       (channel_blocks, pixel_slices, _split_loads(loads)), _Depthwise(geom, dw_epilogue, out_scope))


def split_slices(c4: int, pixels: int, channel_blocks: int, pixel_slices: int) -> int:
    """Work groups per sample of :func:`excitation_split`."""
    return -(-c4 // channel_blocks) * pixel_slices


#: ``mem_fence`` flags of the split excitation's partial sums: OpenCL's ``CLK_LOCAL_MEM_FENCE |
#: CLK_GLOBAL_MEM_FENCE`` (1 | 2 in the Khronos headers; TIR has no name for them). OpenCL 2.0
#: defines ``mem_fence`` at work-group scope, and NVIDIA's compiler emits ``membar.cta`` for it
#: (measured on the H200): no device-wide fence, hence :data:`PARTIAL_SENTINEL`.
FENCE_FLAGS = 3
#: Bits of the float32 NaN that marks a partial sum not written yet (not a NaN arithmetic makes):
#: the last work group takes each partial sum with ``atomic_xchg(p, sentinel)`` (at the point of
#: coherence, resetting it for the next launch) and takes it again while it reads the sentinel,
#: so a store still on its way is waited for, never read stale; every other work group having
#: stored its partial sums before its ticket, the wait ends whatever the scheduling.
PARTIAL_SENTINEL = 0x7FC0DEAD


def split_second(o4: int, hidden: int, threads: int) -> int:
    """Items per output block of the split excitation's gate (each sums every ``k``-th hidden
    unit): the work items over the blocks, at most ``hidden``, their partial sums in at most 16 KiB."""
    return max(1, min(hidden, threads // o4, SHARED_PIXELS // o4))


def split_shared_bytes(c4: int, pixels: int, hidden: int, out4: int, channel_blocks: int, pixel_slices: int,
                       threads: int = THREADS) -> int:
    """Shared (local) memory of a work group of :func:`excitation_split`."""
    span = -(-pixels // pixel_slices)
    slices = split_slices(c4, pixels, channel_blocks, pixel_slices)
    kp = row_split(hidden, slices, threads)
    k2 = split_second(out4, hidden, threads)
    return shared_bytes(channel_blocks, span, hidden, threads) + 4 * (1 + hidden * (kp + 1) + (4 * k2 * out4 if k2 > 1 else 0))


def _pooled_mlp(shape, channels, hidden, out_channels, activation, gate, bounds, gate_bounds, dtype, scope, threads, groups,
                split=None, dw: "_Depthwise | None" = None, head=(1, None)):
    """The kernel of :func:`excitation` (``out_channels`` given), of :func:`excitation_split`
    (``split``: channel blocks and pixel slices per work group, loads in flight), of :func:`depthwise_excitation`
    (``split`` and ``dw``: the pooled map ``shape`` computed by that depthwise conv) or of
    :func:`pooled_pointwise` (``out_channels`` None: the first layer is the output, split over
    ``groups``; ``head``: its ``unroll`` and ``norm``)."""
    n, c4, h, w = _check_nchw4c(shape)
    check_positive(N=n, C4=c4, H=h, W=w, hidden=hidden, threads=threads, groups=groups)
    check_channels(c4, channels)
    _check_activation("activation", activation)
    check_dtype(dtype)
    check_scope(scope)
    second = out_channels is not None
    o4 = -(-(out_channels if second else hidden) // LANES)
    blocks = -(-o4 // groups)  # output blocks of a work group
    rows = hidden if second else 4 * blocks  # first-layer rows of a work group
    w1_rows = hidden if second else 4 * o4
    cb, psl, lu = split or (c4, 1, 1)  # channel blocks and pixel slices of a work group; W1's, W2's loads in flight per item
    span = -(-(h * w) // psl)  # pixels of a work group
    ps, cs = pool_split(cb, span, threads)
    ks = mean_split(cb, ps, threads)
    k1 = row_split(rows, 4 * cb, threads)
    slices = split_slices(c4, h * w, cb, psl)
    kp = row_split(hidden, slices, threads)  # items per hidden unit adding the work groups' partial sums
    k2 = split_second(o4, hidden, threads) if split else 1
    nt, u = threads, UNROLL if dw is None else 1  # a depthwise pixel's taps are its loads in flight
    ug = max(u, lu)  # the gather's partial sums in flight per item
    zero = T.FloatImm("float32", 0.0)
    inv_pixels = T.FloatImm("float32", 1.0 / (h * w))
    is_split = split is not None
    last = slices - 1  # the ticket of the work group that finishes the excitation
    sentinel = T.call_extern("float32", "as_float", T.int32(PARTIAL_SENTINEL))  # OpenCL's reinterpret

    unroll1, norm = head  # the head's float4 weight loads in flight (1: one weight a step), its layer norm
    ns = min(nt, NORM_ITEMS)  # items of the norm's statistics
    count = T.FloatImm("float32", float(channels))

    def act(x):
        return activate(x, activation, "float32", *bounds)

    def gated(x):
        return activate(x, gate, "float32", *gate_bounds)

    depthwise_pixel = None if dw is None else dw.pixel_macro(channels)

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

    first_layer = scalar_layer if unroll1 == 1 else float4_layer

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

    if not second and norm is not None:
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

    if not second:
        @T.prim_func(s_tir=True)
        def head(x: T.handle, w1: T.handle, b1: T.handle, y: T.handle):
            T.func_attr({"global_symbol": "pooled_pointwise", "tirx.noalias": True})
            X = T.match_buffer(x, (n, c4, h, w, 4), dtype, scope=scope)
            W1 = T.match_buffer(w1, (w1_rows, c4 * 4), "float32")
            B1 = T.match_buffer(b1, (w1_rows,), "float32")
            Y = T.match_buffer(y, (n, o4, 1, 1, 4), dtype, scope=scope)
            head_body(X, X, X, W1, B1, Y)

        return head

    if not split:
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
        X = T.match_buffer(x, (n, c4, geom.h, geom.w, 4), dtype, scope=scope)
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
