"""The proposed Python patches, checked as the diff files themselves.

Each ``docs/upstream/patches/*.diff`` that changes ``python/tvm/`` is applied with ``git apply``
to a shadow copy of the installed tvm package (``docs/upstream/check_patches.py``: the patched
files are copies, everything else links to the wheel, which is never modified), and the
defect's repro files named in the diff's ``Repro:`` header run on that copy in a child
interpreter with their strict xfails as plain tests (``--runxfail``): all of them must pass.
Without the patch the same tests are the suite's strict xfails. No network, no TVM checkout:
TVM's own test files are run by ``check_patches.py --tvm`` (results on docs/upstream/README.md).
"""

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docs" / "upstream"))
import check_patches  # noqa: E402  (docs/upstream/check_patches.py)

DIFFS = check_patches.python_diffs()


def test_python_diffs_are_the_expected_ones():
    """A diff that stops looking like a Python patch (or a new one) is noticed here."""
    assert sorted(d.defect for d in DIFFS) == [7, 11, 12, 13, 15, 17, 18]
    assert all(d.header.get("Repro") for d in DIFFS)


@pytest.fixture(scope="module")
def repro_outcomes(tmp_path_factory):
    """{diff name: Outcome of its repro on the patched copy}, two children at a time."""

    def check(diff):
        root = check_patches.patched_package(diff, tmp_path_factory.mktemp(diff.name))
        return diff.name, check_patches.run_repro(diff, root, timeout=300)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(check, DIFFS))


@pytest.mark.parametrize("diff", DIFFS, ids=lambda d: d.name)
def test_diff_file_fixes_its_repro(diff, repro_outcomes):
    outcome = repro_outcomes[diff.name]
    assert not outcome.error, outcome.error
    assert outcome.passed and not outcome.failed, f"still failing on the patched copy: {sorted(outcome.failed)}"


def test_a_diff_that_does_not_apply_is_refused(tmp_path):
    """The copy is patched by `git apply` with exact context: a stale diff fails loudly."""
    (diff,) = [d for d in DIFFS if d.defect == 12]
    stale = check_patches.Diff(diff.path, diff.header, [(p, t.replace("    assert r_loops\n", "    assert r_loops  \n")) for p, t in diff.sections])
    with pytest.raises(RuntimeError, match="git apply failed"):
        check_patches.patched_package(stale, tmp_path)
