"""Two ways of compiling the same ONNX models, compared from one run: launches, kernel and wall time
(medians, the ways alternating: ``se_launches._measure``) and each kernel family's launches and
time, and how far the two ways' outputs differ; ``wide_split.py`` (one work group per sample or
spread over a wide GPU) uses it.

Building (``build_ways``) needs TVM; measuring (``load_ways``, ``compare``) needs only pyopencl, so
a model set is compiled here and run on a GPU machine without TVM.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from common import print_table
from se_launches import _measure as measure  # kernel, wall, outputs, families per way; the ways interleaved


def build_ways(paths, profiles: dict, precision: str, out: Path, log) -> None:
    """Compile (no device needed) each model for each way's profile (``{way: DeviceProfile}``) and
    save it as ``out/<stem>-<way>``."""
    from tir_adreno.compiler import compile_plan  # TVM: only when building
    from tir_adreno.runtime.executor import save_model

    for path in paths:
        for way, profile in profiles.items():
            log(f"{path.stem}: compile {way} for {profile.name} ({precision})")
            plan, kernels, weights = compile_plan(str(path), profile, progress=lambda _: None, precision=precision)
            save_model(out / f"{path.stem}-{way}", plan, kernels, weights, profile.name)


def load_ways(source: Path, ways, device) -> dict[str, dict]:
    """Model stem -> way -> the model ``build_ways`` saved in ``source`` (no TVM)."""
    from tir_adreno import load_model

    stems = sorted({p.name[: -len(w) - 1] for p in source.iterdir() if p.is_dir() for w in ways if p.name.endswith(f"-{w}")})
    return {s: {way: load_model(source / f"{s}-{way}", device) for way in ways} for s in stems}


def compare(models_by_stem: dict, repeat: int, ways: tuple[str, str]) -> dict:
    """Measure each model's two ``ways`` (``(baseline, other)``), print a table of the models and
    one of their kernel families (the models' table last but one, the families' last), and
    return the JSON results: per model and way launches, kernel ms and kernel families, and the
    relative difference of the first outputs."""
    a_way, b_way = ways
    results, rows, families = {}, [], []
    for stem, models in models_by_stem.items():
        measured = measure(models, repeat)
        entry = {way: {"launches": len(cm.plan.calls), "kernel_ms": measured[way][0], "wall_ms": measured[way][1], "outputs": measured[way][2],
                       "kernels": {k: {"launches": n, "ms": ms} for k, (n, ms) in sorted(measured[way][3].items())}}
                 for way, cm in models.items()}
        b, a = (np.asarray(entry[w]["outputs"][0], np.float64) for w in (b_way, a_way))
        error = float(np.max(np.abs(b - a)) / max(np.max(np.abs(a)), 1e-30))
        results[stem] = {w: {k: v for k, v in e.items() if k != "outputs"} for w, e in entry.items()} | {"relative_difference": error}
        s, f = entry[a_way], entry[b_way]
        rows.append([stem, s["launches"], f["launches"], f"{s['kernel_ms']:.3f}", f"{f['kernel_ms']:.3f}", f"{s['wall_ms']:.3f}", f"{f['wall_ms']:.3f}",
                     f"{error:.1e}"])
        for k in sorted(set(s["kernels"]) | set(f["kernels"])):  # what each kernel family launches and costs
            cells = [(e["kernels"][k]["launches"], e["kernels"][k]["ms"]) if k in e["kernels"] else (0, 0.0) for e in (s, f)]
            families.append([f"{stem} {k}", cells[0][0], cells[1][0], f"{cells[0][1]:.3f}", f"{cells[1][1]:.3f}"])
    print_table(["model kernel family", f"launches {a_way}", f"launches {b_way}", f"median ms {a_way}", f"median ms {b_way}"], families)
    print_table(["model", f"launches {a_way}", f"launches {b_way}", f"kernel ms {a_way}", f"kernel ms {b_way}", f"wall ms {a_way}",
                 f"wall ms {b_way}", "rel. difference"], rows)
    return results
