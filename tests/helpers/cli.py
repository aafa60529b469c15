"""The command line as a user runs it, and what a user error looks like."""

import subprocess
import sys


def cli(*args, cwd=None):
    """The command in a fresh process (what a user runs)."""
    return subprocess.run([sys.executable, "-m", "tir_adreno.cli", *args], capture_output=True, text=True, cwd=cwd)


def assert_user_error(res, *messages, before_compile=True):
    assert res.returncode == 2, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert lines[0].startswith("tir-adreno: error:"), lines[0]
    for message in messages:
        assert message in lines[0], lines[0]
    if before_compile:
        assert "build" not in res.stdout and "compiled in" not in res.stdout, "reported only after compiling:\n" + res.stdout
