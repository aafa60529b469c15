"""Random inputs, error measures against float64 references, and one kernel run on a poisoned output."""

import contextlib
import os
from dataclasses import replace

import numpy as np

from primfuncs._common import TEXTURE
from tir_adreno import ops
from tir_adreno.strategy.packing import pack_nchw4c, pack_oihw4o, unpack_nchw4c  # noqa: F401 (re-exported for tests)
from tir_adreno.reference import relative_error
from tir_adreno.codegen import build
from tir_adreno.runtime import bounds


def rand(rng: np.random.Generator, shape, dtype="float32") -> np.ndarray:
    """Fresh standard-normal values (never zeros or constants)."""
    return rng.standard_normal(shape).astype(dtype)


def as_read(x, half: bool) -> np.ndarray:
    """``x`` in float64 as a kernel reads it: rounded to half first under half storage (float16_acc32)."""
    return np.asarray(x).astype(np.float16).astype(np.float64) if half else np.asarray(x, np.float64)


def rel_error(actual: np.ndarray, reference: np.ndarray) -> float:
    """max |actual - reference| / max |reference| (normwise relative error)."""
    actual = np.asarray(actual, np.float64)
    reference = np.asarray(reference, np.float64)
    assert actual.shape == reference.shape, (actual.shape, reference.shape)
    assert np.all(np.isfinite(actual)), "output has NaN/Inf (an element was not written: poison survived)"
    return relative_error(actual, reference)


def assert_close(actual, reference, rtol: float, scale=None):
    """``actual`` within ``rtol`` of ``reference``, normwise. ``scale``: the same op applied to the
    operands' magnitudes, for sums whose result can cancel to near zero: float32 summation's error
    is bounded relative to sum |terms|, not to |sum| (a mean of 60 normals came out 9.4e-5)."""
    err = rel_error(actual, reference)
    if scale is not None:
        err *= max(float(np.max(np.abs(reference), initial=0.0)), np.finfo(np.float64).tiny)
        err /= max(float(np.max(np.abs(scale), initial=0.0)), np.finfo(np.float64).tiny)
    assert err <= rtol, f"relative error {err:.3g} > {rtol:g}"


def run_split_twice(device, func, storage, inputs, outputs=1):
    """Two launches of a kernel that finishes with a ticket (``excite.excitation_split`` and its
    fused forms: ``inputs``, then partial sums and tickets, then ``outputs`` outputs) on the same
    tensors: the partials set to the sentinel and the tickets to 0 once, the outputs poisoned before
    each launch. Returns each launch's outputs (a tuple of arrays), the partials' bits and the tickets after."""
    from primfuncs import excite

    loaded, name = ops.compile(func, device)
    specs = [replace(spec, storage=storage) if storage and spec.scope == TEXTURE else spec for spec in loaded[name].params]
    tensors = [device.empty(spec).upload(value) for spec, value in zip(specs, inputs)]
    partials, tickets = (device.empty(spec) for spec in specs[len(inputs):-outputs])
    partials.upload(np.full(partials.spec.shape, excite.PARTIAL_SENTINEL, np.int32).view(np.float32))
    tickets.upload(np.zeros(tickets.spec.shape, np.int32))
    outs = []
    for _ in range(2):
        results = [device.empty(spec).poison() for spec in specs[-outputs:]]
        loaded(name, *tensors, partials, tickets, *results)
        outs.append(tuple(r.numpy() for r in results))
    return outs, partials.numpy().view(np.int32), tickets.numpy()


def run_kernel(device, func, *inputs, poison=None, storage=None, pinned=(), half=frozenset()) -> np.ndarray:
    """Run ``func`` on ``inputs`` (NumPy arrays in its parameters' scopes) and a poisoned output
    (NaN, or the value ``poison``: tests of NaN outputs need a finite one); its texture
    parameters stored in ``storage`` images (e.g. "float16"; None: their dtype) but those at the
    positions ``pinned`` (a kernel's float32 statistics); its buffer parameters at the positions
    ``half`` in half buffers (the kernel built for them, as float16_acc32 stores a model's;
    ``build.ALL_BUFFERS``: every float32 buffer parameter)."""
    loaded, name = ops.compile(func, device, half=half if half == build.ALL_BUFFERS else frozenset(half))
    specs = [replace(spec, storage=storage) if storage and spec.scope == TEXTURE and k not in pinned else spec
             for k, spec in enumerate(loaded[name].params)]
    tensors = [device.empty(spec).upload(value) for spec, value in zip(specs, inputs)]
    out = device.empty(specs[-1])
    out = out.poison() if poison is None else out.upload(np.full(out.spec.shape, poison, out.spec.dtype))
    loaded(name, *tensors, out)
    return out.numpy()


@contextlib.contextmanager
def sanitized(seed: int):
    """Kernels built inside run under the texture bounds sanitizer when ``seed`` is even: half of a
    property's examples. PoCL returns 0 for an out-of-range image read, which equals the padding,
    so without it a conv that lost a coordinate clamp passes every numeric check. (Odd seeds leave
    ``$TIR_ADRENO_CHECK_BOUNDS`` as it is: a run with it set sanitizes every example.)"""
    if seed % 2:
        yield
        return
    old = os.environ.get(bounds.ENV)
    os.environ[bounds.ENV] = "1"
    try:
        yield
    finally:
        if old is None:
            del os.environ[bounds.ENV]
        else:
            os.environ[bounds.ENV] = old
