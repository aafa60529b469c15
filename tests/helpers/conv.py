"""Conv kernels on fresh random inputs against the float64 references (tir_adreno.reference).

The host-side blocked layouts here are written independently of tir_adreno.strategy.packing
on purpose: a conv test must not share a lane-order mistake with the code it checks.
"""

from dataclasses import replace

import numpy as np

from helpers.numeric import rand
from primfuncs import conv
from primfuncs._common import BUFFER, TEXTURE, TEXTURE_WEIGHT, blocked
from primfuncs.conv.prologue import Prologue
from tir_adreno import ops, reference
from tir_adreno.reference import conv2d_epilogue as reference_epilogue  # noqa: F401 (re-exported for tests)
from tir_adreno.reference import conv2d_nchw
from tir_adreno.strategy.packing import pack_bias, pack_nchw4c, pack_oihw4o

#: Direct convs (float32, max |error| / max |reference|): measured max 2.4e-7 over 14 random
#: property cases; left at 1e-4 for the tiled, split_k and fused kernels that share it.
CONV_RTOL = 1e-4
#: Per algorithm, measured on the properties' random convs (C, O <= 9; hypothesis, PoCL):
#: F(2x2) max 2.6e-7 over 30 cases, F(4x4) max 3.6e-6 over 40 (its transforms carry 8s and 5s).
#: About 10x the worst measured error.
ALGORITHM_RTOL = {"direct": CONV_RTOL, "winograd_2x2": 3e-6, "winograd_4x4": 3e-5}

reference_conv2d = conv2d_nchw  # float64 NCHW/OIHW conv, padding (top, left, bottom, right)


def to_nchw4c(x):
    """NCHW -> [N, C/4, H, W, 4] on the host, padded channels zero (layout kernels have their own tests)."""
    n, c, h, w = x.shape
    padded = np.zeros((n, blocked(c) * 4, h, w), x.dtype)
    padded[:, :c] = x
    return np.ascontiguousarray(padded.reshape(n, -1, 4, h, w).transpose(0, 1, 3, 4, 2))


def to_oihw4o(w):
    """OIHW -> [O/4, I, KH, KW, 4] on the host, padded output channels zero."""
    o, i, kh, kw = w.shape
    padded = np.zeros((blocked(o) * 4, i, kh, kw), w.dtype)
    padded[:o] = w
    return np.ascontiguousarray(padded.reshape(-1, 4, i, kh, kw).transpose(0, 2, 3, 4, 1))


def from_nchw4c(y, channels):
    n, c4, h, w, _ = y.shape
    return y.transpose(0, 1, 4, 2, 3).reshape(n, c4 * 4, h, w)[:, :channels]


def run_conv_case(device, case, scope, rng):
    """Run the conv kernel of ``case`` in ``scope`` on fresh inputs; returns (NCHW out, reference, blocked out).
    ``case["prologue"].data_layout == "NCHW"``: X is the plain NCHW array in a buffer, the rest in ``scope``."""
    case = dict(case)
    depthwise = case.pop("depthwise", False)
    plain = case.get("prologue", Prologue()).data_layout == "NCHW"
    x = rand(rng, case["data_shape"])
    w = rand(rng, case["weight_shape"])
    geom = conv.conv2d_geometry(x.shape, w.shape, case["strides"], case["padding"], case["dilation"], case["groups"])
    epi = case["epilogue"]
    bias = rand(rng, (geom.o,)) if epi.bias else None
    residual = rand(rng, geom.out_shape) if epi.residual else None
    ref = reference_epilogue(
        reference_conv2d(x, w, geom.strides, geom.padding, geom.dilation, geom.groups), bias, residual, epi.activation
    )

    weight_scope = TEXTURE_WEIGHT if scope == TEXTURE else BUFFER
    x_arg = device.array(x, BUFFER, "X") if plain else device.array(to_nchw4c(x), scope, "X")
    tensors = [x_arg, device.array(to_oihw4o(w), weight_scope, "W")]
    if bias is not None:
        tensors.append(device.array(to_nchw4c(bias.reshape(1, -1, 1, 1)).reshape(geom.o4, 4), BUFFER, "Bias"))
    if residual is not None:
        tensors.append(device.array(to_nchw4c(residual), scope, "Residual"))
    out = ops.empty_nchw4c(device, geom.out_shape, "float32", scope, "Y")  # poisoned
    tensors.append(out)

    if depthwise:
        case.pop("groups")
        func = conv.depthwise_conv2d_nchw4c(**case, scope=scope)
    elif plain:
        func = conv.conv2d_nchw4c(**{**case, "prologue": replace(case["prologue"], weight_scope=weight_scope),
                                     "epilogue": replace(epi, out_scope=scope)}, scope=BUFFER)
    else:
        func = conv.conv2d_nchw4c(**case, scope=scope)
    ops.launch(func, tensors, device)
    blocked_out = out.numpy()
    return from_nchw4c(blocked_out, geom.o), ref, blocked_out


def check_blocked_output(blocked_out, o):
    """Every pixel written (no poison left) and the padding lanes zero (the next conv reads them)."""
    assert np.all(np.isfinite(blocked_out)), "output pixel not written (poison survived)"
    lanes = from_nchw4c(blocked_out, blocked_out.shape[1] * 4)
    assert np.all(lanes[:, o:] == 0), "padding channels of the output are not zero"


def fused_inputs(rng, case, make=rand):
    """(kernel inputs in their blocked layouts, float64 reference output) of a fused depthwise -> 1x1 ``case``."""
    dw, pw = conv.depthwise_pointwise_geometry(case["data_shape"], case["dw_weight_shape"], case["pw_weight_shape"],
                                               case["strides"], case["padding"], groups=case.get("groups", 1))
    dw_epi, epi = case["prologue"].depthwise, case["epilogue"]
    x, w_dw, w_pw = make(rng, case["data_shape"]), rand(rng, case["dw_weight_shape"]), rand(rng, case["pw_weight_shape"])
    dw_bias = rand(rng, (dw.c,)) if dw_epi.bias else None
    bias = rand(rng, (pw.o,)) if epi.bias else None
    residual = rand(rng, pw.out_shape) if epi.residual else None
    ref = reference.depthwise_pointwise(x, w_dw, w_pw, dw.strides, dw.padding, dw.dilation, dw_bias, dw_epi.activation,
                                        bias, residual, epi.activation, groups=pw.groups)
    inputs = [pack_nchw4c(x), pack_oihw4o(w_dw), *([] if dw_bias is None else [pack_bias(dw_bias)]), pack_oihw4o(w_pw),
              *([] if bias is None else [pack_bias(bias)]), *([] if residual is None else [pack_nchw4c(residual)])]
    return inputs, ref
