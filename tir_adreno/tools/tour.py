"""The kernel tour: every kernel family on a small shape, checked against float64 NumPy and timed.

``tir-adreno kernels`` runs it. Each case runs an op the way a user would
(``tir_adreno.ops``: NCHW NumPy in, the op's kernels on textures where they
fit, NCHW NumPy out, outputs poisoned first), compares with
:mod:`tir_adreno.reference` and reports the median kernel time (OpenCL events
of every kernel the op launches, its layout packing included). The same cases
run in the tests under the bounds sanitizer and the OpenCL C 1.2 build.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable

import numpy as np

from primfuncs import attention as _attention
from primfuncs import concat as _concat
from primfuncs import layernorm as _layernorm
from primfuncs import conv
from primfuncs import elementwise as _elementwise
from primfuncs import patches as _patches
from primfuncs import reduce as _reduce_kernels
from primfuncs._common import BUFFER, TEXTURE, TEXTURE_WEIGHT, equal_slices
from primfuncs.epilogue import Epilogue

from tir_adreno import ops, reference
from tir_adreno.runtime import opencl as runtime
from tir_adreno.strategy import conv as _strategy
from tir_adreno.strategy.profile import DeviceProfile
from tir_adreno.strategy.packing import pack_bias, pack_oihw4o

#: The tour's NCHW activation: small enough for PoCL, C not a multiple of 4.
SHAPE = (1, 10, 14, 14)


@dataclass(frozen=True)
class Case:
    """One kernel family: ``run(dev, rng, shape)`` returns (output, float64 reference)."""

    name: str
    family: str
    run: Callable
    rtol: float


def _conv(algorithm="direct", groups=1, depthwise=False, stride=1, padding=1, activation="relu"):
    def run(dev, rng, shape):
        n, c, h, w = shape
        c += -c % groups  # a channel count the groups divide
        g = c if depthwise else groups
        o = 2 * c if depthwise else 8
        x = rng.standard_normal((n, c, h, w)).astype("float32")
        wt = rng.standard_normal((o, c // g, 3, 3)).astype("float32")
        b = rng.standard_normal(o).astype("float32")
        y = ops.conv2d(x, wt, b, stride=stride, padding=padding, groups=g, activation=activation,
                       algorithm=algorithm, device=dev)
        geom = conv.conv2d_geometry(x.shape, wt.shape, stride, padding, 1, g)
        ref = reference.conv2d_nchw(x, wt, geom.strides, geom.padding, geom.dilation, g)
        return y, reference.conv2d_epilogue(ref, b, None, activation)

    return run


def _depthwise_pointwise(dev, rng, shape):
    """A MobileNetV2 block's tail as one kernel: depthwise 3x3 + bias + ReLU6, then 1x1 + bias + residual."""
    n, c, h, w = shape
    o = c + 3
    x, w_dw, w_pw = (rng.standard_normal(s).astype("float32") for s in ((n, c, h, w), (c, 1, 3, 3), (o, c, 1, 1)))
    b_dw, b, r = (rng.standard_normal(s).astype("float32") for s in (c, o, (n, o, h, w)))
    scope = ops.activation_scope(dev, shape)
    weight_scope = TEXTURE_WEIGHT if scope == TEXTURE else BUFFER
    func = conv.depthwise_pointwise_nchw4c(shape, w_dw.shape, w_pw.shape, 1, 1, prologue=conv.Prologue(depthwise=Epilogue(True, "relu6")),
                                             epilogue=Epilogue(bias=True, residual=True), scope=scope)
    out = ops.empty_nchw4c(dev, (n, o, h, w), "float32", scope)
    ops.launch(func, [ops.upload_nchw4c(dev, x, scope), dev.array(pack_oihw4o(w_dw), weight_scope, "w_dw"),
                      dev.array(pack_bias(b_dw), BUFFER, "b_dw"), dev.array(pack_oihw4o(w_pw), weight_scope, "w"),
                      dev.array(pack_bias(b), BUFFER, "b"), ops.upload_nchw4c(dev, r, scope, "r"), out], dev)
    ref = reference.depthwise_pointwise(x, w_dw, w_pw, (1, 1), (1, 1, 1, 1), (1, 1), b_dw, "relu6", b, r)
    return ops.download_nchw(out, o), ref


def _tiled(dev, rng, shape):
    """The local-memory tiled kernel (``ConvConfig.tiled``, the H200's 1x1 and stem convs), here a
    3x3/2 conv with 2 K slices, so its im2col copies read the padding and every tail is partial."""
    n, c, h, w = shape
    o = 6
    x, wt = rng.standard_normal((n, c, h, w)).astype("float32"), rng.standard_normal((o, c, 3, 3)).astype("float32")
    b = rng.standard_normal(o).astype("float32")
    geom = conv.conv2d_geometry(x.shape, wt.shape, 2, 1)
    placement = "texture" if ops.activation_scope(dev, shape) == TEXTURE else "buffer"
    choice = _strategy.ConvChoice("direct", conv.ConvConfig(1, 2, (8, 2, 1), split_k=2, tiled=True, k_chunk=3), placement)
    plan = _strategy.conv2d_plan(geom, Epilogue(bias=True, activation="relu"), "float32", DeviceProfile.from_device(dev),
                                 choice=choice)
    ref = reference.conv2d_nchw(x, wt, geom.strides, geom.padding, geom.dilation)
    return ops.run_conv_plan(plan, dev, x, wt, b), reference.conv2d_epilogue(ref, b, None, "relu")


def _pool(op, strategy, **attrs):
    def run(dev, rng, shape):
        x = rng.standard_normal(shape).astype("float32")
        y = getattr(ops, op)(x, device=dev, strategy=strategy, **attrs)
        if op == "adaptive_avg_pool2d":
            return y, reference.adaptive_pool2d(x, "avg", (1, 1))
        p = attrs["padding"]
        return y, reference.pool2d(x, op[:3], attrs["pool_size"], attrs["strides"], (p, p, p, p))

    return run


def _reduce(op, axis, strategy="auto"):
    def run(dev, rng, shape):
        x = rng.standard_normal(shape).astype("float32")
        return getattr(ops, op)(x, axis, keepdims=True, device=dev, strategy=strategy), reference.reduce(x, op, axis, True)

    return run


def _softmax(dev, rng, shape):
    x = rng.standard_normal(shape).astype("float32")
    return ops.softmax(x, device=dev), reference.softmax(x)


def _kernel_case(make, inputs, out_nchw, dev):
    """Run the kernel ``make(scope)`` on NCHW ``inputs`` (packed to NCHW4c on the device) into a
    poisoned NCHW4c output of NCHW shape ``out_nchw``; the output as NCHW."""
    scope = ops.activation_scope(dev, out_nchw)
    tensors = [ops.upload_nchw4c(dev, x, scope, f"x{i}") for i, x in enumerate(inputs)]
    out = ops.empty_nchw4c(dev, out_nchw, "float32", scope)
    ops.launch(make(scope), [*tensors, out], dev)
    return ops.download_nchw(out, out_nchw[1])


def _softmax_w(dev, rng, shape):
    x = (rng.standard_normal(shape) * 4).astype("float32")
    y = _kernel_case(lambda scope: _reduce_kernels.softmax(ops.blocked_shape(shape), shape[1], scope=scope, axis=-1), [x], shape, dev)
    return y, reference.softmax(x, axis=3)


def _separable_attention(dev, rng, shape):
    """MobileViT-v2's separable attention on a qkv map of ``1 + 2 C`` channels (keys and values
    off the pixel grid), the query scaled by 4."""
    n, d, h, w = shape
    x = rng.standard_normal((n, 1 + 2 * d, h, w)).astype("float32")
    x[:, 0] *= 4
    y = _kernel_case(lambda scope: _attention.separable_attention(ops.blocked_shape(x.shape), 1 + 2 * d, d, scope=scope), [x], shape, dev)
    return y, reference.separable_attention(x, d)


def _patches_case(dev, rng, shape):
    """MobileViT's unfold into patches (the smallest that tile the map: 2x2 on the tour's 14x14),
    then the fold of a second tensor of patches."""
    n, c, h, w = shape
    ph, pw = (next(d for d in range(2, size + 1) if size % d == 0) if size > 1 else 1 for size in (h, w))
    x = rng.standard_normal(shape).astype("float32")
    unfolded = reference.patch_unfold(x, ph, pw)
    y = _kernel_case(lambda scope: _patches.patch_unfold(ops.blocked_shape(shape), ph, pw, scope=scope), [x], unfolded.shape, dev)
    p = rng.standard_normal(unfolded.shape).astype("float32")
    z = _kernel_case(lambda scope: _patches.patch_fold(ops.blocked_shape(shape), ph, pw, scope=scope), [p], shape, dev)
    return np.concatenate([y.ravel(), z.ravel()]), np.concatenate([unfolded.ravel(), reference.patch_fold(p, ph, pw, h, w).ravel()])


def _broadcast_multiply(dev, rng, shape):
    """MobileViT-v2's keys times its 1-channel scores (lane 0 to every channel)."""
    a = rng.standard_normal(shape).astype("float32")
    b = rng.standard_normal((shape[0], 1, *shape[2:])).astype("float32")
    y = _kernel_case(lambda scope: _elementwise.broadcast_binary(ops.blocked_shape(shape), shape[1], "multiply", "c", scope=scope),
                     [a, b], shape, dev)
    return y, a.astype(np.float64) * b


def _concat_case(dev, rng, shape):
    n, c, h, w = shape
    a = rng.standard_normal(shape).astype("float32")
    b = rng.standard_normal((n, 3, h, w)).astype("float32")
    scope = ops.activation_scope(dev, (n, c + 3, h, w))
    ta, tb = ops.upload_nchw4c(dev, a, scope, "a"), ops.upload_nchw4c(dev, b, scope, "b")
    out = ops.empty_nchw4c(dev, (n, c + 3, h, w), "float32", scope)
    ops.launch(_concat.concat_channels(n, (c, 3), h, w, scope=scope), [ta, tb, out], dev)
    return ops.download_nchw(out, c + 3), np.concatenate([a, b], axis=1).astype(np.float64)


def _layout(dev, rng, shape):
    x = rng.standard_normal(shape).astype("float32")
    return ops.from_nchw4c(ops.to_nchw4c(x, device=dev), shape[1], device=dev), x.astype(np.float64)


def _binary(op, numpy_op):
    def run(dev, rng, shape):
        a, b = (rng.standard_normal(shape).astype("float32") for _ in range(2))
        return getattr(ops, op)(a, b, device=dev), numpy_op(a.astype(np.float64), b.astype(np.float64))

    return run


def _group_norm(slices: int | None = None):
    """Group norm (two groups when the channels split into multiples of 4; the tour's 10 channels
    are one group, a padded block), then the per-channel scale and shift: one kernel, or with
    ``slices`` the split form (partial statistics of that many pixel slices, then the normalizing
    kernel; the tour's 588 pixels in 5 slices: two rounds of the work items, a short last slice)."""

    def run(dev, rng, shape):
        n, c, h, w = shape
        x = rng.standard_normal(shape).astype("float32")
        gamma, beta = (rng.standard_normal(c).astype("float32") for _ in range(2))
        groups = 2 if c % 8 == 0 else 1
        scope = ops.activation_scope(dev, shape)
        tx = ops.upload_nchw4c(dev, x, scope)
        params = [dev.array(pack_bias(v), BUFFER, name) for v, name in ((gamma, "gamma"), (beta, "beta"))]
        out = ops.empty_nchw4c(dev, shape, "float32", scope)
        if slices is None:
            ops.launch(_layernorm.group_norm(tx.shape, c, groups, 1e-5, scope=scope), [tx, *params, out], dev)
        else:
            k = equal_slices(_layernorm.group_norm_pixels(tx.shape, groups), slices)
            partials = dev.array(np.full((n * groups, k, _layernorm.PARTIAL_FIELDS), np.nan, np.float32), BUFFER, "partials")
            ops.launch(_layernorm.group_norm_partials(tx.shape, c, groups, k, scope=scope), [tx, partials], dev)
            ops.launch(_layernorm.group_norm_apply(tx.shape, c, groups, k, 1e-5, scope=scope), [tx, partials, *params, out], dev)
        xg = x.astype(np.float64).reshape(n, groups, -1)
        y = ((xg - xg.mean(axis=2, keepdims=True)) / np.sqrt(xg.var(axis=2, keepdims=True) + 1e-5)).reshape(shape)
        return ops.download_nchw(out, c), y * gamma[None, :, None, None] + beta[None, :, None, None]

    return run


def _layer_norm(wide: bool):
    """Layer norm over the channels of each pixel, then the per-channel scale and shift: the one
    kernel (a work item per pixel) or the wide form (a work group per pixel; the tour's 10
    channels, a padded block, on a work group of 4)."""

    def run(dev, rng, shape):
        n, c, h, w = shape
        x = rng.standard_normal(shape).astype("float32") + 3.0  # a mean off 0: the two passes matter
        gamma, beta = (rng.standard_normal(c).astype("float32") for _ in range(2))
        scope = ops.activation_scope(dev, shape)
        tx = ops.upload_nchw4c(dev, x, scope)
        params = [dev.array(pack_bias(v), BUFFER, name) for v, name in ((gamma, "gamma"), (beta, "beta"))]
        out = ops.empty_nchw4c(dev, shape, "float32", scope)
        factory = _layernorm.layer_norm_channels_wide if wide else _layernorm.layer_norm_channels
        ops.launch(factory(tx.shape, c, 1e-5, scope=scope), [tx, *params, out], dev)
        return ops.download_nchw(out, c), reference.layer_norm(x, gamma, beta, axis=1)

    return run


def _relu6(dev, rng, shape):
    x = (rng.standard_normal(shape) * 4).astype("float32")  # both clamps taken
    return ops.relu6(x, device=dev), np.clip(x.astype(np.float64), 0, 6)


def _bias_add(dev, rng, shape):
    x = rng.standard_normal(shape).astype("float32")
    b = rng.standard_normal(shape[1]).astype("float32")
    return ops.bias_add(x, b, device=dev), reference.conv2d_epilogue(x, b)


#: Every kernel family. Winograd F(4x4) is held to 1e-3 (docs/kernels.md, Winograd), the rest as in the tests.
CASES = (
    Case("conv2d direct", "conv2d", _conv(), 1e-4),
    Case("conv2d grouped", "conv2d", _conv(groups=2, stride=2, padding=(1, 0, 1, 2), activation=None), 1e-4),
    Case("conv2d depthwise", "conv2d", _conv(depthwise=True, activation="relu6"), 1e-4),
    Case("depthwise -> 1x1 fused", "conv2d", _depthwise_pointwise, 1e-4),
    Case("conv2d tiled (local memory)", "conv2d", _tiled, 1e-4),
    Case("conv2d winograd_2x2", "winograd", _conv("winograd_2x2"), 1e-4),
    Case("conv2d winograd_4x4", "winograd", _conv("winograd_4x4"), 1e-3),
    Case("max_pool2d thread", "pool", _pool("max_pool2d", "thread", pool_size=(3, 3), strides=(2, 2), padding=1), 1e-5),
    Case("max_pool2d group", "pool", _pool("max_pool2d", "group", pool_size=(3, 3), strides=(2, 2), padding=1), 1e-5),
    Case("global avg pool thread", "pool", _pool("adaptive_avg_pool2d", "thread", output_size=1), 1e-5),
    Case("global avg pool group", "pool", _pool("adaptive_avg_pool2d", "group", output_size=1), 1e-5),
    Case("mean over H, W", "reduce", _reduce("mean", (2, 3)), 1e-5),
    Case("max over C", "reduce", _reduce("max", 1), 1e-5),
    Case("sum over C, H, W group", "reduce", _reduce("sum", (1, 2, 3), "group"), 1e-5),
    Case("softmax over C", "softmax", _softmax, 1e-5),
    Case("softmax over W", "softmax", _softmax_w, 1e-5),
    Case("separable attention (MobileViT-v2)", "attention", _separable_attention, 1e-5),
    Case("concat channels", "concat", _concat_case, 0.0),
    Case("patch unfold, fold", "layout", _patches_case, 0.0),
    Case("NCHW <-> NCHW4c", "layout", _layout, 0.0),
    Case("add", "elementwise", _binary("add", np.add), 1e-7),
    Case("multiply", "elementwise", _binary("multiply", np.multiply), 1e-7),
    Case("subtract", "elementwise", _binary("subtract", np.subtract), 1e-7),
    Case("divide", "elementwise", _binary("divide", np.divide), 1e-6),
    Case("group norm", "norm", _group_norm(), 1e-5),
    Case("group norm split (wide GPUs)", "norm", _group_norm(slices=5), 1e-5),
    Case("layer norm over C", "norm", _layer_norm(wide=False), 1e-5),
    Case("layer norm over C wide (wide GPUs)", "norm", _layer_norm(wide=True), 1e-5),
    Case("relu6", "elementwise", _relu6, 0.0),
    Case("bias_add", "elementwise", _bias_add, 1e-7),
    Case("multiply broadcast over C", "elementwise", _broadcast_multiply, 1e-7),
)
#: The families a tour must cover (the CLI test checks every one has a row).
FAMILIES = tuple(dict.fromkeys(c.family for c in CASES))


def check(case: Case, dev: runtime.Device, rng: np.random.Generator, shape=SHAPE) -> str:
    """Run ``case`` once; "ok" or what went wrong (error beyond ``case.rtol``, unwritten output)."""
    got, expected = case.run(dev, rng, shape)
    if got.shape != expected.shape:
        return f"shape {got.shape} != {expected.shape}"
    err = reference.relative_error(got, expected)
    if not np.isfinite(err):
        return "not finite (an output was not written)"
    return "ok" if err <= case.rtol else f"err {err:.1e}"


def _kernel_seconds(case, dev, rng, shape, repeat: int) -> float:
    times = []
    for _ in range(repeat):  # warm: the check ran first
        before = dev.kernel_seconds
        case.run(dev, rng, shape)
        times.append(dev.kernel_seconds - before)
    return statistics.median(times)


def kernel_tour(dev: runtime.Device, progress=print, seed: int = 0, shape=SHAPE, repeat: int = 3) -> list[dict]:
    """Every case of :data:`CASES` on ``shape``: checked (which warms it up), then timed (median of
    ``repeat`` runs); one dict per case."""
    rows = []
    rng = np.random.default_rng(seed)
    for case in CASES:
        result = check(case, dev, rng, shape)
        seconds = _kernel_seconds(case, dev, rng, shape, repeat)
        progress(f"  {case.name}: {seconds * 1e6:.1f} us, {result}")
        rows.append(
            {
                "kernel": case.name,
                "family": case.family,
                "shape": "x".join(map(str, shape)),
                "placement": ops.activation_scope(dev, shape),
                "time_us": seconds * 1e6,
                "check": result,
            }
        )
    return rows
