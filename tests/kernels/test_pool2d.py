"""Pooling kernels (primfuncs.pool2d, ops.*pool2d) against float64 NumPy references on OpenCL.

Both schedules are forced on every property: "thread" (a work item per output pixel)
and "group" (a work group per output pixel, combined in shared memory). Max pooling
inputs are all negative, so a padded position read as 0 instead of -inf shows up. Half
the examples (even seeds) run under the texture bounds sanitizer.
"""

import numpy as np
import pytest
from hypothesis import example, given

from primfuncs import pool2d
from helpers.strategies import ADAPTIVE_POOL_ARGS, STRATEGIES, pool_cases
from tir_adreno import ops, reference
from helpers.numeric import assert_close, pack_nchw4c, rand, run_kernel, sanitized, unpack_nchw4c

RTOL = 1e-5


pool_reference = reference.pool2d  # float64 NCHW pool2d, PyTorch's semantics
adaptive_reference = reference.adaptive_pool2d


def assert_pool_close(actual, reference):
    """-inf exactly where the reference has it (windows with no input), the rest within RTOL."""
    neg = np.isneginf(reference)
    np.testing.assert_array_equal(np.isneginf(actual), neg)
    assert_close(actual[~neg], reference[~neg], RTOL)


def pool_input(rng, shape, pool_type):
    x = rand(rng, shape)
    return -np.abs(x) - 0.25 if pool_type == "max" else x  # all negative: padding must not win a max


# -- properties -------------------------------------------------------------------------------
def _pool_case(pool_type, h, w, pool_size, strides, padding, ceil_mode, count_include_pad, scope, seed, n=1, c=5, dilation=(1, 1)):
    return dict(n=n, c=c, h=h, w=w, pool_type=pool_type, pool_size=pool_size, strides=strides, padding=padding, dilation=dilation,
                ceil_mode=ceil_mode, count_include_pad=count_include_pad, scope=scope, group_size=4, seed=seed)


# Corners random draws rarely hit, each under the sanitizer (even seeds): ceil_mode windows that
# overhang the padding (6 x 6, 3x3 stride 2, pad 1: ceil_mode adds a 4th window per axis that starts
# on the last row, covers the padding row and runs one row past it), averaged with and without the
# padding counted (PyTorch divides by the window clipped to the padded input, never by the
# overhang); asymmetric padding; a window larger than the map.
@example(case=_pool_case("avg", 6, 6, (3, 3), (2, 2), (1, 1, 1, 1), True, True, "global.texture", 0))
@example(case=_pool_case("avg", 6, 6, (3, 3), (2, 2), (1, 1, 1, 1), True, False, "global", 2))
@example(case=_pool_case("avg", 6, 5, (2, 3), (2, 3), (0, 1, 1, 0), True, True, "global.texture", 4, n=2, c=6))
@example(case=_pool_case("max", 6, 5, (3, 2), (2, 2), (1, 0, 0, 1), True, False, "global.texture", 6))
@example(case=_pool_case("avg", 2, 3, (4, 4), (1, 1), (2, 2, 2, 2), True, True, "global", 8, c=3, dilation=(1, 1)))
@pytest.mark.parametrize("strategy", STRATEGIES)
@given(case=pool_cases())
def test_pool2d(device, strategy, case):
    x = pool_input(np.random.default_rng(case["seed"]), (case["n"], case["c"], case["h"], case["w"]), case["pool_type"])
    attrs = {k: case[k] for k in ("pool_size", "strides", "padding", "dilation", "ceil_mode", "count_include_pad")}
    with sanitized(case["seed"]):
        func = pool2d.pool2d(
            pack_nchw4c(x).shape, case["pool_type"], **attrs,
            scope=case["scope"], strategy=strategy, group_size=case["group_size"],
        )
        y = run_kernel(device, func, pack_nchw4c(x))
    assert_pool_close(unpack_nchw4c(y, case["c"]), pool_reference(x, case["pool_type"], **attrs))


@given(**ADAPTIVE_POOL_ARGS)
def test_adaptive_pool2d(device, n, c, h, w, grow, pool_type, scope, strategy, seed):
    """Adaptive windows go through the same kernels as sliding ones (test_pool2d forces both
    schedules on every example); here each example forces one of them."""
    out_size = (max(1, h + grow[0]), max(1, w + grow[1]))
    x = pool_input(np.random.default_rng(seed), (n, c, h, w), pool_type)
    with sanitized(seed):
        func = pool2d.adaptive_pool2d(pack_nchw4c(x).shape, pool_type, out_size, scope=scope, strategy=strategy, group_size=4)
        y = run_kernel(device, func, pack_nchw4c(x))
    assert_pool_close(unpack_nchw4c(y, c), adaptive_reference(x, pool_type, out_size))


# -- fixed cases ------------------------------------------------------------------------------
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_max_pool_padding_is_minus_infinity(device, strategy):
    """All-negative input: a padded tap read as 0 would win every border max."""
    rng = np.random.default_rng(7)
    x = -np.abs(rand(rng, (1, 5, 6, 5))) - 1.0
    attrs = dict(pool_size=(3, 3), strides=(1, 2), padding=(1, 1, 1, 1), dilation=(1, 1), ceil_mode=True)
    y = unpack_nchw4c(run_kernel(device, pool2d.max_pool2d(pack_nchw4c(x).shape, **attrs, strategy=strategy), pack_nchw4c(x)), 5)
    assert np.all(y < -1.0)
    assert_close(y, pool_reference(x, "max", **attrs, count_include_pad=False), RTOL)
    # dilation 2 on a 1x1 input with padding 1: the only window holds padding alone -> -inf (PyTorch)
    x1 = -np.ones((1, 1, 1, 1), np.float32)
    func = pool2d.max_pool2d((1, 1, 1, 1, 4), (2, 2), padding=1, dilation=2, strategy=strategy)
    assert np.all(np.isneginf(run_kernel(device, func, pack_nchw4c(x1))[..., 0]))


@pytest.mark.parametrize("strategy, pool_type", [("thread", "avg"), ("group", "max")])
def test_global_pool_large_window(device, strategy, pool_type):
    """Global pooling of 23x19 (437 taps): many rounds per work item in the group schedule."""
    x = rand(np.random.default_rng(11), (1, 6, 23, 19))
    func = pool2d.global_pool2d(pack_nchw4c(x).shape, pool_type, strategy=strategy)
    y = unpack_nchw4c(run_kernel(device, func, pack_nchw4c(x)), 6)
    assert_close(y, adaptive_reference(x, pool_type, (1, 1)), RTOL)


def test_ops_pooling_nchw(device):
    """ops.*pool2d: NCHW NumPy in and out, argument names and defaults as relax.op.nn
    (one input shape and one output shape: the layout kernels are built once)."""
    rng = np.random.default_rng(3)
    x = rand(rng, (2, 6, 9, 9))
    neg = -np.abs(x) - 0.5
    assert_close(ops.max_pool2d(neg, 3, 2, 1), pool_reference(neg, "max", (3, 3), (2, 2), (1,) * 4, (1, 1), False, False), RTOL)
    ref = pool_reference(x, "avg", (3, 3), (2, 2), (1,) * 4, (1, 1), False, False)  # Relax default: padding excluded
    assert_close(ops.avg_pool2d(x, pool_size=(3, 3), strides=(2, 2), padding=(1, 1)), ref, RTOL)
    assert_close(ops.adaptive_avg_pool2d(x, 5), adaptive_reference(x, "avg", (5, 5)), RTOL)


@pytest.mark.parametrize(
    "extent, size, stride, pad, dilation, ceil_mode, expected",
    [
        (112, 3, 2, 1, 1, False, 56),  # ResNet stem
        (112, 3, 2, 1, 1, True, 57),
        (6, 3, 2, 1, 1, False, 3),
        (6, 3, 2, 1, 1, True, 4),  # partial last window
        (5, 2, 2, 1, 1, True, 3),  # a 4th window would start in the right padding: dropped
        (8, 3, 2, 0, 1, True, 4),
        (7, 3, 2, 0, 1, True, 3),
        (9, 3, 1, 2, 2, False, 9),
        (1, 1, 1, 0, 1, True, 1),
    ],
)
def test_output_size(extent, size, stride, pad, dilation, ceil_mode, expected):
    shape = pool2d.pool2d_output_shape((1, 1, extent, extent, 4), size, stride, pad, dilation, ceil_mode)
    assert shape == (1, 1, expected, expected, 4)


def test_padding_forms():
    assert pool2d.normalize_padding(1) == (1, 1, 1, 1)
    assert pool2d.normalize_padding((1, 2)) == (1, 2, 1, 2)
    assert pool2d.normalize_padding((1, 2, 3, 0)) == (1, 2, 3, 0)


def test_bad_arguments():
    shape = (1, 2, 8, 8, 4)
    x = np.ones((1, 5, 8, 8), np.float32)
    with pytest.raises(ValueError, match="pool_size_h must be >= 1"):
        pool2d.max_pool2d(shape, (0, 2))
    with pytest.raises(ValueError, match="pool_size must be an int or a pair"):
        pool2d.max_pool2d(shape, (2, 2, 2))
    with pytest.raises(TypeError, match="strides must be an int or a tuple of ints, got 1.5"):
        pool2d.max_pool2d(shape, 2, strides=1.5)
    with pytest.raises(ValueError, match="strides_w must be >= 1"):
        pool2d.avg_pool2d(shape, 2, strides=(1, 0))
    with pytest.raises(ValueError, match="padding left=2 is more than half of the window span 3"):
        pool2d.max_pool2d(shape, 3, padding=(1, 2, 1, 1))
    with pytest.raises(ValueError, match="padding must be >= 0"):
        pool2d.max_pool2d(shape, 3, padding=-1)
    with pytest.raises(ValueError, match="padding must be an int, a pair or"):
        pool2d.max_pool2d(shape, 3, padding=(1, 1, 1))
    with pytest.raises(ValueError, match="larger than the padded input"):
        pool2d.max_pool2d((1, 1, 2, 8, 4), 5, padding=1)
    with pytest.raises(ValueError, match="NCHW4c shape"):
        pool2d.max_pool2d((1, 2, 8, 8), 2)
    with pytest.raises(ValueError, match="strategy must be one of"):
        pool2d.max_pool2d(shape, 2, strategy="warp")
    with pytest.raises(ValueError, match="pool_type must be one of"):
        pool2d.pool2d(shape, "min", 2)
    with pytest.raises(ValueError, match="output_size_w must be >= 1"):
        pool2d.adaptive_avg_pool2d(shape, (2, 0))
    with pytest.raises(ValueError, match="scope must be one of"):
        pool2d.max_pool2d(shape, 2, scope="shared")
    with pytest.raises(ValueError, match="x must be 4-d"):
        ops.max_pool2d(np.ones((5, 8, 8), np.float32), 2)
    with pytest.raises(ValueError, match="pool_size_w must be >= 1"):
        ops.avg_pool2d(x, (2, 0))
    with pytest.raises(ValueError, match="padding top=3 is more than half"):
        ops.max_pool2d(x, 3, padding=(3, 0))
    with pytest.raises(TypeError, match="x has dtype int32"):
        ops.adaptive_avg_pool2d(np.ones((1, 5, 8, 8), np.int32), 1)
