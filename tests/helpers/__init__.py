"""Shared test helpers: one place for what several test modules need (no test module imports another).

- ``numeric``: random inputs, error measures, ``run_kernel`` (one kernel on poisoned outputs).
- ``strategies``: hypothesis strategies and fixed cases.
- ``conv``: the float64 conv references, the conv-case runner, blocked-output checks.
- ``nonfinite``: NaN/Inf inputs and NaN-aware comparisons.
- ``onnx_graphs``: small ONNX graphs built with onnx.helper, and the pattern check.
- ``cli``: the command in a fresh process, the user-error check.
- ``benchmarks``: the benchmark scripts, imported one way.
Fixtures shared across folders (``device``, ``run_cli``, ``tiny_onnx``, ``two_convs``, ...) live in tests/conftest.py.
"""

from pathlib import Path

#: The repository root (tests/helpers/ -> tests/ -> root).
ROOT = Path(__file__).resolve().parents[2]
