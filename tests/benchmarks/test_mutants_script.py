"""benchmarks/mutants.py without running a mutant (each runs the suite): every mutant still finds
its code, the command is the README's, the copy leaves the working tree alone, the table is
Markdown."""

import os

import pytest

from helpers import ROOT
from helpers.benchmarks import benchmark

mutants = benchmark("mutants")


@pytest.mark.parametrize("mutant", mutants.MUTANTS, ids=lambda m: m.name)
def test_every_mutant_finds_its_code_once_and_changes_it(mutant):
    """A snippet that moved or changed fails here, in the suite, not when the mutants next run."""
    for old, new in mutant.edits:
        assert old != new
        path = mutants.locate(ROOT, old)
        assert path.read_text().count(old) == 1
    for test in mutant.tests:
        assert (ROOT / test.split("::")[0]).is_file(), test


def test_mutant_names_are_unique():
    names = [m.name for m in mutants.MUTANTS]
    assert len(names) == len(set(names))


def test_the_command_is_the_readme_test_command_stopping_at_the_first_failure():
    lines = (ROOT / "README.md").read_text().splitlines()
    fence = next(i for i, line in enumerate(lines) if line.startswith("```"))
    readme = lines[fence + 2]  # the first code block's second line, as .ci/run reads it
    command = mutants.pytest_command(ROOT, None, 7)
    stop = ["-x", "-p", "first_failure", "-p", "no:cacheprovider"]
    assert " ".join(["python3", *command[1:-7]]) == readme.split("&&")[-1].strip()
    assert command[-7:] == [f"--ignore={mutants.SNIPPET_CHECK}", *stop, "--hypothesis-seed=7"]
    assert (ROOT / mutants.SNIPPET_CHECK).samefile(__file__)  # the test ignored is this one
    own_first = mutants.pytest_command(ROOT, None, 7, own_first=True)
    assert own_first == [*command[:-6], "-p", "files_first", *command[-6:]]
    quick = mutants.pytest_command(ROOT, ["tests/a.py::t"], 3, own_first=True)
    assert quick[3:] == ["-q", "-n", "0", "tests/a.py::t", *stop, "--hypothesis-seed=3"]


def _plugins_beside(tmp_path):
    (tmp_path / "benchmarks").mkdir()
    for plugin in ("first_failure.py", "files_first.py"):
        (tmp_path / "benchmarks" / plugin).write_text((ROOT / "benchmarks" / plugin).read_text())


def test_a_run_stops_at_its_first_failure_not_when_the_workers_drain(tmp_path):
    """Under xdist, ``-x`` lets the other worker finish its file; the runner stops the whole
    process group when the plugin names the first failed test (the slow file never finishes)."""
    _plugins_beside(tmp_path)
    finished = tmp_path / "slow-finished"
    (tmp_path / "test_slow.py").write_text(
        f"import pathlib, time\n\ndef test_slow():\n    time.sleep(120)\n    pathlib.Path({str(finished)!r}).touch()\n")
    (tmp_path / "test_wrong.py").write_text("def test_wrong():\n    assert 1 + 1 == 3, 'arithmetic'\n")
    command = [mutants.sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadfile", "-x", "-p", "first_failure",
               "-p", "no:cacheprovider", "test_slow.py", "test_wrong.py"]
    code, _, out = mutants.run_tests(tmp_path, command, dict(os.environ))
    assert mutants.verdict(code, out) == "killed"
    assert mutants.first_failure(out).startswith("test_wrong.py::test_wrong: AssertionError: arithmetic")
    assert not finished.exists()


def test_a_mutant_edits_a_copy_not_the_tree(tmp_path):
    m = next(m for m in mutants.MUTANTS if m.name == "pool_count_include_pad_misread")
    (old, new), = m.edits
    path = mutants.locate(ROOT, old)
    before = path.read_text()
    copy = tmp_path / "copy"
    for top in mutants.SEARCHED:  # the searched folders are enough for apply()
        (copy / top).mkdir(parents=True)
    (copy / path.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
    (copy / path.relative_to(ROOT)).write_text(before)
    where = mutants.apply(m, copy)
    assert where == [f"{path.relative_to(ROOT)}:{before[: before.index(old)].count(chr(10)) + 1}"]
    assert new in (copy / path.relative_to(ROOT)).read_text() and old not in (copy / path.relative_to(ROOT)).read_text()
    assert path.read_text() == before


def test_the_kill_table_counts_kills_per_run():
    m = mutants.MUTANTS[0]
    runs = [mutants.Run(0, "killed", 12.4, "kernels/test_x.py::t: AssertionError: a|b"), mutants.Run(1, "SURVIVED", 600, "")]
    lines = mutants.table([(m, ["a.py:3"], runs)], 2).splitlines()
    assert lines[0].startswith("| mutant |") and set(lines[1]) <= set("|-")
    assert lines[2] == f"| `{m.name}`: {m.what} | a.py:3 | 1/2 | 12, survived | kernels/test_x.py::t: AssertionError: a/b |"


XDIST_STOPPED = """\
=========================== short test summary info ============================
FAILED tests/kernels/test_b.py::test_bad[3] - AssertionError: 0.5
!!!!!!!!!!!! xdist.dsession.Interrupted: stopping after 1 failures !!!!!!!!!!!!!
E       AssertionError: 0.5
1 failed, 1 passed in 16.36s
"""


def test_a_failure_is_a_kill_also_when_xdist_stops_the_run():
    """``-n 2 -x`` ends with exit code 2 (interrupted) after the first failure: still a kill."""
    assert mutants.first_failure(XDIST_STOPPED) == "kernels/test_b.py::test_bad[3]: AssertionError: 0.5"
    assert mutants.verdict(2, XDIST_STOPPED) == mutants.verdict(1, XDIST_STOPPED) == "killed"
    assert mutants.verdict(0, "5 passed") == "SURVIVED"
    assert mutants.verdict(2, "Interrupted: 1 error during collection") == "error (pytest exit 2)"
    assert mutants.verdict(-15, "") == "error (pytest exit -15)"


def test_own_first_orders_the_mutants_files_first_and_keeps_every_test(monkeypatch):
    """``--own-first`` reorders the suite (its files first, in order; the rest as collected), never drops a test."""
    files_first = benchmark("files_first")
    item = type("Item", (), {"__init__": lambda self, nodeid: setattr(self, "nodeid", nodeid)})
    ids = ["tests/a.py::t1", "tests/b.py::t1", "tests/c.py::t[1]", "tests/b.py::t2", "tests/d.py::t", "tests/c.py::t[2]"]
    items = [item(n) for n in ids]
    monkeypatch.setenv(files_first.FILES_FIRST, os.pathsep.join(["tests/c.py", "tests/b.py"]))
    files_first.pytest_collection_modifyitems(items)
    assert [i.nodeid for i in items] == ["tests/c.py::t[1]", "tests/c.py::t[2]", "tests/b.py::t1", "tests/b.py::t2",
                                         "tests/a.py::t1", "tests/d.py::t"]
    monkeypatch.delenv(files_first.FILES_FIRST)
    files_first.pytest_collection_modifyitems(items)
    assert [i.nodeid for i in items][:2] == ["tests/c.py::t[1]", "tests/c.py::t[2]"]  # no files named: order kept


def test_own_files_come_first_under_xdist_loadfile(tmp_path):
    """xdist hands out --dist loadfile's biggest file first unless told not to: with one worker the
    first failure is the own (small) file's only when files_first keeps the collected order."""
    _plugins_beside(tmp_path)
    (tmp_path / "test_big.py").write_text("".join(f"def test_big_{i}():\n    assert {i} != 0, 'big'\n\n" for i in range(6)))
    (tmp_path / "test_small.py").write_text("def test_small():\n    assert False, 'small'\n")
    command = [mutants.sys.executable, "-m", "pytest", "-q", "-n", "1", "--dist", "loadfile", "-p", "files_first", "-x",
               "-p", "first_failure", "-p", "no:cacheprovider", "test_big.py", "test_small.py"]
    files_first = benchmark("files_first")
    code, _, out = mutants.run_tests(tmp_path, command, {**os.environ, files_first.FILES_FIRST: "test_small.py"})
    assert mutants.first_failure(out).startswith("test_small.py::test_small: AssertionError: small")
