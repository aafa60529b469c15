"""Reductions and softmax (primfuncs.reduce, ops.sum/mean/max/min/softmax) against float64 NumPy.

The padded lanes of the last channel block hold NaN in the kernels' inputs: a
reduction over C that let them in would return NaN; max inputs are all negative
and min inputs all positive, so padding counted as 0 would also show. Half the examples
(even seeds) run under the texture bounds sanitizer.
"""

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from primfuncs import reduce
from primfuncs._common import BUFFER, TEXTURE
from helpers.strategies import NCHW_SEEDS, REDUCE_ARGS, SCOPES, SOFTMAX_ARGS, STRATEGIES
from tir_adreno import ops
from tir_adreno.reference import reduce as reference
from tir_adreno.reference import softmax as reference_softmax
from helpers.numeric import assert_close, pack_nchw4c, rand, run_kernel, sanitized, unpack_nchw4c

RTOL = 1e-5


def reduce_input(rng, shape, op):
    x = rand(rng, shape)
    return {"max": -np.abs(x) - 0.25, "min": np.abs(x) + 0.25}.get(op, x)


@pytest.mark.parametrize("strategy", STRATEGIES)
@given(**REDUCE_ARGS)
@example(n=1, c=5, h=2, w=3, op="mean", axis=(1,), negative_axes=False, keepdims=True, scope=TEXTURE, group_size=2,
         seed=0)  # a mean over 5 channels in 2 blocks: divided by 5, never by the padded 8 (draws hit it 1 run in 3)
def test_reduce(device, strategy, n, c, h, w, op, axis, negative_axes, keepdims, scope, group_size, seed):
    x = reduce_input(np.random.default_rng(seed), (n, c, h, w), op)
    packed = pack_nchw4c(x, pad_value=np.nan)
    kernel_axis = tuple(a - 4 for a in axis) if negative_axes else axis
    with sanitized(seed):
        func = reduce.reduce(
            packed.shape, c, op, kernel_axis, keepdims, scope=scope, strategy=strategy, group_size=group_size
        )
        y = run_kernel(device, func, packed)
    expected_shape, blocked = reduce.reduce_output(packed.shape, c, kernel_axis, keepdims)
    assert y.shape == expected_shape
    if blocked:
        if 1 in axis:  # one channel left: lane 0, the padding lanes zero
            np.testing.assert_array_equal(y[..., 1:], 0)
        y = unpack_nchw4c(y, 1 if 1 in axis else c)
    magnitudes = reference(np.abs(x), op, axis, keepdims) if op in ("sum", "mean") else None
    assert_close(y, reference(x, op, axis, keepdims), RTOL, scale=magnitudes)


@given(nchw_seed=NCHW_SEEDS, scope=SCOPES, strategy=st.sampled_from(STRATEGIES),
       precision=st.sampled_from(["float32", "float16_acc32"]))
def test_sum_squares(device, nchw_seed, scope, strategy, precision):
    """``sum_hw x * x`` in one kernel (GRN's statistics), float32 out: under float16_acc32 the input
    is stored in half (images, or half buffers) and the output stays float32, so sums of squares
    beyond half's range (65504) stay finite."""
    *nchw, seed = nchw_seed
    x = rand(np.random.default_rng(seed), nchw) * 300
    x[0, 0, 0, 0] = 300.0  # a sum of squares >= 90000: inf in half
    half = precision == "float16_acc32"
    with sanitized(seed):
        func = reduce.reduce(pack_nchw4c(x).shape, nchw[1], "sum", (2, 3), True, scope=scope, strategy=strategy, square=True,
                             out_dtype="float32")
        y = run_kernel(device, func, pack_nchw4c(x, pad_value=np.nan), storage="float16" if half else None, pinned=(1,),
                       half={0} if half and scope == BUFFER else ())
    x_in = x.astype(np.float16) if half else x
    assert_close(unpack_nchw4c(y, nchw[1]), reference(x_in.astype(np.float64) ** 2, "sum", (2, 3), True), RTOL)


def test_sum_squares_takes_sum_only():
    with pytest.raises(ValueError, match="square=True takes op 'sum'"):
        reduce.reduce((1, 1, 2, 2, 4), 4, "mean", square=True)


@given(**SOFTMAX_ARGS)
def test_softmax(device, n, c, h, w, scale, scope, seed):
    x = (rand(np.random.default_rng(seed), (n, c, h, w)) * scale).astype(np.float32)
    with sanitized(seed):
        y = run_kernel(device, reduce.softmax(pack_nchw4c(x).shape, c, scope=scope), pack_nchw4c(x, pad_value=np.nan))
    assert_close(unpack_nchw4c(y, c), reference_softmax(x), RTOL)
    np.testing.assert_array_equal(unpack_nchw4c(y, 4 * y.shape[1])[:, c:], 0)  # padded channels written as 0


def test_ops_reductions_nchw(device):
    """ops.sum/mean/max/min/softmax: NCHW NumPy in and out, numpy/Relax axis and keepdims."""
    rng = np.random.default_rng(5)
    x = rand(rng, (2, 6, 5, 7))
    for op, axis, keepdims in [("mean", (2, 3), False), ("max", 1, True), ("sum", (-3, -2, -1), False)]:
        x_op = reduce_input(rng, x.shape, op)
        y = getattr(ops, op)(x_op, axis, keepdims=keepdims)
        assert_close(y, reference(x_op, op, axis, keepdims), RTOL)
    assert_close(ops.softmax(x), reference_softmax(x), RTOL)


def test_bad_arguments():
    shape = (1, 2, 4, 4, 4)
    x = np.ones((1, 6, 4, 4), np.float32)
    with pytest.raises(NotImplementedError, match="batch axis"):
        reduce.reduce(shape, 6, "sum", (0, 2))
    with pytest.raises(NotImplementedError, match="batch axis"):
        ops.mean(x, axis=-4)
    with pytest.raises(ValueError, match="axis 4 is out of range"):
        ops.sum(x, axis=4)
    with pytest.raises(ValueError, match="repeated"):
        ops.max(x, axis=(1, -3))
    with pytest.raises(ValueError, match="at least one axis"):
        ops.min(x, axis=())
    with pytest.raises(TypeError, match="axis must be an int or a tuple of ints, got 1.0"):
        ops.sum(x, axis=1.0)
    with pytest.raises(NotImplementedError, match=r"axis=None reduces the batch axis too"):
        ops.sum(x, axis=None)
    with pytest.raises(ValueError, match="op must be one of"):
        reduce.reduce(shape, 6, "prod", 1)
    with pytest.raises(ValueError, match="channels=9 does not fit the 2 channel blocks"):
        reduce.reduce(shape, 9, "sum", 1)
    with pytest.raises(ValueError, match="x must be 4-d"):
        ops.sum(np.ones((6, 4, 4), np.float32), axis=1)
    with pytest.raises(NotImplementedError, match="channel axis only"):
        ops.softmax(x, axis=-1)
    with pytest.raises(ValueError, match="channels=3 does not fit"):
        reduce.softmax(shape, 3)
