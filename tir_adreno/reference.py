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
