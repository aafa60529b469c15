"""The layer contracts of pyproject.toml ([tool.importlinter]) hold: primfuncs never imports
tir_adreno, the runtime imports neither TVM nor the layers above it, and every import goes
downwards (cli > tools > ops > tuning > compiler > passes > strategy > codegen | frontend > runtime),
primfuncs below tir_adreno; inside passes the fusion patterns above the single-op rules, above conv
emission and the rewriter, and neither two rule modules nor two pattern modules import each other."""

import subprocess
import sys
from helpers import ROOT


def test_lint_imports_keeps_every_contract():
    # lint-imports analyses the packages importable from its working directory: this checkout's.
    command = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    res = subprocess.run([sys.executable, "-c", command], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "0 broken" in res.stdout, res.stdout[-4000:]
