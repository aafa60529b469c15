"""tir_adreno.tuning.measure: timing jobs here, in an exported folder without TVM, and over TVM's RPC tracker."""

import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from helpers import ROOT
from helpers.cli import assert_user_error
from helpers.rpc import free_port, start, stop, wait_for

from primfuncs import conv, elementwise
from tir_adreno.codegen import build
from tir_adreno.runtime import cache
from tir_adreno.tuning import measure
from tir_adreno.runtime.bundle import KernelModule

SHAPE = (1, 2, 5, 7, 4)


@pytest.fixture(scope="module")
def modules():
    return {
        "relu": build.build_cached(elementwise.relu(SHAPE)),
        "add": build.build_cached(elementwise.add(SHAPE)),
        "conv2d_nchw4c": build.build_cached(conv.conv2d_nchw4c((1, 8, 6, 6), (8, 8, 3, 3), padding=1)),
    }


def _jobs(modules, copies=1):
    relu, add, conv = modules["relu"], modules["add"], modules["conv2d_nchw4c"]
    broken = KernelModule("__kernel void relu(", relu.functions)  # does not compile
    jobs = []
    for i in range(copies):
        jobs += [
            measure.MeasureJob(f"relu|{i}", ((relu, "relu"),)),
            measure.MeasureJob(f"relu+add|{i}", ((relu, "relu"), (add, "add"))),
            measure.MeasureJob(f"conv|{i}", ((conv, "conv2d_nchw4c"),)),
        ]
    return jobs + [measure.MeasureJob("broken", ((broken, "relu"),)), measure.MeasureJob("no-such-function", ((relu, "gelu"),))]


def _check(results, jobs):
    assert set(results) == {j.key for j in jobs}
    for key, r in results.items():
        assert r.key == key
        if key in ("broken", "no-such-function"):
            assert r.seconds is None and r.error, r
        else:
            assert r.error is None and r.seconds > 0, r
    assert "OpenCL build failed" in results["broken"].error
    assert "gelu" in results["no-such-function"].error


def test_local(modules, device, monkeypatch):
    jobs = _jobs(modules)
    lines, stages = [], []
    time_stage = measure._time_stage

    def recorded(device, module, function, *args):
        stages.append((function, time_stage(device, module, function, *args)))
        return stages[-1][1]

    monkeypatch.setattr(measure, "_time_stage", recorded)
    results = measure.LocalMeasurer(device, warmup=1, repeat=3).measure(jobs, progress=lambda r: lines.append(str(r)))
    _check(results, jobs)
    assert len(lines) == len(jobs) and all(line.startswith("measured ") for line in lines)
    # a job's time is the sum of its stages' times, every stage timed once (no timing ratio: counts)
    assert [f for f, _ in stages] == ["relu", "relu", "add", "conv2d_nchw4c"]  # "broken" and "gelu" fail: not timed
    assert results["relu+add|0"].seconds == stages[1][1] + stages[2][1]
    with pytest.raises(ValueError, match="duplicate key"):
        measure.LocalMeasurer(device).measure(jobs + jobs[:1])


def test_unwritten_output_is_an_error(modules, device):
    # a plan launching nothing leaves the poisoned output as it was
    relu = modules["relu"]
    plan = relu["relu"]
    empty = KernelModule(relu.source, {"relu": type(plan)(plan.name, plan.params, ())})
    result = measure.LocalMeasurer(device, 0, 1).measure_one(measure.MeasureJob("empty", ((empty, "relu"),)))
    assert result.seconds is None and "not fully written" in result.error


def test_export_measure_load_without_tvm(modules, tmp_path):
    jobs = _jobs(modules)
    measure.export_jobs(jobs, tmp_path)
    assert len(list((tmp_path / measure.BUNDLES_DIR).iterdir())) == 4  # modules stored once each
    code = (
        "import sys\n"
        "from tir_adreno.tuning import measure\n"
        f"measure.measure_directory({str(tmp_path)!r}, progress=print, warmup=1, repeat=3)\n"
        "assert 'tvm' not in sys.modules, 'measuring imported TVM'\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("measured ") == len(jobs)
    results = measure.load_results(tmp_path)
    _check(results, jobs)
    # a second run resumes: nothing left to measure, results unchanged
    lines = []
    measure.measure_directory(tmp_path, progress=lines.append)
    assert lines == [] and measure.load_results(tmp_path) == results
    # results of other jobs are refused
    measure.export_jobs(jobs[:2], tmp_path)
    with pytest.raises(ValueError, match="other jobs"):
        measure.load_results(tmp_path)


def test_corrupt_jobs_file(modules, tmp_path):
    measure.export_jobs(_jobs(modules)[:1], tmp_path)
    (bundle,) = (tmp_path / measure.BUNDLES_DIR).iterdir()
    saved = bundle.read_bytes()
    bundle.write_bytes(saved[:-10])
    with pytest.raises(ValueError, match=r"jobs\.json: malformed jobs .*corrupt kernel bundle"):
        measure.measure_directory(tmp_path)
    bundle.write_bytes(saved)
    path = tmp_path / measure.JOBS_FILE
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x20
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"jobs\.json: missing, truncated or corrupt"):
        measure.measure_directory(tmp_path)
    with pytest.raises(ValueError, match=r"results\.json: missing"):
        measure._read_results(tmp_path, None)


# ---------------------------------------------------------------------------------------------
# RPC: re-queueing, with stand-in runners (no tracker)


class FakeRunners(measure.RPCMeasurer):
    """Two runners whose sessions answer from ``_call``: "hang" hangs once, "die" loses its
    runner twice, "always-dies" every time."""

    def __init__(self, release, **kwargs):
        self.calls, self.release = [], release
        super().__init__("fake:1", "k", **kwargs)

    def runners(self):
        return 2

    def _session(self, wanted):
        return (None, self._call) if wanted() else None

    def _call(self, request):
        key = json.loads(request)["jobs"][0]["key"]
        attempt = self.calls.count(key)
        self.calls.append(key)
        if key == "hang" and attempt == 0:
            self.release.wait(30)
        if key == "always-dies" or (key == "die" and attempt < 2):
            raise ConnectionError("runner gone")
        return json.dumps([[key, 1e-6 * (attempt + 1), None]])


def test_rpc_requeue_lost_and_hung_jobs(modules, monkeypatch):
    monkeypatch.setattr(measure, "HANG_GRACE_S", 0.0)
    release = threading.Event()
    relu = modules["relu"]
    jobs = [measure.MeasureJob(k, ((relu, "relu"),)) for k in ("ok1", "hang", "die", "always-dies", "ok2")]
    measurer = FakeRunners(release, timeout_s=0.5)
    try:
        results = measurer.measure(jobs)
    finally:
        release.set()
    assert {k: r.seconds for k, r in results.items() if r.seconds} == {"ok1": 1e-6, "ok2": 1e-6, "hang": 2e-6, "die": 3e-6}
    assert results["always-dies"].seconds is None
    assert results["always-dies"].error == "runner lost 3 times: ConnectionError: runner gone"
    assert measurer.requeued == 1 + 2 + 3


class StuckRequest(FakeRunners):
    """Two runners; the first request for a session never returns (TVM's C++ connect to a runner
    that accepts and never answers has no timeout)."""

    def _session(self, wanted):
        with self.lock:
            first, self.asked = not self.asked, True
        if first:
            self.release.wait(30)
            return None
        return super()._session(wanted)


def test_rpc_a_request_stuck_in_tvm_is_given_up_on(modules, monkeypatch):
    monkeypatch.setattr(measure, "HANG_GRACE_S", 0.0)
    release = threading.Event()
    jobs = [measure.MeasureJob(k, ((modules["relu"], "relu"),)) for k in ("ok1", "ok2", "ok3")]
    measurer = StuckRequest(release, timeout_s=5.0, request_timeout_s=0.5)
    measurer.lock, measurer.asked = threading.Lock(), False
    start = time.monotonic()
    try:
        results = measurer.measure(jobs)
    finally:
        release.set()
    assert time.monotonic() - start < 10  # not the 30 s the stuck request waits
    assert {k: r.seconds for k, r in results.items()} == {"ok1": 1e-6, "ok2": 1e-6, "ok3": 1e-6}  # the other runner took them


# ---------------------------------------------------------------------------------------------
# RPC: a tracker and two runners on localhost


def _runners(port, key):
    try:
        return measure.RPCMeasurer(f"127.0.0.1:{port}", key).runners()
    except measure.TrackerError:
        return 0


def _cli(*args, timeout_s=240):
    return subprocess.run([sys.executable, "-m", "tir_adreno.cli", *args], capture_output=True, text=True,
                          timeout=timeout_s, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_rpc_two_runners_one_killed_then_tune(modules, two_convs, tmp_path):
    jobs = _jobs(modules, copies=2)
    port, key = free_port(), "measure-test"
    procs, logs = [], [tmp_path / "runner0.log", tmp_path / "runner1.log"]
    try:
        procs.append(start(["-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(port),
                             "--port-end", str(port + 1)], tmp_path / "tracker.log"))
        wait_for(lambda: _port_open(port), 30, "the tracker")
        for i, log in enumerate(logs):
            procs.append(start(["-m", "tir_adreno.cli", "serve", "--tracker", f"127.0.0.1:{port}", "--key", key,
                                 "--host", "127.0.0.1", "--port", str(free_port())], log))
        wait_for(lambda: _runners(port, key) == 2, 40, "two runners")
        victim = procs[1]  # runner 0

        def kill_holding_a_session():
            wait_for(lambda: _free(port, key) == 0, 30, "both runners in a session")
            stop(victim)

        # timeout_s: its sessions outlast the tune below (an unclosed one would keep the runner from it)
        measurer = measure.RPCMeasurer(f"127.0.0.1:{port}", key, timeout_s=600, warmup=1, repeat=3, request_timeout_s=10)
        # No race: the first result's progress call (it runs under the measurer's lock, so no job
        # completes meanwhile) waits until both runners hold a session of ours, then kills runner 0.
        # Its thread has a job in flight or sends it the next of the 11 left: lost, re-queued.
        results = measurer.measure(jobs, progress=lambda r: victim.poll() is None and kill_holding_a_session())
        _check(results, jobs)
        assert victim.poll() is not None and measurer.requeued >= 1
        assert "measured " in logs[1].read_text()
        lines = [line for log in logs for line in log.read_text().splitlines() if line.startswith("measured ")]
        assert {line.split(":")[0][len("measured "):] for line in lines} >= {j.key for j in jobs} - {
            k for k in results if "runner lost" in (results[k].error or "")}
        # `tune --rpc-tracker` on the runner left: builds here, measures there, records the layer it
        # tuned (budget 0: one layer; tests/cli/test_tune.py tunes the whole model locally). It runs
        # while `measurer` is still alive (used below), so it gets that runner only if the measurer
        # closed its sessions when it returned (an open one holds the runner for timeout_s, longer
        # than the tune's request for a runner waits).
        records = tmp_path / "records.json"
        before = logs[1].read_text().count("measured ")
        tune = _cli("tune", str(two_convs), "--rpc-tracker", f"127.0.0.1:{port}", "--rpc-key", key,
                    "--target", "pocl", "--records", str(records), "--budget-s", "0")
        assert tune.returncode == 0, tune.stderr[-2000:]
        layers = json.loads(cache.read(records))["layers"]
        assert len(layers) == 1 and tune.stdout.count("winner:") == 1 and "2 layers left for the next run" in tune.stdout
        for entry in layers.values():
            assert entry["default_s"] > 0 and entry["times_s"][entry["name"]] > 0
        assert logs[1].read_text().count("measured ") - before == sum(len(e["times_s"]) for e in layers.values())
        assert measurer.requeued >= 1  # the measurer lived through the tune
    finally:
        for proc in procs:
            stop(proc)


def _free(port, key) -> int:
    from tvm import rpc

    tracker = rpc.connect_tracker("127.0.0.1", port)
    try:
        return tracker.summary()["queue_info"].get(key, {}).get("free", 0)
    finally:
        tracker.close()


def _port_open(port) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def test_rpc_no_tracker(two_convs, monkeypatch):
    from tvm import rpc

    def retrying_client(*args, **kwargs):  # TVM's client retries for 60 s: it must not be reached
        raise AssertionError("TVM's tracker client was called")

    monkeypatch.setattr(rpc, "connect_tracker", retrying_client)
    port = free_port()
    with pytest.raises(measure.TrackerError, match=f"no RPC tracker answers at 127.0.0.1:{port}"):
        measure.RPCMeasurer(f"127.0.0.1:{port}", "k")
    with pytest.raises(measure.TrackerError, match="HOST:PORT"):
        measure.RPCMeasurer("localhost", "k")
    message = f"no RPC tracker answers at 127.0.0.1:{port}"
    assert_user_error(_cli("serve", "--tracker", f"127.0.0.1:{port}", "--key", "k"), message)
    assert_user_error(_cli("tune", str(two_convs), "--rpc-tracker", f"127.0.0.1:{port}", "--target", "pocl"), message)
