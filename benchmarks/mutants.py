"""Mutation check of the test suite: named mutants, each applied to a temporary copy of the
repository, each run against the tests that should catch it; prints the kill table (``first failure``: what caught it).

A mutant is a small, plausible bug (batch norm's epsilon dropped, a conv's coordinate clamp
removed, a Winograd constant off by 0.5%, ...). It is "killed" when its tests fail, and
"survived" when they pass: then the suite cannot tell the bug from the code. Every mutant
must be killed. Not part of CI (minutes per mutant on PoCL): run it before a release and
after changing tests (docs/testing.md has the last table).

Mutants are located by exact code snippets searched over the tree (``primfuncs/``,
``tir_adreno/``), not by file path, so moving code between modules does not break them; a
snippet found other than exactly once stops the run with an error naming it.

    python benchmarks/mutants.py                 # every mutant
    python benchmarks/mutants.py --only bn_eps_dropped,conv_clamp_removed --baseline
    python benchmarks/mutants.py --list
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Where mutants' snippets are searched.
SEARCHED = ("primfuncs", "tir_adreno")


@dataclasses.dataclass(frozen=True)
class Mutant:
    name: str
    what: str
    edits: tuple[tuple[str, str], ...]  # (exact old text, new text), each old text unique in the tree
    tests: tuple[str, ...]  # pytest node ids or files, relative to the repository root


#: A batch norm without a conv (one affine kernel) and MobileNetV2's block (folded into convs).
BATCH_NORM_TESTS = ("tests/passes/test_coverage.py::test_batch_norm_without_conv_is_one_affine_kernel",
                    "tests/models/test_onnx_import.py::test_mobilenet_v2_block_batch_2")

MUTANTS = (
    Mutant(
        "bn_eps_dropped", "batch norm folded without its epsilon",
        (("np.sqrt(var.astype(np.float64) + float(node.attrs.epsilon))", "np.sqrt(var.astype(np.float64))"),),
        BATCH_NORM_TESTS,
    ),
    Mutant(
        "bn_eps_x100", "batch norm's epsilon multiplied by 100",
        (("np.sqrt(var.astype(np.float64) + float(node.attrs.epsilon))",
          "np.sqrt(var.astype(np.float64) + 100 * float(node.attrs.epsilon))"),),
        BATCH_NORM_TESTS,
    ),
    Mutant(
        "conv_clamp_removed", "the direct conv's top-row coordinate clamp removed (PoCL reads 0 there: only the sanitizer sees it)",
        (("            ih = T.max(ih, 0)\n", "            ih = ih\n"),),
        ("tests/kernels/test_conv2d.py::test_conv2d_matches_numpy",),
    ),
    Mutant(
        "winograd_constant", "Winograd F(4x4) output transform: an 8 off by 0.5%",
        (("[0, 1, -1, 8, -8, 1]", "[0, 1, -1, 8.04, -8, 1]"),),
        ("tests/kernels/test_conv2d_winograd.py::test_winograd_matches_numpy",
         "tests/kernels/test_conv2d_winograd.py::test_ops_conv2d_winograd"),
    ),
    Mutant(
        "residual_twice", "the conv epilogue adds the residual twice",
        (("        load_pixel(tmp, Residual, n, c, h, w)\n        for lane in T.unroll(4):\n"
          "            acc[k, lane] = acc[k, lane] + tmp[lane]\n",
          "        load_pixel(tmp, Residual, n, c, h, w)\n        for lane in T.unroll(4):\n"
          "            acc[k, lane] = acc[k, lane] + tmp[lane] + tmp[lane]\n"),),
        ("tests/kernels/test_conv2d.py::test_conv2d_group_paths",),
    ),
    Mutant(
        "layout_lanes_swapped", "NCHW -> NCHW4c packs the four lanes of a pixel in reverse order",
        (("A[vz // c4, T.min((vz % c4) * 4 + lane, c - 1), vh, vw]", "A[vz // c4, T.min((vz % c4) * 4 + 3 - lane, c - 1), vh, vw]"),),
        ("tests/kernels/test_layout.py",),
    ),
    Mutant(
        "pool_window_off_by_one", "sliding pooling windows start one position late",
        (("        return o * self.stride - self.pad_before\n", "        return o * self.stride - self.pad_before + 1\n"),),
        ("tests/kernels/test_pool2d.py::test_pool2d", "tests/kernels/test_pool2d.py::test_max_pool_padding_is_minus_infinity"),
    ),
    Mutant(
        "maxpool_nan_reverted", "max pooling with the plain max (OpenCL's fmax drops a NaN)",
        (('"max": (maximum, lambda dtype: _inf(dtype, -1.0))', '"max": (T.max, lambda dtype: _inf(dtype, -1.0))'),),
        ("tests/kernels/test_nonfinite.py::test_max_pool2d",),
    ),
)


class SnippetError(RuntimeError):
    """A mutant's snippet is not in the tree exactly once (the code moved or changed: update the mutant)."""


def tracked_files(root: Path) -> list[str]:
    """The repository's files as a fresh clone has them, plus new files not yet committed."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                         capture_output=True, check=True).stdout
    return [f for f in out.decode().split("\0") if f and (root / f).is_file()]


def copy_tree(root: Path, dest: Path) -> Path:
    for rel in tracked_files(root):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, target)
    return dest


def locate(tree: Path, snippet: str) -> Path:
    """The one source file under :data:`SEARCHED` holding ``snippet`` exactly once."""
    hits = [(path, path.read_text().count(snippet)) for top in SEARCHED for path in sorted((tree / top).rglob("*.py"))]
    hits = [(path, n) for path, n in hits if n]
    if len(hits) != 1 or hits[0][1] != 1:
        where = ", ".join(f"{p.relative_to(tree)} x{n}" for p, n in hits) or "nowhere"
        raise SnippetError(f"snippet found {where}, not exactly once:\n{snippet}")
    return hits[0][0]


def apply(mutant: Mutant, tree: Path) -> list[str]:
    """Apply ``mutant`` to the copy at ``tree``; returns "file:line" of each edit."""
    where = []
    for old, new in mutant.edits:
        path = locate(tree, old)
        text = path.read_text()
        where.append(f"{path.relative_to(tree)}:{text[: text.index(old)].count(chr(10)) + 1}")
        path.write_text(text.replace(old, new, 1))
    return where


def run_tests(tree: Path, tests, env) -> tuple[int, float, str]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests], cwd=tree,
                          capture_output=True, text=True, env=env)
    return proc.returncode, time.perf_counter() - start, proc.stdout + proc.stderr


def first_failure(output: str) -> str:
    """The failing test (pytest's first ``FAILED`` line) and the first exception it raised, shortened."""
    lines = output.splitlines()
    test = next((ln[len("FAILED "):].split(" - ")[0] for ln in lines if ln.startswith("FAILED ")), "")
    error = next((ln[1:].strip() for ln in lines if ln.startswith("E ") and ("Error" in ln or "assert" in ln)), "")
    return f"{test.replace('tests/', '', 1)}: {error[:90]}" if test else ""


def verdict(code: int) -> str:
    # pytest: 0 all passed, 1 some failed; anything else (interrupted, collection error, no tests) is not a kill
    return {0: "SURVIVED", 1: "killed"}.get(code, f"error (pytest exit {code})")


def test_env(tmp: Path) -> dict:
    env = dict(os.environ)
    env.setdefault("HYPOTHESIS_PROFILE", "mutants")  # tests/conftest.py: ci's examples, no shrinking
    env.setdefault("TIR_ADRENO_CACHE_DIR", str(tmp / "cache"))  # kernels are keyed by their source: mutants never collide
    env.pop("TIR_ADRENO_CHECK_BOUNDS", None)  # CI's setting: the tests decide where the sanitizer runs
    return env


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="comma-separated mutant names (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--baseline", action="store_true", help="first run every mutant's tests on the unmutated copy")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copies (their paths are printed)")
    args = parser.parse_args(argv)

    mutants = MUTANTS
    if args.only:
        names = args.only.split(",")
        unknown = sorted(set(names) - {m.name for m in MUTANTS})
        if unknown:
            parser.error(f"unknown mutants {unknown}; known: {', '.join(m.name for m in MUTANTS)}")
        mutants = tuple(m for m in MUTANTS if m.name in names)
    if args.list:
        for m in mutants:
            print(f"{m.name:<24} {m.what}\n{'':<24} tests: {' '.join(m.tests)}")
        return 0

    start = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="tir-adreno-mutants-"))
    env = test_env(work)
    pristine = copy_tree(ROOT, work / "pristine")
    for m in mutants:  # every snippet first: a moved one fails the run before any test runs
        for old, _ in m.edits:
            locate(pristine, old)
    if args.baseline:
        tests = list(dict.fromkeys(t for m in mutants for t in m.tests))
        code, seconds, out = run_tests(pristine, tests, env)
        print(f"baseline (unmutated): pytest exit {code} in {seconds:.0f} s", flush=True)
        if code != 0:
            print(out[-3000:])
            return 2
    rows = []
    for m in mutants:
        tree = work / m.name
        shutil.copytree(pristine, tree)
        where = apply(m, tree)
        code, seconds, out = run_tests(tree, m.tests, env)
        rows.append((m, where, verdict(code), seconds, first_failure(out)))
        print(f"{m.name}: {verdict(code)} in {seconds:.0f} s ({', '.join(where)}) {first_failure(out)}", flush=True)
        if code not in (0, 1):
            print(out[-3000:])
        if not args.keep:
            shutil.rmtree(tree)
    total = time.perf_counter() - start

    print("\n| mutant | where | result | s | first failure |\n|---|---|---|---|---|")
    for m, where, result, seconds, failure in rows:
        print(f"| `{m.name}`: {m.what} | {', '.join(where)} | {result} | {seconds:.0f} | {failure.replace('|', '/')} |")
    killed = sum(r[2] == "killed" for r in rows)
    print(f"\n{killed}/{len(rows)} mutants killed in {total / 60:.1f} min ({sys.executable}, HYPOTHESIS_PROFILE={env['HYPOTHESIS_PROFILE']})")
    if args.keep:
        print(f"copies kept under {work}")
    else:
        shutil.rmtree(work)
    return 0 if killed == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
