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
