"""benchmarks/zoo.py and models_e2e.py split in two: ``--build-only`` here, ``--from`` without TVM
(what runs on the H200), on a tiny exported-style ONNX model."""

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from test_onnx_import import conv_bn, make, node, relu6_nodes, tensor

ROOT = Path(__file__).resolve().parents[1]
#: Runs a script with tvm/onnx/torch unimportable: the --from side must not need them.
NO_TVM = (
    "import os, runpy, sys\n"
    "class Block:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] in ('tvm', 'onnx', 'torch'):\n"
    "            raise ImportError('blocked ' + name)\n"
    "sys.meta_path.insert(0, Block())\n"
    "sys.argv = sys.argv[1:]\n"
    "sys.path.insert(0, os.path.dirname(sys.argv[0]))\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)


def tiny_model(path: Path) -> Path:
    nodes, inits = conv_bn("input", "c1", "c1", 3, 8, k=3)
    act, bounds = relu6_nodes("c1", "output", "r1")
    onnx.save(make(nodes + act, [tensor("input", (1, 3, 8, 8))], [tensor("output", (1, 8, 8, 8))], inits + bounds), path)
    return path


def script(name, *args, no_tvm=False):
    cmd = [sys.executable, "-c", NO_TVM] if no_tvm else [sys.executable]
    proc = subprocess.run([*cmd, str(ROOT / "benchmarks" / name), *map(str, args)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def onnx_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("onnx")
    tiny_model(directory / "tiny.onnx")
    return directory


def test_zoo_build_only_then_from_without_tvm(onnx_dir, tmp_path):
    saved = tmp_path / "saved"
    script("zoo.py", "--onnx-dir", onnx_dir, "--models", "tiny,absent", "--build-only", saved, "--target", "pocl")
    assert not (saved / "tiny" / "weights.npz").exists()  # timing-only save
    assert json.loads((saved / "zoo-build.json").read_text())["target"] == "pocl"
    out = script("zoo.py", "--from", saved, "--models", "tiny", "--repeat", "2", "--results-dir", tmp_path, no_tvm=True)
    assert "timed" in out
    (result_file,) = tmp_path.glob("zoo-*.json")
    doc = json.loads(result_file.read_text())
    assert doc["target"] == "pocl" and "onnxruntime" in doc["note"]
    r = doc["results"]["tiny"]
    assert r["random_weights"] is True and "ok" not in r
    assert r["kernel_ms"] > 0 and r["wall_ms"] > 0 and r["compile_s"] > 0
    assert r["layout_transforms"] == 2 and r["calls"] == r["kernels"] >= 3
    assert r["ours_share"] > 0.99 and r["upstream_kernels"] == {}


def test_models_e2e_takes_onnx_models(onnx_dir, tmp_path):
    saved = tmp_path / "saved"
    script("models_e2e.py", "--onnx", onnx_dir / "tiny.onnx", "--build-only", saved, "--target", "pocl", "--carry-weights-mb", "0")
    assert {p.name for p in saved.iterdir()} == {"tiny-ours", "tiny-ours_nofuse", "tiny-upstream"}
    assert not (saved / "tiny-ours" / "weights.npz").exists()
    script("models_e2e.py", "--from", saved, "--models", "tiny", "--repeat", "2", "--results-dir", tmp_path, no_tvm=True)
    (result_file,) = tmp_path.glob("models_e2e-*.json")
    (entry,) = json.loads(result_file.read_text())["results"]
    assert entry["model"] == "tiny" and entry["cudnn"] is None
    for way in ("ours", "upstream", "ours_nofuse"):
        assert entry[way]["random_weights"] is True and entry[way]["kernel_ms"] > 0
    assert entry["fuse_gain"] > 0
    assert entry["ours"]["calls"] < entry["upstream"]["calls"]  # conv + BatchNorm + ReLU6 fused
