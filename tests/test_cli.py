"""The command line: user errors are one line on stderr with exit code 2, no traceback."""

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "tir_adreno.cli", *args], capture_output=True, text=True, cwd=cwd)


def assert_user_error(res, message):
    assert res.returncode == 2, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert lines[0].startswith("tir-adreno: error:") and message in lines[0], lines[0]


@pytest.fixture(scope="module")
def tiny_onnx(tmp_path_factory):
    """conv -> relu -> global average pool, input "image" (1, 3, 8, 8)."""
    rng = np.random.default_rng(0)
    w = helper.make_tensor("w", TensorProto.FLOAT, (5, 3, 3, 3), rng.standard_normal(135).astype("float32"))
    nodes = [
        helper.make_node("Conv", ["image", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, (1, 3, 8, 8))],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, (1, 5, 1, 1))],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    path = tmp_path_factory.mktemp("onnx") / "tiny.onnx"
    onnx.save(model, str(path))
    return path


def test_run_onnx_check_inputs_outputs(tiny_onnx, tmp_path):
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype("float32")
    np.savez(tmp_path / "in.npz", image=x)
    res = cli("run", str(tiny_onnx), "--inputs", str(tmp_path / "in.npz"), "--outputs", str(tmp_path / "out.npz"), "--check")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "check passed" in res.stdout
    assert "conv2d" in res.stdout and "texture" in res.stdout
    with np.load(tmp_path / "out.npz") as out:
        y = out["output0"]
    import onnxruntime

    (ref,) = onnxruntime.InferenceSession(str(tiny_onnx), providers=["CPUExecutionProvider"]).run(None, {"image": x})
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)


def test_missing_input_name(tiny_onnx, tmp_path):
    np.savez(tmp_path / "in.npz", data=np.zeros((1, 3, 8, 8), "float32"))
    assert_user_error(cli("run", str(tiny_onnx), "--inputs", str(tmp_path / "in.npz")), "unknown input 'data'")


def test_wrong_input_shape_and_dtype(tiny_onnx, tmp_path):
    np.savez(tmp_path / "shape.npz", image=np.zeros((1, 3, 9, 8), "float32"))
    assert_user_error(cli("run", str(tiny_onnx), "--inputs", str(tmp_path / "shape.npz")), "has shape (1, 3, 9, 8)")
    np.savez(tmp_path / "dtype.npz", image=np.zeros((1, 3, 8, 8), "float64"))
    assert_user_error(cli("run", str(tiny_onnx), "--inputs", str(tmp_path / "dtype.npz")), "has dtype float64")


def test_unparsable_onnx(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00not a protobuf at all\xff" * 10)
    assert_user_error(cli("run", str(bad)), "not a readable ONNX model")
    assert_user_error(cli("run", str(tmp_path / "absent.onnx")), "no such file")


def test_op_tvm_cannot_import(tmp_path):
    node = helper.make_node("NoSuchOp", ["x"], ["y"], domain="com.example")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 4))], [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 4))]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.example", 1)])
    path = tmp_path / "unknown.onnx"
    onnx.save(model, str(path))
    assert_user_error(cli("run", str(path)), "TVM cannot import this ONNX model")


def test_unknown_device():
    assert_user_error(cli("run", "--device", "no-such-gpu"), "no OpenCL device matches 'no-such-gpu'")


def test_devices_lists_limits():
    res = cli("devices")
    assert res.returncode == 0
    assert "images" in res.stdout and "layers" in res.stdout


def test_kernels_tours_every_family(tmp_path):
    import json

    from tir_adreno import tour

    res = cli("kernels", "--json", str(tmp_path / "tour.json"))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert f"{len(tour.CASES)}/{len(tour.CASES)} kernels match NumPy" in res.stdout
    rows = json.loads((tmp_path / "tour.json").read_text())["kernels"]
    assert {r["family"] for r in rows} == set(tour.FAMILIES) == {
        "conv2d", "winograd", "pool", "reduce", "softmax", "concat", "layout", "elementwise"
    }
    assert {r["kernel"] for r in rows} >= {"conv2d grouped", "conv2d depthwise", "conv2d winograd_4x4", "max_pool2d group"}
    assert all(r["check"] == "ok" and r["time_us"] > 0 for r in rows)
