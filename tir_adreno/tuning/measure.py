"""Timing built kernels: here, in a folder carried to another machine, or over TVM's RPC tracker.

A :class:`MeasureJob` is one candidate: its stages, each a built
:class:`~tir_adreno.runtime.bundle.KernelModule` and a function name, run in order. Its
time is the sum over the stages of the median OpenCL event time after warm-up
(``LoadedModule.time``), every stage on its own tensors: the inputs hold seeded
random data, the output (the last parameter) is poisoned first. A job that fails
to build or launch gets an error result; it never stops the others.

Three ways to run jobs, one result type:

- :class:`LocalMeasurer`: on an OpenCL device of this machine;
- :func:`export_jobs` here, :func:`measure_directory` on a machine with only
  numpy + pyopencl (no TVM), :func:`load_results` back here;
- :class:`RPCMeasurer`: spread over every runner (``tir-adreno serve``,
  :mod:`tir_adreno.tuning.serve`) registered under one key with a TVM RPC tracker.

This module imports no TVM; :class:`RPCMeasurer` imports ``tvm.rpc`` when used.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import socket
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tir_adreno.runtime import cache, opencl as runtime
from tir_adreno.runtime.bundle import KernelModule
from tir_adreno.runtime.errors import UserError

FORMAT = 1


class FolderError(UserError, ValueError):
    """A file of an exported folder (jobs, results) is missing, corrupt or of another version."""


JOBS_FILE = "jobs.json"
RESULTS_FILE = "results.json"
BUNDLES_DIR = "bundles"
#: The global function a runner registers (``tir_adreno.tuning.serve``).
REMOTE_FUNCTION = "tir_adreno.measure"


@dataclass(frozen=True)
class MeasureJob:
    """One candidate to time: ``stages`` of (module, function name), run in order."""

    key: str  # unique: "<layer key>|<candidate name>"
    stages: tuple[tuple[KernelModule, str], ...]


@dataclass(frozen=True)
class MeasureResult:
    """``seconds``: sum over the stages of the median event time; None (and ``error``) when it failed."""

    key: str
    seconds: float | None
    error: str | None = None

    def __str__(self) -> str:
        if self.seconds is None:
            return f"measured {self.key}: error: {self.error}"
        return f"measured {self.key}: {self.seconds * 1e6:.1f} us"


# ---------------------------------------------------------------------------------------------
# Measuring on this machine


def _fill(device: runtime.Device, spec, rng) -> runtime.Tensor:
    if np.dtype(spec.dtype).kind == "f":
        data = rng.standard_normal(spec.shape).astype(spec.dtype)
    else:
        data = rng.integers(0, 4, spec.shape).astype(spec.dtype)
    return device.empty(spec).upload(data)


def _time_stage(device: runtime.Device, module: KernelModule, function: str, rng, warmup: int, repeat: int) -> float:
    loaded = device.load(module)
    *inputs, output = module[function].params
    poisoned = output.dtype in runtime.POISON
    out = device.empty(output).poison() if poisoned else device.empty(output)
    seconds = loaded.time(function, [_fill(device, spec, rng) for spec in inputs] + [out], warmup, repeat)
    unwritten = int(np.isnan(out.numpy()).sum()) if poisoned else 0
    if unwritten:  # inputs are finite, so NaN is poison a launch never overwrote
        raise RuntimeError(f"{function}: output {output.name} not fully written ({unwritten} elements)")
    return seconds


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:300]}"


class LocalMeasurer:
    """Times jobs on ``device`` (a name substring or :class:`runtime.Device`; default: ``runtime.get_device()``)."""

    def __init__(self, device=None, warmup: int = 2, repeat: int = 10):
        if warmup < 0 or repeat < 1:
            raise ValueError(f"warmup must be >= 0 and repeat >= 1, got {warmup}, {repeat}")
        self.device = runtime.get_device(device)
        self.warmup, self.repeat = warmup, repeat

    def measure_one(self, job: MeasureJob, seed: int = 0) -> MeasureResult:
        rng = np.random.default_rng(seed)
        try:
            seconds = sum(_time_stage(self.device, m, f, rng, self.warmup, self.repeat) for m, f in job.stages)
        except Exception as err:  # a candidate that fails loses; it does not stop the run
            return MeasureResult(job.key, None, _one_line(err))
        return MeasureResult(job.key, float(seconds))

    def measure(self, jobs, progress=None) -> dict[str, MeasureResult]:
        """Results by job key; ``progress(result)`` after each job (``str(result)`` is one line)."""
        out = {}
        for job in _unique(jobs):
            out[job.key] = self.measure_one(job)
            if progress:
                progress(out[job.key])
        return out


def _unique(jobs) -> list[MeasureJob]:
    jobs = list(jobs)
    seen = set()
    for job in jobs:
        if job.key in seen:
            raise ValueError(f"jobs: duplicate key {job.key!r}")
        seen.add(job.key)
    return jobs


# ---------------------------------------------------------------------------------------------
# Jobs as data: {"jobs": [{"key", "stages": [[bundle id, function], ...]}]} + bundles by id


def _pack(jobs) -> tuple[list[dict], dict[str, KernelModule]]:
    bundles, ids = {}, {}
    entries = []
    for job in _unique(jobs):
        stages = []
        for module, function in job.stages:
            if id(module) not in ids:
                ids[id(module)] = cache.key("bundle", module.to_json())[:20]
                bundles[ids[id(module)]] = module
            stages.append([ids[id(module)], function])
        entries.append({"key": job.key, "stages": stages})
    return entries, bundles


def _unpack(entries, load, where: str) -> list[MeasureJob]:
    """Jobs from packed ``entries``; ``load(bundle id)`` reads a module (once per id)."""
    modules = {}

    def bundle(bundle_id):
        if bundle_id not in modules:
            modules[bundle_id] = load(bundle_id)
        return modules[bundle_id]

    try:
        return [MeasureJob(e["key"], tuple((bundle(b), str(f)) for b, f in e["stages"])) for e in entries]
    except (KeyError, TypeError, ValueError) as err:
        raise FolderError(f"{where}: malformed jobs ({_one_line(err)})") from None


def _read_doc(path: Path, what: str, hint: str) -> tuple[dict, bytes]:
    """The JSON document of an atomic checked file (``cache.write``) and its payload; ValueError naming ``path``."""
    payload = cache.read(path)
    if payload is None:
        raise FolderError(f"{path}: missing, truncated or corrupt {what} file ({hint})")
    try:
        doc = json.loads(payload.decode())
        fmt = doc.get("format")
    except (ValueError, AttributeError) as err:
        raise FolderError(f"{path}: unreadable {what} file ({_one_line(err)})") from None
    if fmt != FORMAT:
        raise FolderError(f"{path}: {what} format {fmt} != {FORMAT} ({hint})")
    return doc, payload


def export_jobs(jobs, directory) -> None:
    """Write ``jobs`` to ``directory``: ``bundles/<id>.json`` then ``jobs.json``, each atomic and checksummed."""
    directory = Path(directory)
    entries, bundles = _pack(jobs)
    for bundle_id, module in bundles.items():
        path = directory / BUNDLES_DIR / f"{bundle_id}.json"
        if cache.read(path) is None:
            module.save(path)
    doc = {"format": FORMAT, "jobs": entries}
    cache.write(directory / JOBS_FILE, json.dumps(doc, indent=0).encode())


def _read_jobs(directory: Path) -> tuple[list[MeasureJob], str]:
    """The jobs in ``directory`` and a digest of them (results are tied to it)."""
    path = directory / JOBS_FILE
    doc, payload = _read_doc(path, "jobs", "export the jobs again")
    jobs = _unpack(doc.get("jobs"), lambda b: KernelModule.load(directory / BUNDLES_DIR / f"{b}.json"), str(path))
    return jobs, cache.key("jobs", payload)[:20]


def _results_doc(device: runtime.Device, digest: str, results: dict) -> bytes:
    rows = {k: {"seconds": r.seconds, "error": r.error} for k, r in results.items()}
    device_info = {"name": device.name, "driver": device.cl_device.driver_version.strip()}
    return json.dumps({"format": FORMAT, "jobs": digest, "device": device_info, "results": rows}, indent=1).encode()


def _read_results(directory: Path, digest: str | None) -> tuple[dict[str, MeasureResult], dict]:
    """The results in ``directory`` and the device they were measured on."""
    path = directory / RESULTS_FILE
    doc, _ = _read_doc(path, "results", "measure the jobs there again")
    try:
        results = {k: MeasureResult(k, r["seconds"], r["error"]) for k, r in doc["results"].items()}
    except (KeyError, TypeError, AttributeError) as err:
        raise FolderError(f"{path}: unreadable results file ({_one_line(err)})") from None
    if digest is not None and doc.get("jobs") != digest:
        raise FolderError(f"{path}: measured for other jobs than {directory / JOBS_FILE} (measure again)")
    return results, doc.get("device") or {}


def measure_directory(directory, device=None, progress=None, warmup: int = 2, repeat: int = 10) -> None:
    """Time the jobs of :func:`export_jobs` in ``directory`` on ``device``; writes ``results.json``.

    Needs numpy and pyopencl only. Resumable: results are saved after every job, and
    a second run skips the jobs already measured for the same ``jobs.json``.
    """
    directory = Path(directory)
    jobs, digest = _read_jobs(directory)
    measurer = LocalMeasurer(device, warmup, repeat)
    try:
        results, measured_on = _read_results(directory, digest)
    except ValueError:
        results, measured_on = {}, {}
    if measured_on.get("name") != measurer.device.name:
        results = {}  # resume only what this device measured
    for job in jobs:
        if job.key in results:
            continue
        results[job.key] = measurer.measure_one(job)
        cache.write(directory / RESULTS_FILE, _results_doc(measurer.device, digest, results))
        if progress:
            progress(results[job.key])
    if not jobs:
        cache.write(directory / RESULTS_FILE, _results_doc(measurer.device, digest, results))


def load_results(directory) -> dict[str, MeasureResult]:
    """The results :func:`measure_directory` wrote (checked against ``jobs.json`` when it is there)."""
    directory = Path(directory)
    digest = _read_jobs(directory)[1] if (directory / JOBS_FILE).exists() else None
    return _read_results(directory, digest)[0]


# ---------------------------------------------------------------------------------------------
# Whole models (``tune``'s placement in context)

#: Saved models (one folder per variant, no weights) that ``tune --export`` puts in the folder.
CONTEXT_DIR = "context"


def time_model(compiled, runs: int = 5, seed: int = 0) -> float:
    """Median summed kernel seconds (OpenCL events) of ``runs`` profiled runs of a compiled or
    loaded model, after a warm-up run, on seeded random inputs."""
    rng = np.random.default_rng(seed)
    tensors = compiled.plan.tensors
    inputs = {n: rng.standard_normal(tensors[i].shape).astype(tensors[i].dtype) for n, i in compiled.plan.inputs}
    compiled.run(inputs)  # warm-up: first launches build per-work-group code on some drivers
    samples = []
    for _ in range(runs):
        compiled.run(inputs, profile=True)
        samples.append(compiled.kernel_time_ms() / 1e3)
    return float(np.median(samples))


def measure_context(directory, device=None, runs: int = 5, progress=None) -> dict | None:
    """Time the saved whole-model variants in ``directory``/``context`` (TVM-free); writes their
    seconds next to them, tied to the records they came from. None when there are none."""
    from tir_adreno.runtime.executor import load_model

    folder = Path(directory) / CONTEXT_DIR
    if not has_context(directory):
        return None
    dev = runtime.get_device(device)
    times = {}
    for path in sorted(p for p in folder.iterdir() if p.is_dir()):
        times[path.name] = time_model(load_model(path, dev, random_weights=0), runs)
        if progress:
            progress(f"whole model {path.name}: {times[path.name] * 1e3:.3f} ms (median of {runs} profiled runs)")
    doc = {"variants": (folder / "variants.json").read_text(), "device": dev.name, "model_s": times}
    cache.write(folder / RESULTS_FILE, json.dumps(doc).encode())
    return times


def load_context_results(directory, digest: str) -> dict | None:
    """Seconds per variant folder measured by :func:`measure_context` for the records of
    ``digest``; None when not measured (or measured for other records)."""
    payload = cache.read(Path(directory) / CONTEXT_DIR / RESULTS_FILE)
    doc = json.loads(payload) if payload is not None else None
    if not doc or doc.get("variants") != digest:
        return None
    return {k: float(v) for k, v in doc["model_s"].items()}


def has_context(directory) -> bool:
    """Whether ``directory`` holds whole-model variants to time (:func:`measure_context`)."""
    return (Path(directory) / CONTEXT_DIR / "variants.json").exists()


# ---------------------------------------------------------------------------------------------
# Over TVM's RPC tracker


class TrackerError(UserError, ConnectionError):
    """The RPC tracker does not answer, or no runner is registered under the key."""


def parse_address(text: str, what: str = "tracker") -> tuple[str, int]:
    """``"HOST:PORT"`` -> (host, port); TrackerError naming ``what`` otherwise."""
    host, sep, port = str(text).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise TrackerError(f"{what} must be HOST:PORT, got {text!r}")
    return host, int(port)


#: Seconds a tracker has to answer: the connection, its handshake and each reply (README, docs).
TRACKER_TIMEOUT_S = 10.0


def check_tracker(address: tuple[str, int], timeout_s: float = TRACKER_TIMEOUT_S) -> dict:
    """The summary of the TVM RPC tracker at ``address``; TrackerError unless it answers as one
    within ``timeout_s`` (TVM's own client retries for 60 s and then waits on a silent peer forever)."""
    where = f"{address[0]}:{address[1]}"
    try:
        with tracker_socket(address, timeout_s) as sock:
            from tvm.rpc import base

            base.sendjson(sock, [base.TrackerCode.SUMMARY])
            value = base.recvjson(sock)
    except TimeoutError:
        raise TrackerError(f"the RPC tracker at {where} does not answer (nothing within {timeout_s:g} s)") from None
    except (ConnectionRefusedError, socket.gaierror) as err:
        raise TrackerError(f"no RPC tracker answers at {where} ({err.strerror or type(err).__name__})") from None
    except (OSError, ValueError, struct.error, UnicodeDecodeError) as err:
        if isinstance(err, TrackerError):
            raise
        raise TrackerError(f"{where} is not a TVM RPC tracker ({_one_line(err)})") from None
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[1], dict)):
        raise TrackerError(f"{where} is not a TVM RPC tracker (it answered {str(value)[:60]})")
    return value[1]


def tracker_socket(address: tuple[str, int], timeout_s: float) -> socket.socket:
    """A socket to the tracker at ``address`` past TVM's tracker handshake, every operation bounded
    by ``timeout_s`` (TimeoutError); TrackerError when the peer answers the handshake wrongly."""
    from tvm.rpc import base

    sock = socket.create_connection(address, timeout=timeout_s)
    try:
        sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
        (magic,) = struct.unpack("<i", base.recvall(sock, 4))
        if magic != base.RPC_TRACKER_MAGIC:
            raise TrackerError(f"{address[0]}:{address[1]} is not a TVM RPC tracker (wrong handshake)")
    except BaseException:
        sock.close()
        raise
    return sock


def _timed_tracker(address: tuple[str, int], timeout_s: float):
    """TVM's tracker client (``rpc.connect_tracker``) whose socket waits ``timeout_s`` at most."""
    from tvm.rpc.client import TrackerSession

    class TimedTrackerSession(TrackerSession):
        def _connect(self):
            self._sock = tracker_socket(self._addr, timeout_s)

    return TimedTrackerSession(address)


def encode_request(jobs, warmup: int, repeat: int) -> str:
    """The JSON a runner's ``tir_adreno.tuning.measure`` takes: the jobs with their modules inline."""
    entries, bundles = _pack(jobs)
    return json.dumps({"format": FORMAT, "jobs": entries, "warmup": warmup, "repeat": repeat,
                       "bundles": {k: m.to_json() for k, m in bundles.items()}})


def run_request(request: str, device=None, progress=None) -> str:
    """A runner's side of :func:`encode_request`: measure on ``device``, results as JSON."""
    doc = json.loads(request)
    if doc.get("format") != FORMAT:
        raise ValueError(f"request format {doc.get('format')} != {FORMAT} (client and runner versions differ)")
    measurer = LocalMeasurer(device, doc["warmup"], doc["repeat"])
    jobs = _unpack(doc.get("jobs"), lambda bundle_id: KernelModule.from_json(doc["bundles"][bundle_id]), "request")
    results = measurer.measure(jobs, progress)
    return json.dumps([[r.key, r.seconds, r.error] for r in results.values()])


class RPCMeasurer:
    """Times jobs on the runners registered under ``key`` with the TVM RPC tracker at ``tracker`` ("HOST:PORT").

    One thread per runner holds a session and sends it one job at a time. A job
    whose runner dies or hangs is re-queued, at most ``max_attempts`` times in all
    (a runner ends a session after ``timeout_s``; sessions are renewed before that);
    a thread that lost its runner requests another one for up to
    ``request_timeout_s``. Jobs no runner is left to take get error results.
    Nothing is built here: the jobs carry their kernels.
    """

    def __init__(self, tracker: str, key: str, timeout_s: float = 600.0, warmup: int = 2, repeat: int = 10,
                 max_attempts: int = 3, request_timeout_s: float = 60.0):
        self.address = parse_address(tracker)
        if not key:
            raise TrackerError("the RPC key must not be empty")
        self.key, self.timeout_s, self.warmup, self.repeat = key, timeout_s, warmup, repeat
        self.max_attempts, self.request_timeout_s = max_attempts, request_timeout_s
        self.requeued = 0  # jobs handed back after their runner was lost (for reports and tests)
        self.runners()  # fail now, before anything is built, when the tracker or runners are missing

    def runners(self) -> int:
        """How many runners of the key are registered, busy or free (TrackerError when none)."""
        summary = check_tracker(self.address)
        servers = [s["key"].split(":", 1)[-1] for s in summary.get("server_info", [])]
        if self.key not in servers:
            known = ", ".join(sorted(set(servers))) or "none"
            raise TrackerError(f"no runner with key {self.key!r} at tracker {self.address[0]}:{self.address[1]} "
                               f"(keys registered: {known}); start one with `tir-adreno serve`")
        return servers.count(self.key)

    def _session(self, wanted):
        """(session, measure function) of a free runner, or None when none came within
        ``request_timeout_s`` or ``wanted()`` turned false meanwhile."""
        deadline = time.monotonic() + self.request_timeout_s
        while wanted() and time.monotonic() < deadline:
            try:
                return self._request()
            except (OSError, RuntimeError):
                time.sleep(0.2)
        return None

    def _request(self):
        """One request to the tracker, waiting 2 s at most (so a thread stops waiting once the work is done).

        The session is bound only in this short-lived frame: TVM's failed requests leave
        reference cycles that keep their callers' frames, and with them any session they
        hold, alive until the garbage collector runs (the runner stays busy meanwhile).
        """
        tracker = _timed_tracker(self.address, 2.0)
        try:
            session = tracker.request(self.key, session_timeout=self.timeout_s, max_retry=1)
        finally:
            tracker.close()
        try:
            return session, session.get_function(REMOTE_FUNCTION)
        except Exception:  # not a tir-adreno runner
            session = None
            raise

    def measure(self, jobs, progress=None) -> dict[str, MeasureResult]:
        """Results by job key; ``progress(result)`` as each arrives, one call at a time (under a lock)."""
        jobs = _unique(jobs)
        if not jobs:
            return {}
        work = _WorkQueue(jobs, self.max_attempts, progress)
        threads = [threading.Thread(target=self._worker, args=(work,), daemon=True)
                   for _ in range(min(self.runners(), len(jobs)))]
        for t in threads:
            t.start()
        # the runner kills a session at timeout_s and the error comes back; this is for when even that is lost,
        # and for a request stuck where TVM does not time out (its C++ connect to the runner handed out)
        work.supervise(threads, self.timeout_s + HANG_GRACE_S, self.request_timeout_s + HANG_GRACE_S)
        self.requeued += work.requeued
        for job, _ in work.queue:  # every runner was lost
            work.finish(MeasureResult(job.key, None, f"no runner with key {self.key!r} left to measure it"))
        return work.results

    def _worker(self, work: "_WorkQueue") -> None:
        """One runner's thread: a session, then one job at a time until the work is done or the runner is gone."""
        session, opened = None, 0.0
        try:
            while True:
                if session is None or time.monotonic() - opened > self.timeout_s / 2:
                    session = None  # end the old session first: its runner becomes free for our request
                    with work.requesting():
                        session, opened = self._session(work.pending), time.monotonic()
                    if session is None:
                        return
                item = work.take()
                if item is None:
                    return
                token, job = item
                try:
                    reply = session[1](encode_request([job], self.warmup, self.repeat))
                    ((key, seconds, error),) = json.loads(reply)
                    kept = work.complete(token, MeasureResult(key, seconds, error))
                except Exception as err:  # the runner died, timed out or dropped the connection
                    session = None
                    kept = work.complete(token, lost=_one_line(err))
                if not kept:  # given up on as hung: this thread's session is unusable
                    return
        finally:
            session = None  # this frame may outlive the thread (see _request): close the session now


#: Seconds past ``timeout_s`` after which a job without an answer is taken from its runner.
HANG_GRACE_S = 30.0


class _WorkQueue:
    """The jobs of one :meth:`RPCMeasurer.measure` call, shared by its runner threads."""

    def __init__(self, jobs, max_attempts: int, progress):
        self.queue = collections.deque((job, 0) for job in jobs)
        self.flight = {}  # token -> (job, attempts, started, thread)
        self.given_up = set()  # threads whose job was taken from them, or that never got a session
        self.requests = {}  # thread -> when it started asking the tracker for a session
        self.results: dict[str, MeasureResult] = {}
        self.requeued = 0
        self.max_attempts, self.progress = max_attempts, progress
        self.cond = threading.Condition()
        self._tokens = itertools.count()

    def pending(self) -> bool:
        with self.cond:
            return bool(self.queue or self.flight)

    @contextlib.contextmanager
    def requesting(self):
        """The calling thread asks for a session meanwhile (watched by :meth:`supervise`)."""
        with self.cond:
            self.requests[threading.current_thread()] = time.monotonic()
        try:
            yield
        finally:
            with self.cond:
                self.requests.pop(threading.current_thread(), None)

    def take(self):
        """(token, job) to measure, or None when no work is left (or this thread was given up on)."""
        with self.cond:
            if threading.current_thread() in self.given_up:
                return None
            while not self.queue and self.flight:
                self.cond.wait()  # a job in flight elsewhere may come back
            if not self.queue:
                return None
            job, attempts = self.queue.popleft()
            token = next(self._tokens)
            self.flight[token] = (job, attempts, time.monotonic(), threading.current_thread())
            return token, job

    def finish(self, result: MeasureResult) -> None:
        self.results[result.key] = result
        if self.progress:
            self.progress(result)

    def _lose(self, token, why: str) -> None:
        job, attempts, _, _ = self.flight.pop(token)
        self.requeued += 1
        if attempts + 1 < self.max_attempts:
            self.queue.append((job, attempts + 1))
        else:
            self.finish(MeasureResult(job.key, None, f"runner lost {attempts + 1} times: {why}"))
        self.cond.notify_all()

    def complete(self, token, result: MeasureResult | None = None, lost: str | None = None) -> bool:
        """Hand a job back: its result, or why its runner was lost (re-queued). False when it was given up on."""
        with self.cond:
            if token not in self.flight:
                return False
            if result is None:
                self._lose(token, lost)
            else:
                del self.flight[token]
                self.finish(result)
                self.cond.notify_all()
            return True

    def supervise(self, threads, hang_s: float, request_s: float = float("inf")) -> None:
        """Wait for ``threads``; a job without an answer after ``hang_s`` is re-queued and its thread
        left behind, and so is a thread that asked for a session for more than ``request_s``."""
        while True:
            with self.cond:
                now = time.monotonic()
                for token, (_, _, started, thread) in list(self.flight.items()):
                    if now - started > hang_s:
                        self.given_up.add(thread)
                        self._lose(token, f"no answer in {hang_s:.0f} s")
                self.given_up.update(t for t, since in self.requests.items() if now - since > request_s)
                if not any(t.is_alive() and t not in self.given_up for t in threads):
                    return
                self.cond.wait(0.5)
