"""The host launch path: the ctypes launcher (no events) and the pyopencl fallback give the same
results; $TIR_ADRENO_LAUNCHER picks one; launch errors are exceptions naming the kernel."""

from pathlib import Path

import numpy as np
import pytest

from tir_adreno import load_model
from tir_adreno.runtime import launcher

from helpers.benchmarks import benchmark
from helpers.numeric import rand

host_path = benchmark("host_path")
CHAIN_SIZE, chain_model, chain_reference = host_path.CHAIN_SIZE, host_path.chain_model, host_path.chain_reference

KINDS = ("ctypes", "pyopencl")


@pytest.fixture(scope="module")
def tiny(device, tiny_saved):
    return load_model(tiny_saved, device)


@pytest.fixture(scope="module")
def chain(device):
    return chain_model(5, device)


def test_ctypes_loads_pyopencls_library():
    lib, path = launcher.library()
    assert lib is not None, path
    assert "OpenCL" in path
    maps = Path("/proc/self/maps")
    if maps.exists():  # Linux: the very library pyopencl loaded (one ICD loader for its handles)
        assert path in maps.read_text()
    assert launcher.resolve("auto") == "ctypes"


def test_both_launchers_give_the_profiled_runs_bits(tiny, device):
    rng = np.random.default_rng(3)
    for x in (rand(rng, (1, 8, 9, 10)), rand(rng, (1, 8, 9, 10))):
        profiled = tiny.run({"image": x}, profile=True)  # outputs poisoned first
        assert all(np.isfinite(y).all() for y in profiled)
        for kind in KINDS:
            tiny.use_launcher(kind)
            assert tiny.launcher_kind == kind and tiny.launcher.queue is device.plain_queue
            for got, want in zip(tiny.run({"image": x}), profiled):
                np.testing.assert_array_equal(got, want)
    tiny.use_launcher()
    assert tiny.launcher_kind == "ctypes"  # auto, the library loads here


def test_fast_run_on_the_profiling_queue_still_matches(tiny, device):
    """The "today" variant of benchmarks/host_path.py: the fast path on the profiling queue."""
    x = rand(np.random.default_rng(4), (1, 8, 9, 10))
    want = tiny.run({"image": x}, profile=True)
    tiny.use_launcher("ctypes", "profiling")
    try:
        assert tiny.launcher.queue is device.queue
        for got, ref in zip(tiny.run({"image": x}), want):
            np.testing.assert_array_equal(got, ref)
    finally:
        tiny.use_launcher()
    with pytest.raises(ValueError, match="queue must be 'plain' or 'profiling'"):
        tiny.use_launcher(queue="fast")


def test_bound_call_run_twice_both_ways(device):
    """One LoadedModule call bound once, enqueued twice with new inputs by each launcher."""
    module = chain_model(1, device).kernels["chain"]
    loaded = device.load(module)
    x, y = (device.empty(spec) for spec in module["chain_step"].params)
    bound = loaded.bind("chain_step", [x, y])
    rng = np.random.default_rng(7)
    for kind in KINDS:
        run = launcher.make_launcher(device.plain_queue, bound.launches, kind)
        for _ in range(2):
            data = rand(rng, (CHAIN_SIZE,))
            y.poison()
            x.upload(data)
            run.enqueue()
            device.plain_queue.finish()
            np.testing.assert_array_equal(y.numpy(), chain_reference(data, 1))


def test_chain_of_launches_each_way(chain):
    rng = np.random.default_rng(8)
    for kind in KINDS:
        chain.use_launcher(kind)
        assert len(chain.launcher) == 5
        x = rand(rng, (CHAIN_SIZE,))
        (y,) = chain.run({"x": x})
        np.testing.assert_array_equal(y, chain_reference(x, 5))
    chain.use_launcher()


def test_environment_picks_the_launcher(device, monkeypatch):
    monkeypatch.setenv(launcher.ENV, "pyopencl")
    cm = chain_model(3, device)
    assert cm.launcher_kind == "pyopencl"
    x = rand(np.random.default_rng(1), (CHAIN_SIZE,))
    np.testing.assert_array_equal(cm.run([x])[0], chain_reference(x, 3))
    monkeypatch.setenv(launcher.ENV, " CTYPES ")
    cm.use_launcher()
    assert cm.launcher_kind == "ctypes"


def test_bad_environment_value_is_a_clear_error(device, monkeypatch):
    monkeypatch.setenv(launcher.ENV, "fast")
    with pytest.raises(ValueError, match=r"\$TIR_ADRENO_LAUNCHER must be one of auto, ctypes, pyopencl, got 'fast'"):
        chain_model(2, device)
    with pytest.raises(ValueError, match="launcher must be one of"):
        launcher.make_launcher(device.plain_queue, [], "cuda")


def test_without_the_library_auto_falls_back_and_ctypes_says_why(device, monkeypatch):
    monkeypatch.setattr(launcher, "library", lambda: (None, "no OpenCL library found"))
    cm = chain_model(2, device)
    assert cm.launcher_kind == "pyopencl"
    x = rand(np.random.default_rng(2), (CHAIN_SIZE,))
    np.testing.assert_array_equal(cm.run([x])[0], chain_reference(x, 2))
    with pytest.raises(RuntimeError, match="ctypes launcher: cannot load the OpenCL library"):
        cm.use_launcher("ctypes")


@pytest.mark.parametrize("kind", KINDS)
def test_launch_error_is_an_exception_naming_the_kernel(chain, device, kind):
    too_big = device.cl_device.max_work_group_size * 2
    good = chain.launcher.launches[:2]
    kernel = good[0][0]
    bad = launcher.make_launcher(device.plain_queue, [*good, (kernel, (too_big,), (too_big,))], kind)
    with pytest.raises(launcher.LaunchError, match="chain_step.*INVALID_WORK_GROUP_SIZE") as err:
        bad.enqueue()
    assert err.value.code == -54 and err.value.kernel == "chain_step"
    x = rand(np.random.default_rng(5), (CHAIN_SIZE,))  # the process and the queue still work
    np.testing.assert_array_equal(chain.run([x])[0], chain_reference(x, 5))


def test_replacing_a_kernel_keeps_the_launcher_choice(device):
    cm = chain_model(4, device)
    cm.use_launcher("pyopencl", "profiling")
    cm.replace_kernel("chain", cm.kernels["chain"])  # what `run --kernels DIR` does with an edit
    assert cm.launcher_kind == "pyopencl" and cm.launcher.queue is device.queue
    x = rand(np.random.default_rng(6), (CHAIN_SIZE,))
    np.testing.assert_array_equal(cm.run([x])[0], chain_reference(x, 4))
