"""Compile time of ``tir-adreno compile``, old code and this checkout side by side (issue 22).

Each compile runs in a fresh process (``python -m tir_adreno.cli compile --builtin MODEL
--target TARGET``): cold with an empty ``TIR_ADRENO_CACHE_DIR``, then warm with the cache the
cold run left (every kernel cached). The old code is a git ref checked out in a temporary
worktree (``--old``, default ``main``; after this work is merged pass the commit before it) or
an existing checkout (``--old-checkout``). Writes JSON to benchmarks/results, prints a table last.

    python benchmarks/compile_time.py --old 9f03e98
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import log, print_table, write_json

ROOT = Path(__file__).resolve().parent.parent


def compile_seconds(checkout: Path, model: str, target: str, cache: Path) -> float:
    """Wall time of one compile in a fresh process run from ``checkout`` (its packages first)."""
    env = dict(os.environ, TIR_ADRENO_CACHE_DIR=str(cache), PYTHONPATH=str(checkout))
    with tempfile.TemporaryDirectory(prefix="compile-time-out-") as out:
        cmd = [sys.executable, "-m", "tir_adreno.cli", "compile", "--builtin", model, "--target", target, "-o", out]
        start = time.perf_counter()
        res = subprocess.run(cmd, cwd=checkout, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
    if res.returncode != 0:
        raise RuntimeError(f"{checkout}: {' '.join(cmd)} failed:\n{res.stderr[-2000:]}")
    return seconds


def measure(checkout: Path, model: str, target: str) -> dict:
    """Cold (empty cache) then warm (the cold run's cache) compile seconds."""
    with tempfile.TemporaryDirectory(prefix="compile-time-cache-") as cache:
        cold = compile_seconds(checkout, model, target, Path(cache))
        warm = compile_seconds(checkout, model, target, Path(cache))
    return {"cold_s": cold, "warm_s": warm}


def old_checkout(args, stack) -> Path:
    if args.old_checkout:
        return Path(args.old_checkout)
    folder = Path(tempfile.mkdtemp(prefix="compile-time-old-"))
    subprocess.run(["git", "worktree", "add", "--detach", str(folder), args.old], cwd=ROOT, check=True, capture_output=True)
    stack.append(folder)
    return folder


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", default="main", help="git ref of the old code (default: main)")
    parser.add_argument("--old-checkout", help="an existing checkout of the old code (instead of --old)")
    parser.add_argument("--models", nargs="+", default=["resnet50", "mobilenet_v2"])
    parser.add_argument("--target", default="adreno")
    args = parser.parse_args(argv)
    worktrees: list[Path] = []
    try:
        checkouts = {"old": old_checkout(args, worktrees), "new": ROOT}
        results = {}
        for model in args.models:
            for name, checkout in checkouts.items():
                log(f"{model} {name} ({checkout})")
                results[f"{model}/{name}"] = measure(checkout, model, args.target)
    finally:
        for folder in worktrees:
            subprocess.run(["git", "worktree", "remove", "--force", str(folder)], cwd=ROOT, capture_output=True)
    cores = os.cpu_count()
    payload = {"target": args.target, "cores": cores, "old": args.old_checkout or args.old, "results": results}
    path = write_json("compile_time", f"{cores}-cores", payload)
    log(f"wrote {path}")
    rows = []
    for model in args.models:
        old, new = results[f"{model}/old"], results[f"{model}/new"]
        rows.append([model, f"{old['cold_s']:.1f}", f"{new['cold_s']:.1f}", f"{old['cold_s'] / new['cold_s']:.1f}x",
                     f"{old['warm_s']:.1f}", f"{new['warm_s']:.1f}", f"{old['warm_s'] / new['warm_s']:.1f}x"])
    print_table(["model", "cold old s", "cold new s", "speedup", "warm old s", "warm new s", "speedup"], rows,
                title=f"tir-adreno compile --target {args.target}, fresh processes, {cores} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
