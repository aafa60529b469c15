"""Elementwise kernels on NCHW4c tensors (textures or buffers).

Every factory takes the blocked shape ``(N, C/4, H, W, 4)``. One work item
owns one pixel (4 channels): it reads the pixel, computes in registers and
writes it back with one store.
"""

from __future__ import annotations

from tvm.script import tirx as T

from . import gather
from ._common import BUFFER, LANES, TEXTURE, check_channels, check_dtype, check_scope, clamp, load_pixel, pixel_grid, pixel_launch, select_params, store_pixel
from .epilogue import ACTIVATIONS, activate

BINARY_OPS = {
    "add": lambda a, b: a + b,
    "subtract": lambda a, b: a - b,
    "multiply": lambda a, b: a * b,
    "divide": lambda a, b: a / b,  # IEEE division: x / 0 is +-inf, 0 / 0 NaN, as in NumPy
}


def _check_nchw4c(shape):
    shape = tuple(int(d) for d in shape)
    if len(shape) != 5 or shape[4] != LANES or min(shape) < 1:
        raise ValueError(f"expected an NCHW4c shape (N, C4, H, W, 4), got {shape}")
    return shape


def _clamp_fn(dtype, lo, hi):
    lo_v = None if lo is None else T.FloatImm(dtype, float(lo))
    hi_v = None if hi is None else T.FloatImm(dtype, float(hi))
    return lambda x: clamp(x, lo_v, hi_v)  # NaN stays NaN (np.clip), unlike fmax/fmin


def _pixelwise(shape, name: str, fn, second, dtype: str, scope: str, out_scope: str | None = None, channels: int | None = None,
               views: tuple = ((), ())):
    """``C = fn(A, ...)`` lane by lane, one work item per pixel.

    ``second`` picks the other inputs: None (unary), ``"tensor"`` (``B`` an NCHW4c
    tensor like ``A``), ``"channel"`` (``B`` of shape ``(N, C/4, 1, 1, 4)``, one
    pixel per channel block broadcast over H and W: a squeeze-excitation gate),
    ``"bias"`` (``Bias`` a ``(C4, 4)`` buffer indexed by channel block),
    ``"affine"`` (``Scale`` and ``Bias``, both ``(C4, 4)``) or ``"plain"`` (``B`` the plain
    ``(N, channels, H, W)`` buffer of a tensor like ``A``, read lane by lane; its padded lanes 0).
    One body serves all;
    :func:`select_params` drops the inputs a variant never reads.
    ``C`` lives in ``out_scope`` (default: ``scope``). ``channels``: write the padded lanes of
    the last block (channels ``>= channels``) as 0 whatever ``fn`` gives there (``0 / 0``).
    ``views``: ``A`` and a ``"tensor"`` ``B`` read through :mod:`primfuncs.gather` steps from their
    NCHW4c shape to the buffer's (a channel window of a wider map: its slice read in place); a
    step must keep a pixel's 4 lanes together.
    """
    n, c4, h, w, _ = _check_nchw4c(shape)
    check_dtype(dtype)
    check_scope(scope)
    out_scope = check_scope(out_scope or scope)
    if channels is not None:
        check_channels(c4, channels)
    zero = T.FloatImm(dtype, 0.0)

    def real(vz, lane):
        return (vz % c4) * 4 + lane < channels
    g = pixel_grid(n * c4, h, w)
    bh, bw = (1, 1) if second == "channel" else (h, w)
    b_shape, b_scope = ((n, channels, h, w), BUFFER) if second == "plain" else ((n, c4, bh, bw, 4), scope)
    if views[1] and second != "tensor":
        raise ValueError(f"b_view reads a blocked B of A's shape, not a {second!r} operand")
    a_view, a_shape = gather.read_blocked_view(shape, views[0], "a_view")
    b_view, b_shape = gather.read_blocked_view(shape, views[1], "b_view") if second == "tensor" else ((), b_shape)

    launch = pixel_launch()

    @T.macro
    def per_pixel(A, B, Scale, Bias, C, vz, vh, vw):
        x = T.sblock_alloc_buffer((4,), dtype, scope="local")
        y = T.sblock_alloc_buffer((4,), dtype, scope="local")
        s = T.sblock_alloc_buffer((4,), dtype, scope="local")
        for lane in T.vectorized(4):
            x[lane] = A[gather.through(a_view, shape, (vz // c4, vz % c4, vh, vw, 0), lane)]
        if second == "tensor":
            for lane in T.vectorized(4):
                y[lane] = B[gather.through(b_view, shape, (vz // c4, vz % c4, vh, vw, 0), lane)]
        if second == "channel":
            load_pixel(y, B, vz // c4, vz % c4, 0, 0)
        if second == "plain":
            for lane in T.unroll(4):
                y[lane] = T.if_then_else(real(vz, lane), B[vz // c4, T.min((vz % c4) * 4 + lane, channels - 1), vh, vw], zero)
        if second == "affine":
            for lane in T.vectorized(4):
                s[lane] = Scale[vz % c4, lane]
        if second in ("bias", "affine"):
            for lane in T.vectorized(4):
                y[lane] = Bias[vz % c4, lane]
        for lane in T.unroll(4):
            if second is None:
                x[lane] = fn(x[lane])
            elif second == "affine":
                x[lane] = fn(x[lane], s[lane], y[lane])
            elif channels is not None:
                x[lane] = T.Select(real(vz, lane), fn(x[lane], y[lane]), zero)
            else:
                x[lane] = fn(x[lane], y[lane])
        store_pixel(C, vz // c4, vz % c4, vh, vw, x)

    @T.prim_func(s_tir=True)
    def func(a: T.handle, b: T.handle, scale: T.handle, bias: T.handle, c: T.handle):
        T.func_attr({"global_symbol": name, "tirx.noalias": True})
        A = T.match_buffer(a, a_shape, dtype, scope=scope)
        B = T.match_buffer(b, b_shape, dtype, scope=b_scope)
        Scale = T.match_buffer(scale, (c4, 4), dtype, scope=BUFFER)
        Bias = T.match_buffer(bias, (c4, 4), dtype, scope=BUFFER)
        C = T.match_buffer(c, (n, c4, h, w, 4), dtype, scope=out_scope)
        launch(g, h, w, "pixel", lambda vz, vh, vw: per_pixel(A, B, Scale, Bias, C, vz, vh, vw))

    inputs = {None: ["A"], "tensor": ["A", "B"], "channel": ["A", "B"], "plain": ["A", "B"], "bias": ["A", "Bias"],
              "affine": ["A", "Scale", "Bias"]}[second]
    return select_params(func, [*inputs, "C"])


def unary(shape, fn, name: str, dtype: str = "float32", scope: str = TEXTURE, out_scope: str | None = None):
    """``B = fn(A)`` lane by lane, ``fn`` a Python function of one TIR expression.
    ``B`` lives in ``out_scope`` (default: ``scope``)."""
    return _pixelwise(shape, name, fn, None, dtype, scope, out_scope)


def copy(shape, dtype: str = "float32", scope: str = TEXTURE, out_scope: str = BUFFER):
    """Move an NCHW4c tensor between a texture and a buffer (or copy it)."""
    return unary(shape, lambda x: x, "copy", dtype, scope, out_scope)


def relu(shape, dtype: str = "float32", scope: str = TEXTURE):
    """``max(x, 0)``."""
    return unary(shape, _clamp_fn(dtype, 0.0, None), "relu", dtype, scope)


def clip(shape, a_min: float, a_max: float, dtype: str = "float32", scope: str = TEXTURE):
    """``min(max(x, a_min), a_max)``; relu6 is ``clip(shape, 0, 6)``."""
    if not a_min <= a_max:
        raise ValueError(f"clip needs a_min <= a_max, got {a_min} > {a_max}")
    return unary(shape, _clamp_fn(dtype, a_min, a_max), "clip", dtype, scope)


def relu6(shape, dtype: str = "float32", scope: str = TEXTURE):
    return clip(shape, 0.0, 6.0, dtype, scope)


def binary(shape, op: str, dtype: str = "float32", scope: str = TEXTURE, broadcast_channels: bool = False,
           channels: int | None = None, plain_b: bool = False, a_view: tuple = (), b_view: tuple = ()):
    """``C = A op B`` for two NCHW4c tensors of the same shape; ``op`` in :data:`BINARY_OPS`.

    ``broadcast_channels``: ``B`` is ``(N, C/4, 1, 1, 4)``, one value per channel
    broadcast over H and W (a squeeze-excitation gate times its block input, or a per-sample
    channel vector subtracted from or dividing a feature map).
    ``channels`` (the real channel count; required by ``divide``, whose padded lanes would be
    ``0 / 0 = NaN``, and a NaN there would reach every conv that reads them): padded lanes are
    written as 0.
    ``plain_b``: ``B`` is the plain ``(N, channels, H, W)`` buffer of such a tensor (a GEMM's result
    seen as a map, EfficientViT's head output added to the next head's input): read in place, so
    no layout kernel packs it first; needs ``channels``.
    ``a_view``, ``b_view``: ``A`` (``B``, a whole blocked tensor) read through :mod:`primfuncs.gather`
    steps from the NCHW4c shape to its buffer's, 4 lanes kept together: a slice of whole channel
    blocks of a wider map read in place (EfficientViT's cascaded heads: ``x.chunk(h)[i] + out``)."""
    if op not in BINARY_OPS:
        raise ValueError(f"unknown binary op {op!r}; expected one of {sorted(BINARY_OPS)}")
    if (op == "divide" or plain_b) and channels is None:
        raise ValueError(f"binary {op!r} needs channels (the padded lanes are written as 0, not 0 / 0; a plain B's extent)")
    if plain_b and broadcast_channels:
        raise ValueError("a plain B is a whole tensor, not a per-channel vector")
    views = (tuple(a_view), tuple(b_view))
    if plain_b:
        return _pixelwise(shape, f"{op}_plain", BINARY_OPS[op], "plain", dtype, scope, channels=channels, views=views)
    if broadcast_channels:
        return _pixelwise(shape, f"{op}_channels", BINARY_OPS[op], "channel", dtype, scope, channels=channels, views=views)
    return _pixelwise(shape, op, BINARY_OPS[op], "tensor", dtype, scope, channels=channels, views=views)


def add(shape, dtype: str = "float32", scope: str = TEXTURE):
    return binary(shape, "add", dtype, scope)


def multiply(shape, dtype: str = "float32", scope: str = TEXTURE):
    return binary(shape, "multiply", dtype, scope)


def bias_add(shape, dtype: str = "float32", scope: str = TEXTURE):
    """``C[n, c, h, w, :] = A[n, c, h, w, :] + Bias[c, :]``; Bias is a ``(C4, 4)`` buffer, zero-padded."""
    return _pixelwise(shape, "bias_add", BINARY_OPS["add"], "bias", dtype, scope)


def activation(shape, name: str, dtype: str = "float32", scope: str = TEXTURE):
    """One of the conv epilogue's activations (:data:`primfuncs.epilogue.ACTIVATIONS`:
    ``sigmoid``, ``silu``, ``hardsigmoid``, ``hardswish``, ...) as a standalone kernel."""
    if name not in ACTIVATIONS or name in (None, "clip"):
        raise ValueError(f"activation must be one of {[a for a in ACTIVATIONS if a not in (None, 'clip')]}, got {name!r}")
    return unary(shape, lambda x: activate(x, name, dtype), name, dtype, scope)


def affine(shape, activation: str | None = None, dtype: str = "float32", scope: str = TEXTURE, clip_min: float = 0.0, clip_max: float = 6.0):
    """``C = act(A * Scale[c] + Bias[c])``: batch norm (or a per-channel Mul/Add) that
    follows no conv, with an optional following activation fused (``clip_min``/``clip_max``:
    the bounds of ``activation="clip"``, e.g. HardSigmoid with ONNX's alpha=0.2).
    ``Scale`` and ``Bias`` are ``(C4, 4)`` buffers like :func:`bias_add`'s."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    if not clip_min <= clip_max:
        raise ValueError(f"clip needs clip_min <= clip_max, got {clip_min} > {clip_max}")
    name = "affine" if activation is None else f"affine_{activation}"
    return _pixelwise(shape, name, lambda x, s, b: activate(x * s + b, activation, dtype, clip_min, clip_max), "affine", dtype, scope)


#: Axes :func:`broadcast_binary`'s ``B`` may broadcast (extent 1), NCHW names.
BROADCAST_AXES = "chw"


def broadcast_binary(shape, channels: int, op: str, broadcast: str, reverse: bool = False, dtype: str = "float32",
                     scope: str = TEXTURE):
    """``C = A op B`` (``B op A`` with ``reverse``) with NumPy broadcasting of ``B`` over the NCHW
    axes named in ``broadcast`` (a non-empty subset of "chw", in that order), e.g. "c": ``B`` is
    ``[N, 1, H, W]`` (its lane 0 goes to every channel: MobileViT-v2's attention scores times its
    keys), "w": ``B`` is ``[N, C, H, 1]`` (a per-row context vector times the values).

    ``shape`` is ``A``'s and ``C``'s NCHW4c shape holding ``channels``; ``B`` is NCHW4c too. The
    padded lanes of ``C`` are written as 0 (``0 + B[lane 0]`` would not be). One work item per
    pixel, two texture reads, one write."""
    n, c4, h, w, _ = _check_nchw4c(shape)
    if op not in BINARY_OPS:
        raise ValueError(f"unknown binary op {op!r}; expected one of {sorted(BINARY_OPS)}")
    if not broadcast or any(a not in BROADCAST_AXES for a in broadcast) or "".join(sorted(broadcast, key=BROADCAST_AXES.index)) != broadcast or len(set(broadcast)) != len(broadcast):
        raise ValueError(f"broadcast must name axes of {BROADCAST_AXES!r} in that order, got {broadcast!r}")
    if not 4 * (c4 - 1) < channels <= 4 * c4:
        raise ValueError(f"channels={channels} does not fill C4={c4} blocks of 4")
    check_dtype(dtype)
    check_scope(scope)
    fn = BINARY_OPS[op]
    b_shape = (n, 1 if "c" in broadcast else c4, 1 if "h" in broadcast else h, 1 if "w" in broadcast else w, LANES)
    g = pixel_grid(n * c4, h, w)
    zero = T.FloatImm(dtype, 0.0)

    # B's pixel and lane for output pixel (block cb, row y, column x) and lane: index 0 along a broadcast axis.
    def b_block(cb):
        return 0 if "c" in broadcast else cb

    def b_row(y):
        return 0 if "h" in broadcast else y

    def b_col(x):
        return 0 if "w" in broadcast else x

    def b_lane(lane):
        return 0 if "c" in broadcast else lane

    def apply(a, b):
        return fn(b, a) if reverse else fn(a, b)

    launch = pixel_launch()

    @T.macro
    def per_pixel(A, B, C, vz, vh, vw):
        x = T.sblock_alloc_buffer((4,), dtype, scope="local")
        y = T.sblock_alloc_buffer((4,), dtype, scope="local")
        load_pixel(x, A, vz // c4, vz % c4, vh, vw)
        load_pixel(y, B, vz // c4, b_block(vz % c4), b_row(vh), b_col(vw))
        for lane in T.unroll(4):
            x[lane] = T.Select((vz % c4) * 4 + lane < channels, apply(x[lane], y[b_lane(lane)]), zero)
        store_pixel(C, vz // c4, vz % c4, vh, vw, x)

    @T.prim_func(s_tir=True)
    def func(a: T.handle, b: T.handle, c: T.handle):
        T.func_attr({"global_symbol": f"{op}_broadcast_{broadcast}", "tirx.noalias": True})
        A = T.match_buffer(a, (n, c4, h, w, 4), dtype, scope=scope)
        B = T.match_buffer(b, b_shape, dtype, scope=scope)
        C = T.match_buffer(c, (n, c4, h, w, 4), dtype, scope=scope)
        launch(g, h, w, "pixel", lambda vz, vh, vw: per_pixel(A, B, C, vz, vh, vw))

    return func
