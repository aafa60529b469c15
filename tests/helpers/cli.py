"""The command line as a user runs it (also where TVM cannot be imported), and what a user error looks like."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from helpers import ROOT, refuse_imports


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


#: Runs ``tir_adreno.cli.main`` on each case of a JSON file, in one process that cannot import TVM
#: (nor tvm_ffi, nor onnx), and writes each case's exit code, stdout and stderr to a second file.
_NO_TVM_RUNNER = refuse_imports("tvm", "tvm_ffi", "onnx") + textwrap.dedent(
    """
    import contextlib, io, json, os, traceback
    from tir_adreno.cli import main

    cases, results, home = json.load(open(sys.argv[1])), {}, os.getcwd()
    for name, case in cases.items():
        out, err = io.StringIO(), io.StringIO()
        os.chdir(case.get("cwd", home))
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(case["argv"])
            except SystemExit as exit:  # argparse
                code = exit.code
            except BaseException:  # what a user would see: a traceback, exit 1
                traceback.print_exc()
                code = 1
        os.chdir(home)
        results[name] = {"returncode": code, "stdout": out.getvalue(), "stderr": err.getvalue()}
    json.dump(results, open(sys.argv[2], "w"))
    """
)


def cli_without_tvm(cases: dict, folder) -> dict:
    """``{name: {"argv": [...], "cwd": optional folder}}`` -> ``{name: CompletedProcess}``: each
    command run by ``main`` in one fresh process where importing TVM fails (files in ``folder``)."""
    folder = Path(folder)
    (folder / "cases.json").write_text(json.dumps(cases))
    runner = [sys.executable, "-c", _NO_TVM_RUNNER, str(folder / "cases.json"), str(folder / "results.json")]
    res = subprocess.run(runner, cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    results = json.loads((folder / "results.json").read_text())
    return {name: subprocess.CompletedProcess(cases[name]["argv"], r["returncode"], r["stdout"], r["stderr"])
            for name, r in results.items()}
