"""``tir-adreno serve``: a measurement runner registered with a TVM RPC tracker.

TVM's RPC server (``tvm.rpc.Server``) runs in a worker process and forks one
process per client session; the function a client calls must be registered in
the process that serves it, so it is registered by the server's init callback
(inherited by every session). It is :data:`measure.REMOTE_FUNCTION`: JSON jobs in
(kernels inline), JSON results out, one ``measured ...`` line printed per job.
Start the tracker with ``python -m tvm.exec.rpc_tracker --host 0.0.0.0 --port 9190``.
"""

from __future__ import annotations

import functools
import signal
import sys
import time

from tir_adreno.tuning import measure
from tir_adreno.runtime import opencl as runtime


def _register(device) -> None:
    """Runs in the RPC server's process, before it forks sessions."""
    import tvm_ffi

    def measure_jobs(request: str) -> str:
        return measure.run_request(str(request), device, progress=lambda r: print(r, flush=True))

    tvm_ffi.register_global_func(measure.REMOTE_FUNCTION, measure_jobs, override=True)


def serve(tracker: str, key: str, device=None, host: str = "0.0.0.0", port: int = 9090,
          port_end: int | None = None, custom_addr: str | None = None) -> int:
    """Register a runner for ``key`` with ``tracker`` ("HOST:PORT") and serve until interrupted.

    The OpenCL device is checked here first (DeviceNotFoundError), and so is the
    tracker (measure.TrackerError), so mistakes are reported at once.
    """
    address = measure.parse_address(tracker)
    if not key:
        raise ValueError("key must not be empty")
    dev = runtime.get_device(device)
    measure.check_tracker(address)
    from tvm import rpc

    # TVM's server searches [port, port_end); its default end (9199) is below a high --port.
    port_end = port_end if port_end is not None else max(9199, port + 100)
    server = rpc.Server(host, port, port_end, key=key, tracker_addr=address, custom_addr=custom_addr, silent=True,
                        server_init_callback=functools.partial(_register, device))
    print(f"serving {dev.name} as key {key!r} on port {server.port}, registered with tracker {tracker}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stop the server's processes too (finally)
    try:
        while server.proc is not None and server.proc._proc.poll() is None:
            time.sleep(1.0)
    except KeyboardInterrupt:
        pass
    finally:
        server.terminate()
    return 0
