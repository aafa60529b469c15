"""Kernels that read or write a plain map where it is (``passes.channel_groups`` and the token
layout's boundary): a conv adding its residual from a plain NCHW or NHWC buffer
(``Epilogue(residual_layout=...)``: direct, tiled, depthwise and gated convs, X and Y in any layout), a
gated conv writing Y plain, and a pool writing a plain NCHW or NHWC buffer
(``pool2d(plain_axes=...)``), against float64 NumPy with fresh random inputs and poisoned outputs
(every element must be written); even seeds under the bounds sanitizer."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from helpers.conv import CONV_RTOL as RTOL
from helpers.conv import from_nchw4c, reference_conv2d, reference_epilogue, to_nchw4c, to_oihw4o
from helpers.numeric import assert_close, pack_nchw4c, rand, run_kernel, sanitized
from helpers.strategies import SEEDS, STRATEGIES

from primfuncs import conv, pool2d
from primfuncs._common import BUFFER, TEXTURE, TEXTURE_WEIGHT
from primfuncs.conv.prologue import Prologue
from primfuncs.epilogue import Epilogue
from tir_adreno import ops, reference

PLAIN = ("NCHW", "NHWC")


def _stored(x, layout):
    """NCHW ``x`` as stored in ``layout``."""
    return {"NHWC": lambda: np.ascontiguousarray(x.transpose(0, 2, 3, 1)), "NCHW": lambda: x}.get(layout, lambda: to_nchw4c(x))()


def _nchw(y, layout, o):
    return {"NHWC": lambda: y.transpose(0, 3, 1, 2), "NCHW": lambda: y}.get(layout, lambda: from_nchw4c(y, o))()


@st.composite
def residual_cases(draw):
    """A dense, depthwise or gated conv (dense and gated ones direct or tiled; O a multiple of 4, as the plain residual needs), a plain
    residual in either layout, X and Y each blocked or plain (a gated conv reads X blocked)."""
    kind = draw(st.sampled_from(["dense", "depthwise", "gated"]))
    n, k = draw(st.integers(1, 2)), draw(st.sampled_from([1, 3, 5]))
    if kind == "depthwise":
        c = o = 4 * draw(st.integers(1, 3))
    else:
        c, o = draw(st.integers(1, 9)), 4 * draw(st.integers(1, 3))
    h, w = draw(st.integers(k, 9)), draw(st.integers(k, 9))
    tiled = kind != "depthwise" and draw(st.booleans())  # the local-memory tiled GEMM (dense convs): the H200's 1x1 convs
    config = (conv.ConvConfig(draw(st.integers(1, 2)), draw(st.integers(1, 2)), (4, 2, 1), tiled=True, k_chunk=draw(st.sampled_from([1, 4])),
                              split_k=draw(st.integers(1, 2))) if tiled
              else conv.ConvConfig(draw(st.integers(1, 2)), 2, (4, 2, 1)))
    return dict(kind=kind, data_shape=(n, c, h, w), weight_shape=(o, 1 if kind == "depthwise" else c, k, k),
                padding=(k // 2,) * 4, strides=draw(st.integers(1, 2)),
                residual_layout=draw(st.sampled_from(PLAIN)),
                in_layout="NCHW4c" if kind == "gated" else draw(st.sampled_from(("NCHW4c", *PLAIN))),
                out_layout=draw(st.sampled_from(("NCHW4c", *PLAIN))),
                activation=draw(st.sampled_from([None, "relu", "gelu"])), config=config)


#: CoaT's position encoding: a depthwise 3x3 on a plain NCHW map written as tokens, plus that map.
COAT_CPE = dict(kind="depthwise", data_shape=(1, 8, 6, 5), weight_shape=(8, 1, 3, 3), padding=(1, 1, 1, 1), strides=1,
                residual_layout="NCHW", in_layout="NCHW", out_layout="NHWC", activation=None, config=conv.ConvConfig(1, 2, (4, 2, 1)))
#: GCViT's global-query block: a gated 1x1 conv adding the plain map its depthwise conv read, writing tokens.
GCVIT_MBCONV = dict(kind="gated", data_shape=(1, 8, 7, 7), weight_shape=(8, 8, 1, 1), padding=(0, 0, 0, 0), strides=1,
                    residual_layout="NCHW", in_layout="NCHW4c", out_layout="NHWC", activation=None, config=conv.ConvConfig(2, 2, (4, 2, 1)))


#: The same on the nvidia-h200 profile: its 1x1 convs are the tiled kernel (on buffers).
GCVIT_MBCONV_TILED = dict(GCVIT_MBCONV, out_layout="NCHW4c", config=conv.ConvConfig(2, 2, (4, 2, 1), tiled=True, k_chunk=4))


@pytest.mark.parametrize("scope", [TEXTURE, BUFFER])
@given(case=residual_cases(), seed=SEEDS)
@example(case=COAT_CPE, seed=0)
@example(case=GCVIT_MBCONV, seed=1)
@example(case=GCVIT_MBCONV_TILED, seed=2)
def test_conv_reads_plain_residual(device, scope, case, seed):
    """``act(conv(X [* G]) + bias + R)`` with R a plain buffer, the rest in ``scope`` or plain."""
    rng = np.random.default_rng(seed)
    kind, o = case["kind"], case["weight_shape"][0]
    groups = case["data_shape"][1] if kind == "depthwise" else 1
    x, wt = rand(rng, case["data_shape"]), rand(rng, case["weight_shape"])
    gate = rand(rng, (case["data_shape"][0], case["data_shape"][1], 1, 1)) if kind == "gated" else None
    geom = conv.conv2d_geometry(x.shape, wt.shape, case["strides"], case["padding"], 1, groups)
    bias, residual = rand(rng, (o,)), rand(rng, geom.out_shape)
    x_scope = scope if case["in_layout"] == "NCHW4c" else BUFFER
    y_scope = scope if case["out_layout"] == "NCHW4c" else BUFFER
    weight_scope = TEXTURE_WEIGHT if scope == TEXTURE else BUFFER
    epilogue = Epilogue(bias=True, residual=True, activation=case["activation"], out_layout=case["out_layout"], out_scope=y_scope,
                        residual_scope=BUFFER, residual_layout=case["residual_layout"])
    prologue = Prologue(weight_scope=weight_scope, data_layout=case["in_layout"], gate_scope=scope if kind == "gated" else None)
    args = dict(data_shape=x.shape, weight_shape=wt.shape, strides=case["strides"], padding=case["padding"], epilogue=epilogue,
                prologue=prologue, config=case["config"], scope=x_scope)
    tensors = [device.array(_stored(x, case["in_layout"]), x_scope, "X")]
    tensors += [device.array(to_nchw4c(gate), scope, "Gate")] if gate is not None else []
    tensors += [device.array(to_oihw4o(wt), weight_scope, "W"), device.array(to_nchw4c(bias.reshape(1, -1, 1, 1)).reshape(geom.o4, 4), BUFFER, "Bias"),
                device.array(_stored(residual, case["residual_layout"]), BUFFER, "Residual")]
    if case["out_layout"] == "NCHW4c":
        out = ops.empty_nchw4c(device, geom.out_shape, "float32", scope, "Y")  # poisoned
    else:
        out = device.array(np.full(epilogue.out_shape(geom.n, o, geom.oh, geom.ow), np.nan, np.float32), BUFFER, "Y")
    with sanitized(seed):
        factory = (conv.depthwise_conv2d_nchw4c if kind == "depthwise" else conv.conv2d_tiled_nchw4c if case["config"].tiled
                   else conv.conv2d_nchw4c)
        func = factory(**args)
        ops.launch(func, [*tensors, out], device)
    stored = out.numpy()
    assert np.all(np.isfinite(stored)), "output element not written (poison survived)"
    read = x.astype(np.float64) * gate if gate is not None else x
    ref = reference_epilogue(reference_conv2d(read, wt, geom.strides, geom.padding, geom.dilation, groups), bias, residual,
                             case["activation"])
    assert_close(_nchw(stored, case["out_layout"], o), ref, RTOL)


@pytest.mark.parametrize("call, match", [
    (lambda: Epilogue(residual_layout="NCHW"), "with a residual"),
    (lambda: Epilogue(residual=True, residual_layout="NLC"), "residual_layout must be"),
    (lambda: conv.conv2d_nchw4c((1, 4, 6, 6), (8, 4, 1, 1), scope=BUFFER,
                                epilogue=Epilogue(residual=True, residual_layout="NCHW", residual_scope=TEXTURE)), "plain buffer"),
    (lambda: conv.conv2d_winograd_nchw4c((1, 4, 8, 8), (8, 4, 3, 3), padding=1, scope=BUFFER,
                                         epilogue=Epilogue(residual=True, residual_layout="NCHW", residual_scope=BUFFER)),
     "blocked residual only"),
    (lambda: pool2d.pool2d((1, 2, 6, 6, 4), "max", 2, plain_axes=("c", "h", "w")), "channels"),
])
def test_plain_residual_and_pool_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("strategy", STRATEGIES)
@given(n=st.integers(1, 2), c=st.integers(1, 11), h=st.integers(2, 9), w=st.integers(2, 9), pool_type=st.sampled_from(["max", "avg"]),
       k=st.integers(1, 3), stride=st.integers(1, 2), axes=st.sampled_from(["chw", "hwc"]), scope=st.sampled_from([TEXTURE, BUFFER]),
       seed=SEEDS)
@example(n=1, c=64, h=14, w=14, pool_type="max", k=3, stride=2, axes="hwc", scope=TEXTURE, seed=0)  # GCViT's global query
def test_pool_writes_plain(device, strategy, n, c, h, w, pool_type, k, stride, axes, scope, seed):
    """The pool's output as the plain ``(N, *axes)`` buffer: real channels only, every element
    written (NaN poison), equal to the float64 pool of the NCHW map."""
    rng = np.random.default_rng(seed)
    x = rand(rng, (n, c, h, w))
    x = -np.abs(x) - 0.25 if pool_type == "max" else x  # all negative: padding must not win a max
    attrs = dict(pool_size=(k, k), strides=(stride, stride), padding=(k // 2,) * 4, dilation=(1, 1), ceil_mode=False,
                 count_include_pad=False)
    with sanitized(seed):
        func = pool2d.pool2d(pack_nchw4c(x).shape, pool_type, **attrs, scope=scope, strategy=strategy, group_size=4, channels=c,
                             plain_axes=tuple(axes))
        y = run_kernel(device, func, pack_nchw4c(x))
    ref = reference.pool2d(x, pool_type, **attrs)
    assert y.shape == ((n, *ref.shape[1:]) if axes == "chw" else (n, *ref.shape[2:], c))
    assert_close(y if axes == "chw" else y.transpose(0, 3, 1, 2), ref, 1e-6)
