"""MobileViT-v2's separable attention between its patch unfold and fold (issue 21) on NCHW4c
textures: the kernels (``patch_unfold``/``patch_fold``, softmax over W, ``broadcast_binary``)
against float64 NumPy, and the exported pattern against onnxruntime with no layout transform
inside."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers.numeric import assert_close, pack_nchw4c, rand, run_kernel, unpack_nchw4c
from helpers.onnx_graphs import check_pattern, mobilevit_graph, wide_profile
from primfuncs import attention, elementwise, patches, reduce
from primfuncs._common import TEXTURE
from tir_adreno import ops, reference

SCOPES = st.sampled_from([TEXTURE, "global"])
SEEDS = st.integers(0, 2**32 - 1)
#: float32 softmax over <= 13 values: measured <= 2.4e-7 (the exp and one division per element).
SOFTMAX_RTOL = 1e-6
#: One float32 operation per element: at most half an ulp (6e-8) of each result.
BINARY_RTOL = 1.2e-7


@given(n=st.integers(1, 2), c=st.integers(1, 9), nh=st.integers(1, 3), nw=st.integers(1, 4), ph=st.integers(1, 3),
       pw=st.integers(1, 3), scope=SCOPES, half=st.booleans(), seed=SEEDS)
def test_patch_unfold_and_fold_kernels(device, n, c, nh, nw, ph, pw, scope, half, seed):
    """Unfold is the exported reshape -> transpose -> reshape exactly (padded lanes carried as
    zeros); fold brings the patches back; half images (float16_acc32) move half values exactly."""
    x = rand(np.random.default_rng(seed), (n, c, nh * ph, nw * pw)) * 10
    storage = "float16" if half and scope == TEXTURE else None
    expected = x.astype(np.float16 if storage else np.float32).astype(np.float64)
    image = pack_nchw4c(x).shape
    unfold = patches.patch_unfold(image, ph, pw, scope=scope)
    unfolded = run_kernel(device, unfold, pack_nchw4c(x).astype(np.float32), storage=storage).astype(np.float64)
    np.testing.assert_array_equal(unpack_nchw4c(unfolded, c), reference.patch_unfold(expected, ph, pw))
    assert np.all(unfolded[:, -1, :, :, (c - 1) % 4 + 1 :] == 0), "padded lanes not zero"
    fold = patches.patch_fold(image, ph, pw, scope=scope)
    folded = run_kernel(device, fold, unfolded.astype(np.float32), storage=storage).astype(np.float64)
    np.testing.assert_array_equal(folded, pack_nchw4c(expected))


def test_patch_unfold_refuses_bad_shapes():
    with pytest.raises(ValueError, match="patches of 2x2 do not tile an 5x4 map"):
        patches.patch_unfold((1, 1, 5, 4, 4), 2, 2)
    with pytest.raises(ValueError, match="NCHW4c"):
        patches.patch_fold((1, 4, 4, 4), 2, 2)
    with pytest.raises(ValueError, match="ph must be >= 1"):
        patches.patch_unfold((1, 1, 4, 4, 4), 0, 2)


@given(n=st.integers(1, 2), c=st.integers(1, 9), h=st.integers(1, 4), w=st.integers(1, 13), negative=st.booleans(),
       scale=st.sampled_from([1.0, 60.0]), scope=SCOPES, seed=SEEDS)
def test_softmax_over_w(device, n, c, h, w, negative, scale, scope, seed):
    """Each channel of each row on its own (scale 60: exp alone would overflow), the padded lanes
    (NaN in the input) written as 0 whatever they hold."""
    x = (rand(np.random.default_rng(seed), (n, c, h, w)) * scale).astype(np.float32)
    func = reduce.softmax(pack_nchw4c(x).shape, c, scope=scope, axis=-1 if negative else 3)
    y = run_kernel(device, func, pack_nchw4c(x, pad_value=np.nan))
    assert_close(unpack_nchw4c(y, c), reference.softmax(x, axis=3), SOFTMAX_RTOL)
    np.testing.assert_array_equal(unpack_nchw4c(y, 4 * y.shape[1])[:, c:], 0)


def test_softmax_over_w_non_finite(device):
    """As NumPy: a row holding a NaN or a +Inf is all NaN, -Inf gives 0, the other rows are finite."""
    x = rand(np.random.default_rng(2), (1, 2, 4, 5))
    x[0, 0, 0, 1], x[0, 0, 1, 3], x[0, 1, 2, 0] = np.nan, np.inf, -np.inf
    y = unpack_nchw4c(run_kernel(device, reduce.softmax(pack_nchw4c(x).shape, 2, axis=-1), pack_nchw4c(x), poison=7.0), 2)
    with np.errstate(invalid="ignore"):
        expected = reference.softmax(x, axis=3)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(expected))
    assert np.isnan(y[0, 0, :2]).all() and y[0, 1, 2, 0] == 0
    assert_close(y[~np.isnan(expected)], expected[~np.isnan(expected)], SOFTMAX_RTOL)


def test_softmax_refuses_other_axes():
    with pytest.raises(NotImplementedError, match="only channels"):
        reduce.softmax((1, 1, 4, 4, 4), 3, axis=2)


@given(n=st.integers(1, 2), c=st.integers(1, 9), h=st.integers(1, 4), w=st.integers(1, 5),
       broadcast=st.sampled_from(["c", "h", "w", "ch", "cw", "hw", "chw"]), op=st.sampled_from(["add", "multiply"]),
       reverse=st.booleans(), scope=SCOPES, seed=SEEDS)
def test_broadcast_binary_kernel(device, n, c, h, w, broadcast, op, reverse, scope, seed):
    """NumPy broadcasting of ``B`` over the named axes (``"c"``: lane 0 of its one channel to every
    lane), either operand order; the padded lanes of the output 0 (``0 + b`` would not be)."""
    rng = np.random.default_rng(seed)
    a = rand(rng, (n, c, h, w))
    b = rand(rng, (n, *(1 if ax in broadcast else d for ax, d in zip("chw", (c, h, w)))))
    func = elementwise.broadcast_binary(pack_nchw4c(a).shape, c, op, broadcast, reverse, scope=scope)
    y = run_kernel(device, func, pack_nchw4c(a, pad_value=np.nan), pack_nchw4c(b, pad_value=np.nan))
    operands = (b, a) if reverse else (a, b)
    assert_close(unpack_nchw4c(y, c), getattr(np, op)(*(v.astype(np.float64) for v in operands)), BINARY_RTOL)
    np.testing.assert_array_equal(unpack_nchw4c(y, 4 * y.shape[1])[:, c:], 0)


def test_broadcast_binary_refuses_bad_arguments():
    with pytest.raises(ValueError, match="broadcast must name axes"):
        elementwise.broadcast_binary((1, 1, 4, 4, 4), 3, "add", "hc")
    with pytest.raises(ValueError, match="broadcast must name axes"):
        elementwise.broadcast_binary((1, 1, 4, 4, 4), 3, "add", "")
    with pytest.raises(ValueError, match="unknown binary op"):
        elementwise.broadcast_binary((1, 1, 4, 4, 4), 3, "power", "c")
    with pytest.raises(ValueError, match="channels=5 does not fill"):
        elementwise.broadcast_binary((1, 1, 4, 4, 4), 5, "add", "c")


# -- the exported pattern ----------------------------------------------------------------------------

@pytest.mark.parametrize("d, size, ph, pw, layers", [(6, 8, 2, 2, 2), (8, 6, 3, 2, 1)])
def test_mobilevit_attention_stays_on_textures(d, size, ph, pw, layers):
    """Unfold, the attention blocks (d channels: a padded block at d = 6, keys and values off the
    pixel grid after the one query channel) and the fold: one kernel each for unfold and fold,
    the attention between its convs one ``separable_attention``, no layout transform inside."""
    names = check_pattern(mobilevit_graph(d, size, ph, pw, layers), size=size)
    block = ["conv2d_nchw4c1", "separable_attention", "conv2d_nchw4c2"]
    assert names == ["conv2d_nchw4c", "patch_unfold", *block * layers, "patch_fold", "conv2d_nchw4c3"], names


def test_mobilevit_attention_is_one_kernel_on_a_wide_gpu():
    """The same plan for the H200's compute units (the rule asks nothing of the profile)."""
    names = check_pattern(mobilevit_graph(6, 8, 2, 2, 1), size=8, profile=wide_profile())
    assert names.count("separable_attention") == 1 and "split_channels" not in names and "softmax_w" not in names, names


def test_mobilevit_attention_without_relu_keeps_the_broadcast_kernels():
    """``v * context`` (no relu) is not the separable attention: the split, softmax over W and
    broadcast kernels run it, still with no layout transform."""
    names = check_pattern(mobilevit_graph(6, 8, 2, 2, 1, relu=False), size=8)
    assert "separable_attention" not in names, names
    assert all(names.count(k) == 1 for k in ("split_channels", "softmax_w", "sum_w", "multiply_broadcast_c", "multiply_broadcast_w")), names


# -- the separable attention in one kernel ------------------------------------------------------------

#: float32 softmax and a sum of up to 70 products per channel, normwise against the magnitudes'
#: attention: measured <= 1.2e-7 (12 random cases).
SEPARABLE_RTOL = 1e-6
#: float16_acc32: half inputs (the reference takes the same rounded values), float32 math, one
#: rounding of the output to half (4.9e-4 relative): measured <= 3.3e-4.
SEPARABLE_HALF_RTOL = 1e-3


@given(n=st.integers(1, 2), d=st.integers(1, 9), p=st.integers(1, 4), t=st.integers(1, 70), threads=st.sampled_from([None, 1, 4, 32]),
       scale=st.sampled_from([1.0, 60.0]), scope=SCOPES, half=st.booleans(), seed=SEEDS)
def test_separable_attention_kernel(device, n, d, p, t, threads, scale, scope, half, seed):
    """``relu(v) * sum_T(k * softmax_T(q))`` against float64 NumPy: odd ``d`` (keys and values off
    the pixel grid), odd ``T``, more or fewer tokens than work items, q scaled by 60 (exp alone
    would overflow), NaN in the input's padded lanes, the output poisoned; padded lanes 0."""
    rng = np.random.default_rng(seed)
    x = rand(rng, (n, 1 + 2 * d, p, t))
    x[:, 0] *= scale
    storage = "float16" if half else None
    exact = x.astype(np.float16 if half else np.float32)
    func = attention.separable_attention(pack_nchw4c(x).shape, 1 + 2 * d, d, threads=threads, scope=scope, dtype="float32")
    y = run_kernel(device, func, pack_nchw4c(exact.astype(np.float32), pad_value=np.nan), storage=storage if scope == TEXTURE else None,
                   half={0, 1} if half and scope != TEXTURE else frozenset())
    assert_close(unpack_nchw4c(y, d), reference.separable_attention(exact, d), SEPARABLE_HALF_RTOL if half else SEPARABLE_RTOL,
                 scale=reference.separable_attention(exact, d, magnitudes=True))
    np.testing.assert_array_equal(unpack_nchw4c(y, 4 * y.shape[1])[:, d:], 0)


def test_separable_attention_non_finite(device):
    """As NumPy: a NaN or +Inf query makes its row's context (and outputs) NaN, a -Inf query
    weighs 0; an Inf key gives an Inf or NaN context; a NaN value stays NaN, relu(-Inf) * ctx is 0."""
    d = 3
    x = rand(np.random.default_rng(5), (1, 1 + 2 * d, 4, 6))
    x[0, 0, 0, 2], x[0, 0, 1, 4], x[0, 0, 2, 1] = np.nan, np.inf, -np.inf
    x[0, 1 + 1, 3, 0] = np.inf
    x[0, 1 + d, 2, 3], x[0, 1 + d + 2, 3, 5] = np.nan, -np.inf
    func = attention.separable_attention(pack_nchw4c(x).shape, 1 + 2 * d, d)
    y = unpack_nchw4c(run_kernel(device, func, pack_nchw4c(x), poison=7.0), d)
    with np.errstate(invalid="ignore"):
        expected = reference.separable_attention(x, d)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(expected))
    np.testing.assert_array_equal(np.isinf(y), np.isinf(expected))
    assert np.isnan(y[0, :, :2]).all() and np.isnan(y[0, 0, 2, 3]) and np.isfinite(y[0, 1:, 2]).all()
    finite = np.isfinite(expected)
    assert_close(y[finite], expected[finite], SEPARABLE_RTOL)


def test_separable_attention_refuses_bad_arguments():
    with pytest.raises(ValueError, match="v_offset=6"):
        attention.separable_attention((1, 2, 4, 4, 4), 7, 3, v_offset=6)
    with pytest.raises(ValueError, match="q_offset=7"):
        attention.separable_attention((1, 2, 4, 4, 4), 7, 3, q_offset=7, k_offset=1, v_offset=4)
    with pytest.raises(ValueError, match="threads must be >= 1"):
        attention.separable_attention((1, 2, 4, 4, 4), 7, 3, threads=0)
    with pytest.raises(ValueError, match="NCHW4c"):
        attention.separable_attention((1, 2, 4, 4), 7, 3)
    with pytest.raises(TypeError, match="dtype"):
        attention.separable_attention((1, 2, 4, 4, 4), 7, 3, dtype="int8")
