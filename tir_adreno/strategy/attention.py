"""Attention schedules (``primfuncs.attention``): XCA's and ReLU linear attention's statistics in
one kernel or split over token slices, and a wide GPU's one-launch linear attention."""

from __future__ import annotations

from primfuncs import attention as _attention
from primfuncs._common import ceildiv, equal_slices

from tir_adreno.strategy.profile import DeviceProfile
from tir_adreno.strategy.width import WIDE_GROUPS_PER_UNIT, is_wide


#: Tokens per slice at least in the split attention statistics (``xca_partials``,
#: ``linear_kv_partials``): each work item's loop over its tokens stays long enough to pay for
#: writing its partial sums.
ATTENTION_MIN_TOKENS = 16


def attention_schedule(profile: DeviceProfile, batch_heads: int, tokens: int) -> dict | None:
    """How the statistics of XCA (``primfuncs.attention.xca_weights``) and ReLU linear attention
    (``linear_kv``) over ``tokens`` run for ``batch_heads`` (sample, head) pairs: None for the one
    kernel (one work group per (sample, head), each item walking every token), else on a wide GPU
    (:func:`is_wide`) the split form's keywords: ``slices`` of the tokens (at least
    :data:`ATTENTION_MIN_TOKENS` each) making about :data:`WIDE_GROUPS_PER_UNIT` work groups per
    compute unit in all (partial sums, then a kernel adding them)."""
    if not is_wide(profile):
        return None
    per_pair = ceildiv(WIDE_GROUPS_PER_UNIT * profile.compute_units, batch_heads)
    slices = equal_slices(tokens, min(per_pair, tokens // ATTENTION_MIN_TOKENS))
    return dict(slices=slices) if slices > 1 else None


#: Token slices a wide GPU's one-launch ReLU linear attention (``primfuncs.attention.linear_attention``)
#: keeps at least: fewer (a large ``head_dim`` filling local memory) leave each item walking too
#: many tokens in series, and the split form's many work groups win.
LINEAR_ATTENTION_MIN_SLICES = 4
#: Tokens per slice at most in that kernel: its one work group per (sample, head) walks every token
#: (the split form spreads them over ~4 work groups per compute unit). EfficientViT-B0's maps: 196
#: tokens in 16 slices (13 each), 49 in 16 (4 each).
LINEAR_ATTENTION_MAX_TOKENS_PER_SLICE = 64


def linear_attention_schedule(profile: DeviceProfile, head_dim: int, tokens: int) -> dict | None:
    """How ReLU linear attention runs on a wide GPU (:func:`is_wide`): the one-launch kernel's
    keywords (``linear_attention``'s ``threads``: :data:`primfuncs.attention.LINEAR_ATTENTION_THREADS`
    items, fewer where the work group or local memory is smaller, a multiple of ``head_dim``), else
    None for the kernels of :func:`attention_schedule`. It needs ``head_dim`` a multiple of 4 (an
    output pixel in one head), its local memory (``linear_attention_shared_bytes``: the float32 sums
    of ``threads // head_dim`` slices and ``KV``, ``(slices + 1) * d * (d + 1) * 4`` bytes, whatever
    the tokens) within the profile's ``local_memory_bytes`` with at least
    :data:`LINEAR_ATTENTION_MIN_SLICES` slices, and at most
    :data:`LINEAR_ATTENTION_MAX_TOKENS_PER_SLICE` tokens a slice. On the H200 (48 KiB, 1024 items):
    ``d = 16`` 256 items (18.1 KiB), ``d = 32`` 256 (37.1 KiB), ``d = 48`` 192 (45.9 KiB), ``d = 64``
    none (4 slices need 83 KiB)."""
    d = int(head_dim)
    if not is_wide(profile) or d % 4:
        return None
    threads = min(_attention.LINEAR_ATTENTION_THREADS, profile.max_work_group_size) // d * d
    while threads >= d and _attention.linear_attention_shared_bytes(d, threads) > profile.local_memory_bytes:
        threads -= d
    slices = _attention.linear_attention_slices(d, threads)
    if slices < LINEAR_ATTENTION_MIN_SLICES or ceildiv(tokens, slices) > LINEAR_ATTENTION_MAX_TOKENS_PER_SLICE:
        return None
    return dict(threads=threads)


#: Most multiply-adds (query rows x keys x (head_dim + value_dim)) and most steps an item takes in
#: series (its scores' dot products, then its output columns' sums over the keys) where the one
#: kernel replaces the two GEMMs and the softmax. It reads K and V again for every query row (one
#: work group each) and runs at about 0.36 multiply-adds per ns on an H100 (6 us + 2.8 us per
#: million), where the three launches cost ~15 us and the tiled GEMM runs ~2x faster: measured
#: on the 14 catalogue models it applies to (one lease, stop 55), it won every launch under ~8
#: million (EfficientViT-M0's heads 7.8 us against ~18, LeViT's, PVT-v2's, MobileNetV4's, SHViT's)
#: and lost the bigger ones (DeiT-Tiny's 197 x 197 heads 42 us against ~34, GC ViT's 64 windows
#: 61 us, PiT's 730 tokens 165 us) and the long series (XCiT's class attention, 1 query x 197 keys
#: a head: 325 steps, 14 us).
SOFTMAX_ATTENTION_MAX_MACS = 8_000_000
SOFTMAX_ATTENTION_MAX_STEPS = 320


def softmax_attention_threads(profile: DeviceProfile, rows: int, keys: int, head_dim: int, value_dim: int) -> int | None:
    """The ``threads`` of softmax attention in one kernel (the ``softmax_attention`` pattern) over
    ``rows`` query rows (batch x heads x queries), ``keys`` keys of length ``head_dim`` and values
    of ``value_dim``, else None (the matmul family's three launches): items the next power of two
    of the longer of ``keys`` and ``value_dim`` (each item a score, then an output column), from 16
    to the kernel's ``MAX_THREADS`` and within the profile's work group; a work group's local memory
    (``softmax_attention_shared_bytes`` at ``MAX_THREADS``: the query row, scores, probabilities and
    partials) within the profile's ``local_memory_bytes`` and the kernel's limits (``MAX_KEYS``, ``MAX_HEAD_DIM``); at
    most :data:`SOFTMAX_ATTENTION_MAX_MACS` multiply-adds and :data:`SOFTMAX_ATTENTION_MAX_STEPS`
    steps an item. None with fusion off (``launch_cost_macs`` 0: ``compile_model(fuse=False)``
    keeps every op its own kernel)."""
    most_threads = _attention.SOFTMAX_ATTENTION_MAX_THREADS
    shared = _attention.softmax_attention_shared_bytes(keys, head_dim, most_threads)
    if profile.launch_cost_macs <= 0 or keys > _attention.SOFTMAX_ATTENTION_MAX_KEYS or head_dim > _attention.SOFTMAX_ATTENTION_MAX_HEAD_DIM \
            or shared > profile.local_memory_bytes or rows * keys * (head_dim + value_dim) > SOFTMAX_ATTENTION_MAX_MACS:
        return None
    threads = 16
    while threads < min(max(keys, value_dim), most_threads, profile.max_work_group_size):
        threads *= 2
    steps = ceildiv(keys, threads) * head_dim + ceildiv(value_dim, threads) * keys
    return threads if steps <= SOFTMAX_ATTENTION_MAX_STEPS else None
