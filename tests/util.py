"""Test helpers: random inputs and error measures against float64 references."""

import numpy as np


def rand(rng: np.random.Generator, shape, dtype="float32") -> np.ndarray:
    """Fresh standard-normal values (never zeros or constants)."""
    return rng.standard_normal(shape).astype(dtype)


def rel_error(actual: np.ndarray, reference: np.ndarray) -> float:
    """max |actual - reference| / max |reference| (normwise relative error)."""
    actual = np.asarray(actual, np.float64)
    reference = np.asarray(reference, np.float64)
    assert actual.shape == reference.shape, (actual.shape, reference.shape)
    assert np.all(np.isfinite(actual)), "output has NaN/Inf (an element was not written: poison survived)"
    scale = float(np.max(np.abs(reference), initial=0.0)) or np.finfo(np.float64).tiny
    return float(np.max(np.abs(actual - reference), initial=0.0)) / scale


def assert_close(actual, reference, rtol: float):
    err = rel_error(actual, reference)
    assert err <= rtol, f"relative error {err:.3g} > {rtol:g}"
