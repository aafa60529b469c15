"""Ways of compiling the same ONNX models, compared from one run: launches, kernel and wall time
(medians, the ways alternating: ``se_launches._measure``) and each kernel family's launches and
time, and how far each way's outputs differ from the first's; each script that compares one
strategy decision made two or more ways (``norm_fold.py``, ``wide_split.py``, ...) is this
module's ``main`` given the ways' profiles or ``settings``.

Building (``build_ways``) needs TVM; measuring (``load_ways``, ``compare``) needs only pyopencl, so
a model set is compiled here and run on a GPU machine without TVM.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
from pathlib import Path
from unittest import mock

import numpy as np

from common import add_device_argument, log, print_table, write_json
from se_launches import _measure as measure  # kernel, wall, outputs, families, calls per way; the ways interleaved


def arguments(description: str, target: str | None = "nvidia-h200", target_help: str = "the device profile of --build-only") -> argparse.ArgumentParser:
    """The arguments every ways script takes (``--onnx``, ``--repeat``, ``--precision``, ``--target``,
    ``--build-only DIR`` here or ``--from DIR`` there, ``--results-dir``, the device); a script
    adds its own before parsing."""
    parser = argparse.ArgumentParser(description=description.splitlines()[0])
    parser.add_argument("--onnx", type=Path, nargs="+", default=[], metavar="FILE", help="ONNX models, named by stem")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--precision", default="float32")
    parser.add_argument("--target", default=target, help=f"{target_help} (default: {target or 'the device'})")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--build-only", type=Path, metavar="DIR", help="compile and save the ways into DIR (needs TVM)")
    mode.add_argument("--from", dest="source", type=Path, metavar="DIR", help="run the models saved by --build-only (no TVM)")
    parser.add_argument("--results-dir", type=Path, default=None, help="default: benchmarks/results")
    parser.add_argument("--ways", nargs="+", default=None, metavar="WAY",
                        help="--build-only: only these of the script's ways (default: all); --from runs the ways DIR holds")
    add_device_argument(parser)
    return parser


def parse(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The arguments of :func:`arguments`, checked: ``--build-only`` needs ``--onnx``."""
    args = parser.parse_args()
    if args.build_only and not args.onnx:
        parser.error("--build-only needs --onnx FILE...")
    return args


def save_results(name: str, models_by_stem: dict, results: dict, args, device) -> None:
    """Write ``results`` as ``<name>[-<precision>]-<device>.json`` (``common.write_json``)."""
    precision = next(iter(next(iter(models_by_stem.values())).values())).precision
    payload = {"repeat": args.repeat, "precision": precision, "models": results}
    log(f"wrote {write_json(name + ('' if precision == 'float32' else f'-{precision}'), device.name, payload, args.results_dir)}")


def patched(module: str, **values):
    """A ``settings`` entry of :func:`build_ways`: ``module``'s attributes set to ``values`` while a
    way compiles (the module imported then, so that TVM is needed only when building)."""
    return lambda: mock.patch.multiple(importlib.import_module(module), **values)


def together(*settings):
    """One ``settings`` entry of several (context manager factories such as :func:`patched`'s),
    entered in order while a way compiles."""

    @contextlib.contextmanager
    def entered():
        with contextlib.ExitStack() as stack:
            for make in settings:
                stack.enter_context(make())
            yield

    return entered


def wide_profile(target: str, name: str):
    """``target``'s profile, which must be wide (``strategy.width.is_wide``): a script comparing the
    one-group and spread forms of a kernel stops with a clear message otherwise."""
    from tir_adreno.strategy.width import is_wide
    from tir_adreno.strategy.profile import get_profile

    profile = get_profile(target)
    if not is_wide(profile):
        raise SystemExit(f"{name}: {target} is not wide ({profile.compute_units} compute units): it runs one work group")
    return profile


def chosen_ways(args, ways) -> tuple:
    """The script's ``ways`` (in its order, the first the baseline) that this run takes: with
    ``--build-only`` those of ``--ways`` (SystemExit naming an unknown one), with ``--from`` those
    the directory holds."""
    if args.build_only:
        unknown = sorted(set(args.ways or ()) - set(ways))
        if unknown:
            raise SystemExit(f"--ways: unknown {unknown}; this script's ways: {list(ways)}")
        return tuple(w for w in ways if args.ways is None or w in args.ways)
    held = {p.name for p in args.source.iterdir() if p.is_dir()} if args.source.is_dir() else set()
    return tuple(w for w in ways if any(name.endswith(f"-{w}") for name in held)) or tuple(ways)


def build(args, ways, settings: dict | None = None, profiles=None) -> None:
    """``--build-only``: compile each of ``args.onnx`` each of ``ways`` into ``args.build_only``,
    every way for ``--target``'s profile (the live device's where there is none) unless
    ``profiles(target)`` gives ``{way: DeviceProfile}``; ``settings`` as :func:`build_ways` takes."""
    from tir_adreno import runtime
    from tir_adreno.strategy.profile import resolve

    if profiles is None:
        profile = resolve(runtime.get_device(args.device) if args.target is None else None, args.target)
        chosen = {way: profile for way in ways}
    else:
        chosen = profiles(args.target)
    build_ways(args.onnx, chosen, args.precision, args.build_only, log, settings)


def measure_ways(args, ways, detail=()):
    """``--from``: the models ``build`` saved, measured (:func:`compare`); returns the models, the
    results and the device, for a script that adds to the results before :func:`save_results`."""
    from tir_adreno import runtime

    device = runtime.get_device(args.device)
    models = load_ways(args.source, ways, device)
    return models, compare(models, args.repeat, ways, args.source, detail=detail), device


def main(description: str, name: str, ways, profiles=None, settings: dict | None = None, detail=(),
         target_help: str = "the device profile of --build-only") -> None:
    """A whole ways script: ``--build-only`` builds (:func:`build`), ``--from`` measures and saves
    ``name``'s results (``<name>[-<precision>]-<device>.json``)."""
    args = parse(arguments(description, target_help=target_help))
    ways = chosen_ways(args, ways)
    if args.build_only:
        return build(args, ways, settings, profiles)
    models, results, device = measure_ways(args, ways, detail)
    return save_results(name, models, results, args, device)


def build_ways(paths, profiles: dict, precision: str, out: Path, log, settings: dict | None = None) -> None:
    """Compile (no device needed) each model for each way's profile (``{way: DeviceProfile}``) and
    save it as ``out/<stem>-<way>``; ``settings`` (``{way: context manager factory}``): what a way
    changes besides its profile (a strategy decision set for the comparison), entered while compiling it."""
    from tir_adreno.compiler import compile_plan  # TVM: only when building
    from tir_adreno.runtime.executor import save_model

    for path in paths:
        for way, profile in profiles.items():
            log(f"{path.stem}: compile {way} for {profile.name} ({precision})")
            with (settings or {}).get(way, contextlib.nullcontext)():
                plan, kernels, weights = compile_plan(str(path), profile, progress=lambda _: None, precision=precision)
            save_model(out / f"{path.stem}-{way}", plan, kernels, weights, profile.name)


def load_ways(source: Path, ways, device) -> dict[str, dict]:
    """Model stem -> way -> the model ``build_ways`` saved in ``source`` (no TVM); a way saved
    without weights runs with random ones (timing only: :func:`timing_only`)."""
    from tir_adreno import load_model

    stems = sorted({p.name[: -len(w) - 1] for p in source.iterdir() if p.is_dir() for w in ways if p.name.endswith(f"-{w}")})
    return {s: {way: load_model(source / f"{s}-{way}", device, random_weights=0 if timing_only(source, s, way) else None) for way in ways}
            for s in stems}


def timing_only(source: Path, stem: str, way: str) -> bool:
    """Whether ``load_ways`` runs that way of ``stem`` with random weights (none saved)."""
    return not (source / f"{stem}-{way}" / "weights.npz").exists()


def _launches(cm, per_call, prefixes) -> list[dict]:
    """The calls of ``cm`` whose label starts with one of ``prefixes``: label, first argument's
    shape, median us."""
    return [{"op": c.label, "shape": list(cm.plan.tensors[c.args[0]].shape), "us": ms * 1e3}
            for c, ms in zip(cm.plan.calls, per_call) if c.label.startswith(tuple(prefixes))]


def compare(models_by_stem: dict, repeat: int, ways, source: Path | None = None, detail=()) -> dict:
    """Measure each model's ``ways`` (the first the baseline), print a table of their kernel
    families and one of the models (the models' table last), and return the JSON results: per
    model and way launches, kernel and wall ms, kernel families, each later way's relative
    difference of the first outputs from the baseline's (None for a way ``load_ways`` ran from
    ``source`` with random weights; the largest at the model's level), and for the calls whose
    label starts with one of ``detail`` each one's shape and median us."""
    base, others = ways[0], ways[1:]
    results, rows, families = {}, [], []
    for stem, models in models_by_stem.items():
        measured = measure({w: models[w] for w in ways}, repeat)
        entry = {way: {"launches": len(models[way].plan.calls), "kernel_ms": measured[way][0], "wall_ms": measured[way][1],
                       "outputs": measured[way][2],
                       "kernels": {k: {"launches": n, "ms": ms} for k, (n, ms) in sorted(measured[way][3].items())}}
                 | ({"calls": _launches(models[way], measured[way][4], detail)} if detail else {})
                 for way in ways}
        a = np.asarray(entry[base]["outputs"][0], np.float64)
        errors = {w: None if source is not None and timing_only(source, stem, w) else
                  float(np.max(np.abs(np.asarray(entry[w]["outputs"][0], np.float64) - a)) / max(np.max(np.abs(a)), 1e-30)) for w in others}
        results[stem] = {w: {k: v for k, v in e.items() if k != "outputs"} | ({"relative_difference": errors[w]} if w in errors else {})
                         for w, e in entry.items()} | {"relative_difference": max((e for e in errors.values() if e is not None), default=None)}
        rows.append([stem, *(entry[w]["launches"] for w in ways), *(f"{entry[w]['kernel_ms']:.3f}" for w in ways),
                     *(f"{entry[w]['wall_ms']:.3f}" for w in ways), *("timing only" if errors[w] is None else f"{errors[w]:.1e}" for w in others)])
        for k in sorted(set().union(*(e["kernels"] for e in entry.values()))):  # what each kernel family launches and costs
            cells = [(e["kernels"][k]["launches"], e["kernels"][k]["ms"]) if k in e["kernels"] else (0, 0.0) for e in entry.values()]
            families.append([f"{stem} {k}", *(n for n, _ in cells), *(f"{ms:.3f}" for _, ms in cells)])
    print_table(["model kernel family", *(f"launches {w}" for w in ways), *(f"median ms {w}" for w in ways)], families)
    print_table(["model", *(f"launches {w}" for w in ways), *(f"kernel ms {w}" for w in ways), *(f"wall ms {w}" for w in ways),
                 *(f"rel. difference {w}" for w in others)], rows)
    return results
