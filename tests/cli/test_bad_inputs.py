"""A catalogue of bad inputs (issue 36): each is one line on stderr naming the culprit, exit code 2,
no traceback; Ctrl-C is one line and exit 130; an internal error is the traceback, a line asking to
report it, and exit 3 (the README's exit-code contract)."""

import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from helpers import ROOT
from helpers.cli import assert_user_error, cli
from helpers.saved_models import conv_relu, files, rewrite_doc, save_onnx, value
from tir_adreno.runtime import saved


@pytest.fixture(scope="module")
def onnx_files(tmp_path_factory):
    """ONNX models that cannot be compiled, by what is wrong with them."""
    folder = tmp_path_factory.mktemp("bad_onnx")
    relu = lambda shape: ([helper.make_node("Relu", ["x"], ["y"])], [value("x", shape)], [value("y", shape)])  # noqa: E731
    const = numpy_helper.from_array(np.ones((1, 8), np.float32), "w")
    return {
        "unique": save_onnx(folder / "unique.onnx", [helper.make_node("Unique", ["x"], ["y"])], [value("x", (1, 8))], [value("y", None)]),
        "nonzero": save_onnx(folder / "nonzero.onnx", [helper.make_node("NonZero", ["x"], ["y"])], [value("x", (1, 8))],
                             [value("y", None, TensorProto.INT64)]),
        "no inputs": save_onnx(folder / "const.onnx", [helper.make_node("Relu", ["w"], ["y"])], [], [value("y", (1, 8))], [const]),
        "zero-size": save_onnx(folder / "zero.onnx", *relu((1, 0, 8, 8))),
        "huge": save_onnx(folder / "huge.onnx", *relu((1, 3, 100000, 100000))),
        "int32": save_onnx(folder / "int32.onnx", *relu((1, 3, 50000, 20000))),
    }


@pytest.mark.parametrize("name, command, message", [
    ("unique", "run", "op Unique"),
    ("nonzero", "compile", "op NonZero"),
    ("no inputs", "run", "the model has no inputs"),
    ("zero-size", "compile", "zero-size dim in shape (1, 0, 8, 8)"),
    ("huge", "run", "shape (1, 3, 100000, 100000)"),  # before seeded inputs of 30 G elements are drawn
    ("int32", "compile", "more than the kernels' 32-bit indices reach"),
])
def test_models_that_cannot_compile(run_cli, onnx_files, tmp_path, name, command, message):
    out = ["-o", str(tmp_path / "out"), "--target", "pocl"] if command == "compile" else []
    assert_user_error(run_cli(command, str(onnx_files[name]), *out), message)
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def two_saved(tmp_path_factory):
    """Two models of one architecture compiled with their references: (A's folder, B's folder), kept pristine."""
    folder = tmp_path_factory.mktemp("saved")
    for name, seed in (("a", 1), ("b", 2)):
        res = cli("compile", str(conv_relu(folder / f"{name}.onnx", seed)), "-o", str(folder / name), "--target", "pocl", "--check")
        assert res.returncode == 0, res.stderr[-3000:]
    return folder / "a", folder / "b"


@pytest.fixture
def model_a(two_saved, tmp_path):
    """A copy of model A to damage."""
    return shutil.copytree(two_saved[0], tmp_path / "a")


def _break_kernels(d):
    for module in d["kernels"].values():
        module["source"] = "this is not OpenCL C;"


@pytest.mark.parametrize("damage, flags, message", [
    (lambda a, b: shutil.copy(b / saved.WEIGHTS_FILE, a), [], "weights.npz belongs to another model"),
    (lambda a, b: shutil.copy(b / saved.REFERENCE_FILE, a), ["--check"], "reference.npz belongs to another model"),
    (lambda a, b: rewrite_doc(a, lambda d: d.pop("plan")), [], "model.json: no 'plan'"),
    (lambda a, b: rewrite_doc(a, lambda d: d["plan"].pop("calls")), [], "malformed saved model (no 'calls')"),
    (lambda a, b: rewrite_doc(a, lambda d: d.update(format=1)), [], "compile the model again"),
    (lambda a, b: rewrite_doc(a, _break_kernels), [], "its OpenCL does not build on"),
    (lambda a, b: (a / saved.WEIGHTS_FILE).unlink(), [], "weights.npz"),
])
def test_damaged_saved_models(run_cli, model_a, two_saved, damage, flags, message):
    damage(model_a, two_saved[1])
    assert_user_error(run_cli("run", str(model_a), *flags), message)


def test_outputs_never_overwrite_what_the_command_reads(run_cli, model_a, tmp_path):
    before = files(model_a)
    np.savez(tmp_path / "in.npz", x=np.ones((1, 3, 6, 6), np.float32))
    for flags, message in ((["--outputs", str(model_a / "weights.npz")], "would overwrite"),
                           (["--json", str(model_a / "model.json")], "would overwrite"),
                           (["--json", str(model_a / "." / "reference.npz")], "would overwrite"),
                           (["--inputs", str(tmp_path / "in.npz"), "--outputs", str(tmp_path / "in.npz")], "would overwrite"),
                           (["--outputs", str(tmp_path / "o.npz"), "--json", str(tmp_path / "o.npz")], "is also --outputs")):
        assert_user_error(run_cli("run", str(model_a), *flags), flags[-2], message)
    assert files(model_a) == before
    res = run_cli("run", str(model_a), "--outputs", str(tmp_path / "o.bin"))
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("o.")) == ["o.bin"]  # exactly the name given
    with np.load(tmp_path / "o.bin") as out:
        assert out["output0"].shape == (1, 4, 6, 6)


def test_a_folder_of_the_users_files_is_not_overwritten_without_force(run_cli, two_saved, tmp_path):
    onnx_file = two_saved[0].parent / "b.onnx"
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "model.json").write_text('{"my": "own file"}')
    (mine / "notes.txt").write_text("keep me")
    assert_user_error(run_cli("compile", str(onnx_file), "-o", str(mine), "--target", "pocl"),
                      f"-o {mine}: holds files tir-adreno did not write (model.json, notes.txt)", "--force")
    assert (mine / "model.json").read_text() == '{"my": "own file"}'
    res = run_cli("compile", str(onnx_file), "-o", str(mine), "--target", "pocl", "--force")
    assert res.returncode == 0, res.stderr
    assert (mine / "notes.txt").read_text() == "keep me"
    assert run_cli("run", str(mine)).returncode == 0


def test_inputs_files_numpy_cannot_read_as_numbers(run_cli, model_a, tmp_path):
    np.savez(tmp_path / "whole.npz", x=np.ones((1, 3, 6, 6), np.float32))
    (tmp_path / "truncated.npz").write_bytes((tmp_path / "whole.npz").read_bytes()[:200])
    np.savez(tmp_path / "objects.npz", x=np.array([1, "a", None], dtype=object))
    assert_user_error(run_cli("run", str(model_a), "--inputs", str(tmp_path / "truncated.npz")), "truncated.npz", "damaged")
    assert_user_error(run_cli("run", str(model_a), "--inputs", str(tmp_path / "objects.npz")), "'x' is an object array")


def test_fifos_are_refused_not_waited_on(model_a, two_saved, tmp_path):
    """A FIFO as --inputs, as an ONNX model, as a saved model's model.json: refused at once (a reader would block)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (model_a / "model.json").unlink()
    os.mkfifo(model_a / "model.json")
    for argv, message in ((["run", str(two_saved[0]), "--inputs", str(fifo)], f"--inputs {fifo}: not a regular file"),
                          (["run", str(fifo)], f"{fifo}: not a regular file"),
                          (["run", str(model_a)], "model.json: not a regular file")):
        res = subprocess.run([sys.executable, "-m", "tir_adreno.cli", *argv], capture_output=True, text=True, timeout=120)
        assert_user_error(res, message)


def test_ctrl_c_is_one_line_and_exit_130(tmp_path):
    """Ctrl-C in the middle of a compile (ResNet-18's takes many seconds; the header comes first):
    one line, exit 130, and nothing left in the temp folder (TVM's own folders are removed by an
    atexit hook the immediate exit skips: the CLI removes them itself)."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "tir_adreno.cli", "compile", "--builtin", "resnet18", "-o",
                             str(tmp_path / "out"), "--target", "pocl", "--no-cache"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env={**os.environ, "TMPDIR": str(temp)})
    line = proc.stdout.readline()  # "model: ...": the model is built, the compile under way
    assert line.startswith("model:"), line + proc.stderr.read()
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.strip() == "tir-adreno: interrupted", err
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["tmp"]  # no temporary folder left beside the output
    assert list(temp.iterdir()) == []  # nor in the temp folder


def test_internal_error_is_exit_3_with_the_traceback(run_cli, monkeypatch):
    from tir_adreno import cli as tir_cli

    def broken(args):
        raise RuntimeError("a bug of ours")

    monkeypatch.setitem(tir_cli.COMMANDS, "devices", broken)
    res = run_cli("devices")
    assert res.returncode == 3
    assert "Traceback" in res.stderr and "RuntimeError: a bug of ours" in res.stderr
    assert res.stderr.strip().splitlines()[-1].startswith("tir-adreno: internal error: this is a bug in tir-adreno; please report it")


def test_readme_states_the_exit_codes_these_tests_assert():
    readme = (ROOT / "README.md").read_text()
    for line in ("| 0 | ok |", "| 1 | `--check` failed", "| 2 | user error", "| 3 | internal error", "| 130 | interrupted"):
        assert line in readme, line
    from tir_adreno.cli import EXIT_CHECK_FAILED, EXIT_INTERNAL_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_USER_ERROR

    assert (EXIT_OK, EXIT_CHECK_FAILED, EXIT_USER_ERROR, EXIT_INTERNAL_ERROR, EXIT_INTERRUPTED) == (0, 1, 2, 3, 130)
