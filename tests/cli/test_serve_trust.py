"""`serve` and the RPC tracker (issue 36): the runner listens on loopback unless told otherwise and
says why in --help; it stops when `serve` is killed; a tracker that accepts and never answers ends
`tune` and `serve` with one line and exit 2 within the documented timeout. Everything on 127.0.0.1."""

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
from tir_adreno.cli.args import build_parser
from tir_adreno.tuning.measure import TRACKER_TIMEOUT_S


def test_serve_defaults_to_loopback_and_states_the_trust_model(run_cli):
    args = build_parser("").parse_args(["serve", "--tracker", "127.0.0.1:9190", "--key", "k"])
    assert args.host == "127.0.0.1"
    res = run_cli("serve", "--help")
    assert res.returncode == 0
    text = " ".join(res.stdout.split())
    for words in ("TVM RPC has no authentication", "run it as the runner's user", "listens on 127.0.0.1 unless --host",
                  "SSH tunnel", "default 127.0.0.1"):
        assert words in text, words


def _listening(port: int) -> list[str]:
    """Local addresses (hex, as /proc/net/tcp writes them) listening on ``port``, IPv4 and IPv6."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if os.path.exists(table):
            with open(table) as f:
                for line in f.readlines()[1:]:
                    local, state = line.split()[1], line.split()[3]
                    address, hex_port = local.rsplit(":", 1)
                    if int(hex_port, 16) == port and state == "0A":  # LISTEN
                        found.append(address)
    return found


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="reads the listening sockets from /proc (Linux)")
def test_serve_listens_on_loopback_and_stops_with_its_parent(tmp_path):
    tracker_port, runner_port = free_port(), free_port()
    tracker = start(["-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(tracker_port),
                      "--port-end", str(tracker_port + 1)], tmp_path / "tracker.log")
    serve = None
    try:
        wait_for(lambda: _listening(tracker_port), 60, "tracker")
        serve = start(["-m", "tir_adreno.cli", "serve", "--tracker", f"127.0.0.1:{tracker_port}", "--key", "loopback",
                        "--port", str(runner_port), "--port-end", str(runner_port + 1)], tmp_path / "serve.log")
        wait_for(lambda: "registered" in (tmp_path / "serve.log").read_text() or serve.poll() is not None, 120, "registration")
        line = (tmp_path / "serve.log").read_text()
        assert f"on 127.0.0.1:{runner_port}, registered with tracker" in line, line
        assert _listening(runner_port) == ["0100007F"], _listening(runner_port)  # 127.0.0.1 only, not 0.0.0.0
        serve.kill()  # SIGKILL: no clean-up of its own; its server process must notice
        serve.wait(10)
        wait_for(lambda: not _listening(runner_port), 15, "stop of the runner's server process")
    finally:
        for proc in (serve, tracker):
            if proc is not None:
                stop(proc)  # its session: the tracker's popen_worker, and a server process that outlived serve


class _SilentTracker:
    """A TCP port on 127.0.0.1 that accepts connections and never answers."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.held, self.stopped = [], False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopped:
            try:
                self.held.append(self.sock.accept()[0])
            except OSError:
                return

    def close(self):
        self.stopped = True
        self.sock.close()
        for conn in self.held:
            conn.close()


def test_an_unanswering_tracker_ends_tune_and_serve_with_exit_2(two_convs):
    silent = _SilentTracker()
    try:
        where = f"127.0.0.1:{silent.port}"
        commands = {"tune": ["tune", str(two_convs), "--rpc-tracker", where, "--target", "pocl"],
                    "serve": ["serve", "--tracker", where, "--key", "k"]}
        start = time.monotonic()
        procs = {name: subprocess.Popen([sys.executable, "-m", "tir_adreno.cli", *argv], cwd=ROOT, text=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE) for name, argv in commands.items()}
        for name, proc in procs.items():
            out, err = proc.communicate(timeout=TRACKER_TIMEOUT_S + 120)
            elapsed = time.monotonic() - start
            assert_user_error(subprocess.CompletedProcess(commands[name], proc.returncode, out, err),
                              f"the RPC tracker at {where} does not answer (nothing within {TRACKER_TIMEOUT_S:g} s)")
            assert TRACKER_TIMEOUT_S <= elapsed < TRACKER_TIMEOUT_S + 60, (name, elapsed)  # the timeout, plus imports
            assert "registered" not in out
        assert silent.held  # both connected and got no answer
    finally:
        silent.close()
