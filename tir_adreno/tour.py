"""The kernel tour: every kernel family on a representative shape, checked and timed.

``tir-adreno run`` without a model runs this: it builds each kernel (cached),
runs it on textures where they fit, compares with NumPy (float64) and reports
the median OpenCL event time.
"""

from __future__ import annotations

import numpy as np

from primfuncs import elementwise, layout

from . import build, runtime
from .blocked import pack_nchw4c, pack_oihw4o
from .ops import activation_scope, blocked_shape

SHAPE = (1, 32, 56, 56)  # an early-CNN activation, NCHW


def _case(dev, func, inputs, expected, rtol):
    """Build and run ``func`` on ``inputs`` (host arrays for all but the last param); time it."""
    module = build.build_cached(func)
    (name,) = module.functions
    loaded = dev.load(module)
    specs = module[name].params
    tensors = [dev.empty(s).upload(x) for s, x in zip(specs, inputs)] + [dev.empty(specs[-1]).poison()]
    loaded(name, *tensors)
    got = tensors[-1].numpy().astype(np.float64)
    err = float(np.max(np.abs(got - expected)) / max(np.max(np.abs(expected)), 1e-30))
    seconds = loaded.time(name, tensors, warmup=2, repeat=10)
    textures = [s.scope for s in specs if s.scope != "global"]
    placement = textures[-1] if textures else "buffer"
    return name, placement, seconds, "ok" if np.isfinite(err) and err <= rtol else f"err {err:.1e}"


def cases(dev, rng):
    """(func, inputs, float64 expected, rtol) for each kernel on the tour."""
    x = rng.standard_normal(SHAPE).astype("float32")
    y = rng.standard_normal(SHAPE).astype("float32")
    bias = rng.standard_normal((SHAPE[1] // 4, 4)).astype("float32")
    scope = activation_scope(dev, SHAPE)
    xb, yb = pack_nchw4c(x), pack_nchw4c(y)
    x64, y64 = xb.astype(np.float64), yb.astype(np.float64)
    shape5 = blocked_shape(SHAPE)
    yield layout.nchw_to_nchw4c(SHAPE, scope=scope), [x], x64, 0.0
    yield layout.nchw4c_to_nchw(SHAPE, scope=scope), [xb], x.astype(np.float64), 0.0
    w = rng.standard_normal((64, 32, 3, 3)).astype("float32")
    yield layout.oihw_to_oihw4o(w.shape), [w], pack_oihw4o(w).astype(np.float64), 0.0
    yield elementwise.add(shape5, scope=scope), [xb, yb], x64 + y64, 1e-7
    yield elementwise.multiply(shape5, scope=scope), [xb, yb], x64 * y64, 1e-7
    yield elementwise.bias_add(shape5, scope=scope), [xb, bias], x64 + bias[None, :, None, None, :], 1e-7
    yield elementwise.relu(shape5, scope=scope), [xb], np.maximum(x64, 0), 0.0
    yield elementwise.relu6(shape5, scope=scope), [xb * 4], np.clip(x64 * 4, 0, 6), 0.0


def kernel_tour(dev: runtime.Device, progress=print, seed: int = 0) -> list[dict]:
    rows = []
    for func, inputs, expected, rtol in cases(dev, np.random.default_rng(seed)):
        name, placement, seconds, check = _case(dev, func, inputs, expected, rtol)
        progress(f"  {name}: {placement}, {seconds * 1e6:.1f} us, {check}")
        rows.append(
            {
                "kernel": name,
                "shape": "x".join(map(str, inputs[0].shape)),
                "placement": placement,
                "time_us": seconds * 1e6,
                "check": check,
            }
        )
    return rows
