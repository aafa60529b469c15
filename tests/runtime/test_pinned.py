"""Pinned staging of the fast run's inputs and outputs ($TIR_ADRENO_PINNED): the same bits as the
ordinary path run after run, fresh inputs each run, outputs never aliased; the knob; the fallback."""


import numpy as np
import pyopencl as cl
import pytest

from tir_adreno import load_model
from tir_adreno.runtime import opencl as runtime
from tir_adreno.runtime.executor import ModelInputError

from helpers.benchmarks import benchmark
from helpers.numeric import rand

host_path = benchmark("host_path")
CHAIN_SIZE, chain_model, chain_reference = host_path.CHAIN_SIZE, host_path.chain_model, host_path.chain_reference


@pytest.fixture(scope="module")
def tiny(device, tiny_saved):
    return load_model(tiny_saved, device)


def test_pinned_and_plain_give_the_same_bits_run_after_run(tiny):
    """Two outputs, three runs of different inputs: every pinned run
    equals the ordinary run of its input, and the arrays a run returned stay as they were
    after the next runs (copies, not the staging)."""
    assert tiny.pinned  # the default, and PoCL gives pinned memory
    rng = np.random.default_rng(11)
    inputs = [rand(rng, (1, 8, 9, 10)) for _ in range(3)]
    tiny.use_pinned(False)
    assert not tiny.pinned
    plain = [tiny.run({"image": x}) for x in inputs]
    tiny.use_pinned(True)
    assert tiny.pinned
    pinned = [tiny.run({"image": x}) for x in inputs]
    kept = [[y.copy() for y in outs] for outs in pinned]
    tiny.run({"image": inputs[0] * 3})  # must not write into what earlier runs returned
    assert not any(np.array_equal(a[0], b[0]) for a, b in zip(plain, plain[1:]))  # the runs differ
    for want, got, same in zip(plain, pinned, kept):
        for w, g, s in zip(want, got, same):
            assert np.isfinite(g).all()
            np.testing.assert_array_equal(g, w)
            np.testing.assert_array_equal(g, s)
    views = [pin.array for pin in tiny._staging[1]]
    assert not any(np.shares_memory(g, v) for outs in pinned for g in outs for v in views)
    profiled = tiny.run({"image": inputs[1]}, profile=True)  # profiled runs keep their own path
    for g, w in zip(profiled, plain[1]):
        np.testing.assert_array_equal(g, w)


def test_environment_turns_it_off_and_release_unmaps(device, monkeypatch):
    x = rand(np.random.default_rng(12), (CHAIN_SIZE,))
    monkeypatch.setenv(runtime.PINNED_ENV, "0")
    cm = chain_model(2, device)
    assert not cm.pinned
    np.testing.assert_array_equal(cm.run([x])[0], chain_reference(x, 2))
    monkeypatch.setenv(runtime.PINNED_ENV, " 1 ")
    cm.use_pinned()
    assert cm.pinned
    pins = cm._staging[0] + cm._staging[1]
    np.testing.assert_array_equal(cm.run([x])[0], chain_reference(x, 2))
    cm.release()
    assert not cm.pinned and all(pin.array is None for pin in pins)
    cm.release()  # twice is fine
    np.testing.assert_array_equal(cm.run([2 * x])[0], chain_reference(2 * x, 2))  # the ordinary path


def test_bad_environment_value_is_a_clear_error(device, monkeypatch):
    monkeypatch.setenv(runtime.PINNED_ENV, "yes")
    with pytest.raises(ValueError, match=r"\$TIR_ADRENO_PINNED must be 0 or 1, got 'yes'"):
        chain_model(2, device)


def test_refused_pinned_memory_falls_back_with_a_warning(device, monkeypatch):
    def refuse(*_args, **_kw):
        raise cl.MemoryError("clCreateBuffer failed: MEM_OBJECT_ALLOCATION_FAILURE")

    monkeypatch.setattr(runtime.PinnedHost, "__init__", refuse)
    with pytest.warns(runtime.PinnedMemoryWarning, match="refused pinned host memory.*ordinary memory"):
        cm = chain_model(3, device)
    assert not cm.pinned
    x = rand(np.random.default_rng(13), (CHAIN_SIZE,))
    np.testing.assert_array_equal(cm.run([x])[0], chain_reference(x, 3))


def test_image_round_trip_through_pinned_arrays(device):
    """The model above keeps its inputs and outputs in buffers; images copy from and to pinned
    host arrays the same way."""
    spec = runtime.TensorSpec("img", (1, 2, 3, 4), "float32", "global.texture")
    src, dst = (runtime.PinnedHost(device, spec.shape, "float32", device.plain_queue) for _ in range(2))
    try:
        x = rand(np.random.default_rng(14), spec.shape)
        np.copyto(src.array, x)
        dst.array[...] = np.nan
        image = device.empty(spec)
        image.enqueue_upload(src.array, device.plain_queue)
        image.enqueue_download(dst.array, device.plain_queue)
        device.plain_queue.finish()
        np.testing.assert_array_equal(dst.array, x)
    finally:
        src.release()
        dst.release()


def test_get_input_fills_the_staging_in_place(device, monkeypatch):
    """An input written into ``get_input``'s array runs without the host copy (the run sees it as
    the staging itself) and gives what the same input gives from ordinary memory, run after run;
    unknown names and an unpinned model are clear errors."""
    rng = np.random.default_rng(15)
    cm = chain_model(3, device)
    staged = cm.get_input(cm.input_names[0])
    assert staged is cm._staging[0][0].array and staged.shape == (CHAIN_SIZE,)
    copies = []
    copyto = np.copyto
    monkeypatch.setattr(np, "copyto", lambda dst, src, **kw: (copies.append(dst.shape), copyto(dst, src, **kw)))
    for _ in range(2):
        x = rand(rng, (CHAIN_SIZE,))
        staged[...] = x
        np.testing.assert_array_equal(cm.run([staged])[0], chain_reference(x, 3))
        np.testing.assert_array_equal(staged, x)  # the run left it as written
    assert copies == []
    cm.run([x])  # an ordinary array is copied in
    assert copies == [(CHAIN_SIZE,)]
    monkeypatch.undo()
    with pytest.raises(ModelInputError, match="unknown input 'nope'"):
        cm.get_input("nope")
    cm.use_pinned(False)
    with pytest.raises(RuntimeError, match="not staged in pinned memory"):
        cm.get_input(cm.input_names[0])
