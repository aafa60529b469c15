"""The command line: user errors are one line on stderr with exit code 2, no traceback."""

import os
import re
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from helpers.cli import assert_user_error, cli


def test_run_onnx_check_inputs_outputs(tiny_onnx, tmp_path):
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype("float32")
    np.savez(tmp_path / "in.npz", image=x)
    res = cli("run", str(tiny_onnx), "--inputs", str(tmp_path / "in.npz"), "--outputs", str(tmp_path / "out.npz"), "--check")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "check passed" in res.stdout
    assert "conv2d" in res.stdout and "texture" in res.stdout
    assert "(ctypes launcher)" in res.stdout  # the fast run's default where the OpenCL library loads
    with np.load(tmp_path / "out.npz") as out:
        y = out["output0"]
    import onnxruntime

    (ref,) = onnxruntime.InferenceSession(str(tiny_onnx), providers=["CPUExecutionProvider"]).run(None, {"image": x})
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)


def test_missing_input_name(run_cli, tiny_onnx, tmp_path):
    np.savez(tmp_path / "in.npz", data=np.zeros((1, 3, 8, 8), "float32"))
    assert_user_error(run_cli("run", str(tiny_onnx), "--inputs", str(tmp_path / "in.npz")), "unknown input 'data'")


def test_wrong_input_shape_and_dtype(run_cli, tiny_onnx, tmp_path):
    np.savez(tmp_path / "shape.npz", image=np.zeros((1, 3, 9, 8), "float32"))
    assert_user_error(run_cli("run", str(tiny_onnx), "--inputs", str(tmp_path / "shape.npz")), "has shape (1, 3, 9, 8)")
    np.savez(tmp_path / "dtype.npz", image=np.zeros((1, 3, 8, 8), "float64"))
    assert_user_error(run_cli("run", str(tiny_onnx), "--inputs", str(tmp_path / "dtype.npz")), "has dtype float64")


def test_unparsable_onnx(run_cli, tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00not a protobuf at all\xff" * 10)
    assert_user_error(run_cli("run", str(bad)), "not an ONNX model")
    assert_user_error(run_cli("run", str(tmp_path / "absent.onnx")), "no such file")


def test_op_tvm_cannot_import(run_cli, tmp_path):
    node = helper.make_node("NoSuchOp", ["x"], ["y"], domain="com.example")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 4))], [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 4))]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.example", 1)])
    path = tmp_path / "unknown.onnx"
    onnx.save(model, str(path))
    assert_user_error(run_cli("run", str(path)), "TVM cannot import this ONNX model")


def test_unknown_device():
    assert_user_error(cli("run", "--device", "no-such-gpu"), "no OpenCL device matches 'no-such-gpu'")


def test_devices_lists_limits():
    res = cli("devices")
    assert res.returncode == 0
    assert "images" in res.stdout and "layers" in res.stdout


def test_kernels_tours_every_family(run_cli, tmp_path, monkeypatch):
    """The command: its table, JSON and summary, on two cases (in this process). The tour's every
    case runs in tests/kernels/test_bounds.py (OpenCL C 1.2 build, bounds sanitizer), not again here."""
    import json

    from tir_adreno.tools import tour

    assert set(tour.FAMILIES) == {"conv2d", "winograd", "pool", "reduce", "softmax", "attention", "concat", "layout", "elementwise", "norm"}
    cases = [c for c in tour.CASES if c.name in ("conv2d winograd_4x4", "max_pool2d group")]
    monkeypatch.setattr(tour, "CASES", tuple(cases))
    res = run_cli("kernels", "--json", str(tmp_path / "tour.json"))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "2/2 kernels match NumPy" in res.stdout
    rows = json.loads((tmp_path / "tour.json").read_text())["kernels"]
    assert [(r["kernel"], r["family"]) for r in rows] == [("conv2d winograd_4x4", "winograd"), ("max_pool2d group", "pool")]
    assert all(r["check"] == "ok" and r["time_us"] > 0 for r in rows)


def save_model(path, nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return str(path)


def test_builtin_choices_are_the_built_in_models():
    from tir_adreno import cli as cli_module
    from tir_adreno.frontend import models

    assert cli_module.BUILTIN_MODELS == models.MODELS


def test_help_documents_exit_codes(run_cli):
    for args in (["--help"], ["run", "--help"]):
        res = run_cli(*args)
        assert res.returncode == 0
        for line in ("0    ok", "1    --check failed", "2    user error", "3    internal error", "130  interrupted"):
            assert line in res.stdout, res.stdout


def test_help_lists_every_command_in_plain_text(run_cli):
    """``tir-adreno --help`` names every command main runs, and no help shows RST markup."""
    from tir_adreno.cli import COMMANDS

    res = run_cli("--help")
    assert res.returncode == 0
    listed = [line.split()[0] for line in res.stdout.split("COMMAND\n", 1)[1].split("\noptions:")[0].splitlines() if line.startswith("    ") and line[4] != " "]
    assert listed == list(COMMANDS), res.stdout
    for command in ("", *COMMANDS):
        res = run_cli(*([command] if command else []), "--help")
        assert res.returncode == 0 and "``" not in res.stdout, res.stdout


@pytest.mark.parametrize("command", ["run", "kernels"])
@pytest.mark.parametrize("variable, allowed", [
    ("TIR_ADRENO_CHECK_BOUNDS", "0 or 1"),
    ("TIR_ADRENO_LAUNCHER", "auto, ctypes, pyopencl"),
    ("TIR_ADRENO_PINNED", "0 or 1"),
])
def test_garbage_environment_setting(run_cli, tiny_onnx, command, variable, allowed):
    args = ["run", str(tiny_onnx)] if command == "run" else ["kernels"]
    assert_user_error(run_cli(*args, env={variable: "bogus"}), f"${variable}", allowed, "'bogus'")


@pytest.mark.parametrize("flag", ["--outputs", "--json"])
def test_output_into_missing_or_unwritable_folder(run_cli, tiny_onnx, tmp_path, flag):
    missing = tmp_path / "no" / "such" / "out.file"
    assert_user_error(run_cli("run", str(tiny_onnx), flag, str(missing)), flag, f"folder {missing.parent} does not exist")
    assert_user_error(run_cli("run", str(tiny_onnx), flag, str(tmp_path)), flag, "is a folder")


def test_kernels_json_into_missing_folder(run_cli, tmp_path):
    assert_user_error(run_cli("kernels", "--json", str(tmp_path / "no" / "k.json")), "--json", "does not exist")


def test_unreadable_inputs_reported_before_compiling(run_cli, tiny_onnx, tmp_path):
    assert_user_error(run_cli("run", str(tiny_onnx), "--inputs", str(tmp_path / "absent.npz")), "--inputs", "absent.npz", "no such file")
    (tmp_path / "text.npz").write_text("not numpy")
    assert_user_error(run_cli("run", str(tiny_onnx), "--inputs", str(tmp_path / "text.npz")), "--inputs", "not a NumPy .npz archive")


@pytest.fixture(scope="module")
def batch_onnx(tmp_path_factory):
    """conv -> relu with a symbolic batch "N": input "image" (N, 3, 6, 6)."""
    w = numpy_helper.from_array(np.random.default_rng(2).standard_normal((4, 3, 3, 3)).astype("float32"), "w")
    path = tmp_path_factory.mktemp("onnx") / "batch.onnx"
    nodes = [helper.make_node("Conv", ["image", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["out"])]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ("N", c, 6, 6)) for n, c in (("image", 3), ("out", 4))]
    return save_model(path, nodes, io[:1], io[1:], [w])


def test_symbolic_dim_needs_input_shape(run_cli, batch_onnx):
    assert_user_error(run_cli("run", batch_onnx), "input 'image'", "symbolic dim 'N'", "--input-shape image=1,3,6,6")
    assert_user_error(run_cli("run", batch_onnx, "--input-shape", "image=2,3,6"), "input 'image'", "does not fit")
    assert_user_error(run_cli("run", batch_onnx, "--input-shape", "image=2,x"), "--input-shape 'image=2,x'")
    assert_user_error(run_cli("run", batch_onnx, "--input-shape", "data=2,3,6,6"), "--input-shape names 'data'")


def test_batch_2_through_symbolic_model(run_cli, batch_onnx, tmp_path):
    x = np.random.default_rng(4).standard_normal((2, 3, 6, 6)).astype("float32")
    np.savez(tmp_path / "in.npz", image=x)
    out = tmp_path / "out.npz"
    res = run_cli("run", batch_onnx, "--input-shape", "image=2,3,6,6", "--inputs", str(tmp_path / "in.npz"), "--outputs", str(out), "--check",
                  env={"TIR_ADRENO_LAUNCHER": "pyopencl"})
    assert res.returncode == 0, res.stderr[-3000:]
    assert "check passed" in res.stdout and res.stderr == ""
    assert "(pyopencl launcher)" in res.stdout
    import onnxruntime

    (ref,) = onnxruntime.InferenceSession(batch_onnx, providers=["CPUExecutionProvider"]).run(None, {"image": x})
    with np.load(out) as y:
        assert y["output0"].shape == (2, 4, 6, 6)
        np.testing.assert_allclose(y["output0"], ref, rtol=1e-4, atol=1e-5)


def test_float16_model_on_device_without_fp16(run_cli, tmp_path, device):
    if device.fp16:
        pytest.skip(f"{device.name} has cl_khr_fp16: a float16 model runs there")
    w = numpy_helper.from_array(np.random.default_rng(5).standard_normal((4, 4, 1, 1)).astype("float16"), "w")
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT16, (1, 4, 3, 3)) for n in ("x", "y")]
    path = save_model(tmp_path / "fp16.onnx", [helper.make_node("Conv", ["x", "w"], ["y"])], io[:1], io[1:], [w])
    assert_user_error(run_cli("run", path), "float16", f"device {device.name!r}", "cl_khr_fp16")


def test_check_on_model_onnxruntime_cannot_run(run_cli, tmp_path):
    """Valid ONNX that onnxruntime refuses (Relu has no int8 kernel): reported before compiling."""
    io = [helper.make_tensor_value_info(n, TensorProto.INT8, (1, 4, 3, 3)) for n in ("x", "y")]
    path = save_model(tmp_path / "int8.onnx", [helper.make_node("Relu", ["x"], ["y"])], io[:1], io[1:])
    assert_user_error(run_cli("run", path, "--check"), "--check: the CPU reference: onnxruntime cannot run this model", "Relu")


def test_check_warns_on_constant_reference(run_cli, tmp_path):
    """y = x * 0 + 0.5: every output is 0.5, so "passed" would have checked nothing."""
    inits = [
        numpy_helper.from_array(np.zeros((1, 4, 1, 1), "float32"), "zero"),
        numpy_helper.from_array(np.full((1, 4, 1, 1), 0.5, "float32"), "half"),
    ]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, (1, 4, 3, 3)) for n in ("x", "y")]
    nodes = [helper.make_node("Mul", ["x", "zero"], ["m"]), helper.make_node("Add", ["m", "half"], ["y"])]
    res = run_cli("run", save_model(tmp_path / "constant.onnx", nodes, io[:1], io[1:], inits), "--check")
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tir-adreno: warning:") and "output0" in lines[0] and "constant" in lines[0], res.stderr


def test_unusable_cache_folder_is_one_warning(tiny_onnx, tmp_path):
    """In a fresh process, so every kernel is built cold and would be written to the cache."""
    blocker = tmp_path / "file"
    blocker.write_text("")  # a folder below a regular file cannot be created, even by root
    res = subprocess.run(
        [sys.executable, "-m", "tir_adreno.cli", "run", str(tiny_onnx)],
        capture_output=True, text=True, env=dict(os.environ, TIR_ADRENO_CACHE_DIR=str(blocker / "cache")),
    )
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert lines[0].startswith("tir-adreno: warning: cache folder") and "working without the disk cache" in lines[0]


def test_compile_takes_input_shape(run_cli, batch_onnx, tmp_path):
    assert_user_error(run_cli("compile", batch_onnx, "-o", str(tmp_path / "m")), "symbolic dim 'N'", "--input-shape image=1,3,6,6")
    res = run_cli("compile", batch_onnx, "-o", str(tmp_path / "m"), "--target", "pocl", "--input-shape", "image=2,3,6,6")
    assert res.returncode == 0, res.stderr
    x = np.random.default_rng(6).standard_normal((2, 3, 6, 6)).astype("float32")
    np.savez(tmp_path / "in.npz", image=x)
    res = run_cli("run", str(tmp_path / "m"), "--inputs", str(tmp_path / "in.npz"), "--outputs", str(tmp_path / "out.npz"))
    assert res.returncode == 0, res.stderr
    import onnxruntime

    (ref,) = onnxruntime.InferenceSession(batch_onnx, providers=["CPUExecutionProvider"]).run(None, {"image": x})
    with np.load(tmp_path / "out.npz") as y:
        np.testing.assert_allclose(y["output0"], ref, rtol=1e-4, atol=1e-5)


def test_compile_output_folder_that_cannot_be_made(run_cli, tiny_onnx, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert_user_error(run_cli("compile", str(tiny_onnx), "-o", str(blocker)), "--output", "is a file, expected a folder")
    assert_user_error(run_cli("compile", str(tiny_onnx), "-o", str(blocker / "sub" / "m")), "--output", "cannot be made")


def test_run_no_fuse(tmp_path):
    """A depthwise conv feeding a 1x1 conv: one fused kernel by default (PoCL's profile, a layer this
    small), two with --no-fuse; both pass --check."""
    import json

    rng = np.random.default_rng(3)
    inits = [helper.make_tensor(n, TensorProto.FLOAT, s, rng.standard_normal(int(np.prod(s))).astype("float32"))
             for n, s in (("wd", (6, 1, 3, 3)), ("wp", (5, 6, 1, 1)))]
    model = save_model(tmp_path / "m.onnx", [helper.make_node("Conv", ["x", "wd"], ["d"], pads=[1, 1, 1, 1], group=6),
                                              helper.make_node("Conv", ["d", "wp"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 6, 5, 5))],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 5, 5, 5))], inits)
    ops = {}
    for flags in ((), ("--no-fuse",)):
        res = cli("run", model, "--check", "--json", str(tmp_path / "r.json"), *flags)
        assert res.returncode == 0 and "check passed" in res.stdout, res.stdout[-2000:] + res.stderr[-2000:]
        ops[flags] = [p["op"] for p in json.loads((tmp_path / "r.json").read_text())["profile"]]
    assert ops[()] == ["nchw_to_nchw4c", "depthwise_pointwise_nchw4c", "nchw4c_to_nchw"]
    assert ops[("--no-fuse",)] == ["nchw_to_nchw4c", "depthwise_conv2d_nchw4c", "conv2d_nchw4c", "nchw4c_to_nchw"]


def test_saved_model_checks_against_the_reference_compile_saved(run_cli, tiny_onnx, tmp_path):
    """`compile --check` saves the CPU reference's outputs for the seeded inputs, so `run DIR --check`
    reports the error where there is no TVM or onnxruntime (a float16 build on a GPU machine)."""
    from tir_adreno.runtime.executor import REFERENCE_FILE, load_reference, save_reference

    plain, checked = tmp_path / "plain", tmp_path / "checked"
    assert run_cli("compile", str(tiny_onnx), "-o", str(plain), "--target", "pocl").returncode == 0
    assert_user_error(run_cli("run", str(plain), "--check"), "holds no reference outputs", "compile ... --check")
    res = run_cli("compile", str(tiny_onnx), "-o", str(checked), "--target", "pocl", "--precision", "float16_acc32", "--check")
    assert res.returncode == 0, res.stderr
    res = run_cli("run", str(checked), "--check")
    assert res.returncode == 0 and "check passed" in res.stdout and "tolerance 0.01" in res.stdout, res.stdout + res.stderr
    inputs, outputs = load_reference(checked)
    save_reference(checked, inputs, [o * 1.1 for o in outputs])  # a reference the model no longer matches
    res = run_cli("run", str(checked), "--check")
    assert res.returncode == 1 and "check FAILED" in res.stdout, res.stdout + res.stderr
    np.savez(tmp_path / "in.npz", **inputs)
    assert_user_error(run_cli("run", str(checked), "--check", "--inputs", str(tmp_path / "in.npz")), "leave out --inputs")
    (checked / REFERENCE_FILE).write_bytes((checked / REFERENCE_FILE).read_bytes()[:-9])
    assert_user_error(run_cli("run", str(checked), "--check"), REFERENCE_FILE, "corrupt")


def test_a_long_first_build_says_so_and_quiet_hides_it(run_cli, tiny_saved, tmp_path, monkeypatch):
    """The first run of a saved model builds its program from source (ResNet-18 on PoCL: 22 s):
    one stderr line says so and about how long; ``--quiet`` shows nothing there."""
    from tir_adreno.runtime import opencl, programs

    monkeypatch.setattr(programs, "ANNOUNCE_MIN_S", 0.0)  # the tiny model's build is short: announce it anyway
    device = opencl.get_device()
    monkeypatch.setattr(device, "_programs", {})  # nothing built in this process yet
    res = run_cli("run", str(tiny_saved), env={"TIR_ADRENO_CACHE_DIR": str(tmp_path / "cold")})
    assert res.returncode == 0, res.stderr
    assert re.fullmatch(r"tir-adreno: building the OpenCL program of \d+ kernels? from source on .+, about \d+ s "
                        r"\(once: later runs load its binary from the cache\)\n", res.stderr), res.stderr
    monkeypatch.setattr(device, "_programs", {})
    res = run_cli("run", str(tiny_saved), "--quiet", env={"TIR_ADRENO_CACHE_DIR": str(tmp_path / "cold-quiet")})
    assert res.returncode == 0 and res.stderr == "", res.stderr
    monkeypatch.setattr(device, "_programs", {})
    res = run_cli("run", str(tiny_saved), env={"TIR_ADRENO_CACHE_DIR": str(tmp_path / "cold")})  # its binary cached now
    assert res.returncode == 0 and res.stderr == "", res.stderr


def test_tables_fit_names_of_any_length_and_small_sizes_show():
    """The ``kernels`` table widens to its longest cell (names past 22 characters stayed aligned
    nowhere); memory sizes take the unit that shows them, not "0.0 MiB"."""
    from tir_adreno.cli.output import table
    from tir_adreno.cli.output import size

    rows = [{"kernel": "conv2d depthwise_pointwise fused excitation", "time_us": 12.3, "check": "ok"},
            {"kernel": "relu", "time_us": 1234.56, "check": "FAILED"}]
    lines = table(rows, {"kernel": "<", "time_us": ">.1f", "check": ">"}, {"time_us": "time (us)"}).splitlines()
    assert lines[1].startswith("conv2d depthwise_pointwise fused excitation  ") and lines[2].startswith("relu ")
    assert len({len(line) for line in lines}) == 1, lines  # every row ends where the header ends
    assert [line.index("us)") for line in lines[:1]] == [lines[2].index("1234.6") + 3]
    assert [size(n) for n in (0, 700, 1536, 52.5 * 2**20, 3 * 2**30)] == ["0 B", "700 B", "1.5 KiB", "52.5 MiB", "3.0 GiB"]
