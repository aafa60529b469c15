"""The tiled GEMM with a layer norm over A's rows folded in (``gemm(..., norm_eps=...)``,
``primfuncs.gemm_tiled``) against float64 NumPy: ``LN(A) @ W + b`` with gamma, beta and the bias
folded on the host in float64 as the Relax pattern folds them (``W' = diag(gamma) W``, ``s`` the
column sums of ``W'``, ``b' = beta W + b``: ``passes.patterns.layer_norm_gemm``).

Fresh random inputs, NaN-poisoned outputs, random tiled configs whose tiles overhang the product,
K and N not multiples of 4 (nor of the step), rows of any rank, and rows whose mean is large against
their spread (1000 +- 1: an unshifted ``E[x^2] - E[x]^2`` loses ~20 of float32's 24 bits there);
the refusals (register, split, ``trans_a``, textures, half).
"""

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from helpers.conv import CONV_RTOL as RTOL
from helpers.nonfinite import assert_matches, nonfinite, run_finite_poison
from helpers.numeric import assert_close, rand, run_kernel
from primfuncs import gemm
from primfuncs._common import TEXTURE
from primfuncs.epilogue import Epilogue
from tir_adreno.reference import activation, layer_norm
from tir_adreno.strategy.packing import pack_bias
from test_gemm_tiled import TILED, tiled


def fold_layer_norm(w, bias, gamma, beta):
    """(W', s, b') of ``(LN(a) * gamma + beta) @ W + bias`` in float64."""
    w = np.asarray(w, np.float64)
    folded = gamma[:, None] * w
    return folded, folded.sum(axis=0), beta @ w + (0 if bias is None else bias)


def run_norm_gemm(device, a_shape, n, config, epilogue, eps, seed, mean=0.0, alpha=1.0):
    """``act(alpha LN(A) @ W + bias + residual)`` of ``A = mean (1 + 0.1 N(0,1) per row) + N(0, 1)``:
    (output, float64 reference, the same of the terms' magnitudes)."""
    rng = np.random.default_rng(seed)
    k = a_shape[-1]
    a = (rand(rng, a_shape) + mean * (1 + 0.1 * rand(rng, (*a_shape[:-1], 1)))).astype(np.float32)
    w, bias = rand(rng, (k, n)), rand(rng, (n,))
    gamma, beta = 1 + 0.5 * rand(rng, (k,)), 0.5 * rand(rng, (k,))
    folded, wsum, folded_bias = fold_layer_norm(w, bias, gamma.astype(np.float64), beta.astype(np.float64))
    w32 = folded.astype(np.float32)
    out_shape = (*a_shape[:-1], n)
    residual = rand(rng, out_shape) if epilogue.residual else None
    func = gemm.gemm(a_shape, (k, n), config=config, epilogue=epilogue, alpha=alpha, norm_eps=eps)
    assert [p.name for p in func.params] == ["A", "B", "WeightSum", *["Bias"] * epilogue.bias, *["Residual"] * epilogue.residual, "Y"]
    inputs = [a, w32, pack_bias(wsum.astype(np.float32)), *[pack_bias(folded_bias.astype(np.float32))] * epilogue.bias,
              *([residual] if epilogue.residual else [])]
    y = run_kernel(device, func, *inputs)
    assert y.shape == out_shape and not np.isnan(y).any(), "an output element was not written (poison survived)"
    z = layer_norm(a.astype(np.float64), np.ones(k), np.zeros(k), axis=-1, epsilon=eps)
    w64 = w32.astype(np.float64)
    ref = alpha * (z @ w64) + (folded_bias if epilogue.bias else 0)
    scale = abs(alpha) * (np.abs(z) @ np.abs(w64)) + (np.abs(folded_bias) if epilogue.bias else 0)
    if residual is not None:
        ref, scale = ref + residual, scale + np.abs(residual)
    if epilogue.activation == "gelu":
        ref, scale = activation(ref, "gelu"), 1.13 * scale
    return y, ref, scale


@given(rows=st.lists(st.integers(1, 9), min_size=1, max_size=3), k=st.integers(1, 37), n=st.integers(1, 13), config=TILED,
       epilogue=st.builds(Epilogue, bias=st.booleans(), activation=st.sampled_from([None, "gelu"]), residual=st.booleans()),
       eps=st.sampled_from([1e-6, 1e-5]), mean=st.sampled_from([0.0, 1e3, -3e4]), alpha=st.sampled_from([1.0, -0.5]),
       seed=st.integers(0, 2**32 - 1))
@example(rows=[1, 49], k=64, n=96, config=tiled(2, 1, 8, 8, 4), epilogue=Epilogue(bias=True, activation="gelu"), eps=1e-6,
         mean=0.0, alpha=1.0, seed=1)  # a transformer's fc1 on tokens: vector copies of A, tiles past the rows
@example(rows=[13], k=18, n=7, config=tiled(2, 2, 2, 4, 2), epilogue=Epilogue(bias=True), eps=1e-5, mean=1e3, alpha=1.0,
         seed=2)  # rows at 1000 +- 1, K % 4 != 0 (scalar copies, zeros past K in the last step), N % 4 != 0
@example(rows=[5], k=36, n=9, config=tiled(1, 1, 4, 2, 2), epilogue=Epilogue(residual=True), eps=1e-6, mean=-3e4, alpha=-0.5,
         seed=3)  # K = 36 in steps of 8: a vector copy of A's last step past K, shifted then zeroed
@example(rows=[4, 3], k=1, n=5, config=tiled(1, 2, 2, 2, 1), epilogue=Epilogue(bias=True), eps=1e-5, mean=0.0, alpha=1.0,
         seed=4)  # rows of one value: variance 0, only epsilon keeps r finite (outputs = the bias)
@example(rows=[1, 21], k=37, n=10, config=tiled(2, 1, 4, 4, 2, prefetch=True), epilogue=Epilogue(bias=True), eps=1e-6, mean=1e3,
         alpha=1.0, seed=5)  # prefetched steps: each next step's values shifted as they are read, a tail of 5 zeroed after the shift
def test_norm_gemm_matches_numpy(device, rows, k, n, config, epilogue, eps, mean, alpha, seed):
    """``act(alpha LN(A) W + bias + residual)`` within the conv fold's tolerance (sums of the terms'
    magnitudes: a few outputs cancel to near 0), every element written."""
    y, ref, scale = run_norm_gemm(device, (*rows, k), n, config, epilogue, eps, seed, mean, alpha)
    assert_close(y, ref, RTOL, scale=scale)


@pytest.mark.parametrize("mean", [1e3, -3e4])
def test_norm_gemm_large_mean(device, mean):
    """Rows at ``mean`` +- 1 with K = 77 (no multiple of 4 or of the step): the shifted statistics
    stay within float32's tolerance of the float64 layer norm of the same float32 inputs, normwise
    (no magnitude scale to hide behind); unshifted, ``S2 / K - mean^2`` would lose the variance."""
    y, ref, _ = run_norm_gemm(device, (3, 29, 77), 10, tiled(2, 1, 4, 4, 4), Epilogue(bias=True), 1e-6, 5, mean)
    assert_close(y, ref, RTOL)


def test_norm_gemm_nonfinite_rows(device):
    """A NaN or +-Inf in a row (its shift, element 0, among them) makes that row's outputs NaN (its
    mean, its deviations), as NumPy's layer norm then the product; the other rows stay exact."""
    rng = np.random.default_rng(8)
    a, w, bias = nonfinite(rng, (11, 9), 3), rand(rng, (9, 6)), rand(rng, (6,))
    a[1, 0] = np.inf  # a row's shift itself
    out = run_finite_poison(device, gemm.gemm(a.shape, w.shape, config=tiled(2, 1, 2, 2, 1), epilogue=Epilogue(bias=True), norm_eps=1e-6),
                            a, w, pack_bias(w.sum(axis=0)), pack_bias(bias))
    with np.errstate(invalid="ignore"):
        ref = layer_norm(a, np.ones(9), np.zeros(9), epsilon=1e-6) @ w.astype(np.float64) + bias
    assert np.isnan(ref[1]).all()
    assert_matches(out, ref, rtol=RTOL)


def test_norm_gemm_refusals():
    """Only the float32 tiled kernel on buffers, A as stored, folds a layer norm: ValueError naming the culprit."""
    with pytest.raises(ValueError, match="register"):
        gemm.gemm((8, 8), (8, 8), norm_eps=1e-6)
    with pytest.raises(ValueError, match="split"):
        gemm.gemm((8, 64), (64, 8), config=gemm.GemmConfig(1, 1, 1, 4, split_k=4), norm_eps=1e-6)
    with pytest.raises(ValueError, match="trans_a"):
        gemm.gemm((8, 8), (8, 8), trans_a=True, config=tiled(1, 1, 2, 2, 1), norm_eps=1e-6)
    with pytest.raises(ValueError, match="buffers"):
        gemm.gemm((8, 8), (8, 8), config=tiled(1, 1, 2, 2, 1), scope=TEXTURE, norm_eps=1e-6)
    with pytest.raises(ValueError, match="float32 kernel"):
        gemm.gemm((8, 8), (8, 8), config=tiled(1, 1, 2, 2, 1), dtype="float16", acc_dtype="float32", norm_eps=1e-6)
    with pytest.raises(ValueError, match="float32 kernel"):
        gemm.gemm((8, 8), (8, 8), config=tiled(1, 1, 2, 2, 1), dtype="float16", norm_eps=1e-6)
    with pytest.raises(ValueError, match="norm_eps must be"):
        gemm.gemm((8, 8), (8, 8), config=tiled(1, 1, 2, 2, 1), norm_eps=-1.0)
