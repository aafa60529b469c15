"""``tir-adreno dump`` / ``run --kernels`` / ``kernel``: a model's kernels as TVMScript files, edited in place."""

import json
import re
import shutil

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper

from helpers.cli import assert_user_error, cli

from tir_adreno import compiler
from tir_adreno.runtime import opencl as runtime
from tir_adreno.tools import workbench


def tiny_model(path, channels: int, seed: int):
    """conv+bias -> relu -> max pool -> conv (+ residual) -> relu -> global average pool -> flatten ->
    cos (upstream's)."""
    rng = np.random.default_rng(seed)

    def weight(name, shape):
        return helper.make_tensor(name, TensorProto.FLOAT, shape, (rng.standard_normal(int(np.prod(shape))) * 0.3).astype("float32"))

    nodes = [
        helper.make_node("Conv", ["image", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "p1"], ["a2"]),
        helper.make_node("Relu", ["a2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Cos", ["f"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, (1, 3, 8, 8))],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, (1, channels))],
        [weight("w1", (channels, 3, 3, 3)), weight("b1", (channels,)), weight("w2", (channels, channels, 3, 3))],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("workbench")
    return tiny_model(root / "tiny.onnx", 8, 0), tiny_model(root / "other.onnx", 12, 1)


@pytest.fixture(scope="module")
def dumped(models, tmp_path_factory):
    out = tmp_path_factory.mktemp("dump") / "kernels"
    res = cli("dump", str(models[0]), "-o", str(out))
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"wrote 6 kernels and manifest.json to {out}" in res.stdout
    return out


def edited_copy(dumped, tmp_path, name, old, new):
    """A copy of the dump with ``old`` -> ``new`` in kernel file ``name`` (which must contain it)."""
    directory = tmp_path / "edited"
    shutil.copytree(dumped, directory)
    path = directory / f"{name}.py"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    return directory, path


# The second conv (8 channels, 4x4 after the pool) runs one work group of 4 rows; the edit
# makes it 2 work groups of 2 rows (grid and index both change, as a user would edit it).
WORK_GROUP_EDIT = {
    'T.thread_binding(1, thread="blockIdx.y")': 'T.thread_binding(2, thread="blockIdx.y")',
    'T.thread_binding(4, thread="threadIdx.y")': 'T.thread_binding(2, thread="threadIdx.y")',
    "by * 4 + ty": "by * 2 + ty",
}


def test_dump_files_parse_to_the_kernels_the_model_builds(models, dumped):
    manifest = json.loads((dumped / "manifest.json").read_text())
    names = list(manifest["kernels"])
    assert names == ["00_conv2d_nchw4c", "01_max_pool2d", "02_conv2d_nchw4c", "03_mean_hw", "04_nchw4c_to_nchw", "05_tir_cos"]
    prims = {}
    compiler.compile_model(str(models[0]), runtime.get_device(), progress=lambda _: None, prims=prims)
    assert {e["key"] for e in manifest["kernels"].values()} == set(prims)
    for name, entry in manifest["kernels"].items():
        text = (dumped / entry["file"]).read_text()
        assert workbench.text_hash(text) == entry["sha256"]
        tvm.ir.assert_structural_equal(workbench.parse_kernel(dumped / entry["file"]), compiler.kernel_func(prims[entry["key"]]))
    upstream = manifest["kernels"]["05_tir_cos"]
    assert not upstream["ours"] and upstream["op"] == {"op": "upstream", "label": "tir_cos"}
    assert (dumped / "05_tir_cos.py").read_text().startswith("# tir-adreno kernel 05_tir_cos (upstream: legalized by TVM")
    conv = manifest["kernels"]["02_conv2d_nchw4c"]
    assert conv["op"]["op"] == "nn.conv2d" and conv["op"]["epilogue"]["residual"] and conv["rows"] == [2]
    assert conv["op"]["inputs"] == [[1, 8, 4, 4]] and conv["op"]["weight"] == [8, 8, 3, 3]
    header = (dumped / "02_conv2d_nchw4c.py").read_text().split("\n# from tvm.script")[0]
    for expected in ("nn.conv2d, direct", "padding=[1, 1, 1, 1]", "residual=True", "input [1, 8, 4, 4], weight [8, 8, 3, 3] -> output [1, 8, 4, 4]",
                     "config: oc4 w4 wg8x4x1 k1 texture (from default", "X [1, 2, 4, 4, 4] float32 global.texture", "profile rows 2", "tir-adreno kernel ", "--kernels "):
        assert expected in header, (expected, header)


def test_kernel_command_checks_times_and_shows(dumped):
    res = cli("kernel", str(dumped / "02_conv2d_nchw4c.py"), "--check", "--time", "--show", "opencl")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "__kernel void" in res.stdout and "read_imagef" in res.stdout
    assert re.search(r"check passed: relative error \S+ vs float64 NumPy \(tolerance 0.0001\)", res.stdout), res.stdout[-500:]
    assert re.search(r"time \d+\.\d+ (us|ms) \(median of 10 runs, OpenCL events\)", res.stdout)
    res = cli("kernel", str(dumped / "04_nchw4c_to_nchw.py"), "--check", "--show", "lowered")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "check passed: relative error 0.00e+00" in res.stdout and "(tolerance 0)" in res.stdout
    assert "T.launch_thread" in res.stdout or "threadIdx" in res.stdout
    res = cli("kernel", str(dumped / "00_conv2d_nchw4c.py"), "--check")  # the first conv reads the plain NCHW input
    assert res.returncode == 0 and "check passed" in res.stdout, res.stdout[-2000:] + res.stderr[-2000:]
    res = cli("kernel", str(dumped / "01_max_pool2d.py"), "--check")  # exact: max picks one input
    assert res.returncode == 0 and "check passed: relative error 0.00e+00" in res.stdout, res.stdout[-2000:] + res.stderr[-2000:]


def test_run_with_an_edited_work_group(models, dumped, tmp_path):
    directory = tmp_path / "edited"
    shutil.copytree(dumped, directory)
    path = directory / "02_conv2d_nchw4c.py"
    text = path.read_text()
    for old, new in WORK_GROUP_EDIT.items():
        assert old in text
        text = text.replace(old, new)
    path.write_text(text)
    res = cli("run", str(models[0]), "--kernels", str(directory), "--check")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [line for line in res.stdout.splitlines() if "EDITED" in line]
    assert len(rows) == 1 and rows[0].split()[0] == "2", res.stdout
    assert re.search(r"EDITED \d+\.\d+ -> \d+\.\d+ ms", rows[0])
    assert "check passed" in res.stdout


def test_dump_and_edit_in_half_storage(models, tmp_path):
    """float16_acc32 runs the float32 kernels on half images: the dump is the same TVMScript, and
    an edited kernel runs in that precision (checked at its 1e-2 tolerance)."""
    out = tmp_path / "half"
    res = cli("dump", str(models[0]), "-o", str(out), "--precision", "float16_acc32")
    assert res.returncode == 0, res.stderr[-3000:]
    path = out / "02_conv2d_nchw4c.py"
    text = path.read_text()
    for old, new in WORK_GROUP_EDIT.items():
        text = text.replace(old, new)
    path.write_text(text)
    res = cli("run", str(models[0]), "--kernels", str(out), "--precision", "float16_acc32", "--check")
    assert res.returncode == 0 and "EDITED" in res.stdout and "check passed" in res.stdout, res.stdout[-2000:] + res.stderr[-2000:]


def test_edit_reading_out_of_bounds_is_named_by_the_sanitizer(models, dumped, tmp_path, monkeypatch):
    # the column clamp of the input read removed: reads at x = -1 and x = W, which a clamp sampler
    # hides (it returns 0, like the padding); the bounds sanitizer names the kernel and parameter
    clamped = "T.min(T.max(vwt * 4 + wi - 1 + k_w, 0), 3), lane]"
    directory, path = edited_copy(dumped, tmp_path, "02_conv2d_nchw4c", clamped, "vwt * 4 + wi - 1 + k_w, lane]")
    monkeypatch.setenv("TIR_ADRENO_CHECK_BOUNDS", "1")
    res = cli("run", str(models[0]), "--kernels", str(directory))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stdout[-2000:] + res.stderr[-2000:]
    assert "parameter X read at (x=-1" in res.stderr and str(path) in res.stderr, res.stderr


def test_wrong_edit_fails_the_checks(models, dumped, tmp_path):
    # subtracting the residual instead of adding it: builds and runs, numbers are wrong
    directory, path = edited_copy(dumped, tmp_path, "02_conv2d_nchw4c", "acc[ob * 4 + wi, lane] + tmp[lane]", "acc[ob * 4 + wi, lane] - tmp[lane]")
    res = cli("kernel", str(path), "--check")
    assert res.returncode == 1 and "check FAILED" in res.stdout, res.stdout[-2000:] + res.stderr[-2000:]
    res = cli("run", str(models[0]), "--kernels", str(directory), "--check")
    assert res.returncode == 1 and "check FAILED" in res.stdout, res.stdout[-2000:] + res.stderr[-2000:]


def test_file_that_does_not_parse(models, dumped, tmp_path):
    directory, path = edited_copy(dumped, tmp_path, "00_conv2d_nchw4c", "acc[ob * 4 + wi, lane] + tmp[lane]", "acc[ob * 4 + wi, lane] + tmpx[lane]")
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "tmpx" in text)
    assert_user_error(cli("run", str(models[0]), "--kernels", str(directory)), f"{path}:{line}: Undefined variable: tmpx")
    path.write_text(path.read_text().replace("+ tmpx[lane]", "+* tmp[lane]"))
    assert_user_error(cli("kernel", str(path)), f"{path}:{line}: invalid syntax")


def test_missing_manifest(models, tmp_path):
    assert_user_error(cli("run", str(models[0]), "--kernels", str(tmp_path)), f"{tmp_path / 'manifest.json'}: no such file")


def test_kernel_file_of_another_model(models, dumped, tmp_path):
    other = tmp_path / "other"
    assert cli("dump", str(models[1]), "-o", str(other)).returncode == 0
    directory = tmp_path / "mixed"
    shutil.copytree(dumped, directory)
    shutil.copy(other / "02_conv2d_nchw4c.py", directory / "02_conv2d_nchw4c.py")
    res = cli("run", str(models[0]), "--kernels", str(directory))
    # the generated kernel it must match exists only once the model is compiled
    assert_user_error(res, f"{directory / '02_conv2d_nchw4c.py'}: signature differs from the model's kernel: parameter X is [1, 3, 4, 4, 4]",
                      before_compile=False)


def test_bad_show_value_and_saved_model_dir(dumped, tmp_path):
    assert_user_error(cli("kernel", str(dumped / "00_conv2d_nchw4c.py"), "--show", "cuda"), "--show must be one of tir, lowered, opencl, got 'cuda'")
    assert_user_error(cli("dump", str(tmp_path), "-o", str(tmp_path / "k")), "a saved model holds OpenCL C, not TVMScript")
    assert_user_error(cli("kernel", str(dumped / "05_tir_cos.py"), "--check"), "an upstream kernel records no op, so it has no NumPy reference")


def test_winograd_stage_runs_between_the_other_two(models, tmp_path):
    """A Winograd conv (chosen by records, `dump --records`) dumps as three kernels; `kernel --check`
    runs the edited stage between the other two, rebuilt from its header, against the conv reference."""
    from primfuncs.conv import conv2d_geometry
    from tir_adreno.strategy import records, conv as strategy
    from tir_adreno.strategy.profile import resolve

    assert_user_error(cli("dump", str(models[0]), "--records", str(tmp_path / "none.json"), "-o", str(tmp_path)), "no such records file")
    rec = records.Records(resolve(runtime.get_device()))
    rec.add(records.conv2d_key(conv2d_geometry((1, 8, 4, 4), (8, 8, 3, 3), 1, 1)), strategy.ConvChoice("winograd_4x4"), {})
    res = cli("dump", str(models[0]), "--records", str(rec.save(tmp_path / "records.json")), "-o", str(tmp_path))
    assert res.returncode == 0, res.stderr[-3000:]
    names = sorted(p.stem for p in tmp_path.glob("*.py"))
    assert names[2:5] == ["02_winograd4x4_input_transform", "03_winograd4x4_batched_gemm", "04_winograd4x4_output_transform"]
    res = cli("kernel", str(tmp_path / "03_winograd4x4_batched_gemm.py"), "--check")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "batched_gemm, run between the other Winograd stages" in res.stdout and "(tolerance 0.001)" in res.stdout
    path = tmp_path / "04_winograd4x4_output_transform.py"
    text = path.read_text()
    assert "y[i * 4 + j, lane] + tmp[lane]" in text
    path.write_text(text.replace("y[i * 4 + j, lane] + tmp[lane]", "y[i * 4 + j, lane] - tmp[lane]"))  # the residual subtracted
    res = cli("kernel", str(path), "--check")
    assert res.returncode == 1 and "check FAILED" in res.stdout, res.stdout[-2000:] + res.stderr[-2000:]


def test_fused_depthwise_pointwise_kernel_dumps_and_checks(tmp_path):
    """A depthwise conv + bias + relu feeding a 1x1 conv runs as one fused kernel (PoCL's profile
    fuses a layer this small); its file names both convs and ``kernel --check`` rebuilds their reference."""
    rng = np.random.default_rng(2)

    def weight(name, shape):
        return helper.make_tensor(name, TensorProto.FLOAT, shape, rng.standard_normal(int(np.prod(shape))).astype("float32"))

    nodes = [
        helper.make_node("Conv", ["image", "wd", "bd"], ["d"], pads=[1, 1, 1, 1], strides=[2, 2], group=6),
        helper.make_node("Relu", ["d"], ["r"]),
        helper.make_node("Conv", ["r", "wp"], ["out"]),
    ]
    graph = helper.make_graph(nodes, "dwpw", [helper.make_tensor_value_info("image", TensorProto.FLOAT, (1, 6, 7, 7))],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, (1, 5, 4, 4))],
                              [weight("wd", (6, 1, 3, 3)), weight("bd", (6,)), weight("wp", (5, 6, 1, 1))])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(tmp_path / "dwpw.onnx"))
    res = cli("dump", str(tmp_path / "dwpw.onnx"), "-o", str(tmp_path / "k"))
    assert res.returncode == 0, res.stderr[-3000:]
    manifest = json.loads((tmp_path / "k" / "manifest.json").read_text())
    assert list(manifest["kernels"]) == ["00_nchw_to_nchw4c", "01_depthwise_pointwise_nchw4c", "02_nchw4c_to_nchw"]
    info = manifest["kernels"]["01_depthwise_pointwise_nchw4c"]["op"]
    assert info["depthwise"] == {"weight": [6, 1, 3, 3], "epilogue": {"bias": True, "activation": "relu", "residual": False}}
    assert info["weight"] == [5, 6, 1, 1] and info["attrs"]["strides"] == [2, 2]
    path = tmp_path / "k" / "01_depthwise_pointwise_nchw4c.py"
    assert "depthwise prologue: weight [6, 1, 3, 3]" in path.read_text()
    res = cli("kernel", str(path), "--check")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "check passed" in res.stdout


def test_gated_conv_kernel_dumps_and_checks(tmp_path):
    """A squeeze-excitation's gate multiply read by the 1x1 conv after it: the conv's file records
    the gate and ``kernel --check`` rebuilds ``conv(X * G[n, c])`` as its reference."""
    rng = np.random.default_rng(3)

    def weight(name, shape):
        return helper.make_tensor(name, TensorProto.FLOAT, shape, rng.standard_normal(int(np.prod(shape))).astype("float32"))

    nodes = [
        helper.make_node("GlobalAveragePool", ["image"], ["p"]),
        helper.make_node("Conv", ["p", "w1"], ["f1"]),
        helper.make_node("Relu", ["f1"], ["h"]),
        helper.make_node("Conv", ["h", "w2"], ["f2"]),
        helper.make_node("Sigmoid", ["f2"], ["g"]),
        helper.make_node("Mul", ["image", "g"], ["s"]),
        helper.make_node("Conv", ["s", "wp"], ["out"]),
    ]
    graph = helper.make_graph(nodes, "se", [helper.make_tensor_value_info("image", TensorProto.FLOAT, (1, 6, 5, 5))],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, (1, 5, 5, 5))],
                              [weight("w1", (2, 6, 1, 1)), weight("w2", (6, 2, 1, 1)), weight("wp", (5, 6, 1, 1))])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(tmp_path / "se.onnx"))
    res = cli("dump", str(tmp_path / "se.onnx"), "-o", str(tmp_path / "k"))
    assert res.returncode == 0, res.stderr[-3000:]
    manifest = json.loads((tmp_path / "k" / "manifest.json").read_text())
    assert list(manifest["kernels"]) == ["00_nchw_to_nchw4c", "01_excitation", "02_conv2d_nchw4c", "03_nchw4c_to_nchw"]
    assert manifest["kernels"]["02_conv2d_nchw4c"]["op"]["gate"] == [1, 6, 1, 1]
    res = cli("kernel", str(tmp_path / "k" / "02_conv2d_nchw4c.py"), "--check")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "check passed" in res.stdout


def test_grn_kernels_dump_and_check(tmp_path):
    """ConvNeXt-V2's GRN before a 1x1 conv: the sum of squares, ``grn_scale`` and the conv reading
    ``x * s``; ``kernel --check`` rebuilds the sum of squares and the gated conv as their references."""
    from helpers.onnx_graphs import grn_block, pattern_graph

    rng, inits = np.random.default_rng(7), {}
    onnx.save(pattern_graph(grn_block(rng, inits), inits), str(tmp_path / "grn.onnx"))
    res = cli("dump", str(tmp_path / "grn.onnx"), "-o", str(tmp_path / "k"))
    assert res.returncode == 0, res.stderr[-3000:]
    manifest = json.loads((tmp_path / "k" / "manifest.json").read_text())
    assert list(manifest["kernels"]) == ["00_conv2d_nchw4c", "01_sum_squares_hw", "02_grn_scale",
                                         "03_conv2d_nchw4c", "04_nchw4c_to_nchw"]
    assert manifest["kernels"]["03_conv2d_nchw4c"]["op"]["gate"] == [1, 6, 1, 1]
    for name in ("01_sum_squares_hw", "03_conv2d_nchw4c"):
        res = cli("kernel", str(tmp_path / "k" / f"{name}.py"), "--check")
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        assert "check passed" in res.stdout


def test_folded_norm_conv_reference(device):
    """A 1x1 conv with a layer norm folded in (``op`` info ``norm_epsilon``, what the H200's plan
    records; ``dump`` plans for the live device, PoCL, which keeps the norm apart): ``kernel
    --check``'s reference (``workbench.reference_case``) is ``conv(LN(X), W)`` and its inputs X, W,
    WeightSum, Bias the kernel's."""
    from helpers.numeric import run_kernel, unpack_nchw4c
    from primfuncs import conv
    from primfuncs.conv.prologue import Prologue
    from primfuncs.epilogue import Epilogue

    info = {"op": "nn.conv2d", "inputs": [[1, 6, 3, 5]], "weight": [5, 6, 1, 1], "output": [1, 5, 3, 5], "norm_epsilon": 1e-6,
            "attrs": {"strides": [1, 1], "padding": [0, 0, 0, 0], "dilation": [1, 1], "groups": 1},
            "epilogue": {"bias": True, "activation": None, "residual": False}}
    inputs, ref, channels = workbench.reference_case(info, np.random.default_rng(4))
    func = conv.conv2d_nchw4c((1, 6, 3, 5), (5, 6, 1, 1), epilogue=Epilogue(bias=True), scope="global", prologue=Prologue(norm_eps=1e-6))
    out = run_kernel(device, func, *[np.asarray(a, np.float32) for a in inputs])
    np.testing.assert_allclose(unpack_nchw4c(out, channels), ref, rtol=1e-4, atol=1e-4)


def test_folded_group_norm_conv_reference(device):
    """A tiled 1x1 conv with a group norm folded in (``op`` info ``group_norm``, what the H200's
    plan records): ``kernel --check``'s reference is ``conv(GN(X), W)`` and its inputs X, the
    partials ``Stats`` (float64 ``group_norm_partials``), W, Bias the kernel's."""
    from helpers.numeric import run_kernel, unpack_nchw4c
    from primfuncs import conv
    from primfuncs.conv import ConvConfig
    from primfuncs.conv.norm import GroupNormFold
    from primfuncs.conv.prologue import Prologue
    from primfuncs.epilogue import Epilogue

    info = {"op": "nn.conv2d", "inputs": [[1, 8, 3, 5]], "weight": [5, 8, 1, 1], "output": [1, 5, 3, 5],
            "group_norm": {"groups": 2, "slices": 5, "epsilon": 1e-5},
            "attrs": {"strides": [1, 1], "padding": [0, 0, 0, 0], "dilation": [1, 1], "groups": 1},
            "epilogue": {"bias": True, "activation": None, "residual": False}}
    inputs, ref, channels = workbench.reference_case(info, np.random.default_rng(5))
    func = conv.conv2d_nchw4c((1, 8, 3, 5), (5, 8, 1, 1), epilogue=Epilogue(bias=True), scope="global",
                              config=ConvConfig(1, 2, (4, 2, 1), tiled=True), prologue=Prologue(group_norm=GroupNormFold(2, 5, 1e-5)))
    out = run_kernel(device, func, *[np.asarray(a, np.float32) for a in inputs])
    np.testing.assert_allclose(unpack_nchw4c(out, channels), ref, rtol=1e-4, atol=1e-4)


def test_folded_grn_conv_reference(device):
    """A tiled conv with GRN's scale folded in (``op`` info ``gate`` and ``grn_epsilon``, what the
    H200's plan records for ConvNeXt-V2's pwconv2): ``kernel --check``'s inputs are X, its sums of
    squares over H, W (the Gate), Gamma, W, Bias, and its reference ``conv(X * (1 + gamma * Nx), W)``."""
    from helpers.numeric import run_kernel, unpack_nchw4c
    from primfuncs import conv
    from primfuncs.conv import ConvConfig
    from primfuncs.conv.prologue import Prologue
    from primfuncs.epilogue import Epilogue

    info = {"op": "nn.conv2d", "inputs": [[1, 10, 3, 5]], "weight": [5, 10, 1, 1], "output": [1, 5, 3, 5],
            "gate": [1, 10, 1, 1], "grn_epsilon": 1e-6,
            "attrs": {"strides": [1, 1], "padding": [0, 0, 0, 0], "dilation": [1, 1], "groups": 1},
            "epilogue": {"bias": True, "activation": None, "residual": False}}
    inputs, ref, channels = workbench.reference_case(info, np.random.default_rng(5))
    func = conv.conv2d_nchw4c((1, 10, 3, 5), (5, 10, 1, 1), epilogue=Epilogue(bias=True), scope="global", prologue=Prologue(gate_scope="global", grn_eps=1e-6),
                              config=ConvConfig(1, 2, (4, 2, 1), tiled=True))
    out = run_kernel(device, func, *[np.asarray(a, np.float32) for a in inputs])
    np.testing.assert_allclose(unpack_nchw4c(out, channels), ref, rtol=1e-4, atol=1e-4)


def test_pool_with_a_chain_dumps_and_names_where_to_check_it(tmp_path):
    """A max pool with its elementwise chain is one kernel whose info records the expression; ``kernel
    --check`` has no reference for it and says so in one line (not a wrong reference of the bare pool),
    while ``run --check`` of the model checks it."""
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Conv", ["image", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Tanh", ["p"], ["t"]), helper.make_node("Mul", ["t", "k"], ["out"])]
    graph = helper.make_graph(nodes, "pool_chain", [helper.make_tensor_value_info("image", TensorProto.FLOAT, (1, 3, 8, 8))],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, (1, 6, 4, 4))],
                              [helper.make_tensor("w", TensorProto.FLOAT, (6, 3, 3, 3), rng.standard_normal(162).astype("float32")),
                               helper.make_tensor("k", TensorProto.FLOAT, (), [0.5])])
    model = tmp_path / "pool_chain.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(model))
    res = cli("dump", str(model), "-o", str(tmp_path / "k"))
    assert res.returncode == 0, res.stderr[-3000:]
    manifest = json.loads((tmp_path / "k" / "manifest.json").read_text())
    name = next(k for k in manifest["kernels"] if "max_pool2d" in k)
    assert manifest["kernels"][name]["op"]["epilogue"]["expr"] == "multiply(tanh(x), 0.5)"
    assert_user_error(cli("kernel", str(tmp_path / "k" / f"{name}.py"), "--check"),
                      "no NumPy reference for an epilogue expression (multiply(tanh(x), 0.5))")
    res = cli("run", str(model), "--kernels", str(tmp_path / "k"), "--check")
    assert res.returncode == 0 and "check passed" in res.stdout, res.stdout[-2000:] + res.stderr[-2000:]
