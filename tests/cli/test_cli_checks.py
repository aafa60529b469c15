"""Every command checks its file and folder arguments before any work: a bad input or output path
is one line on stderr, exit code 2, no traceback, and it comes before the model is even imported.

"Before" is checked deterministically: the commands run in a process where importing TVM (or
onnx) fails (``helpers.cli.cli_without_tvm``), so a check that came after importing or compiling the
model would end in an ImportError traceback instead of the one-line error."""

import json
from pathlib import Path

import numpy as np
import pytest

from helpers.cli import assert_user_error, cli_without_tvm

#: An unwritable place even for root: nothing can be created in /proc.
UNWRITABLE = "/proc"


def _cases(model: str, tmp: Path) -> dict:
    """(command, argument) -> (argv, the message's parts); ``tmp`` holds a file and a folder to misuse."""
    missing, a_file, a_folder = tmp / "absent", tmp / "a_file", tmp / "a_folder"
    return {
        # outputs
        "run --outputs": (["run", model, "--outputs", f"{UNWRITABLE}/out.npz"], ["--outputs", f"folder {UNWRITABLE} is not writable"]),
        "run --json": (["run", model, "--json", str(missing / "r.json")], ["--json", f"folder {missing} does not exist"]),
        "dump -o": (["dump", model, "-o", f"{UNWRITABLE}/foo"], ["--output", f"cannot be made in {UNWRITABLE}"]),
        "dump -o file": (["dump", model, "-o", str(a_file)], ["--output", "is a file, expected a folder"]),
        "compile -o": (["compile", model, "-o", str(a_file / "m")], ["--output", "is a file, so the folder cannot be made"]),
        "compile -o unwritable": (["compile", model, "-o", UNWRITABLE], ["--output", "folder is not writable"]),
        "tune --records": (["tune", model, "--records", f"{UNWRITABLE}/r.json"], ["--records", "not writable"]),
        "tune --records folder": (["tune", model, "--records", str(a_folder)], ["--records", "is a folder, expected a file name"]),
        "tune --export": (["tune", model, "--export", f"{UNWRITABLE}/jobs"], ["--export", "cannot be made"]),
        "kernels --json": (["kernels", "--json", f"{UNWRITABLE}/k.json"], ["--json", "not writable"]),
        # inputs
        "run model": (["run", str(missing / "m.onnx")], [f"{missing / 'm.onnx'}: no such file"]),
        "run --inputs": (["run", model, "--inputs", str(missing / "x.npz")], ["--inputs", "no such file"]),
        "run --inputs folder": (["run", model, "--inputs", str(a_folder)], ["--inputs", "is a folder, expected a file"]),
        "run --records": (["run", model, "--records", str(missing / "r.json")], ["--records", "no such records file", "tir-adreno tune"]),
        "run --kernels": (["run", model, "--kernels", str(missing)], ["--kernels", "no such folder", "tir-adreno dump"]),
        "run --kernels file": (["run", model, "--kernels", str(a_file)], ["--kernels", "is a file, expected a folder"]),
        "dump model": (["dump", str(missing / "m.onnx"), "-o", str(tmp / "k")], ["no such file"]),
        "dump --records": (["dump", model, "-o", str(tmp / "k"), "--records", str(missing)], ["--records", "no such records file"]),
        "compile model": (["compile", str(missing / "m.onnx"), "-o", str(tmp / "m")], ["no such file"]),
        "compile --records": (["compile", model, "-o", str(tmp / "m"), "--records", str(a_folder)], ["--records", "is a folder"]),
        "kernel file": (["kernel", str(missing / "k.py")], ["no such kernel file", "tir-adreno dump"]),
        "kernel folder": (["kernel", str(a_folder)], ["is a folder, expected a kernel file"]),
        "tune model": (["tune", str(missing / "m.onnx")], ["no such file"]),
        "tune --measure": (["tune", "--measure", str(missing)], ["--measure", "no such folder", "--export"]),
        "tune --measure unwritable": (["tune", "--measure", UNWRITABLE], ["--measure", "folder is not writable"]),
    }


def _mistakes(model: str, tmp: Path) -> dict:
    """What argparse refuses and empty files: name -> (argv, the message's parts)."""
    empty = str(tmp / "empty")
    return {
        "no command": ([], ["no command given; one of: devices, run, dump, kernel, compile, tune, kernels, serve"]),
        "unknown command": (["frob"], ["unknown command 'frob'; one of: devices, run,"]),
        "unknown option": (["run", model, "--frobnicate"], ["unrecognized arguments: --frobnicate"]),
        "bad precision": (["run", model, "--precision", "float64"],
                          ["run: argument --precision: invalid choice: 'float64' (choose from 'float32', 'float16_acc32', 'float16')"]),
        "bad builtin": (["run", "--builtin", "resnet99"],
                        ["run: argument --builtin: invalid choice: 'resnet99' (choose from 'resnet18', 'resnet50', 'mobilenet_v2')"]),
        "bad target": (["compile", model, "-o", str(tmp / "m"), "--target", "tpu"],
                       ["compile: argument --target: invalid choice: 'tpu' (choose from 'adreno', 'nvidia-h200', 'pocl')"]),
        "bad tune target": (["tune", model, "--export", str(tmp / "j"), "--target", "tpu"], ["tune: argument --target: invalid choice: 'tpu'"]),
        "bad placement": (["dump", model, "-o", str(tmp / "k"), "--placement", "disk"], ["dump: argument --placement: invalid choice: 'disk'"]),
        "missing -o": (["compile", model], ["compile: the following arguments are required: -o/--output"]),
        "missing flag value": (["run", model, "--inputs"], ["run: argument --inputs: expected one argument"]),
        "missing serve key": (["serve", "--tracker", "h:9190"], ["serve: the following arguments are required: --key"]),
        "bad number": (["tune", model, "--budget-s", "soon"], ["tune: argument --budget-s: invalid float value: 'soon'"]),
        "exclusive flags": (["tune", model, "--export", str(tmp / "j"), "--rpc-tracker", "h:9190"],
                            ["argument --rpc-tracker: not allowed with argument --export"]),
        "empty model run": (["run", empty], [f"{empty}: empty file, not an ONNX model"]),
        "empty model compile": (["compile", empty, "-o", str(tmp / "m")], ["empty file, not an ONNX model"]),
        "empty model dump": (["dump", empty, "-o", str(tmp / "k")], ["empty file, not an ONNX model"]),
        "empty model tune": (["tune", empty], ["empty file, not an ONNX model"]),
        "empty records": (["run", model, "--records", empty], ["--records", "empty file, expected a records file"]),
        "empty inputs": (["run", model, "--inputs", empty], ["--inputs", "empty file"]),
        "empty kernel file": (["kernel", empty], ["empty file, expected a kernel file"]),
    }


@pytest.fixture(scope="module")
def results(tiny_onnx, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("paths")
    (tmp / "a_file").write_text("")
    (tmp / "a_folder").mkdir()
    (tmp / "empty").write_bytes(b"")
    cases = {**_cases(str(tiny_onnx), tmp), **_mistakes(str(tiny_onnx), tmp)}
    argv = {name: {"argv": args} for name, (args, _) in cases.items()}
    argv["tune default records"] = {"argv": ["tune", str(tiny_onnx)], "cwd": UNWRITABLE}  # records-<profile>.json would go here
    return cli_without_tvm(argv, tmp), {name: parts for name, (_, parts) in cases.items()}


CASES = list(_cases("model.onnx", Path("/tmp")))


@pytest.mark.parametrize("case", CASES)
def test_bad_path_is_reported_before_the_model_is_imported(results, case):
    got, messages = results
    assert_user_error(got[case], *messages[case])


@pytest.mark.parametrize("case", list(_mistakes("model.onnx", Path("/tmp"))))
def test_argparse_mistakes_and_empty_files_are_one_line(results, case):
    """argparse's own refusals (choices from the library, unknown options, missing values) and
    empty files: one line naming the culprit, exit 2, no usage dump, before the model is imported."""
    got, messages = results
    assert "usage:" not in got[case].stderr
    assert_user_error(got[case], *messages[case])


def test_tune_into_an_unwritable_working_folder(results):
    got, _ = results
    assert_user_error(got["tune default records"], "--records (default records-<profile>.json)", "not writable")


def test_every_path_argument_has_a_case():
    """Each file or folder argument the parser declares (``args.add_path``) has a case above."""
    from tir_adreno.cli.args import build_parser

    commands = next(a for a in build_parser("")._actions if a.dest == "command").choices
    declared = {(name, arg.flag or arg.dest) for name, p in commands.items() for arg in p.get_default("paths") or ()}
    spelled = {"-o": "--output"}
    covered = {(case.split()[0], spelled.get(case.split()[1], case.split()[1])) for case in CASES}
    assert declared and declared <= covered, sorted(declared - covered)


def test_saved_model_runs_without_tvm(run_cli, tiny_onnx, tmp_path):
    """``run SAVED_DIR`` loads and runs a saved model in a process that cannot import TVM."""
    assert run_cli("compile", str(tiny_onnx), "-o", str(tmp_path / "m"), "--target", "pocl").returncode == 0
    x = np.random.default_rng(7).standard_normal((1, 3, 8, 8)).astype("float32")
    np.savez(tmp_path / "in.npz", image=x)
    out = tmp_path / "out.npz"
    argv = ["run", str(tmp_path / "m"), "--inputs", str(tmp_path / "in.npz"), "--outputs", str(out), "--json", str(tmp_path / "r.json")]
    res = cli_without_tvm({"saved": {"argv": argv}}, tmp_path)["saved"]
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    # where the start-up went: one line, and the report's phases in --json
    assert sum(line.startswith("startup ") for line in res.stdout.splitlines()) == 1, res.stdout
    startup = json.loads((tmp_path / "r.json").read_text())["startup"]
    assert startup["import_ms"] > 0 and startup["total_ms"] > 0 and "from_binary" in startup["programs"]
    assert {"read_ms", "verify_ms", "programs_ms", "upload_ms", "bind_ms", "other_ms"} <= set(startup)
    import onnxruntime

    (ref,) = onnxruntime.InferenceSession(str(tiny_onnx), providers=["CPUExecutionProvider"]).run(None, {"image": x})
    with np.load(out) as y:
        np.testing.assert_allclose(y["output0"], ref, rtol=1e-4, atol=1e-5)
