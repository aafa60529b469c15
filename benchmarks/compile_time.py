"""Compile time of ``tir-adreno compile``, old code and this checkout side by side (issue 22).

Each compile runs in a fresh process (``python -m tir_adreno.cli compile --builtin MODEL
--target TARGET``): cold with an empty ``TIR_ADRENO_CACHE_DIR``, then warm with the cache the
cold run left (every kernel cached; a checkout with the whole-model compile cache runs it with
``--no-cache``: the edit-loop case, where an edited source is a new key), then, where the checkout
has it, the same command again: a hit of the compile cache (no TVM imported). ``--repeat`` rounds
alternate old and new (medians), so both see the same load on a shared machine; each round
waits until the 1-minute load average is below ``--max-load`` and the loads are recorded. Also
per checkout: the recompile *in one process* (``compile`` a second time, TVM imported, compile
cache bypassed: a notebook or workbench edit loop) and, once, ``import tvm`` alone (a fresh
process's floor without the compile cache; TVM's tvm_ffi imports torch when it is installed).
The old code is a git ref checked out in a temporary worktree (``--old``) or an existing
checkout (``--old-checkout``). Writes JSON to benchmarks/results, prints a table last.

    python benchmarks/compile_time.py --old main --repeat 3 --name compile_time-cache
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import log, print_table, write_json

ROOT = Path(__file__).resolve().parent.parent
#: The in-process recompile: the same ``tir-adreno compile`` twice in one process (warm cache);
#: the second one's seconds.
RECOMPILE = """
import contextlib, io, json, sys, tempfile, time
from tir_adreno.cli import main
def once():
    with tempfile.TemporaryDirectory() as out, contextlib.redirect_stdout(io.StringIO()):
        start = time.perf_counter()
        assert main(["compile", "--builtin", sys.argv[1], "--target", sys.argv[2], "-o", out, *sys.argv[3:]]) == 0
        return time.perf_counter() - start
first = once()
print(json.dumps({"first_s": first, "again_s": once()}))
"""
IMPORT_TVM = "import time; t = time.perf_counter(); import tvm; print(time.perf_counter() - t)"


def _run(checkout: Path, cmd: list[str], cache: Path) -> tuple[float, str]:
    """Wall seconds and stdout of ``cmd`` in a fresh process run from ``checkout`` (its packages first)."""
    env = dict(os.environ, TIR_ADRENO_CACHE_DIR=str(cache), PYTHONPATH=str(checkout))
    start = time.perf_counter()
    res = subprocess.run(cmd, cwd=checkout, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if res.returncode != 0:
        raise RuntimeError(f"{checkout}: {' '.join(cmd)} failed:\n{res.stderr[-2000:]}")
    return seconds, res.stdout


def has_compile_cache(checkout: Path) -> bool:
    """Whether the checkout's ``compile`` has the whole-model compile cache (and ``--no-cache``)."""
    return (checkout / "tir_adreno" / "cli" / "compile_cache.py").exists()


def compile_seconds(checkout: Path, model: str, target: str, cache: Path, flags=(), hit: bool = False) -> float:
    """Wall time of one ``tir-adreno compile`` in a fresh process (``hit``: a compile cache hit is expected)."""
    with tempfile.TemporaryDirectory(prefix="compile-time-out-") as out:
        cmd = [sys.executable, "-m", "tir_adreno.cli", "compile", "--builtin", model, "--target", target, "-o", out, *flags]
        seconds, stdout = _run(checkout, cmd, cache)
        if has_compile_cache(checkout) and ("from the compile cache" in stdout) != hit:
            raise RuntimeError(f"{checkout}: expected {'a' if hit else 'no'} compile cache hit:\n{stdout[-2000:]}")
        return seconds


def measure(checkout: Path, model: str, target: str) -> dict:
    """Cold (empty cache), warm (the cold run's kernels; the compile cache bypassed), a compile
    cache hit (where the checkout has one) and the in-process recompile, in seconds."""
    bypass = ["--no-cache"] if has_compile_cache(checkout) else []
    with tempfile.TemporaryDirectory(prefix="compile-time-cache-") as cache:
        row = {"load_1min": os.getloadavg()[0], "cold_s": compile_seconds(checkout, model, target, Path(cache))}
        row["warm_s"] = compile_seconds(checkout, model, target, Path(cache), bypass)
        if bypass:
            row["compile_cache_s"] = compile_seconds(checkout, model, target, Path(cache), hit=True)
        _, out = _run(checkout, [sys.executable, "-c", RECOMPILE, model, target, *bypass], Path(cache))
    return row | {"in_process_s": json.loads(out.strip().splitlines()[-1])["again_s"]}


def wait_for_load(max_load: float, timeout_s: float = 1800) -> float:
    """Wait until the 1-minute load average is below ``max_load`` (at most ``timeout_s``); the load then."""
    start = time.monotonic()
    while os.getloadavg()[0] >= max_load and time.monotonic() - start < timeout_s:
        time.sleep(10)
    return os.getloadavg()[0]


def medians(rounds: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in rounds) for k in rounds[0] if k.endswith("_s")} | {"rounds": rounds}


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
    parser.add_argument("--repeat", type=int, default=3, help="rounds, old and new alternating (medians)")
    parser.add_argument("--max-load", type=float, default=1.5, help="start a round only below this 1-minute load average")
    parser.add_argument("--name", default="compile_time", help="results file: benchmarks/results/NAME-<cores>-cores.json")
    args = parser.parse_args(argv)
    worktrees: list[Path] = []
    try:
        checkouts = {"old": old_checkout(args, worktrees), "new": ROOT}
        rounds = {f"{m}/{name}": [] for m in args.models for name in checkouts}
        for i in range(args.repeat):
            for model in args.models:
                for name, checkout in checkouts.items():
                    load = wait_for_load(args.max_load)
                    log(f"round {i + 1}/{args.repeat}: {model} {name} ({checkout}), load {load:.2f}")
                    rounds[f"{model}/{name}"].append(measure(checkout, model, args.target))
        results = {k: medians(v) for k, v in rounds.items()}
        import_tvm_s = float(_run(ROOT, [sys.executable, "-c", IMPORT_TVM], Path(tempfile.gettempdir()))[1])
    finally:
        for folder in worktrees:
            subprocess.run(["git", "worktree", "remove", "--force", str(folder)], cwd=ROOT, capture_output=True)
    cores = os.cpu_count()
    torch = importlib.util.find_spec("torch") is not None
    payload = {"target": args.target, "cores": cores, "old": args.old_checkout or args.old, "repeat": args.repeat,
               "max_load": args.max_load, "loads_1min": [r["load_1min"] for v in rounds.values() for r in v],
               "import_tvm_s": import_tvm_s, "torch_installed": torch, "results": results}
    path = write_json(args.name, f"{cores}-cores", payload)
    log(f"wrote {path}")
    rows = []
    for model in args.models:
        old, new = results[f"{model}/old"], results[f"{model}/new"]
        hit = lambda r: f"{r['compile_cache_s']:.2f}" if "compile_cache_s" in r else "-"  # noqa: E731
        rows.append([model, f"{old['cold_s']:.1f}", f"{new['cold_s']:.1f}", f"{old['cold_s'] / new['cold_s']:.1f}x",
                     f"{old['warm_s']:.1f}", f"{new['warm_s']:.1f}", f"{old['warm_s'] / new['warm_s']:.1f}x",
                     hit(old), hit(new), f"{old['in_process_s']:.2f}", f"{new['in_process_s']:.2f}"])
    print_table(["model", "cold old s", "cold new s", "speedup", "warm old s", "warm new s", "speedup",
                 "cache hit old s", "cache hit new s", "in-process old s", "in-process new s"], rows,
                title=f"tir-adreno compile --target {args.target}, fresh processes (medians of {args.repeat}), {cores} cores; "
                      f"warm: kernels cached, compile cache bypassed; import tvm alone {import_tvm_s:.1f} s "
                      f"(torch installed: {torch}); 1-minute loads {min(payload['loads_1min']):.2f}-{max(payload['loads_1min']):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
