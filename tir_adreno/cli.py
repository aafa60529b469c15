"""``tir-adreno`` command line: ``devices`` and ``run`` (the main job)."""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def _devices(args) -> int:
    from . import runtime

    rows = runtime.list_devices()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no OpenCL devices found")
        return 1
    default = runtime.get_device()
    for r in rows:
        mark = "*" if f"{r['platform']}: {r['device']}" == default.name else " "
        images = (
            f"images {r['image2d_max_width']} x {r['image2d_max_height']} x {r['image_max_array_size']} layers"
            if r["image_support"]
            else "no image support (buffers only)"
        )
        print(f"{mark} {r['platform']}: {r['device']} [{r['type']}] {r['version']}; {images}; fp16 {'yes' if r['fp16'] else 'no'}")
    print("* = default device (override with --device or TIR_ADRENO_DEVICE)")
    return 0


def _run(args) -> int:
    from . import runtime
    from .tour import kernel_tour

    dev = runtime.get_device(args.device)
    print(f"device: {dev.name}", flush=True)
    rows = kernel_tour(dev, progress=lambda msg: print(msg, flush=True))
    print()
    print(f"{'kernel':<22} {'shape':<22} {'placement':<22} {'time (us)':>10} {'check':>8}")
    for r in rows:
        print(f"{r['kernel']:<22} {r['shape']:<22} {r['placement']:<22} {r['time_us']:>10.1f} {r['check']:>8}")
    failed = [r for r in rows if r["check"] != "ok"]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev.name, "kernels": rows}, f, indent=2)
    print(f"\n{len(rows) - len(failed)}/{len(rows)} kernels match NumPy on {dev.name}")
    return 1 if failed else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="tir-adreno", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("devices", help="list OpenCL devices, image support and texture limits")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(fn=_devices)
    p = sub.add_parser("run", help="build and run the kernels on a device, check them against NumPy, time them")
    p.add_argument("--device", help="substring of the OpenCL platform or device name")
    p.add_argument("--json", metavar="PATH", help="write the per-kernel report as JSON")
    p.set_defaults(fn=_run)
    args = parser.parse_args(argv)
    from .runtime import DeviceNotFoundError

    try:
        return args.fn(args)
    except (DeviceNotFoundError, ValueError, TypeError, FileNotFoundError) as err:
        print(f"tir-adreno: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
