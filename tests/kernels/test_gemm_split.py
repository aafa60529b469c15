"""The split-reduction GEMM (``GemmConfig(split_k=S)``, ``primfuncs.gemm_split``) against float64
NumPy, on NaN-poisoned outputs: the register kernel's cases (test_gemm's ``check_product``: Linear
at any rank, batched products with broadcast batch dims, either operand read transposed, every
epilogue part, buffers and textures under the bounds sanitizer, float32 and float16_acc32) with
random register tiles, columns per work group and splits, the splits often more than K's blocks
(items with no block, a ragged last round); views with ``out_perm``; the refusals."""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from helpers.numeric import rand, run_kernel
from primfuncs import gemm
from primfuncs import gemm_split
from primfuncs._common import BUFFER, TEXTURE
from primfuncs.conv.config import MAX_LOCAL_BYTES
from primfuncs.epilogue import Epilogue
from tir_adreno.codegen import build
from tir_adreno.strategy.packing import pack_bias
from test_gemm import EPILOGUES, U32, cases, check_product
from test_gemm_out_perm import _head_view

#: Split configs within the work-group and local-memory limits (the others are refused: test_split_gemm_refusals).
SPLIT = st.builds(lambda rows, cols, tx, split_k: gemm.GemmConfig(rows, cols, 1, tx, split_k=split_k), st.integers(1, 4), st.integers(1, 2),
                  st.sampled_from([1, 2, 4, 8]), st.sampled_from([2, 3, 4, 8, 16])).filter(
                      lambda c: gemm_split.split_local_bytes(c) <= MAX_LOCAL_BYTES)


def split(rows, cols, tx, split_k):
    return gemm.GemmConfig(rows, cols, 1, tx, split_k=split_k)


@given(case=cases(), config=SPLIT, epilogue=EPILOGUES, precision=st.sampled_from(["float32", "float16_acc32"]),
       seed=st.integers(0, 2**32 - 1), alpha=st.sampled_from([1.0, 0.125, -3.0]))
@example(case=((1, 384), (384, 1000), False, False, BUFFER), config=split(1, 1, 8, 16), epilogue=Epilogue(bias=True),
         precision="float32", seed=1, alpha=1.0)  # a classifier head: one row, 96 blocks over 16 items, 250 pixels in groups of 8
@example(case=((1, 16, 764), (764, 96), False, False, BUFFER), config=split(2, 1, 4, 8), epilogue=Epilogue(residual=True, activation="gelu"),
         precision="float16_acc32", seed=2, alpha=1.0)  # the last stage's MLP: 191 blocks, a ragged last round of 7 of 8 items
@example(case=((1, 2, 37, 5), (1, 2, 37, 6), True, False, BUFFER), config=split(2, 2, 1, 16), epilogue=Epilogue(),
         precision="float32", seed=3, alpha=0.125)  # Kᵀ V of factorized attention: A read transposed, K = 37 tokens past a block
@example(case=((1, 3, 10, 13), (1, 3, 7, 13), False, True, BUFFER), config=split(1, 2, 2, 8), epilogue=Epilogue(),
         precision="float16_acc32", seed=4, alpha=1.0)  # Q Kᵀ: 4 blocks for 8 items (half of them add nothing)
@example(case=((1, 3, 10, 7), (1, 3, 7, 9), False, False, TEXTURE), config=split(2, 2, 2, 3),
         epilogue=Epilogue(bias=True, residual=True, activation="relu"), precision="float16_acc32", seed=5, alpha=1.0)  # half images, K and N padded
def test_split_gemm_kernel(device, case, config, epilogue, precision, seed, alpha):
    check_product(device, case, config, epilogue, precision, seed, alpha)


@settings(deadline=None, max_examples=max(2, settings().max_examples // 4))  # each example builds a kernel
@given(n=st.integers(1, 2), l=st.integers(1, 40), h=st.integers(1, 3), d=st.sampled_from([3, 4, 8]), config=SPLIT,
       seed=st.integers(0, 2**32 - 1))
@example(n=1, l=37, h=2, d=8, config=split(1, 1, 2, 4), seed=0)
def test_split_gemm_reads_views_and_stores_permuted(device, n, l, h, d, config, seed):
    """Attention x V reading v through a view of one qkv buffer, the reduction over the tokens,
    stored ``[N, L, h, d]`` (``out_perm``) with a bias and a residual in that order."""
    rng = np.random.default_rng(seed)
    qkv = rand(rng, (n, l, 3 * h * d))
    v = qkv.astype(np.float64).reshape(n, l, 3, h, d).transpose(2, 0, 3, 1, 4)[2]
    buffer = gemm.view_buffer((n, h, l, d), _head_view(n, l, h, d, 2))[1]
    p, bias, residual = rand(rng, (n, h, l, l)), rand(rng, (d,)), rand(rng, (n, l, h, d))
    got = run_kernel(device, gemm.gemm((n, h, l, l), (n, h, l, d), config=config, b_view=_head_view(n, l, h, d, 2), out_perm=(0, 2, 1, 3),
                                       epilogue=Epilogue(bias=True, residual=True)), p, qkv.reshape(buffer), pack_bias(bias), residual)
    ref = np.transpose(p @ v, (0, 2, 1, 3)) + bias + residual
    scale = np.transpose(np.abs(p) @ np.abs(v), (0, 2, 1, 3)) + np.abs(bias) + np.abs(residual)
    assert got.shape == ref.shape and not np.isnan(got).any(), "an output element was not written (poison survived)"
    assert np.all(np.abs(got - ref) <= 2 * (l + 4) * U32 * scale), float(np.abs(got - ref).max())


def test_split_gemm_refusals():
    with pytest.raises(ValueError, match="ty = 1"):
        gemm.GemmConfig(1, 1, 2, 4, split_k=4)
    with pytest.raises(ValueError, match="ty = 1"):
        gemm.GemmConfig(1, 1, 1, 4, tiled=True, split_k=4)
    with pytest.raises(ValueError, match="split_k x tx"):
        gemm.GemmConfig(1, 1, 1, 32, split_k=16)
    with pytest.raises(ValueError, match="split_k"):
        gemm.GemmConfig(split_k=0)
    big = split(8, 4, 16, 16)
    assert gemm_split.split_local_bytes(big) > MAX_LOCAL_BYTES
    with pytest.raises(ValueError, match="MAX_LOCAL_BYTES"):
        gemm.gemm((64, 64), (64, 64), config=big)
    assert str(split(1, 1, 8, 16)) == "gemm r1c1 wg1x8 split16"


def test_split_gemm_float16_sums_partials_in_float32():
    """A half split kernel of a long reduction keeps its partial tiles in float32 local memory
    (built, not run: PoCL has no half math)."""
    source = build.build(gemm.gemm((5, 400), (400, 8), dtype="float16", acc_dtype="float32", config=split(1, 1, 2, 8))).source
    assert "__local float" in source and "float acc" in source and "barrier(CLK_LOCAL_MEM_FENCE)" in source
