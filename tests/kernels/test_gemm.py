"""The tiled GEMM (``primfuncs.gemm``) against float64 NumPy: Linear at any rank (rows folded),
batched activation x activation with either operand transposed in its read (buffers), random
register tiles and work groups, every epilogue part; buffers and textures (the last axis as RGBA
pixels, padding lanes written 0, half of the examples under the bounds sanitizer); float32 and
float16_acc32 (half buffers and half images), on NaN-poisoned outputs."""

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from helpers.numeric import rand, run_kernel, sanitized
from primfuncs import gemm
from primfuncs._common import BUFFER, TEXTURE
from primfuncs.epilogue import Epilogue
from tir_adreno.codegen import build
from tir_adreno.reference import activation
from tir_adreno.strategy.packing import pack_bias

U32 = 2.0**-24  # float32 unit roundoff
#: float16_acc32: the output is rounded to half once (inputs are rounded before the reference).
HALF_RTOL = 2.0**-11
#: ... and below half's smallest normal (6.1e-5) that rounding is absolute: half the subnormal
#: spacing 2^-24 (hypothesis found a 1 x 1 x 1 product of -1.24e-5 off by 3.8e-9 more than HALF_RTOL).
HALF_UNDERFLOW = 2.0**-25


@st.composite
def cases(draw, scopes=(BUFFER, TEXTURE)):
    """(a_shape, b_shape, trans_a, trans_b, scope): a Linear (B 2-d, A of rank 2-4) or a batched product
    with 1-2 batch dims (heads; either operand's broadcast: size 1), K and N not multiples of 4 as often as multiples."""
    m, k, n = draw(st.integers(1, 19)), draw(st.sampled_from([1, 3, 4, 7, 8, 13, 32, 37])), draw(st.integers(1, 21))
    scope = draw(st.sampled_from(scopes))
    trans_b = draw(st.booleans()) and scope == BUFFER  # textures are read as stored
    if draw(st.booleans()):  # activation x constant weight: leading dims fold into rows
        lead = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
        return (*lead, m, k), ((n, k) if trans_b else (k, n)), False, trans_b, scope
    lead = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=2)))
    # either operand may broadcast some batch dims (multi-query attention's shared K and V)
    a_lead, b_lead = (tuple(d if draw(st.booleans()) else 1 for d in lead) for _ in range(2))
    a_lead, b_lead = (lead, b_lead) if draw(st.booleans()) else (a_lead, lead)
    trans_a = draw(st.booleans()) and scope == BUFFER
    return (*a_lead, *((k, m) if trans_a else (m, k))), (*b_lead, *((n, k) if trans_b else (k, n))), trans_a, trans_b, scope


CONFIGS = st.builds(gemm.GemmConfig, st.integers(1, 8), st.integers(1, 4), st.sampled_from([1, 2, 8]), st.sampled_from([1, 4, 16]))
EPILOGUES = st.builds(Epilogue, bias=st.booleans(), activation=st.sampled_from([None, "relu", "gelu", "hardswish"]), residual=st.booleans())


def _pixels(x):
    """``x`` with its last axis as zero-padded RGBA pixels (texture placement)."""
    width = x.shape[-1]
    out = np.zeros((*x.shape[:-1], -(-width // 4) * 4), np.float32)
    out[..., :width] = x
    return out.reshape(*x.shape[:-1], -1, 4)


def _reference(a, b, trans_a, trans_b, bias, residual, epilogue, alpha):
    """float64 (y, scale): y the scaled product and epilogue, scale ``|alpha op(a)| @ |op(b)| + |bias| + |residual|``
    (what float32 summation's error is relative to)."""
    a, b = (np.asarray(v, np.float64) for v in (a, b))
    a = np.swapaxes(a, -1, -2) if trans_a else a
    b = np.swapaxes(b, -1, -2) if trans_b else b
    y, scale = alpha * (a @ b), abs(alpha) * (np.abs(a) @ np.abs(b))
    for extra in (bias, residual):
        if extra is not None:
            y, scale = y + extra, scale + np.abs(extra)
    return activation(y, epilogue.activation), scale


@given(case=cases(), config=CONFIGS, epilogue=EPILOGUES, precision=st.sampled_from(["float32", "float16_acc32"]),
       seed=st.integers(0, 2**32 - 1), alpha=st.sampled_from([1.0, 0.125, -3.0]))
@example(case=((2, 49, 64), (64, 96), False, False, BUFFER), config=gemm.GemmConfig(4, 1, 8, 8), epilogue=Epilogue(bias=True, activation="gelu"),
         precision="float32", seed=1, alpha=1.0)  # a transformer's Linear on tokens: every load a vector
@example(case=((1, 2, 5, 7), (1, 2, 9, 7), False, True, BUFFER), config=gemm.GemmConfig(3, 2, 2, 4), epilogue=Epilogue(),
         precision="float16_acc32", seed=2, alpha=0.125)  # Q Kᵀ with heads: K read transposed, odd d
@example(case=((2, 3, 6, 5), (2, 3, 6, 10), True, False, BUFFER), config=gemm.GemmConfig(2, 1, 1, 1), epilogue=Epilogue(residual=True),
         precision="float32", seed=3, alpha=1.0)  # Kᵀ V of linear attention: A read transposed
@example(case=((2, 4, 6, 5), (2, 1, 7, 5), False, True, BUFFER), config=gemm.GemmConfig(2, 1, 2, 2), epilogue=Epilogue(),
         precision="float32", seed=7, alpha=0.5)  # multi-query attention: one K for every head
@example(case=((1, 3, 10, 7), (1, 3, 7, 9), False, False, TEXTURE), config=gemm.GemmConfig(2, 2, 2, 2),
         epilogue=Epilogue(bias=True, residual=True, activation="relu"), precision="float16_acc32", seed=4, alpha=1.0)  # half images, K and N padded
@example(case=((1, 1, 7, 1), (1, 5), False, False, TEXTURE), config=gemm.GemmConfig(1, 2, 1, 1), epilogue=Epilogue(),
         precision="float32", seed=0, alpha=1.0)  # two pixels per item (found by hypothesis: stored through one scratch pixel, both got the first)
def test_gemm_kernel(device, case, config, epilogue, precision, seed, alpha):
    check_product(device, case, config, epilogue, precision, seed, alpha)


def check_product(device, case, config, epilogue, precision, seed, alpha):
    """Every output element equals float64 ``act(alpha op(A) op(B) + bias + residual)`` within float32
    summation's error bound (``(K + 4) u`` of the magnitudes' product, x2 for the activation's
    slope), plus half's rounding of the output under float16_acc32; none is left NaN (test_gemm_tiled's too)."""
    a_shape, b_shape, trans_a, trans_b, scope = case
    geom = gemm.gemm_geometry(a_shape, b_shape, trans_a, trans_b)
    rng = np.random.default_rng(seed)
    a, b = rand(rng, a_shape), rand(rng, b_shape)
    bias = rand(rng, (geom.n,)) if epilogue.bias else None
    residual = rand(rng, geom.out_shape) if epilogue.residual else None
    half = precision == "float16_acc32"
    func = gemm.gemm(a_shape, b_shape, trans_a, trans_b, config=config, epilogue=epilogue, scope=scope, alpha=alpha)
    placed = _pixels if scope == TEXTURE else np.asarray
    inputs = [placed(a), placed(b)] + ([pack_bias(bias)] if bias is not None else []) + ([placed(residual)] if residual is not None else [])
    with sanitized(seed):
        got = run_kernel(device, func, *inputs, storage="float16" if half and scope == TEXTURE else None,
                         half=build.ALL_BUFFERS if half else ())
    if scope == TEXTURE:
        got = got.reshape(*got.shape[:-2], -1)
        assert np.all(got[..., geom.n:] == 0), "padding lanes not written 0"
        got = got[..., : geom.n]
    if half:
        a, b, bias, residual = (None if v is None else v.astype(np.float16).astype(np.float32) for v in (a, b, bias, residual))
    ref, scale = _reference(a, b, trans_a, trans_b, bias, residual, epilogue, alpha)
    assert got.shape == geom.out_shape
    assert np.all(np.isfinite(got)), "an output element was not written (poison survived)"
    bound = 2 * (geom.k + 4) * U32 * scale + 4 * U32 * np.abs(ref) + (HALF_RTOL * np.abs(ref) + HALF_UNDERFLOW if half else 0.0)
    excess = np.abs(got - ref) - bound
    assert np.all(excess <= 0), f"max error over the bound {float(excess.max()):.3g}"


def test_gemm_geometry_folds_rows_of_a_linear():
    """A Linear's leading dims fold into rows (one GEMM); a batched product keeps them as its batch."""
    linear = gemm.gemm_geometry((2, 7, 7, 48), (48, 96))
    assert (linear.batch, linear.m, linear.k, linear.n, linear.out_shape) == (1, 98, 48, 96, (2, 7, 7, 96))
    qk = gemm.gemm_geometry((1, 4, 49, 16), (1, 4, 49, 16), trans_b=True)
    assert (qk.batch, qk.m, qk.k, qk.n, qk.out_shape) == (4, 49, 16, 49, (1, 4, 49, 49))
    ktv = gemm.gemm_geometry((2, 3, 10, 5), (2, 3, 10, 6), trans_a=True)
    assert (ktv.batch, ktv.m, ktv.k, ktv.n) == (6, 5, 10, 6)
    mqa = gemm.gemm_geometry((1, 4, 196, 64), (1, 1, 64, 49))  # K shared by the heads (broadcast)
    assert (mqa.batch, mqa.m, mqa.k, mqa.n, mqa.out_shape) == (4, 196, 64, 49, (1, 4, 196, 49))
    assert gemm.gemm_geometry((3, 1, 5, 2), (1, 4, 2, 6)).out_shape == (3, 4, 5, 6)


def test_gemm_bad_arguments():
    with pytest.raises(ValueError, match="reduction lengths"):
        gemm.gemm((2, 3), (4, 5))
    with pytest.raises(ValueError, match="batch dims"):
        gemm.gemm((2, 3, 4), (3, 4, 5))
    with pytest.raises(ValueError, match="batch dims"):
        gemm.gemm((1, 2, 3, 4), (3, 4, 5))  # ranks differ
    with pytest.raises(ValueError, match="rank"):
        gemm.gemm((3,), (3, 5))
    with pytest.raises(ValueError, match="tile"):
        gemm.GemmConfig(rows=9)
    with pytest.raises(ValueError, match="work group"):
        gemm.GemmConfig(ty=32, tx=32)
    with pytest.raises(TypeError, match="dtype"):
        gemm.gemm((2, 3), (3, 5), dtype="int8")
    with pytest.raises(ValueError, match="scope"):
        gemm.gemm((2, 3), (3, 5), scope="global.texture-weight")
    with pytest.raises(ValueError, match="trans"):
        gemm.gemm((2, 3), (5, 3), trans_b=True, scope=TEXTURE)


def test_gemm_float16_builds_with_float32_accumulators():
    """A half kernel of a long reduction accumulates in float32: its source declares float
    accumulators and half operands (PoCL has no half math, so it is built, not run)."""
    func = gemm.gemm((5, 40), (40, 8), dtype="float16", acc_dtype="float32")
    source = build.build(func).source
    assert "half" in source and "float acc" in source
