"""Softmax attention in one kernel (``primfuncs.attention.scaled_dot_product_attention``) against
float64 NumPy: random batch dims (K and V shared by every head: multi-query attention), lengths
(more keys and columns than items), each operand stored transposed or not, the output transposed
and permuted, scales, the scores' and the output's epilogues (bias, attention biases of the
scores' shape, residual, activation); q, k and v read through views of one qkv buffer; float32
and float16_acc32 (the float32 kernel on half buffers), on NaN-poisoned outputs. Plain buffers
only: no image is read, so there is nothing for the bounds sanitizer to check."""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from helpers.numeric import as_read, rand, run_kernel
from primfuncs import attention
from primfuncs import epilogue_expr as E
from primfuncs import gather as G
from primfuncs.epilogue import Epilogue
from primfuncs.gemm import view_buffer
from tir_adreno.codegen import build
from tir_adreno.strategy.packing import pack_bias

U32 = 2.0**-24
HALF_RTOL, HALF_ABS = 2.0**-11, 2.0**-25
#: The scores' epilogues: none, a bias over the keys, attention biases (an operand of the scores'
#: shape, added), both.
PRE = {"none": Epilogue(), "bias": Epilogue(bias=True), "operand": Epilogue(expr=E.Binary("add", E.X(), E.Operand("full", 0))),
       "both": Epilogue(bias=True, expr=E.Binary("add", E.X(), E.Operand("full", 0)))}
#: The output's: none, a bias and relu, a residual, a residual times an operand.
POST = {"none": Epilogue(), "bias_relu": Epilogue(bias=True, activation="relu"), "residual": Epilogue(residual=True),
        "residual_times": Epilogue(residual=True, expr=E.Binary("multiply", E.X(), E.Operand("full", 0)))}


def _op(x, trans):
    return np.swapaxes(x, -1, -2) if trans else x


@settings(deadline=None)
@given(batch=st.lists(st.integers(1, 3), min_size=1, max_size=2), shared=st.booleans(), lq=st.integers(1, 9),
       lk=st.sampled_from([1, 5, 16, 49, 70]), d=st.sampled_from([1, 3, 8, 16]), dv=st.sampled_from([1, 4, 7, 20]),
       trans=st.tuples(st.booleans(), st.booleans(), st.booleans(), st.booleans()), pre=st.sampled_from(sorted(PRE)),
       post=st.sampled_from(sorted(POST)), permute=st.booleans(), threads=st.sampled_from([1, 16, 64]),
       precision=st.sampled_from(["float32", "float16_acc32"]), seed=st.integers(0, 2**32 - 1))
@example(batch=[1, 4], shared=False, lq=49, lk=49, d=16, dv=16, trans=(True, False, True, True), pre="operand", post="none",
         permute=False, threads=64, precision="float32", seed=1)  # EfficientViT-M0's cascaded heads
@example(batch=[2, 3], shared=True, lq=7, lk=70, d=8, dv=20, trans=(False, True, False, False), pre="both", post="residual_times",
         permute=True, threads=16, precision="float16_acc32", seed=2)  # multi-query, more keys and columns than items
def test_attention_matches_numpy(device, batch, shared, lq, lk, d, dv, trans, pre, post, permute, threads, precision, seed):
    """``post(out_scale softmax(pre(alpha op(Q) op(K))) op(V))`` within float32's error of the float64
    reference (the scores' error times the largest score, the sums' lengths), plus half's rounding."""
    trans_q, trans_k, trans_v, trans_out = trans
    half = precision == "float16_acc32"
    rng = np.random.default_rng(seed)
    kv_batch = [1] * len(batch) if shared else batch
    q = rand(rng, (*batch, *((d, lq) if trans_q else (lq, d))))
    k = rand(rng, (*kv_batch, *((lk, d) if trans_k else (d, lk))))
    v = rand(rng, (*kv_batch, *((dv, lk) if trans_v else (lk, dv))))
    alpha, out_scale = float(rng.uniform(0.2, 1.0)), float(rng.uniform(0.5, 2.0))
    out_logical = (*batch, *((dv, lq) if trans_out else (lq, dv)))
    perm = (*rng.permutation(len(out_logical) - 1), len(out_logical) - 1) if permute else None
    y_shape = out_logical if perm is None else tuple(out_logical[a] for a in perm)
    s_bias, s_operand = rand(rng, (lk,)), rand(rng, (*batch, lq, lk))
    o_bias, residual, o_operand = rand(rng, (out_logical[-1],)), rand(rng, y_shape), rand(rng, y_shape)
    inputs = [q, k, v]
    inputs += [pack_bias(s_bias)] * PRE[pre].bias + [s_operand] * bool(PRE[pre].expr)
    inputs += [pack_bias(o_bias)] * POST[post].bias + [residual] * POST[post].residual + [o_operand] * bool(POST[post].expr)
    func = attention.scaled_dot_product_attention(q.shape, k.shape, v.shape, trans_q, trans_k, trans_v, alpha=alpha, pre=PRE[pre],
                                                  post=POST[post], out_perm=perm, out_scale=out_scale, trans_out=trans_out,
                                                  threads=threads)
    got = run_kernel(device, func, *inputs, half=build.ALL_BUFFERS if half else ())
    assert got.shape == y_shape and np.all(np.isfinite(got)), "an output element was not written (poison survived)"

    qs, ks, vs = (_op(as_read(x, half), t) for x, t in ((q, trans_q), (k, trans_k), (v, trans_v)))
    s = alpha * (qs @ ks) + (as_read(s_bias, half) if PRE[pre].bias else 0.0) + (as_read(s_operand, half) if PRE[pre].expr else 0.0)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = _op(out_scale * (p @ vs), trans_out)
    magnitude = _op(out_scale * (p @ np.abs(vs)), trans_out)
    o = o + (as_read(o_bias, half) if POST[post].bias else 0.0)
    o = o if perm is None else np.transpose(o, perm)
    magnitude = magnitude if perm is None else np.transpose(magnitude, perm)
    if POST[post].residual:
        o, magnitude = o + as_read(residual, half), magnitude + np.abs(as_read(residual, half))
    o = np.maximum(o, 0.0) if POST[post].activation == "relu" else o
    if POST[post].expr is not None:
        o, magnitude = o * as_read(o_operand, half), magnitude * np.abs(as_read(o_operand, half))
    # a score's error (d terms, the bias) moves its probability by that much relatively; then lk + 8 roundings
    score_scale = float(np.max(alpha * (np.abs(qs) @ np.abs(ks)))) + 8.0
    bound = 4 * U32 * (d * score_scale + lk + 16) * (magnitude + np.abs(o) + 1e-6)
    if half:
        bound = bound + HALF_RTOL * np.abs(o) + HALF_ABS
    assert np.all(np.abs(got - o) <= bound), f"max error {float(np.max(np.abs(got - o) - bound)):.3g} over the bound"


def _qkv_view(n, length, heads, d, part):
    """Gather steps from head ``part`` (0: q, 1: k, 2: v) ``[N, heads, L, d]`` to the qkv Linear's
    output ``[N, L, 3 heads d]`` (timm's reshape, transpose (2, 0, 3, 1, 4) and split)."""
    return (G.Reshape((1, n, heads, length, d)), G.Affine((3, n, heads, length, d), (part, 0, 0, 0, 0), (1,) * 5),
            G.Permute((2, 0, 3, 1, 4)), G.Reshape((n, length, 3 * heads * d)))


@settings(deadline=None, max_examples=4)
@given(n=st.integers(1, 2), length=st.integers(1, 20), heads=st.integers(1, 3), d=st.sampled_from([3, 8]), seed=st.integers(0, 2**32 - 1))
def test_attention_reads_heads_in_the_qkv_buffer(device, n, length, heads, d, seed):
    """q, k and v read in one qkv buffer through views, the output stored ``[N, L, heads, d]`` (timm's
    attention before its proj Linear): no gather or transpose kernel around the attention."""
    qkv = rand(np.random.default_rng(seed), (n, length, 3 * heads * d))
    shape = (n, heads, length, d)
    views = [_qkv_view(n, length, heads, d, part) for part in range(3)]
    stored = qkv.reshape(view_buffer(shape, views[0])[1])
    func = attention.scaled_dot_product_attention(shape, shape, shape, trans_k=True, alpha=d**-0.5, out_perm=(0, 2, 1, 3),
                                                  q_view=views[0], k_view=views[1], v_view=views[2])
    got = run_kernel(device, func, stored, stored, stored)
    q, k, v = qkv.astype(np.float64).reshape(n, length, 3, heads, d).transpose(2, 0, 3, 1, 4)
    s = q @ np.swapaxes(k, -1, -2) * d**-0.5
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    ref = np.transpose(p @ v, (0, 2, 1, 3))
    assert got.shape == ref.shape and np.all(np.isfinite(got))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(v).max())


def test_attention_arguments_are_checked():
    with pytest.raises(ValueError, match="batch dims"):
        attention.scaled_dot_product_attention((4, 8), (4, 8), (4, 8))
    with pytest.raises(ValueError, match="local memory"):
        attention.scaled_dot_product_attention((1, 2, 8), (1, attention.SOFTMAX_ATTENTION_MAX_KEYS + 1, 8), (1, 2049, 8))
    with pytest.raises(ValueError, match="threads"):
        attention.scaled_dot_product_attention((1, 2, 8), (1, 3, 8), (1, 3, 8), threads=128)
    with pytest.raises(ValueError, match="finite"):
        attention.scaled_dot_product_attention((1, 2, 8), (1, 3, 8), (1, 3, 8), alpha=float("nan"))
    with pytest.raises(ValueError, match="reduction lengths"):
        attention.scaled_dot_product_attention((1, 2, 8), (1, 3, 7), (1, 3, 8))
    with pytest.raises(ValueError, match="plain buffers"):
        attention.scaled_dot_product_attention((1, 2, 8), (1, 3, 8), (1, 3, 8), post=Epilogue(out_layout="NHWC"))
