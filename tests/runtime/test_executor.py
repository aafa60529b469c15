"""The executor's host path: kernel arguments bound once at load, fast vs profiled runs."""

import math

import numpy as np
import onnxruntime
import pytest

from tir_adreno import load_model
from tir_adreno.reference import relative_error

from helpers.numeric import rand
from helpers.onnx_graphs import tiny_model

RTOL = 1e-5  # float32 against onnxruntime: measured at most 2.5e-7


@pytest.fixture(scope="module")
def tiny(device, tiny_saved):
    model = tiny_model()
    compiled = load_model(tiny_saved, device)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return compiled, lambda x: session.run(None, {"image": x})


def test_one_kernel_serves_two_calls(tiny):
    """The case args-bound-once must survive: one compiled kernel called on different tensors."""
    compiled, _ = tiny
    kernels = [c.kernel for c in compiled.plan.calls if c.label.startswith("conv2d")]
    assert len(kernels) > len(set(kernels))


def test_fast_run_matches_profiled_run_and_reference_twice(tiny):
    compiled, reference = tiny
    rng = np.random.default_rng(11)
    x1, x2 = rand(rng, (1, 8, 9, 10)), rand(rng, (1, 8, 9, 10))
    fast1 = compiled.run({"image": x1})
    kept = [y.copy() for y in fast1]
    fast2 = compiled.run([x2])  # other inputs through the same bound arguments
    for a, b in zip(fast1, kept):  # every run returns new arrays
        np.testing.assert_array_equal(a, b)
    for fast, x in ((fast1, x1), (fast2, x2)):
        refs = reference(x)
        assert len(fast) == len(refs) == 2
        for y, ref in zip(fast, refs):
            assert y.shape == ref.shape
            assert relative_error(y, ref) <= RTOL
        # The profiled path (outputs poisoned first) gives the same bits.
        profiled = compiled.run({"image": x}, profile=True)
        for a, b in zip(fast, profiled):
            np.testing.assert_array_equal(a, b)
    assert not np.allclose(fast1[0], fast2[0])
    rows = compiled.profile()
    assert len(rows) == len(compiled.plan.calls)
    assert all(isinstance(r["time_ms"], float) and r["time_ms"] >= 0 for r in rows)
    assert compiled.kernel_time_ms() == pytest.approx(sum(r["time_ms"] for r in rows))
    for bound in (True, False):
        us = compiled.launch_time_us(repeat=3, bound=bound)
        assert math.isfinite(us) and us > 0
    assert compiled.launch_count >= len(compiled.plan.calls)
    assert 0 < compiled.io_time_ms({"image": x1}, repeat=3) < math.inf


def test_kernel_time_needs_a_profiled_run(tiny, tmp_path, device):
    compiled, reference = tiny
    loaded = load_model(compiled.save(tmp_path / "tiny"), device)
    x = rand(np.random.default_rng(2), (1, 8, 9, 10))
    (y, pool) = loaded.run({"image": x})
    assert relative_error(y, reference(x)[0]) <= RTOL
    assert [r["time_ms"] for r in loaded.profile()] == [None] * len(loaded.plan.calls)
    with pytest.raises(RuntimeError, match="profile=True"):
        loaded.kernel_time_ms()
    loaded.run({"image": x}, profile=True)
    assert loaded.kernel_time_ms() > 0
