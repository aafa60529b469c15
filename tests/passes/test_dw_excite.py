"""The depthwise conv and the squeeze-excitation after it in one launch on wide GPUs
(``excite.depthwise_excitation``): the kernel against float64 NumPy (the depthwise output and
the gate both checked, outputs poisoned, two launches on the same scratch), and conv -> depthwise
-> SE -> 1x1 conv graphs against onnxruntime, asserting the H200's plan (no excitation launch of
its own) and PoCL's (unchanged: depthwise, excitation)."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from helpers.numeric import assert_close, pack_nchw4c, run_split_twice, sanitized, unpack_nchw4c
from helpers.onnx_graphs import check_pattern, conv_node, mbconv_se, pattern_graph, plan_kernels
from primfuncs import excite
from primfuncs._common import TEXTURE, equal_slices
from primfuncs.epilogue import Epilogue
from tir_adreno import reference
from tir_adreno.strategy.packing import pack_bias, pack_oihw4o

#: The gate: float32 dot products of <= 40 terms, then a sigmoid (as ``test_excite.RTOL``).
GATE_RTOL = 2e-6
#: The depthwise output: float32 sums of <= 25 taps, normwise (measured below 3e-7).
DW_RTOL = 1e-5
GATES = [("relu", "sigmoid"), ("relu", "hardsigmoid"), ("silu", "sigmoid"), (None, "hardsigmoid")]
DW_ACTS = [None, "relu", "hardswish", "silu", "sigmoid"]  # sigmoid: act(0) = 0.5 in the padded lanes, masked


def _padded(w, rows, cols):
    out = np.zeros((rows, cols), np.float32)
    out[: w.shape[0], : w.shape[1]] = w
    return out


@given(n=st.integers(1, 2), channels=st.integers(1, 24), hw=st.tuples(st.integers(1, 13), st.integers(1, 13)),
       k=st.sampled_from([1, 3, 5]), stride=st.integers(1, 2), dilation=st.integers(1, 2), pad=st.sampled_from(["same", "none", "asym"]),
       dw_act=st.sampled_from(DW_ACTS), hidden=st.integers(1, 8), acts=st.sampled_from(GATES), threads=st.sampled_from([64, 256, 1024]),
       blocks=st.integers(1, 6), pixel_slices=st.integers(1, 40), scope=st.sampled_from([TEXTURE, "global"]),
       out_scope=st.sampled_from([TEXTURE, "global"]), precision=st.sampled_from(["float32", "float16_acc32"]),
       in_layout=st.sampled_from(["NCHW4c", "NCHW", "NHWC"]), seed=st.integers(0, 2**32 - 1))
@example(n=2, channels=23, hw=(13, 11), k=5, stride=1, dilation=1, pad="same", dw_act="hardswish", hidden=6, acts=("relu", "hardsigmoid"),
         threads=64, blocks=2, pixel_slices=7, scope=TEXTURE, out_scope="global", precision="float32", in_layout="NCHW4c",
         seed=3)  # 143 pixels in 7 slices of 21
@example(n=1, channels=6, hw=(7, 7), k=3, stride=2, dilation=1, pad="asym", dw_act="sigmoid", hidden=2, acts=("silu", "sigmoid"),
         threads=256, blocks=1, pixel_slices=3, scope=TEXTURE, out_scope=TEXTURE, precision="float16_acc32", in_layout="NCHW4c", seed=4)
@example(n=1, channels=10, hw=(7, 7), k=3, stride=1, dilation=1, pad="same", dw_act="relu", hidden=2,
         acts=("silu", "sigmoid"), threads=256, blocks=2, pixel_slices=2, scope="global", out_scope="global", precision="float32",
         in_layout="NCHW", seed=5)  # GCViT's global-query block on a map held plain (channels not a multiple of 4)
@pytest.mark.parametrize("loads", [1, excite.SPLIT_LOADS])
def test_depthwise_excitation_kernel(device, n, channels, hw, k, stride, dilation, pad, dw_act, hidden, acts, threads, blocks,
                                     pixel_slices, scope, out_scope, precision, in_layout, seed, loads):
    """``D = act_dw(dwconv(X) + b)`` and ``G = gate(W2 @ act(W1 @ mean_hw(D) + b1) + b2)`` against
    float64 NumPy: every D pixel written once (poisoned), its padded lanes 0 (whatever ``act_dw(0)``),
    the gate as ``excitation_split``'s; pixel counts that the slices do not divide, channels not
    a multiple of 4, strides, dilation and asymmetric padding; the second launch on the same
    scratch gives the same outputs and leaves it reset. In half images X and D are rounded to
    half, the pool sums D before its rounding (float32). With one load in flight per item and
    with ``excite.SPLIT_LOADS``; X blocked, or a plain NCHW / NHWC buffer (``data_layout``) read in place."""
    rng = np.random.default_rng(seed)
    act, gate = acts
    padding = {"same": (k // 2,) * 4, "none": (0,) * 4, "asym": (k // 2, 0, k - 1, k // 2 + 1)}[pad]
    h, w = max(hw[0], dilation * (k - 1) + 1), max(hw[1], dilation * (k - 1) + 1)  # no empty output
    x = rng.standard_normal((n, channels, h, w)).astype(np.float32)
    w_dw = (rng.standard_normal((channels, 1, k, k)) / k).astype(np.float32)
    b_dw = rng.standard_normal(channels).astype(np.float32) * 0.5
    w1, b1 = (rng.standard_normal((hidden, channels)) / np.sqrt(channels)).astype(np.float32), rng.standard_normal(hidden).astype(np.float32)
    w2, b2 = (rng.standard_normal((channels, hidden)) / np.sqrt(hidden)).astype(np.float32), rng.standard_normal(channels).astype(np.float32)
    oh = (h + padding[0] + padding[2] - dilation * (k - 1) - 1) // stride + 1
    ow = (w + padding[1] + padding[3] - dilation * (k - 1) - 1) // stride + 1
    c4 = -(-channels // 4)
    blocks, pixel_slices = min(blocks, c4), equal_slices(oh * ow, pixel_slices)
    scope = "global" if in_layout != "NCHW4c" else scope  # a plain X is a buffer
    with sanitized(seed):
        func = excite.depthwise_excitation(
            (n, channels, h, w), w_dw.shape, hidden, channels, strides=stride, padding=padding, dilation=dilation,
            dw_epilogue=Epilogue(bias=True, activation=dw_act), activation=act, gate=gate, scope=scope, out_scope=out_scope,
            threads=threads, channel_blocks=blocks, pixel_slices=pixel_slices, loads=loads, data_layout=in_layout)
        x5 = pack_nchw4c(x).astype(np.float32)
        x5[:, -1, :, :, (channels - 1) % 4 + 1:] = np.nan  # padded input lanes: never read into a sum
        x5 = {"NCHW": x, "NHWC": np.ascontiguousarray(x.transpose(0, 2, 3, 1))}.get(in_layout, x5)
        inputs = [x5, pack_oihw4o(w_dw), pack_bias(b_dw), _padded(w1, hidden, 4 * c4), b1, _padded(w2.T, hidden, 4 * c4), pack_bias(b2)]
        half_in, half_out = (precision == "float16_acc32" and s == TEXTURE for s in (scope, out_scope))
        storage = "float16" if precision == "float16_acc32" else None
        outs, partials, tickets = run_split_twice(device, func, storage, inputs, outputs=2)
    (d, g), again = outs
    x_in = x.astype(np.float16).astype(np.float64) if half_in else x.astype(np.float64)
    mid = reference.conv2d_epilogue(reference.conv2d_nchw(x_in, w_dw, (stride,) * 2, padding, (dilation,) * 2, groups=channels),
                                    b_dw, activation_name=dw_act)
    scale = reference.conv2d_nchw(np.abs(x_in), np.abs(w_dw), (stride,) * 2, padding, (dilation,) * 2, groups=channels) + np.abs(b_dw)[None, :, None, None]
    assert d.shape == (n, c4, oh, ow, 4)
    d_out = unpack_nchw4c(d, channels)
    assert_close(d_out, mid, 2.0**-10 if half_out else DW_RTOL, scale=None if half_out else scale)
    assert np.all(d[:, -1, :, :, (channels - 1) % 4 + 1:] == 0), "padded lanes of D not zero"
    hid = reference.activation(mid.mean(axis=(2, 3)) @ w1.T.astype(np.float64) + b1, act)
    ref = reference.activation(hid @ w2.T.astype(np.float64) + b2, gate)
    np.testing.assert_allclose(unpack_nchw4c(g, channels)[:, :, 0, 0], ref, rtol=2.0**-10 if half_out else GATE_RTOL, atol=1e-6)
    assert np.all(g[:, -1, :, :, (channels - 1) % 4 + 1:] == 0), "padded lanes of G not zero"
    np.testing.assert_array_equal(again[0], d)
    np.testing.assert_array_equal(again[1], g)
    assert np.all(tickets == 0), tickets
    assert np.all(partials == excite.PARTIAL_SENTINEL), "partial sums not taken (or not reset)"


def test_depthwise_excitation_arguments():
    """Bad shapes and settings name the argument."""
    with pytest.raises(ValueError, match="multiplier"):
        excite.depthwise_excitation((1, 8, 6, 6), (16, 1, 3, 3), 2, 8)
    with pytest.raises(ValueError, match="NCHW"):
        excite.depthwise_excitation((1, 8, 6, 6, 4), (8, 1, 3, 3), 2, 8)
    with pytest.raises(ValueError, match="residual"):
        excite.depthwise_excitation((1, 8, 6, 6), (8, 1, 3, 3), 2, 8, dw_epilogue=Epilogue(residual=True))
    with pytest.raises(TypeError, match="float32"):
        excite.depthwise_excitation((1, 8, 6, 6), (8, 1, 3, 3), 2, 8, dtype="float16")
    with pytest.raises(ValueError, match="slices"):
        excite.depthwise_excitation((1, 8, 6, 6), (8, 1, 3, 3), 2, 8, padding=1, pixel_slices=7)  # 36 pixels
    with pytest.raises(ValueError, match="channel_blocks"):
        excite.depthwise_excitation((1, 8, 6, 6), (8, 1, 3, 3), 2, 8, channel_blocks=3)
    with pytest.raises(ValueError, match="from a buffer"):
        excite.depthwise_excitation((1, 8, 6, 6), (8, 1, 3, 3), 2, 8, scope=TEXTURE, data_layout="NCHW")
    with pytest.raises(ValueError, match="data_layout"):
        excite.depthwise_excitation((1, 8, 6, 6), (8, 1, 3, 3), 2, 8, scope="global", data_layout="NLC")


#: Two inverted residuals with SE blocks: (channels, hidden, k, stride, depthwise activation, SE
#: activation, gate) of each, as EfficientNet-B0 (SiLU, sigmoid) and MobileNetV3 (ReLU or
#: hard-swish, hard-sigmoid) export them; channels 6 and 10 fill no block of 4, 28 x 28 pixels.
BLOCKS = {
    "efficientnet": [(16, 4, 3, 1, "Relu", "silu", "Sigmoid"), (24, 6, 5, 2, "Relu", "silu", "Sigmoid")],
    "mobilenetv3": [(6, 2, 5, 2, "HardSwish", "relu", "HardSigmoid"), (10, 3, 3, 1, None, "relu", "HardSigmoid")],
}


def _se_graph(blocks, size=28):
    """conv -> (depthwise -> SE -> 1x1 conv) x len(blocks), a 3x3 stride-2 conv between them."""
    rng, inits, nodes, x = np.random.default_rng(31), {}, [], "x"
    c0 = blocks[0][0]
    nodes.append(conv_node(rng, inits, "x", "a0", c0, 3))
    for i, (c, hidden, k, stride, dw_act, act, gate) in enumerate(blocks):
        x = f"a{i}"
        if i:
            nodes.append(conv_node(rng, inits, f"b{i - 1}", x, c, blocks[i - 1][0], strides=[2, 2]))
        nodes += mbconv_se(rng, inits, x, "y" if i == len(blocks) - 1 else f"b{i}", c, hidden, act, gate, k=k, stride=stride, dw_act=dw_act)
    return pattern_graph(nodes, inits, size=size)


@pytest.mark.parametrize("form", sorted(BLOCKS))
def test_depthwise_se_plan(form):
    """Compiled for the H200, each depthwise conv and the SE block after it are one
    ``depthwise_excitation`` launch (no ``excitation`` or depthwise launch of their own, the gate
    read by the projection conv): two launches fewer than PoCL's plan, which is unchanged
    (depthwise, excitation, gated 1x1 conv per block); the H200's plan run here (PoCL) against
    onnxruntime."""
    from tir_adreno.strategy.profile import get_profile

    model = _se_graph(BLOCKS[form])
    wide, narrow = (plan_kernels(model, get_profile(name)) for name in ("nvidia-h200", "pocl"))
    assert wide.count("depthwise_excitation") == 2, wide
    assert not any(k.startswith(("excitation", "depthwise_conv2d", "multiply")) for k in wide), wide
    assert [k for k in narrow if not k.startswith("conv2d")] == ["depthwise_conv2d_nchw4c", "excitation"] * 2 + ["nchw4c_to_nchw"], narrow
    assert len(wide) == len(narrow) - 2, (wide, narrow)
    names = check_pattern(model, size=28, profile=get_profile("nvidia-h200"))
    assert sum(n.startswith("depthwise_excitation") for n in names) == 2, names


def test_depthwise_se_half_storage():
    """The H200's float16_acc32 plan run here: the fused kernel's partial sums stay float32 (their
    sentinel's bits too) where the activations are half, within half storage's error of onnxruntime."""
    from tir_adreno.compiler import compile_model
    from tir_adreno.reference import reference_outputs, relative_error
    from tir_adreno.strategy.profile import get_profile

    model = _se_graph(BLOCKS["efficientnet"][:1])
    cm = compile_model(model, profile=get_profile("nvidia-h200"), precision="float16_acc32", progress=lambda _: None)
    (call,) = [c for c in cm.plan.calls if c.label.startswith("depthwise_excitation")]
    partials = cm.plan.tensors[call.args[7]]
    assert partials.kind == "const" and partials.shape == (1, 8, 4), partials  # 4 blocks x 2 slices of 784 pixels, 4 hidden
    assert partials.dtype == "float32" and partials.storage_dtype == "float32", partials
    x = (np.random.default_rng(11).standard_normal((1, 3, 28, 28)) * 3).astype("float32")
    (out,) = cm.run({"x": x})
    (ref,) = reference_outputs(model, {"x": x})
    assert relative_error(out, ref) <= 2e-3


def test_depthwise_excitation_schedule():
    """The H200 fuses, a work group per 512 output pixels of four channels (1024 items); PoCL and
    Adreno never (their plans unchanged); not with fusion off, for convs bigger than a launch is
    worth, or where the shared memory does not fit."""
    from tir_adreno.strategy.excite import depthwise_excitation_schedule
    from tir_adreno.strategy.profile import get_profile, without_fusion

    h200 = get_profile("nvidia-h200")
    se = (2 * 16 * 8, 16, 56 * 56, 8)  # MobileNetV3-Small's first SE block: macs, channels, pixels, hidden
    loads = excite.SPLIT_LOADS
    assert depthwise_excitation_schedule(h200, *se) == {"threads": 1024, "channel_blocks": 1, "pixel_slices": 6, "loads": loads}  # 4 x 6 groups
    assert depthwise_excitation_schedule(h200, 2 * 576 * 144, 576, 7 * 7, 144) == {"threads": 1024, "channel_blocks": 10, "pixel_slices": 1,
                                                                                    "loads": loads}
    for name in ("pocl", "adreno"):
        assert depthwise_excitation_schedule(get_profile(name), *se) is None
    assert depthwise_excitation_schedule(without_fusion(h200), *se) is None
    assert depthwise_excitation_schedule(h200, 10 * h200.launch_cost_macs, *se[1:]) is None
    assert depthwise_excitation_schedule(replace(h200, local_memory_bytes=1024), *se) is None
