"""Host cost of one kernel launch against what the launch carries: buffer arguments, image
arguments, global size and local size, on chains of dependent tiny kernels enqueued the way a
model's fast run enqueues them (``runtime.launcher``: ctypes, arguments set once, no events, the
plain queue). Tells whether fewer or packed arguments would cut a model's host time.

    python benchmarks/launch_cost.py [--chain 100] [--repeat 15] [--device NVIDIA]

Per case: host us per launch (enqueue only) and the chain's wall (enqueue + finish) per launch,
medians of ``--repeat`` chains in each of ``--rounds`` rounds, the cases interleaved. Runs on any OpenCL device; needs no TVM.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import pyopencl as cl

from common import add_device_argument, fmt, log, print_table, write_json

#: (buffer arguments, image arguments, global size, local size or None, reqd_work_group_size):
#: the last says whether the kernel declares its work-group size (OpenCL 1.2 then refuses a NULL
#: local size: CL_INVALID_WORK_GROUP_SIZE, seen on PoCL).
CASES = (
    (2, 0, (256,), (64,), False),
    (4, 0, (256,), (64,), False),
    (8, 0, (256,), (64,), False),
    (16, 0, (256,), (64,), False),
    (2, 0, (256,), None, False),
    (2, 0, (256,), (64,), True),
    (4, 0, (64, 2, 2), (64, 1, 1), False),
    (4, 0, (64, 2, 2), (64, 1, 1), True),
    (2, 0, (1 << 18,), (64,), False),
    (8, 0, (1 << 18,), (64,), False),
    (2, 2, (256,), (64,), False),
    (2, 4, (256,), (64,), False),
    (2, 8, (256,), (64,), False),
)
SIZE = 1 << 18  # floats per buffer: the largest global size reads in range


def _source(buffers: int, images: int, reqd=None) -> str:
    """A kernel writing y[i] from its other buffers and one pixel of each image: every argument
    used; ``reqd``: the work-group size it declares (``reqd_work_group_size``), or None."""
    params = ["__global float* restrict y"] + [f"__global const float* restrict b{k}" for k in range(1, buffers)]
    params += [f"__read_only image2d_array_t t{k}" for k in range(images)]
    terms = [f"b{k}[i]" for k in range(1, buffers)] + [f"read_imagef(t{k}, (int4)(0, 0, 0, 0)).x" for k in range(images)]
    attribute = "" if reqd is None else f"__attribute__((reqd_work_group_size({', '.join(map(str, reqd))}))) "
    index = "get_global_id(0) + get_global_size(0) * (get_global_id(1) + get_global_size(1) * get_global_id(2))"
    return (f"__kernel {attribute}void chain_link({', '.join(params)}) {{\n  const int i = {index};\n"
            f"  y[i] = 0.5f * y[i] + {' + '.join(terms) or '1.0f'};\n}}\n")


def prepare(device, case, chain: int):
    """The case's chain as a ctypes launcher on the plain queue (run once: built and warm)."""
    from tir_adreno.runtime.launcher import make_launcher

    buffers, images, global_size, local_size, declared = case
    reqd = tuple(local_size) + (1,) * (3 - len(local_size)) if declared else None
    program = cl.Program(device.context, _source(buffers, images, reqd)).build()
    mf = cl.mem_flags
    bufs = [cl.Buffer(device.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=np.full(SIZE, 0.25, np.float32)) for _ in range(buffers)]
    rgba = cl.ImageFormat(cl.channel_order.RGBA, cl.channel_type.FLOAT)
    imgs = [cl.Image(device.context, mf.READ_ONLY, rgba, shape=(4, 4, 1), is_array=True) for _ in range(images)]
    kernel = cl.Kernel(program, "chain_link")
    kernel.set_args(*bufs, *imgs)
    launcher = make_launcher(device.plain_queue, [(kernel, global_size, local_size)] * chain, "ctypes")
    launcher.enqueue()
    device.plain_queue.finish()
    return launcher, reqd, (bufs, imgs)


def sample(launcher, queue, repeat: int) -> tuple[list, list]:
    """Host us per launch of enqueuing the chain, and wall us per launch until it finished."""
    enqueue_us, wall_us = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        launcher.enqueue()
        enqueued = time.perf_counter()
        queue.finish()
        done = time.perf_counter()
        enqueue_us.append((enqueued - start) * 1e6 / len(launcher))
        wall_us.append((done - start) * 1e6 / len(launcher))
    return enqueue_us, wall_us


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chain", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=15, help="chains per case and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--results-dir", type=Path, default=None)
    add_device_argument(parser)
    args = parser.parse_args(argv)
    from tir_adreno import runtime

    device = runtime.get_device(args.device)
    prepared = []
    for case in CASES:
        log(f"build {case} ...")
        prepared.append(prepare(device, case, args.chain))
    samples = [([], []) for _ in CASES]
    for _ in range(args.rounds):  # the cases interleaved: a drift of the machine hits all alike
        for (launcher, *_), (enqueue_us, wall_us) in zip(prepared, samples):
            e, w = sample(launcher, device.plain_queue, args.repeat)
            enqueue_us += e
            wall_us += w
    results = [{"buffers": case[0], "images": case[1], "global": case[2], "local": case[3], "reqd_work_group_size": reqd,
                "launch_us": statistics.median(e), "wall_us_per_launch": statistics.median(w)}
               for case, (_, reqd, _), (e, w) in zip(CASES, prepared, samples)]
    path = write_json("launch_cost", device.name, {"chain": args.chain, "repeat": args.repeat, "rounds": args.rounds, "results": results},
                      args.results_dir)
    rows = [[str(r["buffers"]), str(r["images"]), str(r["global"]), str(r["local"]), str(r["reqd_work_group_size"]), fmt(r["launch_us"]),
             fmt(r["wall_us_per_launch"])] for r in results]
    print_table(["buffer args", "image args", "global", "local", "reqd_work_group_size", "host us/launch", "wall us/launch"], rows,
                title=f"launch cost on {device.name}, chains of {args.chain}, medians of {args.repeat} x {args.rounds} rounds (JSON: {path})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
