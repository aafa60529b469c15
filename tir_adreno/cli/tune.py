"""``tir-adreno tune``: measure conv candidates per layer here, through an exported folder
(``--export`` / ``--measure``, the measuring side TVM-free) or over TVM's RPC tracker, and write records."""

from __future__ import annotations

from pathlib import Path

from tir_adreno.cli.checks import progress_printer
from tir_adreno.strategy.profile import get_profile


def tune(args) -> int:
    if args.measure:
        return _measure(args)
    from tir_adreno.frontend import models
    from tir_adreno.strategy.profile import with_placement
    from tir_adreno.tuning import tune as tuning

    target, measurer = _target_and_measurer(args)
    target = with_placement(target, args.placement)
    suffix = "" if args.precision == "float32" else f"-{args.precision}"
    records = Path(args.records or f"records-{target.name}{suffix}.json")
    model = args.model if args.model else models.get_model(args.builtin)
    print(f"model: {args.model or args.builtin}\ndevice profile: {target.key}; precision: {args.precision}; "
          f"activations in {target.activation_placement}s", flush=True)
    results = tuning.tune(model, target, records, measurer, args.budget_s, progress=progress_printer(args, ""),
                          precision=args.precision)
    if args.export:
        count = measurer.finish()
        if count:
            print(f"exported {count} candidates to {args.export}: run `tir-adreno tune --measure {args.export}` "
                  "on the device, then this command again")
            return 0
    print()
    print(tuning.table(results))
    png = tuning.plot(results, records.with_suffix(".png"))
    print(f"\nrecords: {records}" + (f"; plot: {png}" if png else ""))
    flag = "" if args.precision == "float32" else f" --precision {args.precision}"
    flag += f" --placement {args.placement}" if args.placement else ""
    print(f"compile with: tir-adreno compile MODEL -o DIR --target {target.name} --records {records}{flag}")
    return 0


def _measure(args) -> int:
    """The TVM-free side of ``--export``: numpy + pyopencl only."""
    from tir_adreno.tuning import measure

    if (Path(args.measure) / measure.JOBS_FILE).exists() or not measure.has_context(args.measure):
        measure.measure_directory(args.measure, args.device, progress=lambda r: print(r, flush=True))
    measure.measure_context(args.measure, args.device, progress=lambda line: print(line, flush=True))
    print(f"results written to {args.measure}; bring the folder back and run tune MODEL --export {args.measure} again")
    return 0


def _target_and_measurer(args):
    """The device profile measured for and how: an exported folder, the RPC tracker's runners or this machine."""
    from tir_adreno.strategy.profile import DeviceProfile
    from tir_adreno.tuning import measure, tune as tuning

    if args.export:
        return get_profile(args.target or "adreno"), tuning.ExportMeasurer(args.export)
    if args.rpc_tracker:
        return get_profile(args.target), measure.RPCMeasurer(args.rpc_tracker, args.rpc_key)
    return DeviceProfile.from_device(args.device), tuning.LocalMeasurer(args.device)
