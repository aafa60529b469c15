"""Mixed convs as one conv (issue 21): launches and kernel time of ONNX models (MixNet) with each
``MixedConv2d`` (Split -> a conv per channel group -> Concat) run as exported ("apart": split,
group convs, concat) and as the strategy merges it ("merged": ``strategy.conv.mixed_conv_form``,
``passes.mixed_conv``), from one run. ``--all`` adds "all" (every mixed conv merged in the form
adding the fewest multiply-adds, whatever they cost), ``--dense`` adds "dense" (1x1 groups as one
dense conv with block-diagonal weights rather than a grouped conv).

    python benchmarks/mixed_conv.py --onnx mixnet_s.onnx --target pocl --build-only DIR [--all] [--dense]  # here (TVM)
    python benchmarks/mixed_conv.py --from DIR                                                           # no TVM

Kernel time: the median over ``--repeat`` profiled runs (the ways alternating) of the sum of
OpenCL event times, per model and per kernel family; each way's outputs are compared with apart's
(``ways.py``; a way saved without weights, to fit what the device tool carries, runs for timing only).
"""

from __future__ import annotations

from ways import arguments, build, measure_ways, parse, patched, save_results

WAYS = ("apart", "merged", "all", "dense")


def _form(choose):
    """``strategy.conv.mixed_conv_form`` replaced by ``choose(forms)`` while compiling."""
    return patched("tir_adreno.strategy.conv", mixed_conv_form=lambda forms, pieces, profile: choose(forms))


SETTINGS = {
    "apart": _form(lambda forms: None),
    "all": _form(lambda forms: min(forms, key=forms.get) if forms else None),
    "dense": _form(lambda forms: "dense" if "dense" in forms else min(forms, key=forms.get) if forms else None),
}


def main():
    parser = arguments(__doc__)
    parser.add_argument("--all", action="store_true", help="also every mixed conv merged, whatever it adds")
    parser.add_argument("--dense", action="store_true", help="also 1x1 groups merged as block-diagonal dense convs")
    args = parse(parser)
    if args.build_only:
        return build(args, [w for w in WAYS if w in ("apart", "merged") or getattr(args, w)], SETTINGS)
    ways = tuple(w for w in WAYS if any(p.name.endswith(f"-{w}") for p in args.source.iterdir()))
    models, results, device = measure_ways(args, ways)
    return save_results("mixed_conv", models, results, args, device)


if __name__ == "__main__":
    main()
