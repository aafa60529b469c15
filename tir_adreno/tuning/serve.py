"""``tir-adreno serve``: a measurement runner registered with a TVM RPC tracker.

TVM's RPC server (``tvm.rpc.Server``) runs in a worker process and forks one
process per client session; the function a client calls must be registered in
the process that serves it, so it is registered by the server's init callback
(inherited by every session). It is :data:`measure.REMOTE_FUNCTION`: JSON jobs in
(kernels inline), JSON results out, one ``measured ...`` line printed per job.

Trust (``serve --help``, docs/tuning-and-deployment.md): TVM RPC has no authentication, so the
runner listens on 127.0.0.1 unless told otherwise. The server's worker process stops when ``serve`` is gone (killed included): it
watches its parent (:func:`_stop_with_parent`).
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
import time

from tir_adreno.tuning import measure
from tir_adreno.runtime import opencl as runtime


#: Seconds the tracker has to list the runner once it started (then "registered" is printed).
REGISTER_TIMEOUT_S = 20.0


def _register(device, parent: int) -> None:
    """Runs in the RPC server's process, before it forks sessions."""
    import tvm_ffi

    _stop_with_parent(parent)

    def measure_jobs(request: str) -> str:
        return measure.run_request(str(request), device, progress=lambda r: print(r, flush=True))

    tvm_ffi.register_global_func(measure.REMOTE_FUNCTION, measure_jobs, override=True)


def _stop_with_parent(parent: int, period_s: float = 1.0) -> None:
    """A thread that ends this process once ``parent`` (the ``serve`` process) is gone: a SIGKILLed
    ``serve`` would otherwise leave its server accepting clients. Sessions forked later do not
    inherit the thread; they end with their client or their session timeout."""

    def watch():
        while os.getppid() == parent:
            time.sleep(period_s)
        os._exit(0)

    threading.Thread(target=watch, daemon=True, name="stop-with-parent").start()


def serve(tracker: str, key: str, device=None, host: str = "127.0.0.1", port: int = 9090,
          port_end: int | None = None, custom_addr: str | None = None) -> int:
    """Register a runner for ``key`` with ``tracker`` ("HOST:PORT") and serve until interrupted.

    The OpenCL device is checked here first (DeviceNotFoundError), and so is the tracker
    (measure.TrackerError, within ``measure.TRACKER_TIMEOUT_S``), so mistakes are reported at
    once; "registered" is printed once the tracker lists the runner.
    """
    address = measure.parse_address(tracker)
    if not key:
        raise measure.TrackerError("--key must not be empty")
    dev = runtime.get_device(device)
    measure.check_tracker(address)
    from tvm import rpc

    # TVM's server searches [port, port_end); its default end (9199) is below a high --port.
    port_end = port_end if port_end is not None else max(9199, port + 100)
    server = rpc.Server(host, port, port_end, key=key, tracker_addr=address, custom_addr=custom_addr, silent=True,
                        server_init_callback=functools.partial(_register, device, os.getpid()))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stop the server's processes too (finally)
    try:
        _wait_until_listed(address, key, server)
        print(f"serving {dev.name} as key {key!r} on {host}:{server.port}, registered with tracker {tracker}", flush=True)
        while server.proc is not None and server.proc._proc.poll() is None:
            time.sleep(1.0)
    finally:
        server.terminate()
    return 0


def _wait_until_listed(address, key: str, server, timeout_s: float = REGISTER_TIMEOUT_S) -> None:
    """Return once the tracker lists a runner of ``key`` on the server's port; TrackerError when it
    does not within ``timeout_s`` (or stops answering)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        summary = measure.check_tracker(address)
        for info in summary.get("server_info", []):
            addr = info.get("addr") or ()
            if info.get("key", "").split(":", 1)[-1] == key and len(addr) > 1 and addr[1] == server.port:
                return
        if server.proc is None or server.proc._proc.poll() is not None:
            raise measure.TrackerError(f"the RPC server for key {key!r} stopped before it registered")
        time.sleep(0.2)
    raise measure.TrackerError(f"the tracker at {address[0]}:{address[1]} did not list the runner within {timeout_s:g} s")
