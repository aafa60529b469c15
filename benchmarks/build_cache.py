"""Cold build vs warm cached load of a module of kernels.

Cold: an empty cache; TVM lowers every PrimFunc to OpenCL C and the driver
compiles it. Warm: a new process that never imports TVM loads the saved
bundles and the cached program binaries. Each half runs in its own process,
so nothing is shared but the cache directory.

    python benchmarks/build_cache.py [--device D]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, add_device_argument, log, print_table, write_json

COLD = """
import json, sys, time
t0 = time.perf_counter()
import numpy as np
from tir_adreno import build, runtime, tour
dev = runtime.get_device({device!r})
t_import = time.perf_counter() - t0
t0 = time.perf_counter()
for i, (func, *_rest) in enumerate(tour.cases(dev, np.random.default_rng(0))):
    module = build.build_cached(func)
    dev.load(module)
    module.save({bundles!r} + f"/{{i}}.json")
print(json.dumps({{"seconds": time.perf_counter() - t0, "import_seconds": t_import, "kernels": i + 1, "device": dev.name}}))
"""

WARM = """
import json, sys, time, glob
sys.modules["tvm"] = None  # the warm path must not need TVM
t0 = time.perf_counter()
from tir_adreno import runtime
from tir_adreno.bundle import KernelModule
dev = runtime.get_device({device!r})
t_import = time.perf_counter() - t0
t0 = time.perf_counter()
paths = sorted(glob.glob({bundles!r} + "/*.json"))
for p in paths:
    dev.load(KernelModule.load(p))
print(json.dumps({{"seconds": time.perf_counter() - t0, "import_seconds": t_import, "kernels": len(paths)}}))
"""


def _run(code: str, cache_dir: str) -> dict:
    env = {"TIR_ADRENO_CACHE_DIR": cache_dir, "PYTHONPATH": str(ROOT)}
    res = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True, cwd=ROOT
    )
    if res.returncode != 0:
        raise SystemExit(res.stderr[-3000:])
    return json.loads(res.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_device_argument(parser)
    parser.add_argument("--repeat", type=int, default=3, help="warm loads to take the median of")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache_dir, tempfile.TemporaryDirectory() as bundles:
        log("cold build (empty cache) ...")
        cold = _run(COLD.format(device=args.device, bundles=bundles), cache_dir)
        warm_runs = []
        for i in range(args.repeat):
            log(f"warm load {i + 1}/{args.repeat} ...")
            warm_runs.append(_run(WARM.format(device=args.device, bundles=bundles), cache_dir))
    warm = sorted(warm_runs, key=lambda r: r["seconds"])[len(warm_runs) // 2]
    ratio = cold["seconds"] / warm["seconds"]
    path = write_json("build_cache", cold["device"], {"cold": cold, "warm": warm, "warm_runs": warm_runs, "ratio": ratio})
    print_table(
        ["path", "kernels", "seconds", "imports (s)"],
        [
            ["cold: TVM lowering + OpenCL compile", cold["kernels"], f"{cold['seconds']:.3f}", f"{cold['import_seconds']:.2f}"],
            ["warm: bundle + cached binary, no TVM", warm["kernels"], f"{warm['seconds']:.4f}", f"{warm['import_seconds']:.2f}"],
        ],
        title=f"build cache on {cold['device']} (JSON: {path.relative_to(ROOT)})",
    )
    print(f"cold / warm = {ratio:.0f}x")


if __name__ == "__main__":
    main()
