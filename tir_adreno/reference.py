"""CPU reference outputs for ``--check`` and the model tests.

ONNX models run on onnxruntime; Relax modules on TVM's LLVM build (the
Relax VM on the CPU). Both are independent of our kernels and of OpenCL.
"""

from __future__ import annotations

import numpy as np


def reference_outputs(model, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    import tvm

    if isinstance(model, tvm.IRModule):
        from tvm import relax

        executable = tvm.compile(model, target="llvm")
        vm = relax.VirtualMachine(executable, tvm.cpu())
        names = [p.name for p in model["main"].params]
        out = vm["main"](*[tvm.runtime.tensor(inputs[n]) for n in names])
        outs = out if isinstance(out, (list, tuple)) or type(out).__name__ == "Array" else [out]
        return [o.numpy() for o in outs]
    import onnx
    import onnxruntime

    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model))
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, inputs)


def relative_error(actual: np.ndarray, reference: np.ndarray) -> float:
    """max |actual - reference| / max |reference|; inf when shapes differ or values are not finite."""
    actual = np.asarray(actual, np.float64)
    reference = np.asarray(reference, np.float64)
    if actual.shape != reference.shape or not np.all(np.isfinite(actual)):
        return float("inf")
    scale = float(np.max(np.abs(reference), initial=0.0)) or np.finfo(np.float64).tiny
    return float(np.max(np.abs(actual - reference), initial=0.0)) / scale


def conv2d_nchw(x, w, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups: int = 1) -> np.ndarray:
    """float64 NCHW/OIHW conv2d, padding (top, left, bottom, right): one matmul per tap and group."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = strides, dilation, padding
    xp = np.zeros((n, c, h + pt + pb, wd + pl + pr))
    xp[:, :, pt : pt + h, pl : pl + wd] = x
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    og = o // groups
    out = np.zeros((n, o, oh, ow))
    for g in range(groups):
        xs = xp[:, g * cg : (g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dh : i * dh + sh * (oh - 1) + 1 : sh, j * dw : j * dw + sw * (ow - 1) + 1 : sw]
                out[:, g * og : (g + 1) * og] += np.einsum("nchw,oc->nohw", patch, w[g * og : (g + 1) * og, :, i, j])
    return out


def activation(x, name: str | None, clip=(0.0, 6.0)) -> np.ndarray:
    """float64 activation by its name in ``primfuncs.epilogue.ACTIVATIONS``; ``clip``: (min, max) of "clip"."""
    x = np.asarray(x, np.float64)
    if name is None:
        return x
    if name in ("relu", "relu6", "clip"):
        lo, hi = {"relu": (0.0, np.inf), "relu6": (0.0, 6.0), "clip": tuple(clip)}[name]
        return np.clip(x, lo, hi)
    with np.errstate(over="ignore"):  # exp(-x) overflows to inf: sigmoid 0
        sigmoid = 1.0 / (1.0 + np.exp(-x))
    hardsigmoid = np.clip(x + 3.0, 0.0, 6.0) / 6.0
    gates = {"sigmoid": sigmoid, "hardsigmoid": hardsigmoid, "silu": x * sigmoid, "hardswish": x * hardsigmoid}
    if name not in gates:
        raise ValueError(f"unknown activation {name!r}")
    return gates[name]
