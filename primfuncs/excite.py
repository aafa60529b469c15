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

from . import excite_body
from ._common import LANES, TEXTURE, check_channels, check_dtype, check_positive, check_scope, check_slices, nchw4c
from .conv.geometry import InputLayout, conv2d_geometry
from .epilogue import ACTIVATIONS, Epilogue, activate
from .excite_body import PARTIAL_SENTINEL  # re-exported: the rules and tests name it here

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




def depthwise_excitation(data_shape, weight_shape, hidden: int, out_channels: int, strides=1, padding=0, dilation=1,
                         dw_epilogue: Epilogue = Epilogue(), activation: str | None = "relu", gate: str | None = "sigmoid",
                         bounds=(0.0, 6.0), gate_bounds=(0.0, 6.0), dtype: str = "float32", scope: str = TEXTURE,
                         out_scope: str | None = None, threads: int = THREADS, channel_blocks: int = 1, pixel_slices: int = 1,
                         loads: int | None = None, data_layout: str = "NCHW4c"):
    """A depthwise conv (multiplier 1, NCHW ``data_shape``, weights ``(C, 1, KH, KW)``, its
    ``dw_epilogue``: bias, activation) and the excitation of its output in one launch: the work
    groups of :func:`excitation_split` (``channel_blocks`` x a slice of the output pixels each)
    compute the depthwise output pixels they pool instead of loading them, write them to ``D``
    (``[N, C/4, OH, OW, 4]``, padded lanes 0) and sum them; the rest is :func:`excitation_split`'s
    (partial first-layer sums, the ticket, the last work group writes the gate ``G``; ``loads`` as there).
    Arguments ``X, W_dw, Bias_dw, W1, b1, W2, b2, partials, tickets, D, G``: ``W_dw``
    ``(C/4, 1, KH, KW, 4)`` and ``Bias_dw`` ``(C/4, 4)`` float32 buffers (zero where there is no
    bias), the rest as :func:`excitation_split` takes them. ``X`` in ``scope``, ``D`` and ``G`` in
    ``out_scope`` (default ``scope``). ``data_layout`` "NCHW" or "NHWC": ``X`` is a plain
    ``[N, C, H, W]`` or ``[N, H, W, C]`` buffer (``scope`` "global"), read in place as the direct
    depthwise conv reads one (a map held plain: no layout kernel before it). Float32 arithmetic
    (half images of the float32 kernel, float16_acc32: the pool sums the depthwise outputs before
    they are rounded to half)."""
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
    reads = InputLayout(geom, data_layout, scope)
    out_scope = check_scope(out_scope or scope)
    shape = (geom.n, geom.c4, geom.oh, geom.ow, LANES)  # the pooled map: the depthwise output
    _check_split(shape, hidden, out_channels, gate, channel_blocks, pixel_slices)
    return _pooled_mlp(shape, geom.c, hidden, out_channels, activation, gate, bounds, gate_bounds, dtype, scope, threads, 1,
                       (channel_blocks, pixel_slices, _split_loads(loads)), excite_body.Depthwise(geom, dw_epilogue, out_scope, reads))


def split_slices(c4: int, pixels: int, channel_blocks: int, pixel_slices: int) -> int:
    """Work groups per sample of :func:`excitation_split`."""
    return -(-c4 // channel_blocks) * pixel_slices


#: ``mem_fence`` flags of the split excitation's partial sums: OpenCL's ``CLK_LOCAL_MEM_FENCE |
#: CLK_GLOBAL_MEM_FENCE`` (1 | 2 in the Khronos headers; TIR has no name for them). OpenCL 2.0
#: defines ``mem_fence`` at work-group scope, and NVIDIA's compiler emits ``membar.cta`` for it
#: (measured on the H200): no device-wide fence, hence :data:`PARTIAL_SENTINEL`.

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
                split=None, dw: "excite_body.Depthwise | None" = None, head=(1, None)):
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

    # every size above by its name: each macro builder of excite_body unpacks the ones it reads
    return excite_body.build(SimpleNamespace(**{k: v for k, v in locals().items() if k not in ("shape", "head")}))
