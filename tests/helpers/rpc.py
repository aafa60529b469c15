"""Processes for the RPC tests, all on 127.0.0.1: a free port, a process in its own session (so it
is stopped with its workers), waiting for a condition with a deadline."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from helpers import ROOT


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args, log: Path):
    """``python ARGS`` in its own session, output to the file ``log``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    with open(log, "wb") as f:  # a file, not a pipe: the server's worker processes outlive their parent
        return subprocess.Popen([sys.executable, *args], stdout=f, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)


def stop(proc):
    """``proc`` and every process of its session (a server's worker and session processes)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)


def wait_for(predicate, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")
