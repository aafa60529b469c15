"""The GEMM computing its A from an elementwise producer (``gemm(a_producer=)``,
``primfuncs.plain_elementwise.Producer``) against float64 NumPy on poisoned outputs: random
expressions of A's inputs (a plain operand of A's shape or read through a slice of a wider tensor,
and a second one broadcast along A's rows or of A's full shape) in all three kernels (register,
tiled, split) over the register kernel's cases on buffers (Linear at any rank, batched products,
transposed reads); the refusals."""

import numpy as np
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from helpers.numeric import rand, run_kernel
from primfuncs import epilogue_expr as ex
from primfuncs import gather as G
from primfuncs import gemm
from primfuncs import plain_elementwise as pe
from primfuncs._common import BUFFER, TEXTURE
from primfuncs.epilogue import Epilogue
from test_gemm import CONFIGS, U32, cases
from test_gemm_split import SPLIT
from test_gemm_tiled import TILED
from test_plain_elementwise import bounded, exprs

#: MambaOut's gated MLP before its second Linear: ``gelu(g) * x``.
GATE = ex.Binary("multiply", ex.Unary("gelu", ex.Input(0)), ex.Input(1))
#: Bigger than any A element drawn here may be (a product of them stays finite in float32).
A_LIMIT = 1e4


def _slice(shape, extra: int) -> tuple:
    """(wider shape, view): a tensor ``extra`` columns wider than ``shape`` read from column ``extra``
    on (a split part of a Linear's output, as MambaOut's ``g`` is)."""
    wide = (*shape[:-1], shape[-1] + extra)
    return wide, pe.View((G.Source(0, (G.Affine(wide, (0,) * (len(shape) - 1) + (extra,), (1,) * len(shape)),)),))


def check_producer(device, case, config, expr, sliced: bool, row_vector: bool, seed: int):
    """Every output element of ``op(expr(X0, X1)) @ op(B)`` within float32 summation's bound plus
    the producer's own float32 error carried through the product; the poison overwritten."""
    a_shape, b_shape, trans_a, trans_b, _ = case
    geom = gemm.gemm_geometry(a_shape, b_shape, trans_a, trans_b)
    rng = np.random.default_rng(seed)
    x1_shape = (a_shape[-1],) if row_vector else a_shape
    if sliced:
        wide, view = _slice(a_shape, 3)
        x0 = rand(rng, wide)
        operands, moved0 = (view, 1), x0[..., 3:]
        shapes = (wide, x1_shape)
    else:
        x0 = rand(rng, a_shape)
        operands, moved0, shapes = (0, 1), x0, (a_shape, x1_shape)
    x1, b = rand(rng, x1_shape), rand(rng, b_shape)
    with np.errstate(all="ignore"):  # a draw NumPy gives NaN or inf (pow of a negative base) is rejected below
        a, a_err = bounded(expr, [moved0.astype(np.float64), np.broadcast_to(x1, a_shape).astype(np.float64)])
    assume(np.all(np.isfinite(a_err)) and np.all(np.abs(a) < A_LIMIT))
    producer = pe.Producer(expr, shapes, operands)
    func = gemm.gemm(a_shape, b_shape, trans_a, trans_b, config=config, a_producer=producer)
    got = run_kernel(device, func, x0, x1, b, poison=12345.0)

    def op(v, trans):
        return np.swapaxes(v, -1, -2) if trans else v

    b64 = op(b.astype(np.float64), trans_b)
    ref = op(a, trans_a) @ b64
    scale = (np.abs(op(a, trans_a)) + op(a_err, trans_a)) @ np.abs(b64)
    bound = op(a_err, trans_a) @ np.abs(b64) + 2 * (geom.k + 4) * U32 * scale + 4 * U32 * np.abs(ref)
    assert got.shape == geom.out_shape
    assert not np.any(got == 12345.0), "an output element was not written (poison survived)"
    excess = np.abs(got - ref) - bound
    assert np.all(excess <= 0), f"max error over the bound {float(excess.max()):.3g}"


def _buffer_cases():
    return cases(scopes=(BUFFER,))


@given(case=_buffer_cases(), config=st.one_of(CONFIGS, TILED, SPLIT), expr=st.one_of(st.just(GATE), exprs(2)), sliced=st.booleans(),
       row_vector=st.booleans(), seed=st.integers(0, 2**32 - 1))
@example(case=((1, 6, 6, 12), (12, 10), False, False, BUFFER), config=gemm.GemmConfig(2, 1, 4, 4, tiled=True, k_chunk=2, prefetch=True),
         expr=GATE, sliced=True, row_vector=False, seed=1)  # MambaOut's gate read from a slice of fc1's output, tiled kernel
@example(case=((1, 14, 14, 37), (37, 20), False, False, BUFFER), config=gemm.GemmConfig(2, 1, 1, 8, split_k=4), expr=GATE,
         sliced=True, row_vector=False, seed=2)  # the split kernel, K not a multiple of 4
@example(case=((2, 7, 5), (2, 7, 9), True, False, BUFFER), config=gemm.GemmConfig(2, 2, 2, 2), expr=GATE, sliced=False,
         row_vector=True, seed=3)  # a batched product reading A transposed, its producer's second input broadcast along rows
def test_gemm_reads_a_through_its_producer(device, case, config, expr, sliced, row_vector, seed):
    check_producer(device, case, config, expr, sliced, row_vector, seed)


def test_producer_refusals():
    """A producer needs buffers, no ``a_view`` and no folded norm beside it, and inputs that broadcast to A."""
    gate = pe.Producer(GATE, ((2, 8), (2, 8)))
    with pytest.raises(ValueError, match="plain buffers"):
        gemm.gemm((2, 8), (8, 4), scope=TEXTURE, a_producer=gate)
    view = (G.Affine((2, 8), (0, 0), (1, 1)),)
    with pytest.raises(ValueError, match="a_view"):
        gemm.gemm((2, 8), (8, 4), a_view=view, a_producer=gate)
    with pytest.raises(ValueError, match="norm_eps"):
        gemm.gemm((2, 8), (8, 4), config=gemm.GemmConfig(1, 1, 1, 1, tiled=True), norm_eps=1e-5, a_producer=gate)
    with pytest.raises(ValueError, match="does not broadcast"):
        gemm.gemm((2, 8), (8, 4), a_producer=pe.Producer(GATE, ((2, 8), (3, 8))))
    with pytest.raises(ValueError, match="must read every one"):
        gemm.gemm((2, 8), (8, 4), a_producer=pe.Producer(ex.Unary("gelu", ex.Input(0)), ((2, 8), (2, 8))))
    with pytest.raises(TypeError, match="Producer"):
        gemm.gemm((2, 8), (8, 4), a_producer=GATE)


def test_producer_inputs_replace_a_among_the_parameters():
    """The kernel's parameters: the producer's inputs where A was, then B, the epilogue's, Y."""
    func = gemm.gemm((2, 8), (8, 4), epilogue=Epilogue(bias=True), a_producer=pe.Producer(GATE, ((2, 8), (8,))))
    assert [p.name for p in func.params] == ["A", "A1", "B", "Bias", "Y"]
