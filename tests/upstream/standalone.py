"""Run a defect file's repros outside pytest: ``python tests/upstream/test_tvm_defectN_*.py``.

Each strict-xfail test of the module is called directly (parametrized ones once per
parameter; the fixtures ``device`` and ``tmp_path`` are provided), and the outcome is
printed: the pinned wrong behaviour when the defect is present, "NOT REPRODUCED" when
the test passes (the defect is fixed in this TVM), or the unexpected error. The exit
status is 0 in all of these cases: the output is the report.
"""

import inspect
import sys
import tempfile
import traceback
from pathlib import Path

import tvm

from defect import KnownDefect


def _fixture(name):
    if name == "device":
        from tir_adreno.runtime import opencl

        return opencl.get_device()
    if name == "tmp_path":
        return Path(tempfile.mkdtemp(prefix="tvm-defect-"))
    raise KeyError(name)


def _cases(func):
    """(label, kwargs) for each parametrization of ``func`` (one parametrize mark at most)."""
    marks = [m for m in getattr(func, "pytestmark", []) if m.name == "parametrize"]
    if not marks:
        return [("", {})]
    (mark,) = marks
    name, values = mark.args[0], mark.args[1]
    ids = mark.kwargs.get("ids") or [repr(v) for v in values]
    return [(f"[{i}]", {name: v}) for i, v in zip(ids, values)]


def _xfail(func):
    return next((m for m in getattr(func, "pytestmark", []) if m.name == "xfail"), None)


def run(module_globals) -> int:
    title = (module_globals.get("__doc__") or "").strip().splitlines()[0]
    print(title)
    print(f"apache-tvm {tvm.__version__} ({tvm.__file__})")
    for name, func in list(module_globals.items()):
        if not (name.startswith("test_") and callable(func)):
            continue
        mark = _xfail(func)
        if mark is None:
            continue
        expected = mark.kwargs.get("raises", KnownDefect)
        for label, kwargs in _cases(func):
            params = inspect.signature(func).parameters
            for p in params:
                if p not in kwargs:
                    kwargs[p] = _fixture(p)
            print(f"\n== {name}{label}")
            try:
                func(**kwargs)
            except expected as err:  # the pinned wrong behaviour
                print("DEFECT REPRODUCED:")
                print("  " + str(err).strip().replace("\n", "\n  ")[:3000])
            except BaseException as err:  # noqa: BLE001 - report anything else as it is
                if getattr(err, "__module__", "").startswith("_pytest") or type(err).__name__ == "Skipped":
                    print(f"SKIPPED: {err}")
                else:
                    print("UNEXPECTED ERROR (not the pinned behaviour):")
                    traceback.print_exc(file=sys.stdout)
            else:
                print("NOT REPRODUCED: the correct behaviour was observed (fixed in this TVM?)")
    return 0
