"""NaN and +-Inf inputs, and comparisons that check NaN/Inf positions as well as the finite values."""

import numpy as np

from helpers.numeric import rand, run_kernel

POISON = 1.0e30  # finite, and no op here can produce it from these inputs


def nonfinite(rng, shape, count, scale=1.0):
    """Normals times ``scale``; ``count`` (>= 3) random positions in the first half of the
    flattened array hold NaN, +Inf, -Inf (each at least once)."""
    x = rand(rng, shape) * np.float32(scale)
    flat = x.reshape(-1)
    pos = rng.choice(flat.size // 2, size=count, replace=False)
    flat[pos] = np.array([np.nan, np.inf, -np.inf], np.float32)[np.arange(count) % 3]
    return x


def run_finite_poison(device, func, *inputs):
    """``run_kernel`` with a finite poison (a NaN poison could pass for a propagated NaN)."""
    out = run_kernel(device, func, *inputs, poison=POISON)
    assert not np.any(out == POISON), "an output element was not written"
    return out


def assert_matches(actual, reference, rtol=0.0):
    """NaN exactly where ``reference`` has NaN, +-Inf where it has them, finite values equal
    to the float64 ``reference`` rounded to float32 (``rtol`` 0: one correctly rounded IEEE
    operation) or within ``rtol`` of the largest finite reference value."""
    reference = np.asarray(reference, np.float64)
    assert np.isnan(reference).any() and np.isfinite(reference).any(), "the case must mix NaN and finite outputs"
    if rtol == 0:
        np.testing.assert_array_equal(actual, reference.astype(actual.dtype))
    else:
        scale = np.abs(reference[np.isfinite(reference)]).max()
        np.testing.assert_allclose(actual, reference, rtol=0, atol=rtol * scale, equal_nan=True)
