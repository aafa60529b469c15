"""Shared test helpers: one place for what several test modules need (no test module imports another).

- ``numeric``: random inputs, error measures, ``run_kernel`` (one kernel on poisoned outputs).
- ``strategies``: hypothesis strategies and fixed cases.
- ``conv``: the float64 conv references, the conv-case runner, blocked-output checks.
- ``nonfinite``: NaN/Inf inputs and NaN-aware comparisons.
- ``onnx_graphs``: small ONNX graphs built with onnx.helper, and the pattern check.
- ``attributes``: the attribute names tir_adreno reads on TVM op attributes, and reads of names they lack.
- ``cli``: the command in a fresh process (also one that cannot import TVM), the user-error check.
- ``benchmarks``: the benchmark scripts, imported one way.
- ``saved_models``: tiny ONNX files and what a saved-model folder holds (whole, mixed), for the fault tests.
- ``rpc``: free ports, processes in their own session, waiting with a deadline (all on 127.0.0.1).
- ``docs``: the fenced blocks of README.md and docs/*.md and what their info strings mean.
Fixtures shared across folders (``device``, ``run_cli``, ``tiny_onnx``, ``two_convs``, ...) live in tests/conftest.py.
"""

from pathlib import Path

#: The repository root (tests/helpers/ -> tests/ -> root).
ROOT = Path(__file__).resolve().parents[2]


def refuse_imports(*packages: str) -> str:
    """Python source that, run first in a process, makes importing any of ``packages`` (or a
    submodule) raise ImportError there: proof that a path of the code never needs them."""
    return (
        "import sys\n"
        "class RefuseImports:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {packages!r}:\n"
        "            raise ImportError('import of ' + name + ' refused in this process')\n"
        "sys.meta_path.insert(0, RefuseImports())\n"
    )
