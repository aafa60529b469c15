"""The local-memory tiled GEMM (``GemmConfig(tiled=True)``, ``primfuncs.gemm_tiled``) against
float64 NumPy, on NaN-poisoned outputs: the register kernel's cases on buffers (test_gemm's
``check_product``: Linear at any rank, batched products with broadcast batch dims, either operand
read transposed, every epilogue part, float32 and float16_acc32) with random tiles, work groups
and K chunks whose tiles end inside the product; views, ``out_perm`` and a second operand; the
refusals (textures, local memory); with and without the next step prefetched."""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from helpers.numeric import rand, run_kernel
from primfuncs import gemm
from primfuncs import gemm_tiled
from primfuncs._common import BUFFER, TEXTURE
from primfuncs.conv.config import MAX_LOCAL_BYTES
from primfuncs.epilogue import Epilogue
from tir_adreno.codegen import build
from tir_adreno.strategy.packing import pack_bias
from test_gemm import EPILOGUES, U32, cases, check_product
from test_gemm_out_perm import _head_view

#: Tiled configs whose tiles fit local memory (the others are refused: test_tiled_gemm_refuses_textures_and_big_tiles);
#: k_chunk up to 16, the H200 rule's.
TILED = st.builds(gemm.GemmConfig, st.integers(1, 8), st.integers(1, 4), st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4, 16]),
                  tiled=st.just(True), k_chunk=st.sampled_from([1, 2, 3, 4, 8, 16]), prefetch=st.booleans()).filter(
                      lambda c: gemm_tiled.tiled_local_bytes(c) <= MAX_LOCAL_BYTES)


def tiled(rows, cols, ty, tx, k_chunk, prefetch=False):
    return gemm.GemmConfig(rows, cols, ty, tx, tiled=True, k_chunk=k_chunk, prefetch=prefetch)


@given(case=cases(scopes=(BUFFER,)), config=TILED, epilogue=EPILOGUES, precision=st.sampled_from(["float32", "float16_acc32"]),
       seed=st.integers(0, 2**32 - 1), alpha=st.sampled_from([1.0, 0.125, -3.0]))
@example(case=((1, 1, 1), (1, 1, 1), False, False, BUFFER), config=tiled(1, 1, 1, 1, 1), epilogue=Epilogue(),
         precision="float16_acc32", seed=71069, alpha=1.0)  # a product of -1.24e-5 stored as a half subnormal (found by hypothesis)
@example(case=((2, 49, 64), (64, 96), False, False, BUFFER), config=tiled(4, 2, 8, 8, 2), epilogue=Epilogue(bias=True, activation="gelu"),
         precision="float32", seed=1, alpha=1.0)  # a transformer's Linear on tokens: vector copies of A and B, rows and columns past the tile
@example(case=((37, 36), (36, 24), False, False, BUFFER), config=tiled(2, 1, 4, 4, 2), epilogue=Epilogue(residual=True),
         precision="float16_acc32", seed=5, alpha=1.0)  # K = 36 in steps of 8: a vector copy of A's last step past K (clamped, zeroed)
@example(case=((1, 2, 5, 7), (1, 2, 9, 7), False, True, BUFFER), config=tiled(3, 2, 2, 4, 1), epilogue=Epilogue(),
         precision="float16_acc32", seed=2, alpha=0.125)  # Q Kᵀ with heads: K read transposed (scalar copies along K), odd d
@example(case=((1, 3, 9, 8), (1, 3, 11, 8), False, True, BUFFER), config=tiled(2, 1, 2, 2, 3), epilogue=Epilogue(bias=True),
         precision="float32", seed=6, alpha=1.0)  # B read transposed with K % 4 == 0: vector copies along K, scalar stores
@example(case=((2, 12, 8), (2, 12, 20), True, False, BUFFER), config=tiled(2, 2, 2, 2, 2), epilogue=Epilogue(residual=True),
         precision="float32", seed=3, alpha=1.0)  # Kᵀ V: A read transposed, M % 4 == 0: vector copies along M
@example(case=((2, 3, 6, 5), (2, 3, 6, 10), True, False, BUFFER), config=tiled(1, 1, 1, 1, 1), epilogue=Epilogue(residual=True),
         precision="float32", seed=3, alpha=1.0)  # one item per work group: every slot one round
@example(case=((2, 4, 6, 5), (2, 1, 7, 5), False, True, BUFFER), config=tiled(2, 1, 2, 2, 1), epilogue=Epilogue(),
         precision="float32", seed=7, alpha=0.5)  # multi-query attention: one K for every head
@example(case=((1, 21, 13), (13, 10), False, False, BUFFER), config=tiled(1, 1, 8, 8, 8), epilogue=Epilogue(bias=True),
         precision="float16_acc32", seed=9, alpha=1.0)  # k_chunk 8 with K = 13: one full step, a tail of 5
@example(case=((1, 21, 45), (45, 10), False, False, BUFFER), config=tiled(2, 1, 4, 4, 2, prefetch=True), epilogue=Epilogue(bias=True),
         precision="float32", seed=10, alpha=1.0)  # prefetch: 6 steps, each multiplied while the next one's reads are in flight, a tail of 5
@example(case=((2, 3, 6, 5), (2, 3, 6, 10), True, False, BUFFER), config=tiled(1, 1, 1, 1, 1, prefetch=True), epilogue=Epilogue(),
         precision="float16_acc32", seed=4, alpha=1.0)  # prefetch with Kᵀ V's scalar copies, one item per work group
def test_tiled_gemm_kernel(device, case, config, epilogue, precision, seed, alpha):
    check_product(device, case, config, epilogue, precision, seed, alpha)


@settings(deadline=None, max_examples=max(2, settings().max_examples // 4))  # each example builds two kernels
@given(n=st.integers(1, 2), l=st.integers(1, 11), h=st.integers(1, 3), d=st.sampled_from([3, 4, 8]), config=TILED,
       seed=st.integers(0, 2**32 - 1))
@example(n=1, l=9, h=2, d=8, config=tiled(2, 1, 4, 2, 2), seed=0)
def test_tiled_gemm_reads_views_and_stores_permuted(device, n, l, h, d, config, seed):
    """Q Kᵀ and attention x V reading q, k, v through views of one qkv buffer (k transposed), the
    second stored ``[N, L, h, d]`` (``out_perm``) with a bias and a residual in that order."""
    rng = np.random.default_rng(seed)
    qkv = rand(rng, (n, l, 3 * h * d))
    q, k, v = qkv.astype(np.float64).reshape(n, l, 3, h, d).transpose(2, 0, 3, 1, 4)
    buffer = gemm.view_buffer((n, h, l, d), _head_view(n, l, h, d, 0))[1]
    scores = run_kernel(device, gemm.gemm((n, h, l, d), (n, h, l, d), trans_b=True, config=config, a_view=_head_view(n, l, h, d, 0),
                                          b_view=_head_view(n, l, h, d, 1)), qkv.reshape(buffer), qkv.reshape(buffer))
    p, bias, residual = rand(rng, (n, h, l, l)), rand(rng, (d,)), rand(rng, (n, l, h, d))
    out = run_kernel(device, gemm.gemm((n, h, l, l), (n, h, l, d), config=config, b_view=_head_view(n, l, h, d, 2), out_perm=(0, 2, 1, 3),
                                       epilogue=Epilogue(bias=True, residual=True)), p, qkv.reshape(buffer), pack_bias(bias), residual)
    kt = np.swapaxes(k, -1, -2)
    for got, ref, scale, kk in ((scores, q @ kt, np.abs(q) @ np.abs(kt), d),
                                (out, np.transpose(p @ v, (0, 2, 1, 3)) + bias + residual,
                                 np.transpose(np.abs(p) @ np.abs(v), (0, 2, 1, 3)) + np.abs(bias) + np.abs(residual), l)):
        assert got.shape == ref.shape and not np.isnan(got).any(), "an output element was not written (poison survived)"
        assert np.all(np.abs(got - ref) <= 2 * (kk + 4) * U32 * scale), float(np.abs(got - ref).max())


@pytest.mark.parametrize("trans_b", [False, True])
def test_tiled_gemm_zeroes_past_k_before_an_inf(device, trans_b):
    """K = 5 in steps of 4 (one block a step): the last step's copies past K read A's and B's last
    reduction index again (clamped). A's is +-Inf in one row, so that row is +-Inf (NumPy); a copy
    past K zeroed on B's side only would make Inf * 0 = NaN there, one not zeroed would count it twice."""
    rng = np.random.default_rng(11)
    a, b = rand(rng, (6, 5)), rand(rng, (7, 5) if trans_b else (5, 7))
    a[2, 4] = np.inf
    a[4, 4] = -np.inf
    got = run_kernel(device, gemm.gemm(a.shape, b.shape, trans_b=trans_b, config=tiled(2, 1, 2, 2, 1)), a, b, poison=7.0)
    with np.errstate(invalid="ignore"):  # NumPy's matmul warns on the Inf rows
        ref = a.astype(np.float64) @ (b.T if trans_b else b).astype(np.float64)
        scale = np.abs(a) @ np.abs(b.T if trans_b else b)
    assert np.array_equal(np.isinf(got), np.isinf(ref)) and np.array_equal(np.sign(got[2:5:2]), np.sign(ref[2:5:2]))
    finite = np.isfinite(ref)
    assert finite.sum() == 4 * 7 and np.all(np.abs(got[finite] - ref[finite]) <= 2 * (5 + 4) * U32 * scale[finite])


def test_tiled_gemm_refuses_textures_and_big_tiles():
    with pytest.raises(ValueError, match="buffers"):
        gemm.gemm((8, 8), (8, 8), config=tiled(1, 1, 1, 1, 1), scope=TEXTURE)
    big = tiled(8, 4, 8, 16, 8)
    assert gemm_tiled.tiled_local_bytes(big) > MAX_LOCAL_BYTES
    with pytest.raises(ValueError, match="MAX_LOCAL_BYTES"):
        gemm.gemm((64, 64), (64, 64), config=big)
    with pytest.raises(ValueError, match="k_chunk"):
        gemm.GemmConfig(k_chunk=0)
    assert str(tiled(4, 2, 8, 16, 2)) == "gemm r4c2 wg8x16 tiled c2" and str(gemm.GemmConfig()) == "gemm r4c1 wg8x8"


def test_tiled_gemm_float16_builds_with_float32_accumulators():
    """A half tiled kernel stages half tiles in local memory and accumulates in float32 (built, not run: PoCL has no half math)."""
    source = build.build(gemm.gemm((5, 40), (40, 8), dtype="float16", acc_dtype="float32", config=tiled(2, 1, 4, 2, 2))).source
    assert "__local half" in source and "float acc" in source and "barrier(CLK_LOCAL_MEM_FENCE)" in source
