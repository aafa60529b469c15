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

The pooling kernels (``primfuncs.pool2d.window_reduce``: pool2d, adaptive and global pooling)
store their pixels with :func:`store_output_pixel` too, so a pool takes the same Epilogue.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tvm import sym, tirx
from tvm.script import tirx as T

from ._common import clamp, load_pixel, maximum, minimum
from .activation_table import NAMES, activation as _table_entry
from .epilogue_expr import LANE_LEAVES, MAX_OPERANDS, channel_count, check_leaves, evaluate, operand_kinds

#: Supported activations (:data:`primfuncs.activation_table.NAMES`: each defined once there, for the
#: kernels, the float64 reference and the recognizer). ``"clip"`` clamps to the :class:`Epilogue`'s
#: ``clip_min``/``clip_max``; other parameters (LeakyReLU's ``alpha``, HardSigmoid's ``alpha``/``beta``)
#: come as the Epilogue's ``activation_params``.
ACTIVATIONS = NAMES
#: Buffer names the conv factories give the optional epilogue inputs.
BIAS = "Bias"
RESIDUAL = "Residual"
#: The second activation a kernel reads (the conv's direct kernel, the GEMM): after ``Residual``.
SECOND = "Residual2"
#: The activation buffers in order: the residual (when added) then the expression's operands.
EXTRA_BUFFERS = (RESIDUAL, SECOND)
#: How a conv writes Y: blocked ``[N, O/4, OH, OW, 4]``, or a plain buffer, channels-last
#: ``[N, OH, OW, O]`` (= tokens ``[N, OH * OW, O]``) or ``[N, O, OH, OW]``: no layout kernel after it.
OUT_LAYOUTS = ("NCHW4c", "NHWC", "NCHW")

_ANALYZER = sym.Analyzer()


@dataclass(frozen=True)
class Epilogue:
    """What a conv kernel does to each output pixel after accumulation."""

    bias: bool = False
    activation: str | None = None
    residual: bool = False
    clip_min: float = 0.0  # bounds of activation="clip"
    clip_max: float = 6.0
    activation_params: tuple = ()  # the activation's other parameters, ((name, value), ...): ``(("alpha", 0.2),)``
    out_scope: str | None = None  # the conv factories: Y's scope (None: X's), so a boundary needs no copy
    residual_scope: str | None = None  # and Residual's (None: Y's)
    expr: object = None  # an elementwise chain after all that (primfuncs.epilogue_expr), None: none
    out_layout: str = "NCHW4c"  # the conv factories: Y blocked, or a plain buffer "NHWC" (tokens) / "NCHW"
    residual_layout: str = "NCHW4c"  # the residual blocked, or a plain buffer "NHWC" / "NCHW" (channels a multiple of 4)

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if self.activation_params:
            _table_entry(self.activation).check_params(dict(self.activation_params))
        if self.out_layout not in OUT_LAYOUTS:
            raise ValueError(f"out_layout must be one of {OUT_LAYOUTS}, got {self.out_layout!r}")
        if self.residual_layout not in OUT_LAYOUTS or (self.residual_layout != "NCHW4c" and not self.residual):
            raise ValueError(f"residual_layout must be one of {OUT_LAYOUTS} (a plain one with a residual), "
                             f"got {self.residual_layout!r}")
        if not self.clip_min <= self.clip_max:
            raise ValueError(f"clip needs clip_min <= clip_max, got {self.clip_min} > {self.clip_max}")
        if self.expr is not None:
            check_leaves(self.expr, LANE_LEAVES)
        if len(self.extra_kinds) > MAX_OPERANDS:
            raise ValueError(f"an epilogue reads at most {MAX_OPERANDS} other activations (the residual and the "
                             f"expression's operands), got {len(self.extra_kinds)}")

    @property
    def operand_kinds(self) -> tuple:
        """How the expression's operands broadcast (``epilogue_expr.OPERAND_KINDS``), by index."""
        return () if self.expr is None else operand_kinds(self.expr)

    @property
    def extra_kinds(self) -> tuple:
        """The kinds of the activation buffers (:data:`EXTRA_BUFFERS`): the residual's (full), then the operands'."""
        return ("full",) * self.residual + self.operand_kinds

    @property
    def channel_rows(self) -> int:
        """How many per-channel constants the expression reads (rows of ``Bias`` after the bias)."""
        return 0 if self.expr is None else channel_count(self.expr)

    @property
    def reads_bias(self) -> bool:
        return self.bias or self.channel_rows > 0

    @property
    def reads_residual(self) -> bool:
        """Whether the kernel reads ``Residual`` (the residual, or the expression's first operand)."""
        return len(self.extra_kinds) > 0

    @property
    def reads_second(self) -> bool:
        """Whether the kernel reads :data:`SECOND` (a residual and an operand, or two operands)."""
        return len(self.extra_kinds) > 1

    def bias_shape(self, blocks: int) -> tuple:
        """``Bias``'s shape for ``blocks`` blocks of 4 channels: ``(blocks, 4)`` a row, the bias first."""
        return (blocks, 4 * (int(self.bias) + self.channel_rows))

    def residual_shape(self, out5, index: int = 0) -> tuple:
        """NCHW4c shape of activation buffer ``index`` (:data:`EXTRA_BUFFERS`) for output ``out5``:
        the output's, or the operand's broadcast; a plain residual's (:attr:`residual_layout`) in its
        layout, ``4 * O/4`` channels."""
        n, c4, h, w, lanes = out5
        kind = self.extra_kinds[index] if index < len(self.extra_kinds) else None
        if index == 0 and self.residual_layout != "NCHW4c":  # the residual as a plain buffer of 4 c4 channels
            return {"NHWC": (n, h, w, c4 * lanes), "NCHW": (n, c4 * lanes, h, w)}[self.residual_layout]
        return {"channel": (n, c4, 1, 1, lanes), "pixel": (n, 1, h, w, lanes)}.get(kind, tuple(out5))

    def params(self, inputs, output) -> list[str]:
        """Parameter names of a kernel with this epilogue: ``inputs``, the
        epilogue's own inputs, then ``output`` (the order ``select_params`` keeps)."""
        extra = [BIAS] * self.reads_bias + list(EXTRA_BUFFERS[:len(self.extra_kinds)])
        return [*inputs, *extra, output]

    def out_shape(self, n: int, o: int, oh: int, ow: int) -> tuple:
        """Y's shape in :attr:`out_layout` for ``o`` output channels of ``oh`` x ``ow`` pixels."""
        return {"NHWC": (n, oh, ow, o), "NCHW": (n, o, oh, ow)}.get(self.out_layout, (n, (o + 3) // 4, oh, ow, 4))


def check_map_epilogue(epilogue, kernel: str, other_output: bool = False) -> None:
    """An epilogue a map kernel without channels of its own takes (a pool, a resize): the blocked
    output in the input's scope and dtype (``other_output``: a lane fold, a plain output or another
    dtype, none of which it takes); None passes."""
    if epilogue is None:
        return
    check_epilogue(epilogue)
    if other_output or epilogue.out_layout != "NCHW4c" or epilogue.out_scope is not None:
        raise ValueError(f"a {kernel} epilogue writes the blocked output in the input's scope and dtype (no out_layout, "
                         "out_scope, out_dtype, lane fold or plain output)")


def map_epilogue_inputs(epilogue, out5, scope: str):
    """(spec, Bias shape, Residual shape, Residual scope) of a map kernel's optional epilogue inputs,
    declared always (``select_params`` keeps those ``spec`` reads; no epilogue: an empty Epilogue)
    for its blocked output ``out5`` ``(N, C/4, H, W, 4)`` in ``scope``."""
    spec = epilogue if epilogue is not None else Epilogue()
    return spec, spec.bias_shape(out5[1]), spec.residual_shape(tuple(out5)), spec.residual_scope or scope


def check_epilogue(epilogue, reads_second: bool = False, plain_residual: bool = False) -> Epilogue:
    """``epilogue``, TypeError when it is not an :class:`Epilogue`; ValueError when it reads a second
    activation (:data:`SECOND`) and the kernel does not (``reads_second``: the direct conv's, the GEMM's),
    or a plain residual (:attr:`Epilogue.residual_layout`) and the kernel does not (``plain_residual``:
    the direct, depthwise and tiled convs')."""
    if not isinstance(epilogue, Epilogue):
        raise TypeError(f"epilogue must be an Epilogue, got {type(epilogue).__name__}")
    if epilogue.residual_layout != "NCHW4c" and not plain_residual:
        raise ValueError(f"residual_layout={epilogue.residual_layout!r}: this kernel reads a blocked residual only "
                         "(the direct, depthwise and tiled convs read a plain one)")
    if epilogue.reads_second and not reads_second:
        raise ValueError(f"this kernel reads one activation beside its inputs ({RESIDUAL}), the epilogue two "
                         f"(kinds {epilogue.extra_kinds}): the direct conv and the GEMM read a second")
    return epilogue


class TirOps:
    """The ops namespace (:mod:`primfuncs.activation_table`) of TIR expressions of one ``dtype``."""

    def __init__(self, dtype: str):
        self.dtype = dtype

    def const(self, v):
        return T.FloatImm(self.dtype, float(v))

    @staticmethod
    def clip(x, lo, hi):
        return clamp(x, lo, hi)  # keeps NaN (np.maximum/np.clip semantics), unlike OpenCL's fmax/fmin

    select = staticmethod(T.Select)
    exp = staticmethod(T.exp)
    erf = staticmethod(T.erf)
    abs = staticmethod(T.fabs)
    sqrt = staticmethod(T.sqrt)
    log = staticmethod(T.log)
    maximum = staticmethod(maximum)  # NaN-safe, as NumPy
    minimum = staticmethod(minimum)

    def divide(self, a, b):
        """``a / b``. A divisor TVM simplifies to zero (``x / 0``, or ``x / (y - y)``: TVM's simplifier
        folds float algebra as fast-math does) stops its constant folder with an internal error, so
        IEEE's answer is written out: +-inf by the signs, NaN for 0 / 0 and NaN / 0."""
        zero = _ANALYZER.simplify(b)
        if not (isinstance(zero, tirx.FloatImm) and float(zero.value) == 0.0):
            return a / b
        inf = self.const(math.copysign(math.inf, float(zero.value)))
        return T.Select(a > self.const(0), inf, T.Select(a < self.const(0), -inf, self.const(math.nan)))

    def tanh(self, x):
        # 1 - 2 / (exp(2x) + 1): exact at +-inf and NaN-preserving (TVM's OpenCL tanh is approximate)
        return self.const(1) - self.const(2) / (T.exp(x * self.const(2)) + self.const(1))

    def power(self, a, b):
        """``a ** b``; a constant exponent of 1, 2, 3 or -1 as multiplications or a division (not 0.5
        as sqrt: ``pow(-inf, 0.5)`` is inf, ``sqrt(-inf)`` NaN)."""
        exponent = float(b.value) if isinstance(b, tirx.FloatImm) else None
        if exponent == 1.0:
            return a
        if exponent == 2.0:
            return a * a
        if exponent == 3.0:
            return a * a * a
        if exponent == -1.0:
            return self.divide(self.const(1), a)
        return T.pow(a, b)


def activate(x, activation, dtype, clip_min: float = 0.0, clip_max: float = 6.0, params: tuple = ()):
    """``activation`` (an entry of :data:`ACTIVATIONS`) of the ``dtype`` TIR expression ``x``:
    the table's formula; ``clip_min``/``clip_max`` are clip's bounds, ``params`` any other parameters."""
    if activation is None:
        return x
    bounds = {"lo": clip_min, "hi": clip_max} if activation == "clip" else {}
    return _table_entry(activation)(TirOps(dtype), x, **bounds, **dict(params))


def expression(epilogue, x, operands, channel_at, dtype):
    """The epilogue's expression of one lane: ``x`` and ``operands`` (by index) that lane's values,
    ``channel_at(i)`` the lane's per-channel constant ``i`` (``x`` itself without an expression)."""
    if epilogue.expr is None:
        return x
    return evaluate(epilogue.expr, TirOps(dtype), x, operands, channel_at)


def _operand_kind(epilogue, index):
    # the kind of activation buffer ``index`` when the expression reads it (not the residual), else None
    kinds = epilogue.extra_kinds
    return kinds[index] if int(epilogue.residual) <= index < len(kinds) else None


@T.macro
def load_operand(tmp, kind, Residual, n, c, h, w):
    """``tmp[0:4]`` = the pixel of an operand of ``kind`` (None: nothing) for output pixel ``(n, c, h, w)``."""
    if kind == "channel":
        load_pixel(tmp, Residual, n, c, 0, 0)
    elif kind == "pixel":
        load_pixel(tmp, Residual, n, 0, h, w)
    elif kind == "full":
        load_pixel(tmp, Residual, n, c, h, w)


@T.macro
def load_residual(tmp, layout, Residual, n, c, h, w):
    """``tmp[0:4]`` = channels ``4c..4c+3`` of the residual at ``(n, h, w)``: one pixel of a blocked
    one, four loads of a plain one in ``layout`` ("NHWC", "NCHW")."""
    if layout == "NHWC":
        for lane in T.unroll(4):
            tmp[lane] = Residual[n, h, w, c * 4 + lane]
    elif layout == "NCHW":
        for lane in T.unroll(4):
            tmp[lane] = Residual[n, c * 4 + lane, h, w]
    else:
        load_pixel(tmp, Residual, n, c, h, w)


def _lane_operands(epilogue, lane, *pixels):
    # the expression's operands in ``lane``: ``pixels`` hold activation buffers 0, 1, ... (the
    # residual's is skipped); a per-pixel operand is one channel: lane 0 of its pixel, for every lane
    kinds = epilogue.extra_kinds
    lanes = tuple(px[0] if kind == "pixel" else px[lane] for kind, px in zip(kinds, pixels))
    return lanes[int(epilogue.residual):]


@T.macro
def apply_epilogue(acc, k, tmp, epilogue, Bias, Residual, n, c, h, w, Second=None):
    """``acc[k] = expr(act(acc[k] + Bias[c] + Residual[n, c, h, w]))`` in place (``tmp``: a scratch
    local pixel). ``acc[k, 0:4]`` holds channels ``4c..4c+3`` of pixel ``(n, h, w)``. ``Second``:
    the :data:`SECOND` buffer (``epilogue.reads_second``: the kernels that read one pass it)."""
    if epilogue.bias:
        for lane in T.vectorized(4):
            tmp[lane] = Bias[c, lane]
        for lane in T.unroll(4):
            acc[k, lane] = acc[k, lane] + tmp[lane]
    if epilogue.residual:
        load_residual(tmp, epilogue.residual_layout, Residual, n, c, h, w)
        for lane in T.unroll(4):
            acc[k, lane] = acc[k, lane] + tmp[lane]
    if epilogue.activation is not None:
        for lane in T.unroll(4):
            acc[k, lane] = activate(acc[k, lane], epilogue.activation, acc.dtype, epilogue.clip_min, epilogue.clip_max,
                                     epilogue.activation_params)
    if epilogue.expr is not None and epilogue.reads_second:
        second = T.sblock_alloc_buffer((4,), tmp.dtype, scope="local")
        load_operand(tmp, _operand_kind(epilogue, 0), Residual, n, c, h, w)
        load_operand(second, _operand_kind(epilogue, 1), Second, n, c, h, w)
        for lane in T.unroll(4):
            acc[k, lane] = expression(epilogue, acc[k, lane], _lane_operands(epilogue, lane, tmp, second),
                                      lambda i: Bias[c, (int(epilogue.bias) + i) * 4 + lane], acc.dtype)
    elif epilogue.expr is not None:
        load_operand(tmp, _operand_kind(epilogue, 0), Residual, n, c, h, w)
        for lane in T.unroll(4):
            acc[k, lane] = expression(epilogue, acc[k, lane], _lane_operands(epilogue, lane, tmp),
                                      lambda i: Bias[c, (int(epilogue.bias) + i) * 4 + lane], acc.dtype)


@T.macro
def store_output_pixel(Y, acc, k, tmp, epilogue, Bias, Residual, n, c, h, w, out_channels=None, Second=None):
    """``Y[n, c, h, w] = act(acc[k] + Bias[c] + Residual[n, c, h, w])``, one vector store.

    ``acc[k, 0:4]`` (a row of a 2-D local buffer) holds output channels
    ``4c..4c+3`` of pixel ``(n, h, w)``; it is updated in place (:func:`apply_epilogue`),
    ``tmp`` is a scratch local pixel. Each pixel must be stored from its own row: TVM 0.27's
    OpenCL codegen reuses a textually identical vector load of a local buffer
    as a texture store's value across writes to that buffer (so storing two
    pixels through one ``px`` buffer writes the first pixel twice).

    A plain Y (``epilogue.out_layout`` "NHWC" or "NCHW", a buffer) gets the pixel's channels below
    ``out_channels`` one store each.
    """
    apply_epilogue(acc, k, tmp, epilogue, Bias, Residual, n, c, h, w, Second)
    if epilogue.out_layout != "NCHW4c":  # a plain Y: one store per channel, none past the last
        for lane in T.unroll(4):
            if out_channels % 4 == 0 or c * 4 + lane < out_channels:  # (a Python True: no guard)
                if epilogue.out_layout == "NHWC":
                    Y[n, h, w, c * 4 + lane] = acc[k, lane]
                else:
                    Y[n, c * 4 + lane, h, w] = acc[k, lane]
    elif out_channels is not None and out_channels % 4 != 0:
        # The padding lanes of the last block must stay 0 (the next conv and Winograd's GEMM read
        # them): act(0) = 0.5 for sigmoid, and a NaN/Inf input window makes them NaN (NaN * 0 weights).
        for lane in T.unroll(4):
            acc[k, lane] = T.if_then_else(c * 4 + lane < out_channels, acc[k, lane], T.Cast(acc.dtype, 0))
    if epilogue.out_layout == "NCHW4c":
        Y[n, c, h, w, T.Ramp(0, 1, 4)] = acc[k, T.Ramp(0, 1, 4)]
