"""Squeeze-excitation (issue 21, fewer launches on mobile CNNs): the ``excitation`` kernel (two 1x1
convs on a pooled vector in one work group) and ``pooled_pointwise`` (a 1x1 conv on the pool,
spread over work groups) against float64 NumPy (fp32 and half images), and SE block graphs as
exporters write them against onnxruntime, asserting the plan."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from onnx import helper

from helpers.numeric import pack_nchw4c, run_kernel, run_split_twice, unpack_nchw4c
from helpers.onnx_graphs import check_pattern, conv_node, mbconv_se, pattern_graph, plan_kernels, se_nodes
from primfuncs import excite
from primfuncs._common import TEXTURE, equal_slices
from tir_adreno import reference
from tir_adreno.strategy.packing import pack_bias

#: float32 dot products of <= 40 terms, then a sigmoid: measured <= 4e-7.
RTOL = 2e-6
GATES = [("relu", "sigmoid"), ("relu", "hardsigmoid"), ("silu", "sigmoid"), (None, "hardsigmoid")]


def _padded(w, rows, cols):
    out = np.zeros((rows, cols), np.float32)
    out[: w.shape[0], : w.shape[1]] = w
    return out


#: The CPU, mobile and wide-GPU work-group sizes of ``strategy.excite.excitation_schedule``.
THREADS = [excite.THREADS, 4 * excite.THREADS, 16 * excite.THREADS]
#: Maps: an already pooled vector, a few pixels, more pixels than slices (several loads per item),
#: and 40 x 40 (more pixels than the shared partial sums: the pool's items loop).
MAPS = [(1, 1), (3, 5), (9, 9), (40, 40)]


def _pooled_input(rng, n, channels, hw):
    """A random map and its NCHW4c float32 form, the padded lanes NaN (never to be read into a sum)."""
    p = rng.standard_normal((n, channels, *hw))
    p5 = pack_nchw4c(p).astype(np.float32)
    p5[:, -1, :, :, (channels - 1) % 4 + 1:] = np.nan
    return p, p5


@given(n=st.integers(1, 2), channels=st.integers(1, 40), hw=st.sampled_from(MAPS), hidden=st.integers(1, 12),
       acts=st.sampled_from(GATES), threads=st.sampled_from(THREADS),
       scope=st.sampled_from([TEXTURE, "global"]), precision=st.sampled_from(["float32", "float16_acc32"]),
       seed=st.integers(0, 2**32 - 1))
def test_excitation_kernel(device, n, channels, hw, hidden, acts, threads, scope, precision, seed):
    """``gate(W2 @ act(W1 @ mean_hw(X) + b1) + b2)`` per sample ((1, 1): an already pooled vector;
    9 x 9 and 40 x 40 with up to 10 channel blocks: several pixel slices and channel slices, items
    that load several pixels; the CPU, mobile and wide-GPU work-group sizes); padded input
    lanes (poisoned: NaN) never reach a sum, padded output lanes are 0; in half images the kernel
    reads ``X`` rounded to half and writes ``G`` rounded to half, its arithmetic float32."""
    rng = np.random.default_rng(seed)
    act, gate = acts
    p, p5 = _pooled_input(rng, n, channels, hw)
    w1, b1 = rng.standard_normal((hidden, channels)) / np.sqrt(channels), rng.standard_normal(hidden)
    w2, b2 = rng.standard_normal((channels, hidden)) / np.sqrt(hidden), rng.standard_normal(channels)
    c4 = p5.shape[1]
    storage = "float16" if precision == "float16_acc32" and scope == TEXTURE else None
    func = excite.excitation(p5.shape, channels, hidden, channels, activation=act, gate=gate, scope=scope, threads=threads)
    args = [p5, _padded(w1, hidden, 4 * c4), b1.astype(np.float32), _padded(w2.T, hidden, 4 * c4), pack_bias(b2.astype(np.float32))]
    y = run_kernel(device, func, *args, storage=storage)
    # the kernel reads p5 (float32) rounded to half: float64 -> float32 -> half rounds twice
    p_in = p.astype(np.float32).astype(np.float16 if storage else np.float32).astype(np.float64).mean(axis=(2, 3))
    h = reference.activation(p_in @ w1.astype(np.float32).T + b1.astype(np.float32), act)
    ref = reference.activation(h @ w2.astype(np.float32).T + b2.astype(np.float32), gate)
    rtol = 2.0**-10 if storage else RTOL  # the half output's rounding
    np.testing.assert_allclose(unpack_nchw4c(y, channels)[:, :, 0, 0], ref, rtol=rtol, atol=1e-6)
    assert np.all(y[:, -1, :, :, (channels - 1) % 4 + 1:] == 0), "padded lanes not zero"


@given(n=st.integers(1, 2), channels=st.integers(1, 40), hw=st.sampled_from(MAPS), hidden=st.integers(1, 12),
       acts=st.sampled_from(GATES), threads=st.sampled_from(THREADS), blocks=st.integers(1, 10), pixel_slices=st.integers(1, 40),
       scope=st.sampled_from([TEXTURE, "global"]), precision=st.sampled_from(["float32", "float16_acc32"]),
       seed=st.integers(0, 2**32 - 1))
@example(n=2, channels=40, hw=(40, 40), hidden=12, acts=("silu", "sigmoid"), threads=1024, blocks=3, pixel_slices=37,
         scope="global", precision="float32", seed=1)  # many work groups per sample, a short last channel slice
@pytest.mark.parametrize("loads", [1, excite.SPLIT_LOADS])
def test_excitation_split_kernel(device, n, channels, hw, hidden, acts, threads, blocks, pixel_slices, scope, precision, seed, loads):
    """``excitation_split`` (the excitation spread over work groups: channel slices x pixel slices
    per sample, the last work group to draw its ticket finishing it) against float64 NumPy, as
    :func:`test_excitation_kernel`: every slicing (the last channel slice short, more slices than
    one item per pixel); two launches in a row on the same scratch give the same gate and leave
    it as the next launch needs it: the tickets 0, every partial sum the sentinel again. With one
    load in flight per item and with ``excite.SPLIT_LOADS`` (the same sums, loads first)."""
    rng = np.random.default_rng(seed)
    act, gate = acts
    p, p5 = _pooled_input(rng, n, channels, hw)
    c4 = p5.shape[1]
    blocks, pixel_slices = min(blocks, c4), equal_slices(hw[0] * hw[1], pixel_slices)
    w1, b1 = rng.standard_normal((hidden, channels)) / np.sqrt(channels), rng.standard_normal(hidden)
    w2, b2 = rng.standard_normal((channels, hidden)) / np.sqrt(hidden), rng.standard_normal(channels)
    storage = "float16" if precision == "float16_acc32" and scope == TEXTURE else None
    func = excite.excitation_split(p5.shape, channels, hidden, channels, activation=act, gate=gate, scope=scope,
                                   threads=threads, channel_blocks=blocks, pixel_slices=pixel_slices, loads=loads)
    args = [p5, _padded(w1, hidden, 4 * c4), b1.astype(np.float32), _padded(w2.T, hidden, 4 * c4), pack_bias(b2.astype(np.float32))]
    ((y,), (again,)), partials, tickets = run_split_twice(device, func, storage, args)
    p_in = p.astype(np.float32).astype(np.float16 if storage else np.float32).astype(np.float64).mean(axis=(2, 3))
    h = reference.activation(p_in @ w1.astype(np.float32).T + b1.astype(np.float32), act)
    ref = reference.activation(h @ w2.astype(np.float32).T + b2.astype(np.float32), gate)
    rtol = 2.0**-10 if storage else RTOL
    np.testing.assert_allclose(unpack_nchw4c(y, channels)[:, :, 0, 0], ref, rtol=rtol, atol=1e-6)
    assert np.all(y[:, -1, :, :, (channels - 1) % 4 + 1:] == 0), "padded lanes not zero"
    np.testing.assert_array_equal(again, y)  # the second launch: its tickets were reset by the first
    assert np.all(tickets == 0), tickets
    assert np.all(partials == excite.PARTIAL_SENTINEL), "partial sums not taken (or not reset)"


def test_excitation_split_arguments():
    """Bad slicings and shapes name the argument."""
    with pytest.raises(ValueError, match="channel_blocks"):
        excite.excitation_split((1, 2, 3, 3, 4), 8, 2, 8, channel_blocks=3)
    with pytest.raises(ValueError, match="slices"):
        excite.excitation_split((1, 2, 3, 3, 4), 8, 2, 8, pixel_slices=10)
    with pytest.raises(ValueError, match="slices"):
        excite.excitation_split((1, 2, 7, 1, 4), 8, 2, 8, pixel_slices=5)  # 7 pixels: no 5 equal slices
    with pytest.raises(ValueError, match="NCHW4c"):
        excite.excitation_split((1, 2, 3, 3), 8, 2, 8)
    with pytest.raises(ValueError, match="gate"):
        excite.excitation_split((1, 2, 3, 3, 4), 8, 2, 8, gate="tanh")


@given(n=st.integers(1, 2), channels=st.integers(1, 40), hw=st.sampled_from(MAPS), out_channels=st.integers(1, 70),
       act=st.sampled_from([None, "hardswish", "relu"]), threads=st.sampled_from(THREADS), groups=st.integers(1, 6),
       scope=st.sampled_from([TEXTURE, "global"]), precision=st.sampled_from(["float32", "float16_acc32"]),
       seed=st.integers(0, 2**32 - 1))
# Found by CI: a half input that float64 -> float32 -> half rounds differently from float64 -> half
@example(n=1, channels=31, hw=(3, 5), out_channels=20, act=None, threads=64, groups=1, scope=TEXTURE, precision="float16_acc32", seed=409)
def test_pooled_pointwise_kernel(device, n, channels, hw, out_channels, act, threads, groups, scope, precision, seed):
    """``act(W @ mean_hw(X) + b)`` (a classifier head's pool and first 1x1 conv): every output
    block written once whatever the split over work groups (more groups than blocks included:
    the output poisoned), padded output lanes 0, padded input lanes (NaN) never summed."""
    rng = np.random.default_rng(seed)
    p, p5 = _pooled_input(rng, n, channels, hw)
    w, b = rng.standard_normal((out_channels, channels)) / np.sqrt(channels), rng.standard_normal(out_channels)
    c4, o4 = p5.shape[1], -(-out_channels // 4)
    storage = "float16" if precision == "float16_acc32" and scope == TEXTURE else None
    func = excite.pooled_pointwise(p5.shape, channels, out_channels, activation=act, scope=scope, threads=threads, groups=groups)
    y = run_kernel(device, func, p5, _padded(w, 4 * o4, 4 * c4), _padded(b[None], 1, 4 * o4)[0], storage=storage)
    # the kernel reads p5 (float32) rounded to half: float64 -> float32 -> half rounds twice
    p_in = p.astype(np.float32).astype(np.float16 if storage else np.float32).astype(np.float64).mean(axis=(2, 3))
    ref = reference.activation(p_in @ w.astype(np.float32).T + b.astype(np.float32), act)
    rtol = 2.0**-10 if storage else RTOL
    np.testing.assert_allclose(unpack_nchw4c(y, out_channels)[:, :, 0, 0], ref, rtol=rtol, atol=1e-6)
    assert np.all(y[:, -1, :, :, (out_channels - 1) % 4 + 1:] == 0), "padded lanes not zero"


@pytest.mark.parametrize("pool, act, gate", [("ReduceMean", "silu", "Sigmoid"), ("GlobalAveragePool", "relu", "HardSigmoid")])
def test_se_block_plan(pool, act, gate):
    """conv -> SE (6 channels: a padded block; EfficientNet's and MobileNetV3's forms) -> 1x1 conv:
    the pool and the two 1x1 convs of the excitation are one kernel, the gate multiply is read by
    the projection conv, everything ours, no layout transform inside."""
    rng, inits = np.random.default_rng(5), {}
    nodes = [conv_node(rng, inits, "x", "c", 6, 3), *se_nodes("c", "s", inits, 6, 2, rng, pool, act, gate),
             conv_node(rng, inits, "s", "y", 4, 6, k=1)]
    names = check_pattern(pattern_graph(nodes, inits))
    assert names == ["conv2d_nchw4c", "excitation", "conv2d_nchw4c1"], names  # conv, excitation, gated 1x1 conv


def test_se_pool_with_other_users():
    """The pooled vector also feeds the gate (``sigmoid(fc2) + mean``): the pool runs apart, the two
    1x1 convs still as one excitation kernel on the vector."""
    rng, inits = np.random.default_rng(6), {}
    se = se_nodes("c", "s", inits, 6, 3, rng, act="relu")
    se[-1] = helper.make_node("Add", ["se_g", "se_p"], ["se_gp"])
    nodes = [conv_node(rng, inits, "x", "c", 6, 3), *se, helper.make_node("Mul", ["c", "se_gp"], ["s"]),
             conv_node(rng, inits, "s", "y", 4, 6, k=1)]
    names = check_pattern(pattern_graph(nodes, inits))
    assert names.count("excitation") == 1 and len(names) == 5, names  # conv, pool, excitation, add, gated conv
    assert not any(n.startswith("multiply") for n in names), names


def _pool_conv_relu_multiply(rng, inits):
    """conv -> pool -> 1x1 conv -> relu -> multiply (no second conv: no excitation)."""
    node = helper.make_node
    return [conv_node(rng, inits, "x", "c", 6, 3), node("ReduceMean", ["c"], ["p"], axes=[2, 3], keepdims=1),
            conv_node(rng, inits, "p", "f", 6, 6, k=1), node("Relu", ["f"], ["g"]), node("Mul", ["c", "g"], ["y"])]


def test_one_conv_on_the_pool_is_a_pooled_pointwise():
    """pool -> 1x1 conv -> relu (a classifier head's form): one ``pooled_pointwise`` kernel, the
    relu its activation; the multiply by it runs apart (not a gate: no conv after it)."""
    rng, inits = np.random.default_rng(7), {}
    names = check_pattern(pattern_graph(_pool_conv_relu_multiply(rng, inits), inits))
    assert names == ["conv2d_nchw4c", "pooled_pointwise", "multiply_channels"], names


def test_one_conv_on_a_big_pool_is_a_conv(device):
    """The same on a map too big to pool once per work group (``pooled_conv_schedule`` declines):
    no excitation and no pooled_pointwise kernel, and the relu the searches looked at is still
    the conv's epilogue (nothing left fused by the failed matches)."""
    from tir_adreno.strategy.excite import pooled_conv_schedule
    from tir_adreno.strategy.profile import DeviceProfile

    profile = DeviceProfile.from_device(device)
    size = int(np.ceil(np.sqrt(profile.launch_cost_macs / 6 + 1)))  # one work group pooling it is already too much
    assert pooled_conv_schedule(profile, 6, size * size, 6) is None
    rng, inits = np.random.default_rng(7), {}
    names = check_pattern(pattern_graph(_pool_conv_relu_multiply(rng, inits), inits, size=size), size=size)
    assert names == ["conv2d_nchw4c", "mean_hw", "conv2d_nchw4c1", "multiply_channels"], names  # conv, pool, conv + relu, multiply


def test_excitation_schedule():
    """Fused for an SE block's convs on every profile (64, 256, 1024 work items on PoCL, Adreno,
    the H200; spread over work groups on the H200 where its map has more than one work group's
    pixels: ``excitation_split_schedule``); apart with fusion off, or for convs bigger than a launch is worth (a classifier
    head's: its pool and first conv are a pooled_pointwise spread over work groups instead)."""
    from tir_adreno.strategy.excite import excitation_schedule, pooled_conv_schedule
    from tir_adreno.strategy.profile import resolve, without_fusion

    se = (2 * 1152 * 48, 1152, 49, 48)  # EfficientNet-B0's largest SE block: macs, channels, pixels, hidden
    loads = excite.SPLIT_LOADS
    wide = {"nvidia-h200": ({"threads": 1024, "channel_blocks": 10, "pixel_slices": 1, "loads": loads},  # 29 work groups of 10 x 49 pixels
                            {"threads": 1024, "channel_blocks": 1, "pixel_slices": 24, "loads": loads})}  # 8 x 24 work groups of 523 pixels
    for name, threads, groups in (("pocl", 64, 2), ("adreno", 256, 4), ("nvidia-h200", 1024, 33)):
        profile = resolve(profile=name)
        big, first = wide.get(name, ({}, {}))
        assert excitation_schedule(profile, *se) == {"threads": threads} | big
        assert excitation_schedule(profile, se[0], 32, 112 * 112, 8) == {"threads": threads} | first  # its first block
        assert excitation_schedule(profile, se[0], 16, 5 * 5, 8) == {"threads": threads}  # one work group's worth
        assert excitation_schedule(without_fusion(profile), *se) is None
        assert excitation_schedule(profile, 10 * profile.launch_cost_macs, *se[1:]) is None
        # its partial sums and means (~23-26 KiB) on a device with 16 KiB of shared memory
        assert excitation_schedule(replace(profile, local_memory_bytes=16 * 1024), *se) is None
        # MobileNetV3-Small's head: 576 channels of 7 x 7 -> 1024
        assert pooled_conv_schedule(profile, 576, 49, 1024) == {"threads": threads, "groups": groups}
        assert pooled_conv_schedule(profile, 576, 49, 4) == {"threads": threads, "groups": 1}  # one output block
        assert pooled_conv_schedule(without_fusion(profile), 576, 49, 1024) is None
        assert pooled_conv_schedule(profile, 576, 112 * 112, 1024) is None  # a big map, pooled per group
        assert pooled_conv_schedule(replace(profile, local_memory_bytes=4096), 576, 49, 1024) is None  # too little shared memory


@pytest.fixture
def depthwise_apart(monkeypatch):
    """The H200's plan with each depthwise conv apart from the excitation after it (the fused
    kernel off: ``strategy.excite.DEPTHWISE_EXCITATION_PIXELS`` None; tests/passes/test_dw_excite.py)."""
    from tir_adreno.strategy import excite

    monkeypatch.setattr(excite, "DEPTHWISE_EXCITATION_PIXELS", None)


@pytest.mark.parametrize("act, gate", [("silu", "Sigmoid"), ("relu", "HardSigmoid")])
def test_se_split_plan(act, gate, depthwise_apart):
    """Two SE blocks as EfficientNet-B0 and MobileNetV3 export them (a 28 x 28 map of 16 channels,
    a 14 x 14 map of 24), compiled for the H200 with the depthwise conv apart: each excitation is
    one ``excitation_split`` launch (over 8 and 6 work groups) where PoCL's plan has one
    ``excitation``, the same number of launches; the H200's plan run here (PoCL) against onnxruntime."""
    from tir_adreno.strategy.profile import get_profile

    rng, inits = np.random.default_rng(21), {}
    nodes = [conv_node(rng, inits, "x", "a", 16, 3),
             *mbconv_se(rng, inits, "a", "b", 16, 4, act, gate),
             conv_node(rng, inits, "b", "c0", 24, 16, strides=[2, 2]),
             *mbconv_se(rng, inits, "c0", "y", 24, 6, act, gate)]
    model = pattern_graph(nodes, inits, size=28)
    wide, narrow = (plan_kernels(model, get_profile(name)) for name in ("nvidia-h200", "pocl"))
    assert wide.count("excitation_split") == 2 and "excitation" not in wide, wide
    assert narrow.count("excitation") == 2 and "excitation_split" not in narrow, narrow
    assert len(wide) - wide.count("nchw4c_to_nchw") == len(narrow) - narrow.count("nchw4c_to_nchw"), (wide, narrow)
    names = check_pattern(model, size=28, profile=get_profile("nvidia-h200"))
    assert sum(n.startswith("excitation_split") for n in names) == 2, names


def test_se_split_half_storage(depthwise_apart):
    """The H200's float16_acc32 plan of an SE block (16 channels of 28 x 28; the depthwise conv
    apart) run here: the split
    excitation's partial sums stay float32 (their sentinel's bits too) where the activations are
    half, within half storage's error of onnxruntime."""
    from tir_adreno.compiler import compile_model
    from tir_adreno.reference import reference_outputs, relative_error
    from tir_adreno.strategy.profile import get_profile

    rng, inits = np.random.default_rng(22), {}
    model = pattern_graph([conv_node(rng, inits, "x", "a", 16, 3), *mbconv_se(rng, inits, "a", "y", 16, 4, "silu", "Sigmoid")],
                          inits, size=28)
    cm = compile_model(model, profile=get_profile("nvidia-h200"), precision="float16_acc32", progress=lambda _: None)
    assert sum(c.label.startswith("excitation_split") for c in cm.plan.calls) == 1
    (partials,) = [t for t in cm.plan.tensors if t.kind == "const" and t.shape == (1, 8, 4)]  # 4 blocks x 2 pixel slices, 4 hidden
    assert partials.dtype == "float32" and partials.storage_dtype == "float32", partials
    x = (np.random.default_rng(11).standard_normal((1, 3, 28, 28)) * 3).astype("float32")
    (out,) = cm.run({"x": x})
    (ref,) = reference_outputs(model, {"x": x})
    assert relative_error(out, ref) <= 2e-3


def _gated_block(rng, inits, conv_after, k=1):
    """conv -> SE (ReLU, sigmoid; 6 channels) -> ``conv_after`` of the gated map (a k x k conv to 5
    channels, bias, batch-norm-free) -> relu."""
    return [conv_node(rng, inits, "x", "c", 6, 3), *se_nodes("c", "s", inits, 6, 3, rng, act="relu"),
            *conv_after]


def test_se_gate_into_a_3x3_conv_with_residual():
    """Any direct conv reads the gate: a padded 3x3 conv after the SE multiply, its residual the
    block input (the multiply gone; padded taps stay 0)."""
    rng, inits = np.random.default_rng(8), {}
    node = helper.make_node
    nodes = _gated_block(rng, inits, [conv_node(rng, inits, "s", "p", 6, 6, k=3), node("Add", ["p", "c"], ["y"])])
    names = check_pattern(pattern_graph(nodes, inits))
    assert names == ["conv2d_nchw4c", "excitation", "conv2d_nchw4c1"], names


def test_se_gate_with_two_users_stays_apart():
    """The gated map also feeds the output sum: the multiply runs apart (its value is needed), the
    conv reads it as usual."""
    rng, inits = np.random.default_rng(9), {}
    node = helper.make_node
    nodes = _gated_block(rng, inits, [conv_node(rng, inits, "s", "p", 6, 6, k=1), node("Add", ["p", "s"], ["y"])])
    names = check_pattern(pattern_graph(nodes, inits))
    assert names == ["conv2d_nchw4c", "excitation", "multiply_channels", "conv2d_nchw4c1"], names  # the conv: + residual


def test_fuse_gate():
    """The gate goes into a conv whose plan is the direct kernel's blocked path or the tiled GEMM
    with fusion on (the H200's projection convs are tiled); not with fusion off, not into a
    Winograd, depthwise or generally grouped plan."""
    from primfuncs.conv import ConvConfig, conv2d_geometry
    from tir_adreno.strategy.conv import ConvChoice, takes_gate
    from tir_adreno.strategy.fusion import fuse_gate
    from tir_adreno.strategy.profile import resolve, without_fusion

    pointwise = conv2d_geometry((1, 96, 14, 14), (40, 96, 1, 1))
    for name in ("adreno", "pocl", "nvidia-h200"):
        assert fuse_gate(pointwise, "float32", resolve(profile=name))
        assert not fuse_gate(pointwise, "float32", without_fusion(resolve(profile=name)))
    assert takes_gate(ConvChoice(config=ConvConfig(2, 4, (16, 4, 1), tiled=True)), pointwise)
    three = conv2d_geometry((1, 16, 14, 14), (16, 16, 3, 3), padding=1)
    assert takes_gate(ConvChoice(), three) and not takes_gate(ConvChoice("winograd_2x2"), three)
    assert not takes_gate(ConvChoice(), conv2d_geometry((1, 16, 14, 14), (16, 1, 3, 3), padding=1, groups=16))
    assert not takes_gate(ConvChoice(), conv2d_geometry((1, 6, 14, 14), (6, 2, 1, 1), groups=3))


def _se_classifier(rng, inits):
    """conv -> SE (8 channels, 2 hidden units; MobileNetV3's ReLU and hard-sigmoid) -> 1x1 conv ->
    a head: global pool -> 1x1 conv -> hard-swish -> flatten (MobileNetV3's has a second 1x1 conv,
    too big for one work group: the excitation rule would take a small one)."""
    node = helper.make_node
    return [conv_node(rng, inits, "x", "c", 8, 3), *se_nodes("c", "s", inits, 8, 2, rng, "GlobalAveragePool", "relu", "HardSigmoid"),
            conv_node(rng, inits, "s", "p", 8, 8, k=1), node("GlobalAveragePool", ["p"], ["h0"]),
            conv_node(rng, inits, "h0", "h1", 16, 8, k=1), node("HardSwish", ["h1"], ["h2"]), node("Flatten", ["h2"], ["y"])]


@pytest.mark.parametrize("name", ["pocl", "adreno", "nvidia-h200"])
def test_se_classifier_launches(name):
    """Issue 21's launch counts on every profile, the H200 included: an SE block is the excitation
    plus the gated projection conv, a head's pool and first conv one kernel and its [N, C]
    output written by the layout transform (no reshape), the first conv reading the input itself:
    5 launches, 10 with fusion off. Where the head writes a buffer (the H200's placement) the
    [N, C] output is a view of it: one less."""
    from tir_adreno.strategy.profile import get_profile, without_fusion

    rng, inits = np.random.default_rng(12), {}
    model = pattern_graph(_se_classifier(rng, inits), inits, size=14)
    fused = plan_kernels(model, get_profile(name))
    conv = [k for k in fused if k.startswith("conv2d")]
    view = name == "nvidia-h200"
    assert [k if not k.startswith("conv2d") else "conv" for k in fused] == [
        "conv", "excitation", "conv", "pooled_pointwise", *["nchw4c_to_nchw"][:not view]], fused
    assert len(conv) == 2
    apart = plan_kernels(model, without_fusion(get_profile(name)))
    assert len(apart) == 10 and apart.count("mean_hw") == 2 and "reshape" not in apart, apart


def test_se_classifier_output():
    """The same graph on this device against onnxruntime: the flat output written in its own shape."""
    rng, inits = np.random.default_rng(12), {}
    names = check_pattern(pattern_graph(_se_classifier(rng, inits), inits, size=14), size=14)
    assert names == ["conv2d_nchw4c", "excitation", "conv2d_nchw4c1", "pooled_pointwise"], names
