"""The benchmark scripts (benchmarks/*.py): as modules, imported one way, and as commands.

The scripts import their siblings by plain name (``from common import ...``), as they do when
run as ``python benchmarks/x.py``; so their folder goes on sys.path here, once, and nowhere else.
"""

import importlib
import subprocess
import sys

from helpers import ROOT, refuse_imports

BENCHMARKS = ROOT / "benchmarks"


def benchmark(name: str):
    """The module of benchmarks/``name``.py."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(name)


#: Runs a script with tvm/onnx/torch unimportable: the --from side must not need them.
NO_TVM = refuse_imports("tvm", "onnx", "torch") + (
    "import os, runpy\n"
    "sys.argv = sys.argv[1:]\n"
    "sys.path.insert(0, os.path.dirname(sys.argv[0]))\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)


def script(name, *args, no_tvm=False):
    """Run benchmarks/``name`` with ``args`` (``no_tvm``: with tvm/onnx/torch unimportable); its stdout."""
    cmd = [sys.executable, "-c", NO_TVM] if no_tvm else [sys.executable]
    proc = subprocess.run([*cmd, str(BENCHMARKS / name), *map(str, args)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def build_then_run(name, model, stem, tmp_path, ways, build_args=(), between=None) -> dict:
    """benchmarks/``name`` (a ``ways.py`` script) split in two as on the H200: the ONNX ``model``
    saved as ``<stem>.onnx`` and built ``--build-only`` here for the H200 profile (TVM), the saved
    ways checked to be ``ways``, ``between(saved)`` called, then run ``--from`` with TVM
    unimportable, its models' table printed last. Returns ``stem``'s results from the JSON."""
    import json

    import onnx

    onnx.save(model, tmp_path / f"{stem}.onnx")
    saved = tmp_path / "saved"
    script(name, "--onnx", tmp_path / f"{stem}.onnx", "--target", "nvidia-h200", *build_args, "--build-only", saved)
    assert sorted(p.name for p in saved.iterdir()) == sorted(f"{stem}-{w}" for w in ways)
    if between is not None:
        between(saved)
    out = script(name, "--from", saved, "--repeat", "2", "--results-dir", tmp_path / "results", no_tvm=True)
    assert out.strip().splitlines()[-1].startswith(f"{stem} ")  # the models' table comes last
    (result,) = (tmp_path / "results").glob(f"{name.removesuffix('.py')}-*.json")
    return json.loads(result.read_text())["models"][stem]
