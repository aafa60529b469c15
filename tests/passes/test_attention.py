"""Attention on textures (issue 21): EdgeNeXt's cross-covariance attention (XCA) and EfficientViT's
ReLU linear attention kernels against float64 NumPy, and the blocks as timm exports them (EdgeNeXt's
SDTA: tokens of a map, layer norm, Linear, XCA, Linear, residual, back to the map; EfficientViT's
LiteMLA) against onnxruntime with no layout transform inside; the split forms of ``xca_weights`` and
``linear_kv`` for wide GPUs (partial sums over token slices, then a finishing kernel) the same way."""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from onnx import helper

from helpers.numeric import pack_nchw4c, run_kernel, sanitized, unpack_nchw4c
from helpers.onnx_graphs import check_pattern, conv_node, lite_mla_graph, pattern_graph, wide_profile
from helpers.xca_graphs import sdta_model
from helpers.strategies import SCOPES, SEEDS
from primfuncs import attention
from primfuncs._common import TEXTURE, equal_slices
from tir_adreno.strategy.attention import attention_schedule, linear_attention_schedule
from tir_adreno.strategy.profile import get_profile

#: float32 dots over <= 64 tokens and a softmax over <= 13 numbers: measured <= 4e-7 (weights) and
#: <= 5e-7 (apply, relative to max |y|).
RTOL = 2e-6
#: 0: one kernel per (sample, head); k > 0: the split form with about k token slices.
SPLITS = st.integers(0, 40)


def _xca_weights(device, xb, channels, heads, d, qo, ko, temperature, scope, split):
    """A of the one kernel, or of the split form (its partials checked: float32, one row per slice)."""
    if not split:
        return run_kernel(device, attention.xca_weights(xb.shape, channels, heads, d, qo, ko, scope=scope), xb, temperature)
    n, _, h, w, _ = xb.shape
    slices = equal_slices(h * w, split)
    p = run_kernel(device, attention.xca_partials(xb.shape, channels, heads, d, qo, ko, slices, scope=scope), xb)
    assert p.dtype == np.float32 and p.shape == (n * heads, slices, d, 2 * d + 1)
    return run_kernel(device, attention.xca_finish(n, heads, d, slices), p, temperature)


def _linear_kv(device, xb, channels, heads, d, ko, vo, stride, scope, split):
    """KV of the one kernel, or of the split form (its partials checked: float32, one per slice)."""
    if not split:
        return run_kernel(device, attention.linear_kv(xb.shape, channels, heads, d, ko, vo, stride, scope=scope), xb)
    n, _, h, w, _ = xb.shape
    slices = equal_slices(h * w, split)
    p = run_kernel(device, attention.linear_kv_partials(xb.shape, channels, heads, d, ko, vo, slices, stride, scope=scope), xb)
    assert p.dtype == np.float32 and p.shape == (n * heads, slices, d, d + 1)
    return run_kernel(device, attention.linear_kv_finish(n, heads, d, slices), p)


def xca_reference(x, heads, d, offsets, temperature, eps=1e-12):
    """(A, Y) of primfuncs.attention in float64 from NCHW ``x``; ``offsets`` = (q, k, v) channels."""
    b, c, h, w = x.shape
    t = x.reshape(b, c, h * w).astype(np.float64)
    q, k, v = (t[:, o : o + heads * d].reshape(b, heads, d, h * w) for o in offsets)
    q = q / np.maximum(np.linalg.norm(q, axis=-1, keepdims=True), eps)
    k = k / np.maximum(np.linalg.norm(k, axis=-1, keepdims=True), eps)
    a = q @ k.transpose(0, 1, 3, 2) * np.asarray(temperature, np.float64).reshape(1, heads, 1, 1)
    a = np.exp(a - a.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    return a, (a @ v).reshape(b, heads * d, h, w)


@st.composite
def xca_cases(draw):
    """(n, heads, d, extra channels, offsets (q, k, v), h, w): head sizes not a multiple of 4 and
    ranges not aligned to the 4-lane pixel, in any order inside the map."""
    heads, d = draw(st.integers(1, 4)), draw(st.integers(1, 13))
    extra = draw(st.integers(0, 5))
    span = heads * d
    channels = 3 * span + extra
    offsets = tuple(draw(st.integers(0, channels - span)) for _ in range(3))
    return draw(st.integers(1, 2)), heads, d, channels, offsets, draw(st.integers(1, 8)), draw(st.integers(1, 8))


@given(xca_cases(), SCOPES, SEEDS, SPLITS)
@example((1, 4, 12, 144, (0, 48, 96), 5, 6), TEXTURE, 1, 0)  # EdgeNeXt-XXS stage 2 (d = 12, aligned)
@example((1, 2, 22, 132, (0, 44, 88), 3, 4), TEXTURE, 2, 0)  # d = 22: heads straddle pixels; sanitized (even seed)
@example((2, 3, 1, 9, (0, 3, 6), 2, 3), "global", 3, 0)  # d = 1: one pixel holds several heads
@example((1, 2, 22, 132, (0, 44, 88), 5, 7), TEXTURE, 4, 6)  # split: 6 slices of 6 tokens, the last 5; sanitized
@example((2, 3, 5, 45, (0, 15, 30), 3, 3), "global", 5, 40)  # split: a token a slice
def test_xca_kernels(device, case, scope, seed, split):
    """Both kernels against float64: a zero channel (its norm clamps to eps, its row of logits is 0),
    temperatures in [0.1, 4], poisoned outputs, padded output lanes 0. ``split``: the weights from
    the split form (partials over token slices, then ``xca_finish``)."""
    n, heads, d, channels, (qo, ko, vo), h, w = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, channels, h, w)).astype(np.float32)
    x[0, qo] = 0.0
    temperature = rng.uniform(0.1, 4.0, heads).astype(np.float32)
    a_ref, y_ref = xca_reference(x, heads, d, (qo, ko, vo), temperature)
    xb = pack_nchw4c(x)
    with sanitized(seed):  # the pixels a head's range overlaps are clamped to the map: checked in range
        a = _xca_weights(device, xb, channels, heads, d, qo, ko, temperature, scope, split)
        np.testing.assert_allclose(a, a_ref, rtol=RTOL, atol=RTOL)
        y = run_kernel(device, attention.xca_apply(xb.shape, channels, heads, d, vo, scope=scope), xb, a.astype(np.float32))
    out = unpack_nchw4c(y, heads * d)
    assert np.max(np.abs(out - y_ref)) <= RTOL * np.max(np.abs(y_ref)), np.max(np.abs(out - y_ref))
    assert np.all(y[:, -1, :, :, (heads * d - 1) % 4 + 1 :] == 0), "padded lanes not zero"


def test_xca_bad_arguments():
    with pytest.raises(ValueError, match="k_offset"):
        attention.xca_weights((1, 3, 2, 2, 4), 12, 2, 3, 0, 7)
    with pytest.raises(ValueError, match="channels"):
        attention.xca_apply((1, 2, 2, 2, 4), 12, 2, 2, 0)
    with pytest.raises(ValueError, match="epsilon"):
        attention.xca_weights((1, 3, 2, 2, 4), 12, 2, 2, 0, 4, epsilon=-1.0)
    with pytest.raises(ValueError, match="work group"):  # the split form's finish: a work group per row
        attention.xca_finish(1, 1, 257, 2)


@pytest.mark.parametrize("wide", [False, True], ids=["one-kernel", "split"])
@pytest.mark.parametrize("channels,heads,pos_embedding", [(24, 2, True), (20, 2, False)])
def test_sdta_block_stays_on_textures(channels, heads, pos_embedding, wide):
    """conv -> SDTA (head size 12, 4-aligned, with the positional embedding; and 10, straddling
    pixels) -> conv: the attention in two kernels (on a wide profile the weights split: partials
    over 3 slices of the 49 tokens, then xca_finish), the tokens views of the map, no layout transform."""
    names = check_pattern(sdta_model(channels, heads, pos_embedding, seed=channels), profile=wide_profile() if wide else None)
    weights = ["xca_partials", "xca_finish"] if wide else ["xca_weights"]
    assert all(names.count(k) == 1 for k in weights + ["xca_apply"]) and len(names) == len(set(names)), names
    assert names.count("layer_norm_channels") == 1, names
    assert names.count("add") == (1 if pos_embedding else 0), names  # the embedding; the residual is the proj conv's


# -- ReLU linear attention (EfficientViT's LiteMLA) ---------------------------------------------


def linear_reference(x, heads, d, offsets, stride, eps=1e-5):
    """(KV, Y, the magnitude Y's float32 rounding scales with) of primfuncs.attention's linear
    attention in float64 from NCHW ``x``. The magnitude is Y with every product's absolute value
    (``|v|``): where the sums over tokens cancel, Y is small but its rounding is not."""
    b, c, h, w = x.shape
    t = x.reshape(b, c, h * w).astype(np.float64)
    q, k, v = (np.stack([t[:, o + s * stride : o + s * stride + d] for s in range(heads)], 1) for o in offsets)
    q, k = np.maximum(q, 0), np.maximum(k, 0)
    v1 = np.concatenate([v, np.ones_like(v[:, :, :1])], 2)
    kv = k @ v1.transpose(0, 1, 3, 2)
    out = q.transpose(0, 1, 3, 2) @ kv
    y = out[..., :d] / (out[..., d:] + eps)
    magnitude = (q.transpose(0, 1, 3, 2) @ (k @ np.abs(v1).transpose(0, 1, 3, 2)))[..., :d] / (out[..., d:] + eps)
    return kv, y.transpose(0, 1, 3, 2).reshape(b, heads * d, h, w), magnitude


@st.composite
def linear_cases(draw):
    """(n, heads, d, channels, offsets (q, k, v), head stride, h, w): interleaved heads as LiteMLA's
    (stride 3 d) or contiguous ones, unaligned to the 4-lane pixel."""
    heads, d = draw(st.integers(1, 4)), draw(st.integers(1, 17))
    stride = draw(st.sampled_from([d, 3 * d, d + 1]))
    span = (heads - 1) * stride + d
    channels = span + 2 * d + draw(st.integers(0, 5))
    offsets = tuple(draw(st.integers(0, channels - span)) for _ in range(3))
    return draw(st.integers(1, 2)), heads, d, channels, offsets, stride, draw(st.integers(1, 8)), draw(st.integers(1, 8))


@given(linear_cases(), SCOPES, SEEDS, SPLITS)
@example((1, 8, 16, 384, (0, 16, 32), 48, 5, 6), TEXTURE, 4, 0)  # EfficientViT-B0 stage 3 (d = 16, stride 48); sanitized (even seed)
@example((1, 3, 5, 45, (0, 5, 10), 15, 3, 4), "global", 2, 0)  # d = 5: heads straddle pixels
@example((1, 8, 16, 384, (0, 16, 32), 48, 5, 6), TEXTURE, 6, 4)  # split: 4 slices of 8 tokens, the last 6; sanitized
@example((2, 3, 5, 45, (0, 5, 10), 15, 3, 4), "global", 3, 40)  # split: a token a slice
@example((1, 2, 1, 6, (0, 1, 0), 3, 6, 8), TEXTURE, 115038, 0)  # a head's sums over tokens cancel: Y small
def test_linear_attention_kernels(device, case, scope, seed, split):
    """Both kernels against float64 (negative q, k lanes relu'd away, an all-negative k row), poisoned
    outputs, padded output lanes 0. ``split``: KV from the split form (partials over token slices,
    then ``linear_kv_finish``)."""
    n, heads, d, channels, (qo, ko, vo), stride, h, w = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, channels, h, w)).astype(np.float32)
    x[0, ko] = -np.abs(x[0, ko])  # relu(k_0) = 0: its KV row is 0
    kv_ref, y_ref, magnitude = linear_reference(x, heads, d, (qo, ko, vo), stride)
    xb = pack_nchw4c(x)
    with sanitized(seed):
        kv = _linear_kv(device, xb, channels, heads, d, ko, vo, stride, scope, split)
        assert np.max(np.abs(kv - kv_ref)) <= RTOL * np.max(np.abs(kv_ref)), np.max(np.abs(kv - kv_ref))
        y = run_kernel(device, attention.linear_apply(xb.shape, channels, heads, d, qo, stride, scope=scope), xb, kv.astype(np.float32))
    out = unpack_nchw4c(y, heads * d)
    # relative to the products' magnitude: a head whose sums over the tokens cancel has a small Y
    # (case (1, 2, 1, 6, (0, 1, 0), 3, 6, 8), seed 115038: max |Y| 1.2e-3, error 2.1e-8)
    assert np.max(np.abs(out - y_ref)) <= RTOL * np.max(magnitude), np.max(np.abs(out - y_ref))
    assert np.all(y[:, -1, :, :, (heads * d - 1) % 4 + 1 :] == 0), "padded lanes not zero"


def test_linear_attention_bad_arguments():
    with pytest.raises(ValueError, match="head_stride"):
        attention.linear_kv((1, 3, 2, 2, 4), 12, 2, 3, 0, 3, head_stride=2)
    with pytest.raises(ValueError, match="v_offset"):
        attention.linear_kv((1, 3, 2, 2, 4), 12, 2, 3, 0, 7, head_stride=3)


#: float16_acc32 (half inputs, the reference on the same rounded values; float32 sums; one rounding
#: of the output to half, 4.9e-4 of |Y| <= its magnitude).
HALF_RTOL = 1e-3


@st.composite
def one_kernel_cases(draw):
    """(n, heads per map, d, channels per map, offsets (q, k, v), head stride, h, w, threads) of
    :func:`attention.linear_attention`: 1 or 2 maps, d a multiple of 4, heads interleaved (LiteMLA's
    stride 3 d) or not, unaligned offsets, fewer items than (row, slice) pairs or than output pixels."""
    d = 4 * draw(st.integers(1, 4))
    stride = draw(st.sampled_from([d, 3 * d, d + 1]))
    heads = [draw(st.integers(1, 3)) for _ in range(draw(st.integers(1, 2)))]
    spans = [(t - 1) * stride + d for t in heads]
    channels = [span + 2 * d + draw(st.integers(0, 5)) for span in spans]
    offsets = tuple(draw(st.integers(0, min(c - span for c, span in zip(channels, spans)))) for _ in range(3))
    threads = draw(st.sampled_from([d, 2 * d + 3, 64, attention.LINEAR_ATTENTION_THREADS]))
    return draw(st.integers(1, 2)), heads, d, channels, offsets, stride, draw(st.integers(1, 8)), draw(st.integers(1, 8)), threads


@settings(max_examples=max(2, settings().max_examples // 2))  # 4 in CI besides the examples: each builds a kernel
@given(one_kernel_cases(), SCOPES, st.booleans(), SEEDS)
@example((1, [4, 4], 16, [192, 192], (0, 16, 32), 48, 5, 6, 256), TEXTURE, False, 2)  # EfficientViT-B0 stage 3's two maps; sanitized
@example((2, [1, 2], 4, [13, 25], (1, 6, 0), 5, 3, 7, 4), "global", True, 3)  # one slice: every item walks all tokens; half buffers
def test_linear_attention_one_kernel(device, case, scope, half, seed):
    """``linear_attention`` (sums, KV and output in one work group per (sample, head), the heads read
    from two maps) against float64 per map, the maps' outputs concatenated as the module's concat
    would; poisoned output. ``half``: float16_acc32 storage (half images or buffers, float32 math)."""
    n, heads, d, channels, (qo, ko, vo), stride, h, w, threads = case
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal((n, c, h, w)).astype(np.float16 if half else np.float32).astype(np.float32) for c in channels]
    xs[0][0, ko] = -np.abs(xs[0][0, ko])  # relu(k_0) = 0: its KV row is 0
    refs = [linear_reference(x, t, d, (qo, ko, vo), stride) for x, t in zip(xs, heads)]
    y_ref, magnitude = np.concatenate([r[1] for r in refs], 1), max(float(np.max(r[2])) for r in refs)
    func = attention.linear_attention([pack_nchw4c(x).shape for x in xs], channels, heads, d, qo, ko, vo, stride, threads=threads, scope=scope)
    with sanitized(seed):
        y = run_kernel(device, func, *[pack_nchw4c(x) for x in xs], storage="float16" if half and scope == TEXTURE else None,
                       half=set(range(len(xs) + 1)) if half and scope != TEXTURE else frozenset())
    assert y.shape == (n, sum(heads) * d // 4, h, w, 4)
    assert np.max(np.abs(y.transpose(0, 1, 4, 2, 3).reshape(n, -1, h, w) - y_ref)) <= (HALF_RTOL if half else RTOL) * magnitude


def test_linear_attention_one_kernel_bad_arguments():
    with pytest.raises(ValueError, match="multiple of 4"):
        attention.linear_attention([(1, 5, 2, 2, 4)], [18], [2], 3, 0, 3, 6, 9)
    with pytest.raises(ValueError, match="1..2 maps"):
        attention.linear_attention([(1, 12, 2, 2, 4)] * 3, [48] * 3, [1] * 3, 16, 0, 16, 32, 48)
    with pytest.raises(ValueError, match="share N, H, W"):
        attention.linear_attention([(1, 12, 2, 2, 4), (1, 12, 2, 3, 4)], [48, 48], [1, 1], 16, 0, 16, 32, 48)
    with pytest.raises(ValueError, match="threads=8"):
        attention.linear_attention([(1, 12, 2, 2, 4)], [48], [1], 16, 0, 16, 32, 48, threads=8)
    with pytest.raises(ValueError, match="v_offset"):
        attention.linear_attention([(1, 12, 2, 2, 4), (1, 8, 2, 2, 4)], [48, 32], [1, 1], 16, 0, 16, 32, 48)


@pytest.mark.parametrize("d", [6, 8])
@pytest.mark.parametrize("wide", [False, True], ids=["narrow", "wide"])
def test_lite_mla_stays_on_textures(wide, d):
    """conv (qkv, 2 heads) -> LiteMLA -> conv, the reshapes, slices, pad and transposes planned away,
    no layout transform: two kernels; on a wide profile one ``linear_attention`` where d = 8, and
    where d = 6 (heads straddle pixels: no one-launch form) KV split: partials over 3 slices of the
    49 tokens, then linear_kv_finish."""
    names = check_pattern(lite_mla_graph(2, d), profile=wide_profile() if wide else None)
    attn = {(False, 6): ["linear_kv", "linear_apply"], (False, 8): ["linear_kv", "linear_apply"],
            (True, 6): ["linear_kv_partials", "linear_kv_finish", "linear_apply"], (True, 8): ["linear_attention"]}[wide, d]
    assert names == ["conv2d_nchw4c", *attn, "conv2d_nchw4c1"], names


@pytest.mark.parametrize("wide", [False, True], ids=["narrow", "wide"])
def test_lite_mla_reads_the_concat_maps(wide):
    """EfficientViT's LiteMLA as exported: the qkv conv (2 heads of d = 8), its multi-scale
    aggregation (depthwise 5x5, grouped 1x1: 2 more heads), their channel concat, the attention, the
    projection. On a wide profile one ``linear_attention`` reads both maps (no ``concat_channels``);
    elsewhere the concat, ``linear_kv`` and ``linear_apply`` as before. The aggregation is one
    ``depthwise_pointwise`` launch (its groups of 8 channels fill whole blocks)."""
    names = check_pattern(lite_mla_graph(2, 8, multi_scale=True), profile=wide_profile() if wide else None)
    attn = ["linear_attention"] if wide else ["concat_channels", "linear_kv", "linear_apply"]
    assert names[1] == "depthwise_pointwise_nchw4c", names
    assert names[-1 - len(attn):] == [*attn, names[-1]] and len(names) == 3 + len(attn), names


def test_multi_scale_aggregation_is_one_launch():
    """EfficientViT's multi-scale aggregation as exported: a depthwise 5x5 (padding 2), then a grouped
    1x1 without bias, 16 channels a group (3 groups of 48): on the H200's plan one
    ``depthwise_pointwise`` launch, each tile computing its group's depthwise channels only."""
    rng, inits, c = np.random.default_rng(41), {}, 48
    inits["g_w"] = rng.standard_normal((c, 16, 1, 1)) / 4
    nodes = [conv_node(rng, inits, "x", "d", c, c, k=5, group=c), helper.make_node("Conv", ["d", "g_w"], ["y"], group=c // 16)]
    names = check_pattern(pattern_graph(nodes, inits, channels=c, size=14), channels=c, size=14,
                          profile=get_profile("nvidia-h200"))
    assert names == ["depthwise_pointwise_nchw4c"], names


def test_attention_form_by_profile():
    """The H200 profile splits the attention statistics of EdgeNeXt-XXS's and EfficientViT-B0's
    maps (>= 16 tokens a slice, ~4 work groups per compute unit); PoCL and Adreno, and maps of
    fewer than 32 tokens, keep one kernel per (sample, head)."""
    h200 = get_profile("nvidia-h200")
    assert attention_schedule(h200, 4, 28 * 28) == {"slices": 49}  # 784 tokens: 16 each
    assert attention_schedule(h200, 4, 7 * 7) == {"slices": 3}
    assert attention_schedule(h200, 64, 32 * 32) == {"slices": 9}  # 64 pairs x 9 slices ~ 4 x 132
    assert attention_schedule(h200, 4, 31) is None
    for name in ("pocl", "adreno"):
        assert attention_schedule(get_profile(name), 4, 28 * 28) is None


def test_linear_attention_form_by_profile():
    """The H200 runs EfficientViT-B0's linear attention (d = 16; 196 and 49 tokens) in one launch of
    256 items (18.1 KiB of its 48 KiB local memory); not for a head size off the pixel grid, a head
    size whose 4 slices do not fit local memory (d = 64), or more than 64 tokens a slice. PoCL and
    Adreno keep their kernels."""
    h200 = get_profile("nvidia-h200")
    assert linear_attention_schedule(h200, 16, 196) == linear_attention_schedule(h200, 16, 49) == {"threads": 256}
    assert attention.linear_attention_shared_bytes(16, 256) == 18496 <= h200.local_memory_bytes
    assert linear_attention_schedule(h200, 48, 196) == {"threads": 192}  # 4 slices: 45.9 KiB
    assert linear_attention_schedule(h200, 6, 196) is None
    assert linear_attention_schedule(h200, 64, 196) is None
    assert linear_attention_schedule(h200, 16, 16 * 64) is not None and linear_attention_schedule(h200, 16, 16 * 64 + 1) is None
    for name in ("pocl", "adreno"):
        assert linear_attention_schedule(get_profile(name), 16, 196) is None
