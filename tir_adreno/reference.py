"""References: CPU model outputs for ``--check``, and float64 NumPy for every op.

ONNX models run on onnxruntime; Relax modules on TVM's LLVM build (the
Relax VM on the CPU; TVM is imported only there). Both are independent of our
kernels and of OpenCL. The op references below (NumPy only, float64, NCHW)
are the ones tests, benchmarks and the kernel tour compare with; nobody
re-derives them.
"""

from __future__ import annotations

import contextlib
import functools

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


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


#: (setter, getter) symbol names of OpenBLAS's thread count, as NumPy's wheels (scipy-openblas,
#: 64-bit integers or not) and a plain OpenBLAS export them.
_BLAS_THREAD_SYMBOLS = (
    ("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
    ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
    ("openblas_set_num_threads", "openblas_get_num_threads"),
)


@functools.cache
def _blas_threads():
    """(set, get) of the thread count of the OpenBLAS NumPy loaded, or None (another BLAS)."""
    import ctypes
    import glob
    import os

    libs = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")  # a wheel's vendored libraries
    for path in sorted(glob.glob(os.path.join(libs, "*openblas*"))) + [None]:  # None: the process's own symbols
        try:
            lib = ctypes.CDLL(path)  # already loaded by NumPy: the same library, not a second copy
        except OSError:
            continue
        for set_name, get_name in _BLAS_THREAD_SYMBOLS:
            if hasattr(lib, set_name) and hasattr(lib, get_name):
                return getattr(lib, set_name), getattr(lib, get_name)
    return None


@contextlib.contextmanager
def single_threaded_blas():
    """NumPy's BLAS on one thread inside the block (a no-op where its thread count is out of
    reach). For many small matmuls on a shared machine: OpenBLAS's threads wait for each other
    by spinning, so on 2 busy cores the built-in ResNet-50's calibration took 2-5 s with two
    threads and 0.5-0.7 s with one (0.5 s either way on idle cores)."""
    threads = _blas_threads()
    if threads is None:
        yield
        return
    set_threads, get_threads = threads
    before = get_threads()
    set_threads(1)
    try:
        yield
    finally:
        set_threads(before)


def conv2d_nchw(x, w, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups: int = 1) -> np.ndarray:
    """float64 NCHW/OIHW conv2d, padding (top, left, bottom, right): the windows gathered
    (im2col) and one batched BLAS matmul over the groups (a matmul per tap through einsum was
    5-20x slower, which a built-in model's batch-norm calibration paid at every compile)."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = strides, dilation, padding
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    og = o // groups
    windows = sliding_window_view(xp, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(2, 3))
    windows = windows[:, :, : sh * (oh - 1) + 1 : sh, : sw * (ow - 1) + 1 : sw, ::dh, ::dw]  # [n, c, oh, ow, kh, kw]
    cols = windows.reshape(n, groups, cg, oh, ow, kh, kw).transpose(1, 0, 3, 4, 2, 5, 6).reshape(groups, n * oh * ow, cg * kh * kw)
    out = cols @ w.reshape(groups, og, cg * kh * kw).transpose(0, 2, 1)  # [groups, n * oh * ow, og]
    return np.ascontiguousarray(out.reshape(groups, n, oh, ow, og).transpose(1, 0, 4, 2, 3).reshape(n, o, oh, ow))


def activation(y, name, clip_min: float = 0.0, clip_max: float = 6.0) -> np.ndarray:
    """float64 ``name`` of ``primfuncs.epilogue.ACTIVATIONS`` (None: identity); NaN propagates."""
    y = np.asarray(y, np.float64)
    if name is None:
        return y
    if name in ("relu", "relu6", "clip"):
        lo, hi = {"relu": (0, None), "relu6": (0, 6), "clip": (clip_min, clip_max)}[name]
        y = np.maximum(y, lo)
        return y if hi is None else np.minimum(y, hi)
    with np.errstate(over="ignore"):  # exp(-x) overflows to inf: sigmoid 0, as the kernels
        if name == "sigmoid":
            return 1 / (1 + np.exp(-y))
        if name == "silu":
            return y / (1 + np.exp(-y))
    if name in ("gelu", "gelu_tanh"):
        return gelu(y, "tanh" if name == "gelu_tanh" else "none")
    hard = np.minimum(np.maximum(y + 3, 0), 6) / 6
    if name == "hardsigmoid":
        return hard
    if name == "hardswish":
        return y * hard
    if name in ("gelu", "gelu_tanh"):
        return gelu(y, "tanh" if name == "gelu_tanh" else "none")
    raise ValueError(f"unknown activation {name!r}")


def conv2d_epilogue(y, bias=None, residual=None, activation_name=None, clip_min=0.0, clip_max=6.0) -> np.ndarray:
    """``act(y + bias + residual)`` in float64 (the conv kernels' fused epilogue)."""
    y = np.asarray(y, np.float64)
    if bias is not None:
        y = y + np.asarray(bias, np.float64)[None, :, None, None]
    if residual is not None:
        y = y + residual
    return activation(y, activation_name, clip_min, clip_max)


def depthwise_pointwise(x, w_dw, w_pw, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), dw_bias=None,
                        dw_activation=None, bias=None, residual=None, activation_name=None, dw_clip=(0.0, 6.0),
                        clip=(0.0, 6.0), groups=1) -> np.ndarray:
    """float64 depthwise conv (``w_dw`` ``(C, 1, KH, KW)``) + bias + activation, then a 1x1 conv
    ``w_pw`` (``groups``) with :func:`conv2d_epilogue`: what the fused depthwise-pointwise kernel computes."""
    mid = conv2d_nchw(x, w_dw, strides, padding, dilation, groups=np.shape(x)[1])
    mid = conv2d_epilogue(mid, dw_bias, None, dw_activation, *dw_clip)
    return conv2d_epilogue(conv2d_nchw(mid, w_pw, groups=groups), bias, residual, activation_name, *clip)


def _taps(start, size, dilation):
    return [start + i * dilation for i in range(size)]


def pool_out_size(extent, size, stride, before, after, dilation, ceil_mode) -> int:
    """Output length of a pooling window sliding over ``extent`` (PyTorch's rule)."""
    room = extent + before + after - (size - 1) * dilation - 1
    out = (-(-room // stride) if ceil_mode else room // stride) + 1
    if ceil_mode and (out - 1) * stride >= extent + before:  # last window must start inside the input
        out -= 1
    return out


def pool2d(x, pool_type, pool_size, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), ceil_mode=False,
           count_include_pad=False) -> np.ndarray:
    """float64 NCHW pool2d with PyTorch's semantics (padding = (top, left, bottom, right));
    a max window with no input element is -inf, an average one 0."""
    x = np.asarray(x, np.float64)
    _, _, h, w = x.shape
    (kh, kw), (sh, sw), (dh, dw) = pool_size, strides, dilation
    top, left, bottom, right = padding
    oh = pool_out_size(h, kh, sh, top, bottom, dh, ceil_mode)
    ow = pool_out_size(w, kw, sw, left, right, dw, ceil_mode)
    out = np.empty(x.shape[:2] + (oh, ow))
    for i in range(oh):
        for j in range(ow):
            rows, cols = _taps(i * sh - top, kh, dh), _taps(j * sw - left, kw, dw)
            real_rows = [r for r in rows if 0 <= r < h]
            real_cols = [c for c in cols if 0 <= c < w]
            box = x[:, :, real_rows][:, :, :, real_cols]
            if pool_type == "max":
                out[:, :, i, j] = box.max(axis=(2, 3)) if box.size else -np.inf
            else:
                if count_include_pad:  # taps inside the padded input (a ceil_mode window may run past it)
                    count = sum(r < h + bottom for r in rows) * sum(c < w + right for c in cols)
                else:
                    count = len(real_rows) * len(real_cols)
                out[:, :, i, j] = box.sum(axis=(2, 3)) / max(count, 1)
    return out


def adaptive_pool2d(x, pool_type, out_size) -> np.ndarray:
    """float64 adaptive pooling: output i pools [floor(i*H/OH), ceil((i+1)*H/OH))."""
    x = np.asarray(x, np.float64)
    _, _, h, w = x.shape
    oh, ow = out_size
    out = np.empty(x.shape[:2] + (oh, ow))
    for i in range(oh):
        for j in range(ow):
            box = x[:, :, (i * h) // oh : -(-(i + 1) * h // oh), (j * w) // ow : -(-(j + 1) * w // ow)]
            out[:, :, i, j] = box.max(axis=(2, 3)) if pool_type == "max" else box.mean(axis=(2, 3))
    return out


REDUCTIONS = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}


def reduce(x, op, axis, keepdims=False) -> np.ndarray:
    """float64 ``sum``/``mean``/``max``/``min`` over ``axis`` (NumPy's semantics)."""
    return REDUCTIONS[op](np.asarray(x, np.float64), axis=axis, keepdims=keepdims)


def softmax(x, axis=1) -> np.ndarray:
    """float64 softmax, shifted by the max (no overflow)."""
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def separable_attention(x, d: int, magnitudes: bool = False) -> np.ndarray:
    """float64 MobileViT-v2 separable self-attention of the qkv map ``x`` ``[N, 1 + 2 d, P, T]``
    (timm's ``LinearSelfAttention`` between its convs): ``relu(v) * sum_T(k * softmax_T(q))``.
    ``magnitudes``: the same with ``|k|``, ``|v|`` (the scale of its float32 sums' error)."""
    x = np.asarray(x, np.float64)
    q, k, v = x[:, :1], x[:, 1 : 1 + d], x[:, 1 + d : 1 + 2 * d]
    if magnitudes:
        k, v = np.abs(k), np.abs(v)
    ctx = (k * softmax(q, axis=3)).sum(axis=3, keepdims=True)
    return np.maximum(v, 0.0) * ctx


def patch_unfold(x, ph: int, pw: int) -> np.ndarray:
    """MobileViT's unfold of NCHW ``x`` into ``[N, C, ph * pw, nh * nw]`` patches, as exported
    (reshape ``[N, C, nh, ph, nw, pw]``, transpose (0, 1, 3, 5, 2, 4), reshape)."""
    n, c, h, w = x.shape
    return x.reshape(n, c, h // ph, ph, w // pw, pw).transpose(0, 1, 3, 5, 2, 4).reshape(n, c, ph * pw, -1)


def patch_fold(x, ph: int, pw: int, h: int, w: int) -> np.ndarray:
    """The inverse of :func:`patch_unfold`: patches ``[N, C, ph * pw, nh * nw]`` back to the
    ``[N, C, h, w]`` map (reshape ``[N, C, ph, pw, nh, nw]``, transpose (0, 1, 4, 2, 5, 3), reshape)."""
    n, c = x.shape[:2]
    return x.reshape(n, c, ph, pw, h // ph, w // pw).transpose(0, 1, 4, 2, 5, 3).reshape(n, c, h, w)


def gelu(x, approximate: str = "none") -> np.ndarray:
    """float64 GELU as PyTorch defines it: ``x * 0.5 * (1 + erf(x / sqrt 2))``, or with
    ``approximate="tanh"`` ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`` (-inf gives NaN)."""
    import math

    x = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        if approximate == "tanh":
            return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))
        erf = np.vectorize(math.erf, otypes=[np.float64])(x / math.sqrt(2.0)) if x.size else x
        return x * 0.5 * (1.0 + erf)


def resize_coordinate(mode: str, i, size_in: int, size_out: int):
    """ONNX Resize's input coordinate of output index ``i`` on one axis as an exact fraction
    ``(numerator, denominator)`` of integers (``i`` an int or an integer array/TIR expr)."""
    if mode == "asymmetric":
        return i * size_in, size_out
    if mode == "half_pixel" or (mode == "pytorch_half_pixel" and size_out > 1):
        return (2 * i + 1) * size_in - size_out, 2 * size_out  # (i + 1/2) in/out - 1/2
    if mode == "pytorch_half_pixel":
        return i * 0, 1
    if mode == "align_corners":
        return (i * (size_in - 1), size_out - 1) if size_out > 1 else (i * 0, 1)
    raise ValueError(f"coordinate_transformation_mode must be one of {RESIZE_COORDINATE_MODES}, got {mode!r}")


RESIZE_COORDINATE_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")
#: ONNX ``nearest_mode`` -> nearest input index of the fraction ``num / den`` (``den > 0``),
#: with ``floordiv`` the floor division of the caller's numbers (NumPy's //, TIR's floordiv).
NEAREST_ROUNDING = {
    "round_prefer_floor": lambda num, den, floordiv: -floordiv(den - 2 * num, 2 * den),  # ceil(x - 1/2)
    "round_prefer_ceil": lambda num, den, floordiv: floordiv(2 * num + den, 2 * den),  # floor(x + 1/2)
    "floor": lambda num, den, floordiv: floordiv(num, den),
    "ceil": lambda num, den, floordiv: -floordiv(-num, den),
}


def resize2d_nchw(x, size, method: str = "nearest", coordinate_transformation_mode: str = "half_pixel", rounding_method: str = "round_prefer_floor") -> np.ndarray:
    """float64 ONNX ``Resize`` of an NCHW tensor to ``size`` (out H, W): ``method``
    ``"nearest"`` (index rounded by ``rounding_method``, exactly) or ``"linear"``
    (bilinear), input coordinates by ``coordinate_transformation_mode``, clamped to the edges."""
    x = np.asarray(x, np.float64)

    def axis(size_in, size_out):
        num, den = resize_coordinate(coordinate_transformation_mode, np.arange(size_out), size_in, size_out)
        if method == "nearest":
            i = np.clip(NEAREST_ROUNDING[rounding_method](num, den, np.floor_divide), 0, size_in - 1)
            return i, i, np.zeros(size_out)
        c = np.clip(num / den, 0, size_in - 1)
        lo = np.floor(c).astype(int)
        return lo, np.minimum(lo + 1, size_in - 1), c - lo

    (y0, y1, fy), (x0, x1, fx) = axis(*x.shape[2:3], size[0]), axis(x.shape[3], size[1])
    if method == "nearest":
        return x[:, :, y0][:, :, :, x0]
    fy, fx = fy[:, None], fx[None, :]
    top = x[:, :, y0][:, :, :, x0] * (1 - fx) + x[:, :, y0][:, :, :, x1] * fx
    bottom = x[:, :, y1][:, :, :, x0] * (1 - fx) + x[:, :, y1][:, :, :, x1] * fx
    return top * (1 - fy) + bottom * fy


def layer_norm(x, gamma, beta, axis: int = -1, epsilon: float = 1e-5) -> np.ndarray:
    """float64 layer norm over one ``axis``, scaled by ``gamma`` and shifted by ``beta`` (vectors)."""
    x = np.asarray(x, np.float64)
    mean = x.mean(axis=axis, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axis, keepdims=True)
    shape = [1] * x.ndim
    shape[axis] = -1
    return (x - mean) / np.sqrt(var + epsilon) * np.reshape(gamma, shape) + np.reshape(beta, shape)


def grn_nx(sums, epsilon: float) -> np.ndarray:
    """float64 ``Nx`` of ConvNeXt-V2's GRN from ``sums`` ``(N, C, 1, 1)``, each channel's sum of
    squares over H, W: ``sqrt(S) / (mean_c sqrt(S) + epsilon)``."""
    g = np.sqrt(np.asarray(sums, np.float64))
    return g / (g.mean(axis=1, keepdims=True) + epsilon)


def group_norm(x, groups: int, epsilon: float = 1e-5) -> np.ndarray:
    """float64 group norm of NCHW ``x`` over each (sample, group)'s (C / groups, H, W) elements
    (population variance, as torch and ONNX), without gamma and beta."""
    n, c, h, w = x.shape
    xg = np.asarray(x, np.float64).reshape(n, groups, -1)
    return ((xg - xg.mean(axis=2, keepdims=True)) / np.sqrt(xg.var(axis=2, keepdims=True) + epsilon)).reshape(n, c, h, w)


def group_norm_partials(x, groups: int, slices: int) -> np.ndarray:
    """float64 ``(count, mean, M2)`` of the real elements of each pixel slice of each (sample, group)
    of NCHW ``x``, ``(N * groups, slices, 3)``: ``primfuncs.layernorm.group_norm_partials``' output
    (a group's pixels in NCHW4c order, channel block, row, column; ``ceil(pixels / slices)`` each)."""
    n, channels, h, w = x.shape
    c4 = -(-channels // 4)
    padded = np.full((n, 4 * c4, h, w), np.nan)
    padded[:, :channels] = x
    pixels = padded.reshape(n, c4, 4, h, w).transpose(0, 1, 3, 4, 2).reshape(n, groups, -1, 4)
    per = -(-pixels.shape[2] // slices)
    out = np.empty((n * groups, slices, 3))
    for b in range(n * groups):
        for s in range(slices):
            v = pixels[b // groups, b % groups, s * per : (s + 1) * per].ravel()
            v = v[~np.isnan(v)]
            out[b, s] = v.size, v.mean(), np.sum((v - v.mean()) ** 2)
    return out
