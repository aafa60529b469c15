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

#: Supported activations (names as in PyTorch / Relax). ``"clip"`` clamps to the
#: :class:`Epilogue`'s ``clip_min``/``clip_max``; ``hardsigmoid`` is PyTorch's
#: ``relu6(x + 3) / 6``, ``hardswish`` ``x * hardsigmoid(x)``, ``silu`` ``x * sigmoid(x)``;
#: ``gelu`` is the erf form ``x * 0.5 * (1 + erf(x / sqrt 2))``, ``gelu_tanh`` PyTorch's
#: ``approximate="tanh"`` (``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``).
ACTIVATIONS = (None, "relu", "relu6", "clip", "sigmoid", "silu", "hardsigmoid", "hardswish", "gelu", "gelu_tanh")
#: Buffer names the conv factories give the optional epilogue inputs.
BIAS = "Bias"
RESIDUAL = "Residual"


@dataclass(frozen=True)
class Epilogue:
    """What a conv kernel does to each output pixel after accumulation."""

    bias: bool = False
    activation: str | None = None
    residual: bool = False
    clip_min: float = 0.0  # bounds of activation="clip"
    clip_max: float = 6.0

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if not self.clip_min <= self.clip_max:
            raise ValueError(f"clip needs clip_min <= clip_max, got {self.clip_min} > {self.clip_max}")

    def params(self, inputs, output) -> list[str]:
        """Parameter names of a kernel with this epilogue: ``inputs``, the
        epilogue's own inputs, then ``output`` (the order ``select_params`` keeps)."""
        extra = [BIAS] * self.bias + [RESIDUAL] * self.residual
        return [*inputs, *extra, output]


def activate(x, activation, dtype, clip_min: float = 0.0, clip_max: float = 6.0):
    """``activation`` (an entry of :data:`ACTIVATIONS`) of the ``dtype`` TIR expression ``x``."""

    def const(v):
        return T.FloatImm(dtype, float(v))

    if activation is None:
        return x
    # clamp keeps NaN (np.maximum/np.clip semantics), unlike OpenCL's fmax/fmin.
    if activation == "relu":
        return clamp(x, const(0), None)
    if activation == "relu6":
        return clamp(x, const(0), const(6))
    if activation == "clip":
        return clamp(x, const(clip_min), const(clip_max))
    if activation == "sigmoid":
        return const(1) / (const(1) + T.exp(-x))  # exp overflow gives 0, as NumPy
    if activation == "hardsigmoid":
        return clamp(x + const(3), const(0), const(6)) / const(6)
    # GELU as written (not fused into x * Phi(x)), so -inf gives NaN like the NumPy formula.
    if activation == "gelu":
        return x * const(0.5) * (const(1) + T.erf(x * const(0.5**0.5)))
    if activation == "gelu_tanh":  # 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)): TVM's OpenCL tanh is approximate
        u = const(2 * (2 / 3.141592653589793) ** 0.5) * (x + const(0.044715) * x * x * x)
        return x / (const(1) + T.exp(-u))
    if activation in ("silu", "hardswish"):  # the gated forms: x * gate(x)
        return x * activate(x, "sigmoid" if activation == "silu" else "hardsigmoid", dtype)
    raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")


@T.macro
def apply_epilogue(acc, k, tmp, epilogue, Bias, Residual, n, c, h, w):
    """``acc[k] = act(acc[k] + Bias[c] + Residual[n, c, h, w])`` in place (``tmp``: a scratch
    local pixel). ``acc[k, 0:4]`` holds channels ``4c..4c+3`` of pixel ``(n, h, w)``."""
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
            acc[k, lane] = activate(acc[k, lane], epilogue.activation, acc.dtype, epilogue.clip_min, epilogue.clip_max)


@T.macro
def store_output_pixel(Y, acc, k, tmp, epilogue, Bias, Residual, n, c, h, w, out_channels=None):
    """``Y[n, c, h, w] = act(acc[k] + Bias[c] + Residual[n, c, h, w])``, one vector store.

    ``acc[k, 0:4]`` (a row of a 2-D local buffer) holds output channels
    ``4c..4c+3`` of pixel ``(n, h, w)``; it is updated in place (:func:`apply_epilogue`),
    ``tmp`` is a scratch local pixel. Each pixel must be stored from its own row: TVM 0.27's
    OpenCL codegen reuses a textually identical vector load of a local buffer
    as a texture store's value across writes to that buffer (so storing two
    pixels through one ``px`` buffer writes the first pixel twice).
    """
    apply_epilogue(acc, k, tmp, epilogue, Bias, Residual, n, c, h, w)
    if out_channels is not None and out_channels % 4 != 0:
        # The padding lanes of the last block must stay 0 (the next conv and Winograd's GEMM read
        # them): act(0) = 0.5 for sigmoid, and a NaN/Inf input window makes them NaN (NaN * 0 weights).
        for lane in T.unroll(4):
            acc[k, lane] = T.if_then_else(c * 4 + lane < out_channels, acc[k, lane], T.Cast(acc.dtype, 0))
    Y[n, c, h, w, T.Ramp(0, 1, 4)] = acc[k, T.Ramp(0, 1, 4)]
