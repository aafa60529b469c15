"""``tir-adreno tune``: measure conv candidates per layer on a device and write records.

For each distinct conv of a model (same shape and attributes = one layer) the
candidates are (:func:`candidates`): the profile's default (direct conv, default
config, textures) first, a few other register tiles x work groups (x split_k on
big GPUs), Winograd F(2x2) and F(4x4) where eligible, and the default on buffers.
Each is planned by ``strategy.conv2d_plan`` and built here (TVM), then measured
by a measurer (``tir_adreno.tuning.measure``: median OpenCL event time, summed over a
candidate's kernels). The fastest wins; ties within ``tuning.TIE_MARGIN`` go to the
earlier candidate (the default, direct before Winograd). Records are saved after
every layer, so an interrupted run resumes: layers already recorded are skipped.
Each distinct pooling layer is timed with the schedules "auto" (the default),
"thread" and "group" (``strategy.pool.pool_schedule``).

Candidates are timed as bare convs (no bias/activation: the epilogue costs the
same in every candidate), in the profile's ``activation_placement`` plus the default
config in the other placement. In a model, a conv placed apart from its neighbours
runs mixed-scope kernels at the boundary, which a per-layer time does not see; so once
every layer is recorded, :func:`in_context` times the whole model with no records, with
the records' placements forced to the profile's, and with the records as tuned, and
keeps the fastest of the three in the records.
"""

from __future__ import annotations

import dataclasses
import logging

import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from primfuncs.conv import ConvConfig
from primfuncs.epilogue import Epilogue

from tir_adreno.runtime.errors import UserError
from tir_adreno.strategy import records as _records
from tir_adreno.strategy import conv as strategy
from tir_adreno.strategy import defaults
from tir_adreno.strategy import pool as pool_strategy
from tir_adreno.strategy.precision import check_precision, half_storage
from tir_adreno.tuning import programs as tuning
from tir_adreno.strategy.placement import activation_scope
from tir_adreno.strategy.profile import DeviceProfile
from tir_adreno.tuning.measure import LocalMeasurer, MeasureJob, export_jobs, load_results, time_model  # noqa: F401 (LocalMeasurer: the default measurer)

#: How long a tune has left, said after each layer (``logging``: the CLI shows it on stderr, ``--quiet`` hides it).
log = logging.getLogger("tir_adreno.tune")

#: Register tiles (oc_block, w_block) and work groups tried besides the default.
TILES = ((1, 4), (2, 4), (4, 4), (2, 2))
WORK_GROUPS = ((8, 4, 1), (16, 4, 1))
#: split_k values tried on "gpu" profiles (big GPUs; docs/design.md), for convs with enough channel blocks.
SPLITS = (4, 16)
#: At most this many configs besides the default per layer (keeps tuning minutes, not hours).
MAX_CONFIGS = 4


# ---------------------------------------------------------------------------------------------
# Layers and candidates


@dataclass(frozen=True)
class PoolLayer:
    """A distinct pooling layer: its record key and how to build it (``passes.rules.pool.pool_spec``)."""

    key: str
    factory: object
    attrs: dict
    in5: tuple
    out5: tuple


def model_layers(model, profile: DeviceProfile | None = None) -> tuple[list, list]:
    """The distinct convs (``ConvGeometry``) and pools (:class:`PoolLayer`) of ``model`` (ONNX or
    Relax) that the Relax pass runs on our kernels (``passes.convs.conv_layer``, ``pool_spec``),
    in model order, after the pass's conv merges (``passes.dispatch.merge_convs``; without
    ``profile`` the branch sums only)."""
    from primfuncs._common import blocked

    from tir_adreno.compiler import import_model
    from tir_adreno.passes.convs import conv_layer
    from tir_adreno.passes.graph import Graph, dtype, static_shape
    from tir_adreno.passes.host_fold import fold_constants
    from tir_adreno.passes.dispatch import merge_convs
    from tir_adreno.passes.reparam import reparameterize
    from tir_adreno.passes.rules.pool import POOL_OPS, pool_spec

    mod, _ = import_model(model)
    mod = fold_constants(mod)  # as compiler.lower folds, and the pass merges: the same convs
    mod = merge_convs(mod, profile) if profile is not None else reparameterize(mod)
    convs, pools = {}, {}
    for node in Graph(mod["main"]).nodes:
        data = static_shape(node.args[0]) if node.args else None
        if data is None or len(data) != 4 or dtype(node.args[0]) != "float32":
            continue
        geom = conv_layer(node)
        if geom is not None:
            convs.setdefault(_records.conv2d_key(geom), geom)
        spec = pool_spec(node) if node.op in POOL_OPS else None
        if spec is not None:
            op, factory, attrs, (oh, ow) = spec
            key = _records.pool_key(op, data, attrs)
            n, c4 = data[0], blocked(data[1])
            pools.setdefault(key, PoolLayer(key, factory, attrs, (n, c4, data[2], data[3], 4), (n, c4, oh, ow, 4)))
    return list(convs.values()), list(pools.values())


def candidates(geom, profile: DeviceProfile, precision: str = "float32") -> list:
    """The :class:`strategy.ConvChoice` candidates of one conv, the default first."""
    default = defaults.default_config(geom, _untiled(profile))  # the direct kernel's default
    configs = []
    tiles = [(1, wb) for _, wb in TILES] if geom.is_depthwise else TILES
    blocks = geom.cg // 4 if geom.groups > 1 else geom.c // 4
    splits = (1,) if profile.kind != "gpu" or geom.is_depthwise or blocks < 8 else (1, *SPLITS)
    for split in splits:
        for ocb, wb in tiles:
            for wg in WORK_GROUPS:
                try:
                    config = ConvConfig(ocb, wb, wg, split)
                except ValueError:  # too many work items
                    continue
                if config != default and config not in configs:
                    configs.append(config)
    # Spread the few tried configs over the space rather than the first corner of it.
    step = max(1, -(-len(configs) // MAX_CONFIGS))
    first = strategy.default_choice(geom, profile)
    out = [first]
    out += [strategy.ConvChoice("direct", c, first.placement) for c in configs[::step][:MAX_CONFIGS]]
    out += [strategy.ConvChoice(a, None, first.placement) for a in strategy.eligible_algorithms(geom, precision) if a != "direct"]
    out.append(strategy.ConvChoice("direct", None, OTHER_PLACEMENT[first.placement]))
    if geom.is_depthwise:  # the 1-D grid on buffers (upstream's shape), 1 and 2 columns per item
        out += [strategy.ConvChoice("direct", ConvConfig(1, wb, (256, 1, 1), register_window=geom.o == geom.c, flat=True),
                                    "buffer") for wb in (1, 2)]
    elif profile.kind == "gpu" and geom.groups == 1:
        out += _tiled_candidates(geom, profile, first, default)
    return [c for i, c in enumerate(out) if c not in out[:i]]


def _tiled_candidates(geom, profile: DeviceProfile, first, direct_default) -> list:
    """Big GPUs, dense convs: the tiled kernel's default configs on buffers, and when the default
    is tiled, the direct kernel where the profile would place it without the tiled rule."""
    out = [strategy.ConvChoice("direct", defaults.tiled_config(geom, entry), "buffer")
           for entry in (*defaults.TILED_CONFIGS, defaults.TILED_STEM, defaults.TILED_STEM_WIDE)]
    if first.config is not None and first.config.tiled:
        untiled = strategy.default_choice(geom, _untiled(profile))
        out.append(strategy.ConvChoice("direct", direct_default, untiled.placement))
    return out


def _untiled(profile: DeviceProfile) -> DeviceProfile:
    """``profile`` without the tiled kernel rule (``tiled_min_groups`` 0): its direct kernel's defaults."""
    return dataclasses.replace(profile, tiled_min_groups=0)


#: The placement a conv candidate tries besides the profile's default.
OTHER_PLACEMENT = {"texture": "buffer", "buffer": "texture"}


def build_pool_jobs(layer: PoolLayer, profile: DeviceProfile, progress=print, precision: str = "float32") -> tuple[list, dict]:
    """Build a pool with each schedule ("auto" first: the default); returns (jobs, job key -> choice)."""
    from tir_adreno.codegen import build

    jobs, choices = [], {}
    for name in pool_strategy.POOL_STRATEGIES:
        choice, key = pool_strategy.PoolChoice(name), f"{layer.key}|{name}"
        schedule = pool_strategy.pool_schedule(layer.key, profile, choice=choice)
        try:
            scope = activation_scope((layer.in5, layer.out5), profile)  # where the model runs it
            half = build.ALL_BUFFERS if half_storage(precision) else frozenset()  # as the model stores them
            module = build.build_cached(layer.factory(layer.in5, scope=scope, **schedule, **layer.attrs), half=half)
            module = module.with_storage(half_storage(precision))
        except (ValueError, RuntimeError) as err:
            progress(f"    skip {name}: {str(err).splitlines()[0][:120]}")
            continue
        jobs.append(MeasureJob(key, ((module, next(iter(module.functions))),)))
        choices[key] = choice
    return jobs, choices


def build_jobs(geom, profile: DeviceProfile, progress=print, precision: str = "float32") -> tuple[list, dict]:
    """Build every candidate of ``geom``; returns (jobs, job key -> choice). Candidates that
    cannot be built for this conv (e.g. too much local memory) are left out with a note."""
    layer = _records.conv2d_key(geom, precision)
    jobs, choices = [], {}
    for choice in candidates(geom, profile, precision):
        key = f"{layer}|{choice.name}"
        try:
            plan = strategy.conv2d_plan(geom, Epilogue(), precision, profile, choice=choice)
            program = tuning.build_program(plan)
        except (ValueError, RuntimeError) as err:
            progress(f"    skip {choice.name}: {str(err).splitlines()[0][:120]}")
            continue
        jobs.append(MeasureJob(key, tuple((program.module, s) for s in program.stages)))
        choices[key] = choice
    return jobs, choices


# ---------------------------------------------------------------------------------------------
# The driver


@dataclass
class LayerResult:
    key: str
    default_s: float | None
    best_s: float
    winner: str
    skipped: bool = False


class RecordsInTheWay(UserError, ValueError):
    """The records file to write holds records this tune would ignore (and so overwrite)."""


def records_to_update(records_path, profile: DeviceProfile, precision: str = "float32"):
    """The records at ``records_path`` that ``tune`` adds to; :class:`RecordsInTheWay` when the
    file holds records it would ignore (another device, driver, precision or kernel version, or
    not a records file): hours of measurements are never overwritten."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", _records.RecordsWarning)
        recs = _records.load(records_path, profile, precision)
    ignored = [w for w in caught if issubclass(w.category, _records.RecordsWarning)]
    for w in caught:
        if w not in ignored:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if ignored:
        reason = str(ignored[0].message).split("records ignored: ", 1)[-1]
        raise RecordsInTheWay(f"--records {records_path}: holds records tune would ignore ({reason}) and overwrite; "
                              "give another --records file (this one stays as it is)")
    return recs


def tune(model, profile: DeviceProfile, records_path, measurer, budget_s: float | None = None, progress=print,
         precision: str = "float32") -> list:
    """Tune every conv layer of ``model`` not yet in the records at ``records_path``.

    ``measurer`` has ``measure(jobs) -> {key: MeasureResult}`` (``tir_adreno.tuning.measure``).
    Starts no new layer once ``budget_s`` seconds have passed (a layer in progress is
    finished, and one layer is always tuned); the next run continues where this one stopped. Returns one
    :class:`LayerResult` per layer (recorded ones from earlier runs included). Once every layer
    is recorded and the measurer is local, :func:`in_context` times the whole model and keeps
    the fastest variant in the records.
    """
    check_precision(precision, profile)
    recs = records_to_update(records_path, profile, precision)
    convs, pools = model_layers(model, profile)
    layers = [(_records.conv2d_key(g, precision), g) for g in convs] + [(p.key, p) for p in pools]
    progress(f"{len(convs)} distinct conv layers, {len(pools)} pooling layers; records: {records_path} "
             f"({len(recs.layers)} recorded)")
    results, start, tuned = [], time.perf_counter(), 0
    for i, (key, layer) in enumerate(layers):
        if key in recs:
            entry = recs.layers[key]
            progress(f"[{i + 1}/{len(layers)}] {key}: recorded, skipped ({entry['name']})")
            results.append(LayerResult(key, entry.get("default_s"), min(t for t in entry["times_s"].values() if t), entry["name"], True))
            continue
        if budget_s is not None and tuned and time.perf_counter() - start > budget_s:
            progress(f"budget of {budget_s:g} s spent: {len(layers) - i} layers left for the next run")
            break
        tuned += 1
        progress(f"[{i + 1}/{len(layers)}] {key}: building candidates")
        if isinstance(layer, PoolLayer):
            jobs, choices = build_pool_jobs(layer, profile, progress, precision)
        else:
            jobs, choices = build_jobs(layer, profile, progress, precision)
        measured = measurer.measure(jobs, progress=lambda r: progress(
            f"    {r.key.split('|')[1]:<40} " + (f"{r.seconds * 1e3:9.3f} ms" if r.seconds is not None else f"error: {r.error}")))
        times = {choices[k].name: measured[k].seconds for k in choices if k in measured}
        ok = {name: t for name, t in times.items() if t is not None}
        if not ok:
            progress("    nothing measured (exported for measuring elsewhere, or every candidate failed); not recorded")
            continue
        winner_name = tuning.pick_algorithm(ok)
        winner = next(c for c in choices.values() if c.name == winner_name)
        default_s = ok.get(next(iter(choices.values())).name)  # the default is the first candidate
        recs.add(key, winner, times, default_s)
        recs.save(records_path)
        gain = f" ({default_s / ok[winner_name]:.2f}x the default)" if default_s else ""
        progress(f"    winner: {winner_name}{gain}")
        results.append(LayerResult(key, default_s, ok[winner_name], winner_name))
        _say_time_left(layers[i + 1:], recs, tuned, time.perf_counter() - start)
    if len(results) < len(layers) or not results:
        return results
    if isinstance(measurer, LocalMeasurer):
        in_context(model, profile, records_path, measurer.device, precision, progress)
    elif isinstance(measurer, ExportMeasurer):
        export_context(model, profile, records_path, measurer.directory, precision, progress)
    else:
        progress("whole-model timing (placement in context) needs the device here or --export: skipped")
    return results


def _say_time_left(rest: list, recs, tuned: int, elapsed_s: float) -> None:
    """Log about how long the layers not yet recorded take, at the pace of those tuned so far."""
    left = sum(key not in recs for key, _ in rest)
    if left:
        pace = elapsed_s / tuned
        log.info(f"tune: {left} layer{'s' if left != 1 else ''} left, about {left * pace:.0f} s at {pace:.0f} s a layer "
                 "(then the whole model is timed; --budget-s stops earlier, the next run resumes)")


#: Whole-model variants :func:`in_context` times, preferred in this order on a near tie
#: (``tuning.TIE_MARGIN``): no records (the profile's default), the records with every conv in
#: the profile's placement, the records as tuned per layer.
CONTEXT_VARIANTS = ("default", "tuned, default placement", "tuned")
#: Profiled whole-model runs per variant (median of their summed kernel times).
CONTEXT_RUNS = 5


def context_variants(recs, profile: DeviceProfile) -> dict:
    """The records of each of :data:`CONTEXT_VARIANTS` derived from the tuned ``recs``."""
    placement = profile.activation_placement
    return {
        "default": recs.replaced(conv=lambda c: None, pool=lambda c: pool_strategy.PoolChoice()),
        "tuned, default placement": recs.replaced(conv=lambda c: c and strategy.ConvChoice(c.algorithm, c.config, placement)),
        "tuned": recs,
    }


def in_context(model, profile: DeviceProfile, records_path, device, precision: str = "float32", progress=print,
               runs: int = CONTEXT_RUNS) -> dict[str, float]:
    """Time the whole ``model`` on ``device`` (median kernel time of ``runs`` profiled runs) for each
    of :data:`CONTEXT_VARIANTS` and rewrite the records at ``records_path`` to the fastest.

    Per-layer tuning times a conv alone; in a model, a placement other than its neighbours'
    changes what they run (mixed-scope kernels, image floors on some drivers). So the records
    never make the model slower than the profile's default. Returns seconds per variant."""
    from tir_adreno.compiler import compile_model

    variants = context_variants(_records.load(records_path, profile, precision), profile)
    times = {}
    for name in CONTEXT_VARIANTS:
        compiled = compile_model(model, device, profile=profile, records=variants[name], precision=precision, progress=lambda _: None)
        times[name] = time_model(compiled, runs)
    return _keep(variants, times, records_path, profile, progress, f"median of {runs} profiled runs")


def export_context(model, profile: DeviceProfile, records_path, directory, precision: str = "float32", progress=print):
    """:func:`in_context` split over two machines: the variants saved (without weights) under
    ``directory``/``context`` for ``tune --measure`` there (``measure.measure_context``); once
    their times are back for these records, the fastest is kept. Returns the times, or None
    while they are not measured yet."""
    from tir_adreno.compiler import compile_plan
    from tir_adreno.runtime.executor import save_model
    from tir_adreno.tuning.measure import CONTEXT_DIR, load_context_results

    variants = context_variants(_records.load(records_path, profile, precision), profile)
    digest = _records.digest(variants["tuned"])
    measured = load_context_results(directory, digest) or {}
    times = {name: measured[context_folder(name)] for name in CONTEXT_VARIANTS if context_folder(name) in measured}
    if len(times) == len(CONTEXT_VARIANTS):
        return _keep(variants, times, records_path, profile, progress, "measured on the device")
    for name in CONTEXT_VARIANTS:
        plan, kernels, _ = compile_plan(model, profile, variants[name], precision=precision, progress=lambda _: None)
        save_model(Path(directory) / CONTEXT_DIR / context_folder(name), plan, kernels, None, profile.name)
    (Path(directory) / CONTEXT_DIR / "variants.json").write_text(digest)
    progress(f"exported the whole model {len(CONTEXT_VARIANTS)} ways to {Path(directory) / CONTEXT_DIR}: run "
             f"`tir-adreno tune --measure {directory}` on the device, then this command again")
    return None


def context_folder(variant: str) -> str:
    """The folder name of a :data:`CONTEXT_VARIANTS` entry: ``tuned, default placement`` -> ``tuned-default-placement``."""
    return variant.replace(", ", "-").replace(" ", "-")


def _keep(variants: dict, times: dict, records_path, profile: DeviceProfile, progress, how: str) -> dict:
    kept = tuning.pick_algorithm({name: times[name] for name in CONTEXT_VARIANTS})
    recs = variants[kept]
    recs.context = {"model_s": times, "kept": kept, "placement": profile.activation_placement}
    recs.save(records_path)
    progress(f"whole model (kernel time, {how}): " + ", ".join(f"{name} {times[name] * 1e3:.3f} ms" for name in CONTEXT_VARIANTS)
             + f"; kept: {kept}")
    return times


def table(results) -> str:
    """Per-layer gains of the winners over the defaults, as text."""
    lines = [f"{'layer':<64} {'default us':>10} {'tuned us':>9} {'gain':>6}  winner"]
    for r in results:
        default = f"{r.default_s * 1e6:10.1f}" if r.default_s else f"{'-':>10}"
        gain = f"{r.default_s / r.best_s:5.2f}x" if r.default_s else f"{'-':>6}"
        lines.append(f"{r.key:<64} {default} {r.best_s * 1e6:9.1f} {gain}  {r.winner}")
    total_default = sum(r.default_s for r in results if r.default_s)
    total_best = sum(r.best_s for r in results if r.default_s)
    if total_best:
        lines.append(f"{'sum over layers':<64} {total_default * 1e6:10.1f} {total_best * 1e6:9.1f} {total_default / total_best:5.2f}x")
    return "\n".join(lines)


def plot(results, path) -> Path | None:
    """A bar chart of per-layer gains next to the records (None without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rows = [r for r in results if r.default_s]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(max(6, 0.35 * len(rows)), 4))
    ax.bar(range(len(rows)), [r.default_s / r.best_s for r in rows], color="tab:blue")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([f"L{i}" for i in range(len(rows))], fontsize=7)
    ax.set_ylabel("tuned speed-up over the default")
    ax.set_title("per-layer gain of tuning (kernel time, L = layer of the table)")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


class ExportMeasurer:
    """``tune --export DIR``: collects the jobs for a machine without TVM (``tune --measure DIR``)
    and, once that machine's results are in ``DIR``, answers from them."""

    def __init__(self, directory):
        self.directory = Path(directory)
        try:
            self.results = load_results(self.directory)
        except (OSError, ValueError):  # nothing measured there yet
            self.results = {}
        self.pending = []

    def measure(self, jobs, progress=None):
        if not self.results:
            self.pending.extend(jobs)
            return {}
        out = {job.key: self.results[job.key] for job in jobs if job.key in self.results}
        for r in out.values():
            if progress:
                progress(r)
        return out

    def finish(self) -> int:
        """Write the collected jobs to the directory; returns how many."""
        if self.pending:
            export_jobs(self.pending, self.directory)
        return len(self.pending)
