"""The GEMM's permuted store (``primfuncs.gemm``'s ``out_perm``: ``Y`` written with the product's
axes permuted, attention x V ``[N, heads, L, d]`` stored as ``[N, L, heads, d]``) and its operand
views (``a_view``/``b_view``: q, k, v read in the qkv Linear's buffer), against float64 NumPy, on
NaN-poisoned outputs."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.numeric import rand, run_kernel
from primfuncs import gather as G
from primfuncs import gemm
from primfuncs.epilogue import Epilogue
from tir_adreno.strategy.packing import pack_bias

U32 = 2.0**-24


@settings(deadline=None, max_examples=12)
@given(batch=st.lists(st.integers(1, 3), min_size=1, max_size=2), m=st.integers(1, 9), k=st.sampled_from([3, 4, 8, 13]),
       n=st.integers(1, 10), bias=st.booleans(), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_gemm_stores_in_permuted_order(device, batch, m, k, n, bias, seed, data):
    rank = len(batch) + 2
    lead = list(data.draw(st.permutations(range(rank - 1))))
    perm = (*lead, rank - 1)
    rng = np.random.default_rng(seed)
    a, b = rand(rng, (*batch, m, k)), rand(rng, (*batch, k, n))
    bias_v = rand(rng, (n,)) if bias else None
    epilogue = Epilogue(bias=bias, activation="relu")
    func = gemm.gemm(a.shape, b.shape, epilogue=epilogue, out_perm=perm)
    got = run_kernel(device, func, a, b, *([pack_bias(bias_v)] if bias else []))
    y = a.astype(np.float64) @ b.astype(np.float64) + (bias_v if bias else 0.0)
    ref = np.transpose(np.maximum(y, 0.0), perm)
    scale = np.transpose(np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)) + (np.abs(bias_v) if bias else 0.0), perm)
    assert got.shape == ref.shape
    assert not np.isnan(got).any(), "an output element was not written (poison survived)"
    assert np.all(np.abs(got - ref) <= 2 * (k + 4) * U32 * scale), float(np.abs(got - ref).max())


def test_out_perm_must_keep_the_last_axis():
    with pytest.raises(ValueError, match="last one last"):
        gemm.gemm((2, 3, 4), (2, 4, 5), out_perm=(0, 2, 1))
    assert gemm.stored_out_shape(gemm.gemm_geometry((1, 2, 7, 4), (1, 2, 4, 5)), (0, 2, 1, 3)) == (1, 7, 2, 5)


def _head_view(n, l, h, d, part):
    """Gather steps from head ``part`` (0: q, 1: k, 2: v) ``[N, h, L, d]`` to the qkv Linear's output
    ``[N, L, 3 h d]``: squeeze <- split part <- transpose(2, 0, 3, 1, 4) <- reshape (timm's attention)."""
    return (G.Reshape((1, n, h, l, d)), G.Affine((3, n, h, l, d), (part, 0, 0, 0, 0), (1,) * 5),
            G.Permute((2, 0, 3, 1, 4)), G.Reshape((n, l, 3 * h * d)))


@settings(deadline=None, max_examples=6)
@given(n=st.integers(1, 2), l=st.integers(1, 11), h=st.integers(1, 3), d=st.sampled_from([3, 4, 8]), seed=st.integers(0, 2**32 - 1))
def test_gemm_reads_heads_in_the_qkv_buffer(device, n, l, h, d, seed):
    """Q Kᵀ and attention x V reading q, k, v through views of one qkv buffer (k transposed in its
    read too): no gather kernel before either product."""
    rng = np.random.default_rng(seed)
    qkv = rand(rng, (n, l, 3 * h * d))
    heads = qkv.astype(np.float64).reshape(n, l, 3, h, d).transpose(2, 0, 3, 1, 4)
    q, k, v = heads
    buffer = gemm.view_buffer((n, h, l, d), _head_view(n, l, h, d, 0))[1]  # the qkv buffer in the shape the kernel declares
    scores = run_kernel(device, gemm.gemm((n, h, l, d), (n, h, l, d), trans_b=True, a_view=_head_view(n, l, h, d, 0),
                                          b_view=_head_view(n, l, h, d, 1)), qkv.reshape(buffer), qkv.reshape(buffer))
    p = rand(rng, (n, h, l, l))
    out = run_kernel(device, gemm.gemm((n, h, l, l), (n, h, l, d), b_view=_head_view(n, l, h, d, 2), out_perm=(0, 2, 1, 3)), p, qkv.reshape(buffer))
    for got, ref, scale, kk in ((scores, q @ np.swapaxes(k, -1, -2), np.abs(q) @ np.abs(np.swapaxes(k, -1, -2)), d),
                                (out, np.transpose(p @ v, (0, 2, 1, 3)), np.transpose(np.abs(p) @ np.abs(v), (0, 2, 1, 3)), l)):
        assert got.shape == ref.shape and not np.isnan(got).any()
        assert np.all(np.abs(got - ref) <= 2 * (kk + 4) * U32 * scale), float(np.abs(got - ref).max())


def test_views_are_checked():
    with pytest.raises(ValueError, match="unread"):
        gemm.gemm((2, 4), (4, 3), a_view=(G.Affine((2, 4), (0, -1), (1, 1)),))
    with pytest.raises(ValueError, match="texture"):
        gemm.gemm((2, 4), (4, 4), a_view=(G.Permute((1, 0)),), scope="global.texture")
    assert gemm.view_buffer((1, 2, 8, 4), _head_view(1, 8, 2, 4, 1))[1] == (1, 8, 3, 2, 4)
