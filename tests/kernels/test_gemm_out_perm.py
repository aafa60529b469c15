"""The GEMM's permuted store (``primfuncs.gemm``'s ``out_perm``): ``Y`` written with the product's
axes permuted (attention x V ``[N, heads, L, d]`` stored as ``[N, L, heads, d]``), against float64
NumPy, on NaN-poisoned outputs, with and without a bias and an activation."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.numeric import rand, run_kernel
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
