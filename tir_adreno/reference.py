"""CPU reference outputs for ``--check`` and the model tests.

ONNX models run on onnxruntime; Relax modules on TVM's LLVM build (the
Relax VM on the CPU). Both are independent of our kernels and of OpenCL.
"""

from __future__ import annotations

import numpy as np


class ReferenceUnavailable(ValueError):
    """The CPU reference cannot run this model (onnxruntime refuses it)."""


def reference_runner(model):
    """A function ``inputs -> outputs`` computing the CPU reference of ``model``.

    For ONNX the onnxruntime session is created here, so a model onnxruntime
    cannot load is reported (:class:`ReferenceUnavailable`, with its message)
    before anything else is done; a Relax module is compiled for LLVM on first use.
    """
    import tvm

    if isinstance(model, tvm.IRModule):
        from tvm import relax

        def run_relax(inputs):
            executable = tvm.compile(model, target="llvm")
            vm = relax.VirtualMachine(executable, tvm.cpu())
            names = [p.name for p in model["main"].params]
            out = vm["main"](*[tvm.runtime.tensor(inputs[n]) for n in names])
            outs = out if isinstance(out, (list, tuple)) or type(out).__name__ == "Array" else [out]
            return [o.numpy() for o in outs]

        return run_relax
    import onnx
    import onnxruntime

    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model))
    try:
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3  # errors only: its warnings (unused initializers) are noise here
        session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as err:  # onnxruntime raises its own Fail/InvalidGraph/NotImplemented types
        raise ReferenceUnavailable(f"onnxruntime cannot run this model: {_first_line(err)}") from None

    def run_onnx(inputs):
        try:
            return session.run(None, inputs)
        except Exception as err:
            raise ReferenceUnavailable(f"onnxruntime failed on this model: {_first_line(err)}") from None

    return run_onnx


def _first_line(err: Exception) -> str:
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    return (lines[0] if lines else type(err).__name__)[:300]


def reference_outputs(model, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The CPU reference outputs: onnxruntime for ONNX, TVM's LLVM build for Relax."""
    return reference_runner(model)(inputs)


def nearly_constant(reference: np.ndarray) -> bool:
    """True when ``reference`` is (nearly) one value: comparing with it checks (almost) nothing."""
    reference = np.asarray(reference, np.float64)
    if reference.size == 0 or not np.all(np.isfinite(reference)):
        return False
    return float(np.ptp(reference)) <= 1e-6 * max(1.0, float(np.abs(reference).max()))


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
