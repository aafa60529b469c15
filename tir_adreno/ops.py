"""NumPy in, NumPy out: run our texture kernels on one call.

Each op takes NCHW arrays, packs them to NCHW4c on the device, runs the
kernel and unpacks the result. Kernels are built once per shape (in-process
and on-disk caches). A tensor too large for the device's images runs on
buffers with the same schedule, unless ``allow_buffer=False``.
"""

from __future__ import annotations

import numpy as np

from primfuncs import elementwise, layout
from primfuncs._common import TEXTURE, blocked

from . import build, runtime, texture

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
        raise TypeError(f"float16 needs cl_khr_fp16, which {dev.name} does not report")


def blocked_shape(nchw) -> tuple[int, int, int, int, int]:
    n, c, h, w = nchw
    return (n, blocked(c), h, w, 4)


def compile(func, device=None, target=None):
    """Build ``func`` (cached) and load it on the device; returns ``(LoadedModule, name)``."""
    dev = runtime.get_device(device)
    module = build.build_cached(func, target)
    (name,) = module.functions
    return dev.load(module), name


def launch(func, tensors, device=None) -> float:
    """Run ``func`` on device tensors; returns kernel seconds."""
    loaded, name = compile(func, device)
    return loaded(name, *tensors)


def activation_scope(dev: runtime.Device, nchw, allow_buffer: bool = True) -> str:
    """Texture when the NCHW4c tensor fits the device's images, else a buffer."""
    return texture.place(blocked_shape(nchw), TEXTURE, dev.limits, allow_buffer)


def empty_nchw4c(dev: runtime.Device, nchw, dtype: str, scope: str, name: str = "out") -> runtime.Tensor:
    return dev.empty(runtime.TensorSpec(name, blocked_shape(nchw), dtype, scope)).poison()


def upload_nchw4c(dev: runtime.Device, x: np.ndarray, scope: str, name: str = "x") -> runtime.Tensor:
    """Copy an NCHW array to the device and pack it to NCHW4c there."""
    src = dev.array(np.ascontiguousarray(x), "global", name)
    dst = empty_nchw4c(dev, x.shape, x.dtype.name, scope, name)
    launch(layout.nchw_to_nchw4c(x.shape, x.dtype.name, scope), [src, dst], dev)
    return dst


def download_nchw(t: runtime.Tensor, channels: int) -> np.ndarray:
    """Unpack an NCHW4c device tensor to an NCHW array of ``channels`` channels."""
    n, _, h, w, _ = t.shape
    out = t.device.empty(runtime.TensorSpec("out", (n, channels, h, w), t.spec.dtype, "global")).poison()
    launch(layout.nchw4c_to_nchw((n, channels, h, w), t.spec.dtype, t.spec.scope), [t, out], t.device)
    return out.numpy()


def _prepare(x, name, device, allow_buffer):
    x = check_array(x, name)
    dev = runtime.get_device(device)
    check_device_dtype(dev, x.dtype.name)
    return x, dev, activation_scope(dev, x.shape, allow_buffer)


def _unary(factory, x, device, allow_buffer, **attrs):
    x, dev, scope = _prepare(x, "x", device, allow_buffer)
    a = upload_nchw4c(dev, x, scope)
    b = empty_nchw4c(dev, x.shape, x.dtype.name, scope)
    launch(factory(a.shape, dtype=x.dtype.name, scope=scope, **attrs), [a, b], dev)
    return download_nchw(b, x.shape[1])


def _binary(op, a, b, device, allow_buffer):
    a, dev, scope = _prepare(a, "a", device, allow_buffer)
    b = check_array(b, "b", dtype=a.dtype)
    if b.shape != a.shape:
        raise ValueError(f"b has shape {b.shape}, expected a's shape {a.shape}")
    ta, tb = upload_nchw4c(dev, a, scope, "a"), upload_nchw4c(dev, b, scope, "b")
    out = empty_nchw4c(dev, a.shape, a.dtype.name, scope)
    launch(elementwise.binary(ta.shape, op, a.dtype.name, scope), [ta, tb, out], dev)
    return download_nchw(out, a.shape[1])


def add(a, b, device=None, allow_buffer: bool = True) -> np.ndarray:
    """``a + b`` for NCHW arrays of one shape."""
    return _binary("add", a, b, device, allow_buffer)


def multiply(a, b, device=None, allow_buffer: bool = True) -> np.ndarray:
    """``a * b`` for NCHW arrays of one shape."""
    return _binary("multiply", a, b, device, allow_buffer)


def relu(x, device=None, allow_buffer: bool = True) -> np.ndarray:
    return _unary(elementwise.relu, x, device, allow_buffer)


def clip(x, a_min: float, a_max: float, device=None, allow_buffer: bool = True) -> np.ndarray:
    """``min(max(x, a_min), a_max)`` (names as ``relax.op.clip``)."""
    return _unary(elementwise.clip, x, device, allow_buffer, a_min=float(a_min), a_max=float(a_max))


def relu6(x, device=None, allow_buffer: bool = True) -> np.ndarray:
    return clip(x, 0.0, 6.0, device, allow_buffer)


def bias_add(x, bias, device=None, allow_buffer: bool = True) -> np.ndarray:
    """``x + bias[None, :, None, None]`` (``relax.op.nn.bias_add`` with axis=1)."""
    x, dev, scope = _prepare(x, "x", device, allow_buffer)
    bias = np.asarray(bias)
    if bias.shape != (x.shape[1],):
        raise ValueError(f"bias must have shape ({x.shape[1]},) to match x's channels, got {bias.shape}")
    if bias.dtype != x.dtype:
        raise TypeError(f"bias has dtype {bias.dtype}, expected x's dtype {x.dtype}")
    c4 = blocked(x.shape[1])
    packed = np.zeros((c4 * 4,), x.dtype)
    packed[: x.shape[1]] = bias
    tb = dev.array(packed.reshape(c4, 4), "global", "bias")
    ta = upload_nchw4c(dev, x, scope)
    out = empty_nchw4c(dev, x.shape, x.dtype.name, scope)
    launch(elementwise.bias_add(ta.shape, x.dtype.name, scope), [ta, tb, out], dev)
    return download_nchw(out, x.shape[1])


def to_nchw4c(x, device=None, allow_buffer: bool = True) -> np.ndarray:
    """NCHW -> ``[N, ceil(C/4), H, W, 4]`` through the device kernel (padded channels zero)."""
    x, dev, scope = _prepare(x, "x", device, allow_buffer)
    return upload_nchw4c(dev, x, scope).numpy()


def from_nchw4c(x, channels: int, device=None, allow_buffer: bool = True) -> np.ndarray:
    """``[N, C4, H, W, 4]`` -> NCHW with ``channels`` channels, through the device kernel."""
    x = check_array(x, "x", ndim=5)
    n, c4, h, w, lanes = x.shape
    if lanes != 4:
        raise ValueError(f"x must be NCHW4c with a last axis of 4, got shape {x.shape}")
    if not 4 * (c4 - 1) < channels <= 4 * c4:
        raise ValueError(f"channels={channels} does not fit {c4} blocks of 4 (x shape {x.shape})")
    dev = runtime.get_device(device)
    check_device_dtype(dev, x.dtype.name)
    scope = activation_scope(dev, (n, channels, h, w), allow_buffer)
    t = dev.array(np.ascontiguousarray(x), scope, "x")
    return download_nchw(t, channels)
