"""NumPy in, NumPy out: run our texture kernels on one call.

Each op takes NCHW arrays, packs them to NCHW4c on the device, runs the
kernel and unpacks the result. Kernels are built once per shape (in-process
and on-disk caches). A tensor too large for the device's images runs on
buffers with the same schedule, unless ``allow_buffer=False``.

``precision`` (``strategy.precision.PRECISIONS``): "float32" (default: the input's dtype,
float32 or float16, as it is); "float16_acc32" (float32 kernels on RGBA half
images or half buffers: inputs are rounded to half when packed, weights on
upload; ``bias_add``'s bias stays float32); "float16" (the float16 kernels:
half storage and half arithmetic, where the device's probe says it runs). The
fp16 precisions return float32 arrays holding exactly the stored half values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from primfuncs import elementwise, layout
from primfuncs._common import TEXTURE, blocked

from tir_adreno.codegen import build
from tir_adreno.runtime import opencl as runtime, texture
from tir_adreno.strategy import conv as _strategy
from tir_adreno.strategy import placement
from tir_adreno.strategy import pool as _pool_strategy
from tir_adreno.strategy.precision import check_precision, half_storage, kernel_dtype
from tir_adreno.strategy.profile import DeviceProfile

SUPPORTED_DTYPES = ("float32", "float16")


def check_array(x, name: str, ndim: int = 4, dtype=None) -> np.ndarray:
    """``x`` as an ndarray, with a clear error naming the argument when it is wrong."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(x).__name__}")
    if x.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-d, got shape {x.shape}")
    if x.dtype.name not in SUPPORTED_DTYPES:
        raise TypeError(f"{name} has dtype {x.dtype}; supported: {', '.join(SUPPORTED_DTYPES)}")
    if dtype is not None and x.dtype != np.dtype(dtype):
        raise TypeError(f"{name} has dtype {x.dtype}, expected {np.dtype(dtype)}")
    if 0 in x.shape:
        raise ValueError(f"{name} has an empty axis: shape {x.shape}")
    return x


def check_device_dtype(dev: runtime.Device, dtype: str):
    if dtype == "float16" and not dev.fp16:
        raise TypeError(f"float16 kernels need half arithmetic (cl_khr_fp16 and its builtins), which {dev.name} "
                        "does not run (probe kernel)")


@dataclass(frozen=True)
class Precision:
    """How one op call runs: kernel ``dtype`` and the ``storage`` of its tensors."""

    name: str
    dtype: str
    storage: str | None

    def store(self, scope: str) -> str | None:
        """Storage dtype of a tensor in ``scope``: half images and half buffers alike (a kernel
        launched on half buffers is built to convert them: :func:`launch`)."""
        return self.storage

    def result(self, y: np.ndarray) -> np.ndarray:
        return y if self.name == "float32" else y.astype(np.float32)


def _precision(x: np.ndarray, precision: str, dev: runtime.Device) -> tuple[np.ndarray, Precision]:
    """``x`` in the kernels' dtype and the :class:`Precision` of ``precision`` on ``dev``;
    PrecisionError naming the device when it cannot run it."""
    check_precision(precision, DeviceProfile.from_device(dev))
    if precision == "float32":
        check_device_dtype(dev, x.dtype.name)
        return x, Precision(precision, x.dtype.name, None)
    dtype = kernel_dtype(precision)
    return x.astype(dtype, copy=False), Precision(precision, dtype, half_storage(precision))


def blocked_shape(nchw) -> tuple[int, int, int, int, int]:
    n, c, h, w = nchw
    return (n, blocked(c), h, w, 4)


def compile(func, device=None, target=None, half=frozenset()):
    """Build ``func`` (cached; ``half``: its parameters kept in half buffers, see
    ``codegen.build.build``) and load it on the device; returns ``(LoadedModule, name)``."""
    dev = runtime.get_device(device)
    module = build.build_cached(func, target, half=half)
    (name,) = module.functions
    return dev.load(module), name


def half_buffers(tensors) -> frozenset:
    """Positions of ``tensors`` that are float32 tensors in half buffers."""
    return frozenset(i for i, t in enumerate(tensors) if t.spec.storage_dtype == "float16" and t.spec.dtype == "float32"
                     and not texture.is_texture_scope(t.spec.scope))


def launch(func, tensors, device=None) -> float:
    """Run ``func`` on device tensors (built to read and write the half buffers among them);
    returns kernel seconds."""
    loaded, name = compile(func, device, half=half_buffers(tensors))
    return loaded(name, *tensors)


def activation_scope(dev: runtime.Device, nchw, allow_buffer: bool = True) -> str:
    """Where an op keeps an NCHW activation of shape ``nchw`` on ``dev`` (:func:`_kernel_scope`)."""
    return _kernel_scope(dev, (nchw,), allow_buffer)


def _kernel_scope(dev: runtime.Device, nchws, allow_buffer: bool = True) -> str:
    """The one scope of a kernel's NCHW activations ``nchws`` on ``dev``, by the placement rule the
    Relax pass uses for the same kernel in a model (``strategy.placement``): the profile's
    ``activation_placement``, a texture only where every one fits the device's images. Convs
    (:func:`conv2d`) are placed by their plan (big ones on textures: ``texture_min_macs``)."""
    shapes5 = [blocked_shape(nchw) for nchw in nchws]
    return placement.activation_scope(shapes5, DeviceProfile.from_device(dev), allow_buffer=allow_buffer)


def empty_nchw4c(dev: runtime.Device, nchw, dtype: str, scope: str, name: str = "out", storage: str | None = None) -> runtime.Tensor:
    return dev.empty(runtime.TensorSpec(name, blocked_shape(nchw), dtype, scope, storage)).poison()


def upload_nchw4c(dev: runtime.Device, x: np.ndarray, scope: str, name: str = "x", storage: str | None = None) -> runtime.Tensor:
    """Copy an NCHW array to the device and pack it to NCHW4c there (into ``storage``: a half
    image rounds it)."""
    src = dev.array(np.ascontiguousarray(x), "global", name)
    dst = empty_nchw4c(dev, x.shape, x.dtype.name, scope, name, storage)
    launch(layout.nchw_to_nchw4c(x.shape, x.dtype.name, scope), [src, dst], dev)
    return dst


def download_nchw(t: runtime.Tensor, channels: int) -> np.ndarray:
    """Unpack an NCHW4c device tensor to an NCHW array of ``channels`` channels."""
    n, _, h, w, _ = t.shape
    out = t.device.empty(runtime.TensorSpec("out", (n, channels, h, w), t.spec.dtype, "global")).poison()
    launch(layout.nchw4c_to_nchw((n, channels, h, w), t.spec.dtype, t.spec.scope), [t, out], t.device)
    return out.numpy()


def _prepare(x, name, device, allow_buffer, precision="float32"):
    """(x in the kernels' dtype, device, activation scope, :class:`Precision`)."""
    x = check_array(x, name)
    dev = runtime.get_device(device)
    x, prec = _precision(x, precision, dev)
    return x, dev, activation_scope(dev, x.shape, allow_buffer), prec


def _unary(factory, x, device, allow_buffer, precision, **attrs):
    x, dev, scope, prec = _prepare(x, "x", device, allow_buffer, precision)
    a = upload_nchw4c(dev, x, scope, storage=prec.store(scope))
    b = empty_nchw4c(dev, x.shape, x.dtype.name, scope, storage=prec.store(scope))
    launch(factory(a.shape, dtype=x.dtype.name, scope=scope, **attrs), [a, b], dev)
    return prec.result(download_nchw(b, x.shape[1]))


def _binary(op, a, b, device, allow_buffer, precision):
    dtype = check_array(a, "a").dtype
    a, dev, scope, prec = _prepare(a, "a", device, allow_buffer, precision)
    b = check_array(b, "b", dtype=dtype).astype(a.dtype, copy=False)
    if b.shape != a.shape:
        raise ValueError(f"b has shape {b.shape}, expected a's shape {a.shape}")
    store = prec.store(scope)
    ta, tb = upload_nchw4c(dev, a, scope, "a", store), upload_nchw4c(dev, b, scope, "b", store)
    out = empty_nchw4c(dev, a.shape, a.dtype.name, scope, storage=store)
    channels = {"channels": a.shape[1]} if op == "divide" else {}  # its padded lanes written as 0, not 0 / 0
    launch(elementwise.binary(ta.shape, op, a.dtype.name, scope, **channels), [ta, tb, out], dev)
    return prec.result(download_nchw(out, a.shape[1]))


def add(a, b, device=None, allow_buffer: bool = True, precision: str = "float32") -> np.ndarray:
    """``a + b`` for NCHW arrays of one shape."""
    return _binary("add", a, b, device, allow_buffer, precision)


def multiply(a, b, device=None, allow_buffer: bool = True, precision: str = "float32") -> np.ndarray:
    """``a * b`` for NCHW arrays of one shape."""
    return _binary("multiply", a, b, device, allow_buffer, precision)


def subtract(a, b, device=None, allow_buffer: bool = True, precision: str = "float32") -> np.ndarray:
    """``a - b`` for NCHW arrays of one shape."""
    return _binary("subtract", a, b, device, allow_buffer, precision)


def divide(a, b, device=None, allow_buffer: bool = True, precision: str = "float32") -> np.ndarray:
    """``a / b`` for NCHW arrays of one shape (IEEE: ``x / 0`` is +-inf, ``0 / 0`` NaN, as NumPy)."""
    return _binary("divide", a, b, device, allow_buffer, precision)


def relu(x, device=None, allow_buffer: bool = True, precision: str = "float32") -> np.ndarray:
    return _unary(elementwise.relu, x, device, allow_buffer, precision)


def clip(x, a_min: float, a_max: float, device=None, allow_buffer: bool = True, precision: str = "float32") -> np.ndarray:
    """``min(max(x, a_min), a_max)`` (names as ``relax.op.clip``)."""
    return _unary(elementwise.clip, x, device, allow_buffer, precision, a_min=float(a_min), a_max=float(a_max))


def relu6(x, device=None, allow_buffer: bool = True, precision: str = "float32") -> np.ndarray:
    return clip(x, 0.0, 6.0, device, allow_buffer, precision)


def bias_add(x, bias, device=None, allow_buffer: bool = True, precision: str = "float32") -> np.ndarray:
    """``x + bias[None, :, None, None]`` (``relax.op.nn.bias_add`` with axis=1; the bias is a
    float32 buffer, also under "float16_acc32", as at a model's boundary with an upstream kernel)."""
    dtype = check_array(x, "x").dtype
    x, dev, scope, prec = _prepare(x, "x", device, allow_buffer, precision)
    bias = np.asarray(bias)
    if bias.shape != (x.shape[1],):
        raise ValueError(f"bias must have shape ({x.shape[1]},) to match x's channels, got {bias.shape}")
    if bias.dtype != dtype:
        raise TypeError(f"bias has dtype {bias.dtype}, expected x's dtype {dtype}")
    c4 = blocked(x.shape[1])
    packed = np.zeros((c4 * 4,), x.dtype)
    packed[: x.shape[1]] = bias
    tb = dev.array(packed.reshape(c4, 4), "global", "bias")
    ta = upload_nchw4c(dev, x, scope, storage=prec.store(scope))
    out = empty_nchw4c(dev, x.shape, x.dtype.name, scope, storage=prec.store(scope))
    launch(elementwise.bias_add(ta.shape, x.dtype.name, scope), [ta, tb, out], dev)
    return prec.result(download_nchw(out, x.shape[1]))


def to_nchw4c(x, device=None, allow_buffer: bool = True, precision: str = "float32") -> np.ndarray:
    """NCHW -> ``[N, ceil(C/4), H, W, 4]`` through the device kernel (padded channels zero)."""
    x, dev, scope, prec = _prepare(x, "x", device, allow_buffer, precision)
    return prec.result(upload_nchw4c(dev, x, scope, storage=prec.store(scope)).numpy())


def from_nchw4c(x, channels: int, device=None, allow_buffer: bool = True, precision: str = "float32") -> np.ndarray:
    """``[N, C4, H, W, 4]`` -> NCHW with ``channels`` channels, through the device kernel."""
    x = check_array(x, "x", ndim=5)
    n, c4, h, w, lanes = x.shape
    if lanes != 4:
        raise ValueError(f"x must be NCHW4c with a last axis of 4, got shape {x.shape}")
    if not 4 * (c4 - 1) < channels <= 4 * c4:
        raise ValueError(f"channels={channels} does not fit {c4} blocks of 4 (x shape {x.shape})")
    dev = runtime.get_device(device)
    x, prec = _precision(x, precision, dev)
    scope = activation_scope(dev, (n, channels, h, w), allow_buffer)
    t = dev.array(np.ascontiguousarray(x), scope, "x", prec.store(scope))
    return prec.result(download_nchw(t, channels))


# -- pooling and reductions (primfuncs.pool2d, primfuncs.reduce) ---------------------------------
# Imported here, not at the top: this section was appended to the file as a unit.
# ``sum``/``max``/``min`` below shadow the builtins in this module (Relax's names): code in
# this file that needs the builtins must ``import builtins`` and write ``builtins.max`` etc.

from primfuncs import pool2d as _pool2d  # noqa: E402
from primfuncs import reduce as _reduce  # noqa: E402


def group_threshold(dev: runtime.Device):
    """``strategy="auto"``'s window size for the work-group schedule of pools and reductions on
    ``dev`` (``strategy.pool.group_threshold`` of its profile: never on a CPU)."""
    return _pool_strategy.group_threshold(DeviceProfile.from_device(dev))


def _run_pool(x, factory, device, allow_buffer, precision, **attrs) -> np.ndarray:
    x = check_array(x, "x")
    dev = runtime.get_device(device)
    x, prec = _precision(x, precision, dev)
    attrs["group_threshold"] = group_threshold(dev)
    shape = blocked_shape(x.shape)
    func = factory(shape, dtype=x.dtype.name, scope=TEXTURE, **attrs)  # validates attrs, gives the shape
    out_shape = tuple(int(d) for d in func.params[1].shape)
    out_nchw = (x.shape[0], x.shape[1], out_shape[2], out_shape[3])
    scope = _kernel_scope(dev, (x.shape, out_nchw), allow_buffer)
    if scope != TEXTURE:
        func = factory(shape, dtype=x.dtype.name, scope=scope, **attrs)
    a = upload_nchw4c(dev, x, scope, storage=prec.store(scope))
    out = empty_nchw4c(dev, out_nchw, x.dtype.name, scope, storage=prec.store(scope))
    launch(func, [a, out], dev)
    return prec.result(download_nchw(out, x.shape[1]))


def max_pool2d(
    x, pool_size=(1, 1), strides=(1, 1), padding=(0, 0), dilation=(1, 1), ceil_mode: bool = False,
    device=None, allow_buffer: bool = True, strategy: str = "auto", precision: str = "float32",
) -> np.ndarray:
    """NCHW max pooling (``relax.op.nn.max_pool2d``; padding: int, pair or (top, left, bottom,
    right), at most half the window). Padding never wins a max (it is -inf, not 0).
    ``strategy``: "auto", "thread" (a work item per output) or "group" (a work group per output)."""
    return _run_pool(
        x, _pool2d.max_pool2d, device, allow_buffer, precision, pool_size=pool_size, strides=strides, padding=padding,
        dilation=dilation, ceil_mode=ceil_mode, strategy=strategy,
    )


def avg_pool2d(
    x, pool_size=(1, 1), strides=(1, 1), padding=(0, 0), dilation=(1, 1), ceil_mode: bool = False,
    count_include_pad: bool = False, device=None, allow_buffer: bool = True, strategy: str = "auto",
    precision: str = "float32",
) -> np.ndarray:
    """NCHW average pooling (``relax.op.nn.avg_pool2d``, same defaults). The divisor counts the
    taps inside the input, or with ``count_include_pad`` those inside the padded input."""
    return _run_pool(
        x, _pool2d.avg_pool2d, device, allow_buffer, precision, pool_size=pool_size, strides=strides, padding=padding,
        dilation=dilation, ceil_mode=ceil_mode, count_include_pad=count_include_pad, strategy=strategy,
    )


def _output_size(x, output_size):
    x = check_array(x, "x")
    return x.shape[2:] if output_size is None else output_size


def adaptive_avg_pool2d(x, output_size=None, device=None, allow_buffer: bool = True, strategy: str = "auto",
                        precision: str = "float32") -> np.ndarray:
    """NCHW adaptive average pooling to ``output_size`` (int or (OH, OW); None keeps H, W),
    PyTorch's windows ``[floor(i*H/OH), ceil((i+1)*H/OH))``. ``output_size=1`` is global pooling."""
    return _run_pool(x, _pool2d.adaptive_avg_pool2d, device, allow_buffer, precision,
                     output_size=_output_size(x, output_size), strategy=strategy)


def adaptive_max_pool2d(x, output_size=None, device=None, allow_buffer: bool = True, strategy: str = "auto",
                        precision: str = "float32") -> np.ndarray:
    """NCHW adaptive max pooling to ``output_size`` (see :func:`adaptive_avg_pool2d`)."""
    return _run_pool(x, _pool2d.adaptive_max_pool2d, device, allow_buffer, precision,
                     output_size=_output_size(x, output_size), strategy=strategy)


def _run_reduce(op, x, axis, keepdims, device, allow_buffer, strategy, precision) -> np.ndarray:
    x = check_array(x, "x")
    axes = _reduce.normalize_axis(axis)  # ValueError / NotImplementedError (batch axis) name the axis
    dev = runtime.get_device(device)
    x, prec = _precision(x, precision, dev)
    n, c, h, w = x.shape
    keep_nchw = (n, 1 if 1 in axes else c, 1 if 2 in axes else h, 1 if 3 in axes else w)
    scope = _kernel_scope(dev, (x.shape, keep_nchw), allow_buffer)
    shape = blocked_shape(x.shape)
    func = _reduce.reduce(
        shape, c, op, axes, keepdims, dtype=x.dtype.name, scope=scope, strategy=strategy,
        group_threshold=group_threshold(dev),
    )
    out_shape, is_blocked = _reduce.reduce_output(shape, c, axes, keepdims)
    a = upload_nchw4c(dev, x, scope, storage=prec.store(scope))
    if is_blocked:
        out = empty_nchw4c(dev, keep_nchw, x.dtype.name, scope, storage=prec.store(scope))
    else:  # a flat buffer
        out = dev.empty(runtime.TensorSpec("out", out_shape, x.dtype.name, "global", prec.store("global"))).poison()
    launch(func, [a, out], dev)
    return prec.result(download_nchw(out, keep_nchw[1]) if is_blocked else out.numpy())


def sum(x, axis, keepdims: bool = False, device=None, allow_buffer: bool = True, strategy: str = "auto",
        precision: str = "float32") -> np.ndarray:  # noqa: A001
    """Sum over NCHW ``axis`` (an int or a tuple among 1, 2, 3; negative counts from the end),
    as ``relax.op.sum``. The batch axis raises NotImplementedError."""
    return _run_reduce("sum", x, axis, keepdims, device, allow_buffer, strategy, precision)


def mean(x, axis, keepdims: bool = False, device=None, allow_buffer: bool = True, strategy: str = "auto",
        precision: str = "float32") -> np.ndarray:
    """Mean over NCHW ``axis`` (see :func:`sum`); over C it divides by the real channel count."""
    return _run_reduce("mean", x, axis, keepdims, device, allow_buffer, strategy, precision)


def max(x, axis, keepdims: bool = False, device=None, allow_buffer: bool = True, strategy: str = "auto",
        precision: str = "float32") -> np.ndarray:  # noqa: A001
    """Maximum over NCHW ``axis`` (see :func:`sum`)."""
    return _run_reduce("max", x, axis, keepdims, device, allow_buffer, strategy, precision)


def min(x, axis, keepdims: bool = False, device=None, allow_buffer: bool = True, strategy: str = "auto",
        precision: str = "float32") -> np.ndarray:  # noqa: A001
    """Minimum over NCHW ``axis`` (see :func:`sum`)."""
    return _run_reduce("min", x, axis, keepdims, device, allow_buffer, strategy, precision)


def softmax(x, axis: int = 1, device=None, allow_buffer: bool = True, precision: str = "float32") -> np.ndarray:
    """Softmax over the channels of an NCHW array (``relax.op.nn.softmax`` with axis=1 or -3),
    computed as ``exp(x - max) / sum`` (no overflow)."""
    x = check_array(x, "x")
    if not isinstance(axis, int) or axis not in (1, -3):
        raise NotImplementedError(f"softmax supports the channel axis only (axis=1 or -3), got axis={axis!r}")
    x, dev, scope, prec = _prepare(x, "x", device, allow_buffer, precision)
    a = upload_nchw4c(dev, x, scope, storage=prec.store(scope))
    out = empty_nchw4c(dev, x.shape, x.dtype.name, scope, storage=prec.store(scope))
    launch(_reduce.softmax(a.shape, x.shape[1], x.dtype.name, scope), [a, out], dev)
    return prec.result(download_nchw(out, x.shape[1]))


# -- convolution (primfuncs.conv, planned by tir_adreno.strategy.conv) ----------------------------------
# Imported here, not at the top: this section was appended to the file as a unit.
from primfuncs import conv as _conv  # noqa: E402
from primfuncs.epilogue import ACTIVATIONS as _ACTIVATIONS  # noqa: E402
from primfuncs.epilogue import Epilogue as _Epilogue  # noqa: E402

from tir_adreno.tuning import programs as _tuning  # noqa: E402

#: ``conv2d(algorithm=...)``: "auto" is the strategy's choice (the records' when given, else
#: direct); "winograd" means "winograd_2x2".
CONV2D_ALGORITHMS = ("auto", "direct", "winograd", "winograd_2x2", "winograd_4x4")


def conv2d(
    x, w, bias=None, stride=1, padding=0, dilation=1, groups: int = 1, activation=None, residual=None,
    algorithm: str = "auto", device=None, allow_buffer: bool = True, records=None, precision: str = "float32",
) -> np.ndarray:
    """``act(conv2d(x, w) + bias + residual)`` for NCHW ``x`` and OIHW ``w`` (``relax.op.nn.conv2d``).

    ``padding``: int, (pad_h, pad_w) or (top, left, bottom, right); ``bias``: ``(O,)``;
    ``activation``: None, "relu" or "relu6"; ``residual``: an NCHW array of the output's
    shape, added before the activation. ``groups == C`` runs the depthwise kernel.
    Weights are packed on the host on every call (this is the convenience API).
    ``algorithm``: "direct", "winograd_2x2" / "winograd_4x4" (Winograd F(2x2, 3x3) / F(4x4, 3x3):
    3x3 kernels, stride 1, dilation 1, groups 1 only; F(4x4) is held to 1e-3 relative error in
    float32, the others to 1e-4) or "auto" (``strategy.conv2d_plan``: the tuned choice in
    ``records``, a path or ``tir_adreno.strategy.records.Records``, else direct with the device's default config).
    ``precision``: see the module docstring; fp16 precisions allow direct and F(2x2) only
    (``strategy.PRECISION_ALGORITHMS``); weights, input and output textures (and Winograd's
    intermediates) are half under "float16_acc32", bias stays float32 (a buffer).
    """
    if algorithm not in CONV2D_ALGORITHMS:
        raise ValueError(f"algorithm must be one of {CONV2D_ALGORITHMS}, got {algorithm!r}")
    if activation not in _ACTIVATIONS:
        raise ValueError(f"activation must be one of {_ACTIVATIONS}, got {activation!r}")
    x = check_array(x, "x")
    w = check_array(w, "w", dtype=x.dtype)
    geom = _conv.conv2d_geometry(x.shape, w.shape, stride, padding, dilation, groups, names=("x", "w"))
    dtype = x.dtype.name
    if bias is not None:
        bias = check_array(bias, "bias", ndim=1)
        if bias.shape != (geom.o,):
            raise ValueError(f"bias must have shape ({geom.o},) to match w's output channels, got {bias.shape}")
        if bias.dtype != x.dtype:
            raise TypeError(f"bias has dtype {bias.dtype}, expected x's dtype {x.dtype}")
    if residual is not None:
        residual = check_array(residual, "residual")
        if residual.shape != geom.out_shape:
            raise ValueError(f"residual must have shape {geom.out_shape} (the output's), got {residual.shape}")
        if residual.dtype != x.dtype:
            raise TypeError(f"residual has dtype {residual.dtype}, expected x's dtype {x.dtype}")
    dev = runtime.get_device(device)
    x, prec = _precision(x, precision, dev)
    if precision == "float32":
        precision = dtype  # float16 arrays run the float16 kernels, as before precisions
    dtype = prec.dtype
    profile = DeviceProfile.from_device(dev)
    from tir_adreno.strategy.records import open_records

    records = open_records(records, profile, precision)
    choice = None
    if algorithm != "auto":
        choice = _strategy.ConvChoice("winograd_2x2" if algorithm == "winograd" else algorithm)
        _strategy.check_algorithm(geom, choice.algorithm, algorithm, precision)
    epilogue = _Epilogue(bias=bias is not None, activation=activation, residual=residual is not None)
    plan = _strategy.conv2d_plan(geom, epilogue, precision, profile, records, choice, allow_buffer)
    return prec.result(run_conv_plan(plan, dev, x, w, bias, residual))


def run_conv_plan(plan, dev, x, w, bias=None, residual=None) -> np.ndarray:
    """Run a ``strategy.ConvPlan`` on NCHW ``x``, OIHW ``w`` (and ``bias``, ``residual``), each
    tensor in its planned scope (``X``, ``Y`` and ``Residual`` may differ: mixed-scope kernels);
    the output is poisoned first and comes back NCHW in the kernels' dtype."""
    geom, dtype = plan.geometry, plan.dtype
    tensors = {
        "X": upload_nchw4c(dev, x.astype(dtype, copy=False), plan.tensor("X").scope, "x", plan.storage_of("X")),
        plan.weight_name: dev.array(plan.pack_weights(w), plan.weight_scope, "w", plan.storage_of(plan.weight_name)),
        "Y": empty_nchw4c(dev, geom.out_shape, dtype, plan.tensor("Y").scope, storage=plan.storage_of("Y")),
    }
    if bias is not None:
        packed = np.zeros((geom.o4 * 4,), dtype)
        packed[: geom.o] = bias
        tensors["Bias"] = dev.array(packed.reshape(geom.o4, 4), "global", "bias", plan.storage)
    if residual is not None:
        tensors["Residual"] = upload_nchw4c(dev, residual.astype(dtype, copy=False), plan.tensor("Residual").scope, "residual",
                                            plan.storage_of("Residual"))
    _tuning.build_program(plan).run(dev, tensors)
    return download_nchw(tensors["Y"], geom.o)
