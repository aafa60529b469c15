"""Tuning records go stale with the kernels they were measured on: any change to a module of the
``primfuncs`` package (the tiled conv and the pools included, wherever they live) makes a records
file ignored with one warning, and unchanged kernels keep it.

Each step runs in a fresh process inside a copy of the repository, so the kernel sources that
are edited are the copy's own and nothing is remembered between steps."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT

#: Writes records of one conv and one pool for the adreno profile with the copy's code.
WRITE = """
import sys
from types import SimpleNamespace
from tir_adreno.strategy import records
from tir_adreno.strategy.profile import get_profile

conv = SimpleNamespace(n=1, c=8, h=4, w=4, o=8, kh=3, kw=3, strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1)
recs = records.Records(get_profile("adreno"))
recs.add(records.conv2d_key(conv), records.ConvChoice("winograd_4x4"), {"winograd_4x4": 1e-3})
recs.add(records.pool_key("max", (1, 8, 4, 4), {"pool_size": 3}), records.PoolChoice("group"), {"group": 1e-4})
recs.save(sys.argv[1])
"""

#: Loads the records as compilation does; prints where the code came from, the layers kept and the warnings.
LOAD = """
import json, sys, warnings
import primfuncs
from tir_adreno.strategy import records
from tir_adreno.strategy.profile import get_profile

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    recs = records.load(sys.argv[1], get_profile("adreno"))
print(json.dumps({"code": [records.__file__, primfuncs.__file__], "layers": len(recs.layers),
                  "warnings": [f"{w.category.__name__}: {w.message}" for w in caught]}))
"""


def _in_copy(copy: Path, script: str, *args) -> dict | None:
    res = subprocess.run([sys.executable, "-c", script, *args], cwd=copy, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    if not res.stdout.strip():
        return None
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert all(Path(p).resolve().is_relative_to(copy.resolve()) for p in out["code"]), out["code"]  # the copy's code ran
    return out


def _defining(package: Path, definition: str) -> Path:
    """The module of ``package`` that holds ``definition`` (found by content: modules may move)."""
    (path,) = [p for p in package.rglob("*.py") if definition in p.read_text()]
    return path


@pytest.fixture
def copy(tmp_path):
    copy = tmp_path / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in ("tir_adreno", "primfuncs"):
        shutil.copytree(ROOT / package, copy / package, ignore=ignore)
    return copy


@pytest.mark.parametrize("definition", ["def conv2d_tiled_nchw4c(", "def max_pool2d("], ids=["tiled conv", "pool"])
def test_records_ignored_once_a_kernel_module_changes(copy, definition):
    path = copy / "records.json"
    _in_copy(copy, WRITE, str(path))
    kept = _in_copy(copy, LOAD, str(path))
    assert kept["layers"] == 2 and kept["warnings"] == [], kept  # unchanged kernels: the records apply

    module = _defining(copy / "primfuncs", definition)
    module.write_text(module.read_text() + "\n# a comment: the code is the same, but who is to say\n")
    stale = _in_copy(copy, LOAD, str(path))
    assert stale["layers"] == 0, stale
    assert stale["warnings"] == [f"RecordsWarning: {path}: records ignored: measured on other kernel sources"], stale


def test_records_ignored_once_a_kernel_module_is_added(copy):
    path = copy / "records.json"
    _in_copy(copy, WRITE, str(path))
    subpackage = copy / "primfuncs" / "extra"
    subpackage.mkdir()
    (subpackage / "__init__.py").write_text("")
    (subpackage / "new_kernel.py").write_text('"""a kernel module the records were not measured with"""\n')
    stale = _in_copy(copy, LOAD, str(path))
    assert stale["layers"] == 0 and len(stale["warnings"]) == 1 and "other kernel sources" in stale["warnings"][0], stale
