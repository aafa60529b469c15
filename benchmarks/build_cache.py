"""Cold build vs warm cached load: the kernel tour's module, and a whole model.

Cold: an empty cache; TVM lowers every PrimFunc to OpenCL C and the driver
compiles it (for the model: import, our pass, upstream legalization too).
Warm: a new process that never imports TVM loads the saved bundles (or the
saved model) and the cached program binaries. Each half runs in its own
process, so nothing is shared but the cache directory.

    python benchmarks/build_cache.py [--device D] [--model resnet18]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from common import ROOT, add_device_argument, log, print_table, write_json

COLD = """
import json, sys, time
t0 = time.perf_counter()
import numpy as np
from tir_adreno.codegen import build
from tir_adreno.runtime import opencl as runtime
from tir_adreno.tools import tour
dev = runtime.get_device({device!r})
t_import = time.perf_counter() - t0
t0 = time.perf_counter()
for case in tour.CASES:  # builds (and loads) every kernel of the tour
    tour.check(case, dev, np.random.default_rng(0))
for i, module in enumerate(build._memory_cache.values()):
    module.save({bundles!r} + f"/{{i}}.json")
print(json.dumps({{"seconds": time.perf_counter() - t0, "import_seconds": t_import, "kernels": i + 1, "device": dev.name}}))
"""

MODEL_COLD = """
import json, time
t0 = time.perf_counter()
from tir_adreno import compile_model
from tir_adreno.frontend import models
from tir_adreno.runtime import opencl as runtime
dev = runtime.get_device({device!r})
mod = models.get_model({model!r})
t_import = time.perf_counter() - t0
t0 = time.perf_counter()
compiled = compile_model(mod, dev, progress=lambda _: None)
seconds = time.perf_counter() - t0
compiled.save({bundles!r} + "/model")
print(json.dumps({{"seconds": seconds, "import_seconds": t_import, "kernels": len(compiled.kernels), "device": dev.name}}))
"""

MODEL_WARM = """
import json, sys, time
sys.modules["tvm"] = None
t0 = time.perf_counter()
from tir_adreno.runtime.executor import load_model
t_import = time.perf_counter() - t0
t0 = time.perf_counter()
compiled = load_model({bundles!r} + "/model", {device!r})
print(json.dumps({{"seconds": time.perf_counter() - t0, "import_seconds": t_import, "kernels": len(compiled.kernels)}}))
"""

WARM = """
import json, sys, time, glob
sys.modules["tvm"] = None  # the warm path must not need TVM
t0 = time.perf_counter()
from tir_adreno.runtime import opencl as runtime
from tir_adreno.runtime.bundle import KernelModule
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


def _cold_warm(cold_code: str, warm_code: str, device, repeat: int, label: str) -> dict:
    with tempfile.TemporaryDirectory() as cache_dir, tempfile.TemporaryDirectory() as bundles:
        log(f"{label}: cold build (empty cache) ...")
        cold = _run(cold_code.format(device=device, bundles=bundles, model=label), cache_dir)
        warm_runs = []
        for i in range(repeat):
            log(f"{label}: warm load {i + 1}/{repeat} ...")
            warm_runs.append(_run(warm_code.format(device=device, bundles=bundles, model=label), cache_dir))
    warm = sorted(warm_runs, key=lambda r: r["seconds"])[len(warm_runs) // 2]
    return {"cold": cold, "warm": warm, "warm_runs": warm_runs, "ratio": cold["seconds"] / warm["seconds"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_device_argument(parser)
    parser.add_argument("--repeat", type=int, default=3, help="warm loads to take the median of")
    parser.add_argument("--model", default="resnet18", help="built-in model for the model case ('' to skip)")
    args = parser.parse_args()
    cases = {"kernel tour": _cold_warm(COLD, WARM, args.device, args.repeat, "tour")}
    if args.model:
        cases[args.model] = _cold_warm(MODEL_COLD, MODEL_WARM, args.device, args.repeat, args.model)
    device = cases["kernel tour"]["cold"]["device"]
    path = write_json("build_cache", device, {"cases": cases})
    rows = []
    for name, case in cases.items():
        cold, warm = case["cold"], case["warm"]
        rows.append([f"{name}: cold (TVM + OpenCL compile)", cold["kernels"], f"{cold['seconds']:.3f}", ""])
        rows.append([f"{name}: warm (cache, no TVM)", warm["kernels"], f"{warm['seconds']:.4f}", f"{case['ratio']:.0f}x"])
    print_table(["case", "kernels", "seconds", "cold / warm"], rows, title=f"build cache on {device} (JSON: {path.relative_to(ROOT)})")


if __name__ == "__main__":
    main()
