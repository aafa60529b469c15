"""Check the proposed Python patches of docs/upstream/patches/ against the installed TVM wheel.

    python docs/upstream/check_patches.py [--tvm /path/to/apache/tvm] [--only 7,12] [--timeout 900]

For each Python diff (a diff touching ``python/tvm/``), this

1. copies the installed ``tvm`` package into a temporary folder twice (the Python files; the
   shared libraries are linked, not copied) and applies the diff FILE to one copy with
   ``git apply`` (its ``python/tvm/`` part, paths stripped to ``tvm/``): the wheel on disk is
   never touched;
2. runs the defect's repro (``tests/upstream/test_tvm_defectN_*.py``, its strict xfails run as
   plain tests with ``--runxfail``) on the patched copy: "fixed" when all of it passes;
3. with ``--tvm`` (an apache/tvm source checkout: ``git archive`` of the diff's base commit),
   copies its ``tests/python`` into the temporary folder, applies the diff's ``tests/`` part
   there, and runs each TVM test file the diff header lists under ``TVM-tests:``, one at a time
   with a timeout, on the unpatched copy and on the patched one. A failure on the patched copy
   that the unpatched copy does not have is a new failure; a test that fails unpatched and passes
   patched is one that the diff's fix makes pass (the test a diff adds should be one).

It prints a table (markdown, as on docs/upstream/README.md). Without ``--tvm`` only steps 1-2
run; that part is what ``tests/upstream/test_patch_diffs.py`` runs in the suite (no network,
no TVM checkout).

A diff's header (the text before its first ``diff --git``, which ``git apply`` ignores) says
what it needs, one ``Key: value`` per line:

    Repro: tests/upstream/test_tvm_defect7_adreno_tir_pipeline_unusable.py [more files or ::tests]
    TVM-tests: tests/python/tirx-base/test_tir_texture_scope.py [more files]
    Wheel: no. (the wheel does not run the patched Python: not checked on it)
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
PATCHES = HERE / "patches"
PROJECT = HERE.parents[1]


@dataclass
class Diff:
    path: Path
    header: dict[str, list[str]]
    sections: list[tuple[str, str]]  # (path in apache/tvm, the file's part of the diff)

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def defect(self) -> int:
        return int(re.match(r"defect(\d+)", self.name).group(1))

    def part(self, prefix: str) -> str:
        return "".join(text for path, text in self.sections if path.startswith(prefix))

    @property
    def is_python(self) -> bool:
        """Changes TVM's Python and can be checked on the wheel (a ``Wheel: no ...`` header
        line says the wheel does not run the patched code)."""
        return bool(self.part("python/tvm/")) and self.header.get("Wheel", ["yes"])[0].rstrip(".") != "no"


def read_diff(path: Path) -> Diff:
    text = path.read_text()
    head, _, _ = text.partition("diff --git ")
    header: dict[str, list[str]] = {}
    for line in head.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("Repro", "TVM-tests", "Wheel"):
            header[key.strip()] = value.split()
    sections = []
    for chunk in re.split(r"(?m)^(?=diff --git )", text[len(head) :]):
        if chunk:
            sections.append((re.match(r"diff --git a/(\S+)", chunk).group(1), chunk))
    return Diff(path, header, sections)


def python_diffs() -> list[Diff]:
    return [d for d in map(read_diff, sorted(PATCHES.glob("*.diff"))) if d.is_python]


def installed_tvm() -> Path:
    """The installed tvm package folder (found without importing it)."""
    spec = importlib.util.find_spec("tvm")
    if spec is None or spec.origin is None:
        raise RuntimeError("tvm is not installed")
    return Path(spec.origin).parent


def copy_package(src: Path, root: Path, touched: list[str] = ()) -> Path:
    """``root/tvm``, a shadow of the package ``src``: the folders on the way to each file of
    ``touched`` (paths under ``tvm/``) are real and those files copied, so a patch can change
    them; everything else is a symbolic link into ``src`` (nothing copied, the wheel's
    shared libraries found where ``tvm.libinfo`` looks for them)."""
    dest = root / "tvm"
    real = {Path("tvm")} | {parent for t in touched for parent in Path(t).parents if parent != Path(".")}
    copies = {Path(t) for t in touched}
    for folder in sorted(real, key=lambda p: len(p.parts)):
        (root / folder).mkdir(parents=True, exist_ok=True)
        for entry in (src.parent / folder).iterdir():
            rel = folder / entry.name
            if rel in real or entry.name == "__pycache__":
                continue
            if rel in copies:
                shutil.copy2(entry, root / rel)
            else:
                (root / rel).symlink_to(entry)
    return dest


def git_apply(patch_text: str, cwd: Path, strip: int) -> None:
    """Apply ``patch_text`` under ``cwd`` with ``git apply -p<strip>`` (exact context)."""
    with tempfile.NamedTemporaryFile("w", suffix=".diff", delete=False) as f:
        f.write(patch_text)
    try:
        done = subprocess.run(
            ["git", "apply", f"-p{strip}", "--whitespace=nowarn", f.name], cwd=cwd, capture_output=True, text=True
        )
    finally:
        os.unlink(f.name)
    if done.returncode:
        raise RuntimeError(f"git apply failed in {cwd}:\n{done.stderr}")


def patched_package(diff: Diff, root: Path, src: Path | None = None) -> Path:
    """A copy of the installed package under ``root`` with the diff's ``python/tvm/`` part
    applied; returns ``root`` (the folder to put first on PYTHONPATH)."""
    root.mkdir(parents=True, exist_ok=True)
    touched = [path.removeprefix("python/") for path, _ in diff.sections if path.startswith("python/tvm/")]
    copy_package(src or installed_tvm(), root, touched)
    git_apply(diff.part("python/tvm/"), root, strip=2)  # a/python/tvm/x.py -> tvm/x.py
    return root


def env_with(package_root: Path | None) -> dict[str, str]:
    """The environment of a child interpreter importing tvm from ``package_root`` (None: the
    installed one) and tir-adreno from this checkout."""
    env = dict(os.environ)
    paths = [str(package_root)] if package_root else []
    env["PYTHONPATH"] = os.pathsep.join(paths + [str(PROJECT)])
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


@dataclass
class Outcome:
    passed: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    skipped: int = 0
    error: str = ""  # the run itself failed (timeout, collection error)

    def counts(self) -> str:
        if self.error:
            return self.error
        return f"{len(self.passed)} passed, {len(self.failed)} failed, {self.skipped} skipped"


def run_pytest(args: list[str], package_root: Path | None, cwd: Path, timeout: float) -> Outcome:
    """Run pytest in a child interpreter; per-test outcomes from its JUnit XML."""
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", f"--junitxml={xml}", *args]
        try:
            done = subprocess.run(cmd, cwd=cwd, env=env_with(package_root), capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return Outcome(error=f"timeout after {timeout:.0f} s")
        if not xml.exists():
            return Outcome(error=f"pytest exit {done.returncode}: {done.stdout[-300:]}{done.stderr[-300:]}")
        outcome = Outcome()
        for case in ET.parse(xml).iter("testcase"):
            name = f"{case.get('classname')}::{case.get('name')}"
            tags = {child.tag for child in case}
            if tags & {"failure", "error"}:
                outcome.failed.add(name)
            elif "skipped" in tags:
                outcome.skipped += 1
            else:
                outcome.passed.add(name)
        if done.returncode not in (0, 1):  # 1: some tests failed; anything else: not a plain run
            outcome.error = f"pytest exit {done.returncode}: {done.stdout[-300:]}"
        return outcome


def run_repro(diff: Diff, package_root: Path | None, timeout: float = 600) -> Outcome:
    """The defect's repro files with their strict xfails run as plain tests: all pass = fixed."""
    files = [str(PROJECT / f) for f in diff.header.get("Repro", [])]
    if not files:
        return Outcome(error="no Repro: line in the diff header")
    # the in-suite checks of the diffs themselves are not part of the repro
    return run_pytest(["--runxfail", "-k", "not test_patch", *files], package_root, PROJECT, timeout)


@dataclass
class TvmTestResult:
    file: str
    unpatched: Outcome
    patched: Outcome

    @property
    def new_failures(self) -> set[str]:
        return self.patched.failed - self.unpatched.failed

    @property
    def fixed(self) -> set[str]:
        return self.unpatched.failed & self.patched.passed


def run_tvm_tests(diff: Diff, tvm_checkout: Path, work: Path, clean_root: Path, patched_root: Path, timeout: float):
    """Each TVM test file of the diff header, on the unpatched and the patched package, with
    the diff's tests/ part applied to a copy of the checkout's tests/python."""
    tests = work / "tvm-tests"
    shutil.copytree(tvm_checkout / "tests" / "python", tests / "tests" / "python")
    if diff.part("tests/"):
        git_apply(diff.part("tests/"), tests, strip=1)
    results = []
    for file in diff.header.get("TVM-tests", []):
        print(f"  {diff.name}: {file}", file=sys.stderr, flush=True)
        outcome = {}
        for label, root in (("unpatched", clean_root), ("patched", patched_root)):
            outcome[label] = run_pytest([file], root, tests, timeout)
        results.append(TvmTestResult(file, outcome["unpatched"], outcome["patched"]))
    return results


def check(diff: Diff, tvm_checkout: Path | None, timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"check-{diff.name}-") as tmp:
        work = Path(tmp)
        src = installed_tvm()
        clean_root = work / "unpatched"
        clean_root.mkdir()
        copy_package(src, clean_root)
        try:
            patched_root = patched_package(diff, work / "patched", src)
        except RuntimeError as err:
            return {"diff": diff, "applies": str(err).splitlines()[1:2], "repro": None, "tvm": []}
        repro = run_repro(diff, patched_root)
        tvm = run_tvm_tests(diff, tvm_checkout, work, clean_root, patched_root, timeout) if tvm_checkout else []
        return {"diff": diff, "applies": True, "repro": repro, "tvm": tvm}


def repro_cell(repro: Outcome | None) -> str:
    if repro is None:
        return "-"
    if repro.error:
        return f"ERROR: {repro.error}"
    verdict = "fixed" if not repro.failed and repro.passed else "NOT fixed"
    return f"{verdict} ({len(repro.passed)}/{len(repro.passed) + len(repro.failed)} pass)"


def table(results: list[dict]) -> str:
    rows = [
        "| diff | applies to the wheel | repro on the patched wheel | TVM test file | unpatched | patched | new failures | made to pass |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        first = f"| {r['diff'].name} | {'yes' if r['applies'] is True else 'NO ' + ' '.join(r['applies'])} | {repro_cell(r['repro'])} "
        if not r["tvm"]:
            rows.append(first + "| - | - | - | - | - |")
        for i, t in enumerate(r["tvm"]):
            lead = first if i == 0 else "| | | "
            new = ", ".join(sorted(n.split("::")[-1] for n in t.new_failures)) or "none"
            fixed = ", ".join(sorted(n.split("::")[-1] for n in t.fixed)) or "none"
            rows.append(f"{lead}| {t.file} | {t.unpatched.counts()} | {t.patched.counts()} | {new} | {fixed} |")
    return "\n".join(rows)


def applies_to_checkout(tvm_checkout: Path) -> str:
    """A table: does every diff (C++ ones too) still apply to the checkout (git apply --check)?"""
    rows = ["| diff | changes | applies to the TVM checkout |", "|---|---|---|"]
    for diff in map(read_diff, sorted(PATCHES.glob("*.diff"))):
        done = subprocess.run(["git", "apply", "--check", str(diff.path)], cwd=tvm_checkout, capture_output=True, text=True)
        files = ", ".join(path for path, _ in diff.sections)
        verdict = "yes" if done.returncode == 0 else "NO: " + done.stderr.strip().splitlines()[0]
        rows.append(f"| {diff.name} | {files} | {verdict} |")
    return "\n".join(rows)


def _defect_numbers(text: str) -> set[int]:
    try:
        return {int(n) for n in text.split(",")}
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of defect numbers: {text!r}") from None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tvm", type=Path, help="apache/tvm source checkout (its tests/python is used)")
    parser.add_argument("--only", type=_defect_numbers, help="comma-separated defect numbers, e.g. 7,12")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per TVM test file run")
    args = parser.parse_args(argv)
    if args.tvm and not (args.tvm / "tests" / "python").is_dir():
        print(f"error: {args.tvm} has no tests/python (an apache/tvm checkout?)", file=sys.stderr)
        return 2
    only = args.only
    diffs = [d for d in python_diffs() if only is None or d.defect in only]
    results = [check(d, args.tvm, args.timeout) for d in diffs]
    print(table(results))
    if args.tvm:
        print()
        print(applies_to_checkout(args.tvm))
    bad = [r for r in results if r["applies"] is not True or repro_cell(r["repro"]).startswith(("NOT", "ERROR"))]
    bad += [r for r in results if any(t.new_failures or t.unpatched.error or t.patched.error for t in r["tvm"])]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
