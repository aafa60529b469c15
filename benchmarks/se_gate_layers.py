"""The squeeze-excitation gate read by the projection conv (issue 21), layer by layer: the gated
1x1 conv (``conv2d_nchw4c(gate_scope=...)``) against the gate multiply kernel then the same conv
without gate, on EfficientNet-B0's SE projection shapes, each with the device's default plan.

    python benchmarks/se_gate_layers.py [--rounds 15]

Per layer: the median and the minimum over ``--rounds`` rounds (the kernels interleaved) of OpenCL
event time, and the gate multiplies the gated conv does beyond the multiply kernel's (each of its
``ceil(O/4 / oc_block)`` output channel tiles multiplies the input it reads).
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from common import add_device_argument, log, print_table, write_json
from primfuncs import elementwise
from primfuncs.conv import conv2d_geometry
from primfuncs.epilogue import Epilogue
from tir_adreno import ops, runtime
from tir_adreno.strategy import conv as strategy
from tir_adreno.strategy.packing import pack_bias, pack_nchw4c
from tir_adreno.strategy.profile import resolve

#: (C, H = W, O) of EfficientNet-B0's SE projection convs (each distinct one; MobileNetV3's are
#: smaller and have fewer output channels).
LAYERS = ((32, 112, 16), (96, 56, 24), (144, 56, 24), (144, 28, 40), (240, 28, 40), (240, 14, 80), (480, 14, 80),
          (480, 14, 112), (672, 14, 112), (672, 7, 192), (1152, 7, 192), (1152, 7, 320))


def _tensors(dev, loaded, name, arrays):
    specs = loaded[name].params
    return [dev.empty(s).upload(a) for s, a in zip(specs, arrays)] + [dev.empty(specs[-1])]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    add_device_argument(parser)
    args = parser.parse_args()
    dev = runtime.get_device(args.device)
    profile = resolve(dev)
    rng = np.random.default_rng(0)
    rows, results = [], {}
    for c, hw, o in LAYERS:
        geom = conv2d_geometry((1, c, hw, hw), (o, c, 1, 1))
        plain = strategy.conv2d_plan(geom, Epilogue(bias=True), "float32", profile)
        scope = plain.scope
        gated = strategy.conv2d_plan(geom, Epilogue(bias=True), "float32", profile, gate_scope=scope)
        x = pack_nchw4c(rng.standard_normal((1, c, hw, hw))).astype(np.float32)
        g = pack_nchw4c(rng.uniform(0, 1, (1, c, 1, 1))).astype(np.float32)
        w, b = plain.pack_weights(rng.standard_normal((o, c, 1, 1))), pack_bias(rng.standard_normal(o).astype(np.float32))
        conv, conv_name = ops.compile(plain.primfuncs()[0], dev)
        gconv, gconv_name = ops.compile(gated.primfuncs()[0], dev)
        mul, mul_name = ops.compile(elementwise.binary(x.shape, "multiply", scope=scope, broadcast_channels=True), dev)
        t_mul = _tensors(dev, mul, mul_name, [x, g])
        t_conv = _tensors(dev, conv, conv_name, [x, w, b])
        t_gated = _tensors(dev, gconv, gconv_name, [x, g, w, b])
        times = {"multiply": [], "conv": [], "gated": []}
        for r in range(args.rounds + 2):  # 2 warm-up rounds
            sample = {"multiply": mul(mul_name, *t_mul), "conv": conv(conv_name, *t_conv), "gated": gconv(gconv_name, *t_gated)}
            for k, v in sample.items():
                if r >= 2:
                    times[k].append(v * 1e3)
        ms = {k: statistics.median(v) for k, v in times.items()}
        fastest = {k: min(v) for k, v in times.items()}  # other jobs on a shared host only add time
        apart, apart_min = ms["multiply"] + ms["conv"], fastest["multiply"] + fastest["conv"]
        key = f"{c}x{hw}x{hw}->{o}"
        recompute = (-(-geom.o4 // gated.config.oc_block) - 1) * c * hw * hw  # gate multiplies beyond the multiply kernel's
        results[key] = {"median_ms": ms, "min_ms": fastest, "config": gated.config_string, "recompute": recompute}
        rows.append([key, gated.config_string, recompute, f"{ms['multiply']:.3f}", f"{ms['conv']:.3f}", f"{ms['gated']:.3f}",
                     f"{ms['gated'] / apart:.2f}", f"{fastest['gated'] / apart_min:.2f}"])
    print_table(["layer", "config", "extra multiplies", "multiply ms", "conv ms", "gated conv ms", "gated / apart (median)",
                 "(min)"], rows)
    log(f"wrote {write_json('se_gate_layers', dev.name, {'rounds': args.rounds, 'layers': results})}")


if __name__ == "__main__":
    main()
