"""Shared test setup: hypothesis profiles, a per-run kernel cache, the OpenCL device."""

import os
import tempfile

import pytest
from hypothesis import HealthCheck, settings

# CI: few examples per property (the suite must stay under 15 minutes on 2 cores);
# compiled programs are cached for the whole run, so repeated shapes cost nothing.
settings.register_profile(
    "ci", max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=False
)
settings.register_profile("dev", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# deep: thousands of examples per property (hours on PoCL), for a nightly or a soak run.
settings.register_profile(
    "deep", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))

if "TIR_ADRENO_CACHE_DIR" not in os.environ:
    os.environ["TIR_ADRENO_CACHE_DIR"] = tempfile.mkdtemp(prefix="tir-adreno-test-cache-")


@pytest.fixture(scope="session")
def device():
    from tir_adreno.runtime import opencl as runtime

    return runtime.get_device()


@pytest.fixture
def check_bounds(monkeypatch):
    """Kernels built in this test are instrumented by the texture bounds sanitizer
    (``TIR_ADRENO_CHECK_BOUNDS=1``): an out-of-range image access raises BoundsError."""
    from tir_adreno.runtime import bounds

    monkeypatch.setenv(bounds.ENV, "1")
    return True
