"""Fused epilogue of the conv kernels: ``act(y + bias + residual)`` on one output pixel.

Every conv factory (direct, depthwise, Winograd) declares the same optional
parameters, a ``Bias`` buffer ``(O/4, 4)`` (like ``elementwise.bias_add``) and a
``Residual`` NCHW4c tensor of the output's shape and scope, and writes each
accumulated pixel with :func:`store_output_pixel`. The :class:`Epilogue` spec
decides at parse time which parts exist; the factory then drops the unused
parameters with ``select_params(func, epilogue.params(inputs, output))``.

The order is the one ResNet-style blocks need: bias, then the residual (the
skip connection), then the activation (``relu(conv + bias + identity)``); with
``activation=None`` it is MobileNetV2's linear bottleneck add.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm.script import tirx as T

from ._common import clamp, load_pixel

#: Supported activations (names as in PyTorch / Relax).
ACTIVATIONS = (None, "relu", "relu6")
#: Buffer names the conv factories give the optional epilogue inputs.
BIAS = "Bias"
RESIDUAL = "Residual"


@dataclass(frozen=True)
class Epilogue:
    """What a conv kernel does to each output pixel after accumulation."""

    bias: bool = False
    activation: str | None = None
    residual: bool = False

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")

    def params(self, inputs, output) -> list[str]:
        """Parameter names of a kernel with this epilogue: ``inputs``, the
        epilogue's own inputs, then ``output`` (the order ``select_params`` keeps)."""
        extra = [BIAS] * self.bias + [RESIDUAL] * self.residual
        return [*inputs, *extra, output]


def activate(x, activation, dtype):
    """``activation`` (an entry of :data:`ACTIVATIONS`) of the ``dtype`` TIR expression ``x``."""
    if activation is None:
        return x
    hi = T.FloatImm(dtype, 6.0) if activation == "relu6" else None
    return clamp(x, T.FloatImm(dtype, 0.0), hi)  # relu(NaN) = NaN, as np.maximum


@T.macro
def store_output_pixel(Y, acc, k, tmp, epilogue, Bias, Residual, n, c, h, w):
    """``Y[n, c, h, w] = act(acc[k] + Bias[c] + Residual[n, c, h, w])``, one vector store.

    ``acc[k, 0:4]`` (a row of a 2-D local buffer) holds output channels
    ``4c..4c+3`` of pixel ``(n, h, w)``; it is updated in place, ``tmp`` is a
    scratch local pixel. Each pixel must be stored from its own row: TVM 0.27's
    OpenCL codegen reuses a textually identical vector load of a local buffer
    as a texture store's value across writes to that buffer (so storing two
    pixels through one ``px`` buffer writes the first pixel twice).
    """
    if epilogue.bias:
        for lane in T.vectorized(4):
            tmp[lane] = Bias[c, lane]
        for lane in T.unroll(4):
            acc[k, lane] = acc[k, lane] + tmp[lane]
    if epilogue.residual:
        load_pixel(tmp, Residual, n, c, h, w)
        for lane in T.unroll(4):
            acc[k, lane] = acc[k, lane] + tmp[lane]
    if epilogue.activation is not None:
        for lane in T.unroll(4):
            acc[k, lane] = activate(acc[k, lane], epilogue.activation, acc.dtype)
    Y[n, c, h, w, T.Ramp(0, 1, 4)] = acc[k, T.Ramp(0, 1, 4)]
