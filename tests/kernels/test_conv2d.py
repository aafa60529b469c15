"""conv2d / depthwise conv2d (primfuncs.conv) and ops.conv2d against a float64 NumPy conv.

Kernels run on OpenCL (PoCL here) with fresh random inputs and poisoned outputs;
every output pixel of the blocked result must be written, padding lanes zero.
"""

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from helpers.conv import CONV_RTOL as RTOL
from helpers.conv import check_blocked_output, reference_conv2d, reference_epilogue, run_conv_case
from helpers.numeric import assert_close, rand, sanitized
from helpers.strategies import (
    CONV_3X3, CONV_GROUPED_ALIGNED, DEPTHWISE_3X3, DEPTHWISE_ALIGNED, DEPTHWISE_FLAT, SEEDS, conv_case, conv_cases,
    tiled_configs,
)

from primfuncs import conv
from primfuncs._common import BUFFER, TEXTURE
from primfuncs.epilogue import Epilogue
from primfuncs.conv.prologue import Prologue
from tir_adreno import ops
from tir_adreno.codegen import build
from tir_adreno.runtime.texture import TextureLimitError

# -- kernels, both scopes -------------------------------------------------------------------------


@pytest.mark.parametrize("scope", [TEXTURE, BUFFER])
@given(case=conv_cases(), seed=SEEDS)
@example(case=CONV_3X3, seed=0)
@example(case=CONV_GROUPED_ALIGNED, seed=1)
def test_conv2d_matches_numpy(device, scope, case, seed):
    with sanitized(seed):
        got, ref, blocked_out = run_conv_case(device, case, scope, np.random.default_rng(seed))
    check_blocked_output(blocked_out, ref.shape[1])
    assert_close(got, ref, RTOL)


#: A stem conv (one input channel block, 7x7 stride 2) and a 1x1 conv with C, O and pixel tails.
TILED_STEM = conv_case((1, 3, 19, 17), (10, 3, 7, 7), strides=(2, 2), padding=(3, 3, 3, 3),
                       config=conv.ConvConfig(1, 4, (16, 8, 1), tiled=True, k_chunk=4))
TILED_1X1 = conv_case((2, 13, 7, 5), (18, 13, 1, 1), padding=(0, 0, 0, 0),
                      config=conv.ConvConfig(2, 3, (4, 2, 1), tiled=True, k_chunk=3))
#: A patchify conv (2x2 stride 2, no padding: ConvNeXt's downsample, tiled on wide GPUs) with C and O tails.
TILED_PATCHIFY = conv_case((1, 10, 8, 6), (14, 10, 2, 2), strides=(2, 2), padding=(0, 0, 0, 0),
                           config=conv.ConvConfig(2, 2, (16, 4, 1), 4, tiled=True, k_chunk=4))

#: A strided conv (3x3 stride 2, padded: a downsample, tiled on wide GPUs) in the H200 rule's 1 x 1
#: tiles and 8 K slices, with C, O and pixel tails.
TILED_STRIDED = conv_case((1, 10, 9, 11), (14, 10, 3, 3), strides=(2, 2), padding=(1, 1, 1, 1),
                          config=conv.ConvConfig(1, 1, (16, 2, 1), 8, tiled=True, k_chunk=4))


@pytest.mark.parametrize("scope", [TEXTURE, BUFFER])
@given(case=conv_cases(), config=tiled_configs(), seed=SEEDS)
@example(case=TILED_STEM, config=TILED_STEM["config"], seed=0)
@example(case=TILED_1X1, config=TILED_1X1["config"], seed=1)
@example(case=TILED_PATCHIFY, config=TILED_PATCHIFY["config"], seed=2)
@example(case=TILED_STRIDED, config=TILED_STRIDED["config"], seed=3)
def test_conv2d_tiled_matches_numpy(device, scope, case, config, seed):
    """The local-memory tiled implicit GEMM (``ConvConfig.tiled``), any dense conv: partial
    tiles of pixels, channel blocks and K chunks, padding read through the im2col copies."""
    o = case["weight_shape"][0] // case["groups"]
    case = dict(case, groups=1, weight_shape=(o, *case["data_shape"][1:2], *case["weight_shape"][2:]), config=config)
    with sanitized(seed):
        got, ref, blocked_out = run_conv_case(device, case, scope, np.random.default_rng(seed))
    check_blocked_output(blocked_out, ref.shape[1])
    assert_close(got, ref, RTOL)


@pytest.mark.parametrize("scope", [TEXTURE, BUFFER])
@given(case=conv_cases(), tiled=tiled_configs(), use_tiled=st.booleans(), seed=SEEDS)
@example(case=TILED_STEM, tiled=TILED_STEM["config"], use_tiled=True, seed=0)
@example(case=dict(TILED_STEM, config=conv.ConvConfig(4, 4, (8, 4, 1))), tiled=TILED_STEM["config"], use_tiled=False, seed=1)
def test_conv2d_plain_input_matches_numpy(device, scope, case, tiled, use_tiled, seed):
    """A model's first conv reading its plain NCHW input buffer (``data_layout="NCHW"``), direct or
    tiled, writing ``scope``: C not a multiple of 4 reads a partial last block."""
    o = case["weight_shape"][0] // case["groups"]
    case = dict(case, groups=1, weight_shape=(o, *case["data_shape"][1:2], *case["weight_shape"][2:]), prologue=Prologue(data_layout="NCHW"))
    if use_tiled:
        case["config"] = tiled
    with sanitized(seed):
        got, ref, blocked_out = run_conv_case(device, case, scope, np.random.default_rng(seed))
    check_blocked_output(blocked_out, ref.shape[1])
    assert_close(got, ref, RTOL)


@pytest.mark.parametrize("call, match", [
    (lambda: conv.conv2d_nchw4c((1, 3, 8, 8), (8, 3, 3, 3), prologue=Prologue(data_layout="NCHW"), scope=TEXTURE), "from a buffer"),
    (lambda: conv.conv2d_nchw4c((1, 8, 8, 8), (8, 1, 3, 3), groups=8, prologue=Prologue(data_layout="NCHW"), scope=BUFFER), "blocked path"),
    (lambda: conv.conv2d_nchw4c((1, 4, 8, 8), (8, 4, 1, 1), prologue=Prologue(data_layout="NCHW", gate_scope=BUFFER), scope=BUFFER), "gate"),
    (lambda: conv.conv2d_nchw4c((1, 4, 8, 8), (8, 4, 1, 1), prologue=Prologue(data_layout="NWHC"), scope=BUFFER), "data_layout must be"),
])
def test_conv2d_plain_input_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_conv2d_tiled_rejects_bad_configs():
    with pytest.raises(ValueError, match="tiled takes a"):
        conv.ConvConfig(2, 2, (8, 1, 1), flat=True, tiled=True)
    with pytest.raises(ValueError, match="dense convs"):
        conv.conv2d_nchw4c((1, 8, 6, 6), (8, 4, 3, 3), groups=2, config=conv.ConvConfig(tiled=True, work_group=(8, 4, 1)))
    with pytest.raises(ValueError, match="bytes of local memory"):
        conv.conv2d_nchw4c((1, 8, 6, 6), (8, 8, 1, 1), config=conv.ConvConfig(4, 4, (16, 16, 1), tiled=True, k_chunk=16))


@pytest.mark.parametrize("scope", [TEXTURE, BUFFER])
@given(case=conv_cases(depthwise=True), seed=SEEDS)
@example(case=DEPTHWISE_3X3, seed=0)
@example(case=DEPTHWISE_ALIGNED, seed=1)
@example(case=DEPTHWISE_FLAT, seed=2)
def test_depthwise_conv2d_matches_numpy(device, scope, case, seed):
    with sanitized(seed):
        got, ref, blocked_out = run_conv_case(device, dict(case, depthwise=True), scope, np.random.default_rng(seed))
    check_blocked_output(blocked_out, ref.shape[1])
    assert_close(got, ref, RTOL)


@pytest.mark.parametrize("scope", [TEXTURE, BUFFER])
@pytest.mark.parametrize(
    "data_shape, kernel, strides, padding, dilation, w_block",
    [
        ((1, 8, 9, 10), 3, 1, 1, 1, 2),  # MobileNet's 3x3/1, 2 columns per item
        ((2, 12, 11, 7), 3, 2, (1, 0, 1, 2), 1, 3),  # stride 2, asymmetric padding, overhanging tile
        ((1, 5, 6, 13), 5, 1, 2, 2, 4),  # 5x5 dilated, C tail
    ],
)
def test_depthwise_register_window(device, scope, data_shape, kernel, strides, padding, dilation, w_block):
    """The window-in-registers body against NumPy on fixed MobileNet-like shapes (hypothesis draws it too)."""
    case = dict(
        data_shape=data_shape, weight_shape=(data_shape[1], 1, kernel, kernel), strides=strides, padding=padding,
        dilation=dilation, groups=data_shape[1], epilogue=Epilogue(bias=True, activation="relu6", residual=True),
        config=conv.ConvConfig(1, w_block, (4, 2, 1), register_window=True), depthwise=True,
    )
    got, ref, blocked_out = run_conv_case(device, case, scope, np.random.default_rng(3))
    check_blocked_output(blocked_out, ref.shape[1])
    assert_close(got, ref, RTOL)


@pytest.mark.parametrize(
    "data_shape, weight_shape, groups",
    [
        ((2, 7, 9, 6), (10, 7, 1, 1), 1),  # 1x1 fast path (no guards), C and O tails
        ((1, 16, 7, 9), (32, 8, 3, 3), 2),  # blocked groups: the 3-block tile shrinks to 2 (never straddles groups)
        ((1, 6, 7, 5), (8, 3, 3, 3), 2),  # per-lane path, one group per output block
        ((1, 6, 7, 5), (9, 2, 3, 3), 3),  # per-lane path, output blocks straddle groups
        ((1, 6, 7, 5), (6, 1, 3, 3), 6),  # conv2d_nchw4c with groups == C
    ],
)
@pytest.mark.parametrize("scope", [TEXTURE, BUFFER])
def test_conv2d_group_paths(device, scope, data_shape, weight_shape, groups):
    """Each accumulation body of conv2d_nchw4c with the full epilogue and overhanging tiles."""
    case = dict(
        data_shape=data_shape, weight_shape=weight_shape, strides=1, padding=(1, 0, 0, 1), dilation=1,
        groups=groups, epilogue=Epilogue(bias=True, activation="relu6", residual=True), config=conv.ConvConfig(3, 2),
    )
    got, ref, blocked_out = run_conv_case(device, case, scope, np.random.default_rng(0))
    check_blocked_output(blocked_out, ref.shape[1])
    assert_close(got, ref, RTOL)


# -- ops.conv2d (device packing, scope choice, depthwise dispatch) --------------------------------


@pytest.mark.parametrize(
    "x_shape, w_shape, attrs, with_bias, with_residual",
    [
        ((2, 5, 9, 8), (7, 5, 3, 3), dict(stride=(2, 1), padding=(1, 0, 2, 1), dilation=(1, 2), activation="relu"),
         True, True),
        ((1, 6, 7, 9), (9, 2, 3, 1), dict(padding=1, groups=3, activation="relu6"), True, False),
        ((1, 5, 9, 8), (10, 1, 3, 3), dict(stride=2, padding=(2, 1), groups=5, algorithm="direct"), False, True),
    ],
    ids=["dense", "grouped", "depthwise-multiplier-2"],
)
def test_ops_conv2d_matches_numpy(device, x_shape, w_shape, attrs, with_bias, with_residual):
    rng = np.random.default_rng(4)
    x, w = rand(rng, x_shape), rand(rng, w_shape)
    geom = conv.conv2d_geometry(
        x_shape, w_shape, attrs.get("stride", 1), attrs.get("padding", 0), attrs.get("dilation", 1),
        attrs.get("groups", 1),
    )
    bias = rand(rng, (w_shape[0],)) if with_bias else None
    residual = rand(rng, geom.out_shape) if with_residual else None
    got = ops.conv2d(x, w, bias, residual=residual, device=device, **attrs)
    ref = reference_epilogue(
        reference_conv2d(x, w, geom.strides, geom.padding, geom.dilation, geom.groups),
        bias, residual, attrs.get("activation"),
    )
    assert got.shape == geom.out_shape
    assert_close(got, ref, RTOL)


@pytest.mark.parametrize(
    "padding, expected",
    [(1, (1, 1, 1, 1)), ((2, 1), (2, 1, 2, 1)), ((0, 1, 2, 3), (0, 1, 2, 3)), (np.int64(2), (2,) * 4)],
)
def test_padding_forms(padding, expected):
    """int, (pad_h, pad_w) or (top, left, bottom, right), as relax.op.nn.conv2d."""
    geom = conv.conv2d_geometry((1, 4, 8, 8), (4, 4, 3, 3), padding=padding)
    assert geom.padding == expected
    assert (geom.oh, geom.ow) == (8 - 2 + expected[0] + expected[2], 8 - 2 + expected[1] + expected[3])


def test_ops_conv2d_too_large_for_textures(device):
    """A tensor wider than the device's images runs on buffers, or is refused with allow_buffer=False."""
    width = device.limits.image2d_max_width + 3
    rng = np.random.default_rng(2)
    x, w = rand(rng, (1, 3, 1, width)), rand(rng, (2, 3, 1, 3))
    got = ops.conv2d(x, w, padding=(0, 1), device=device)
    assert_close(got, reference_conv2d(x, w, (1, 1), (0, 1, 0, 1), (1, 1), 1), RTOL)
    with pytest.raises(TextureLimitError):
        ops.conv2d(x, w, padding=(0, 1), device=device, allow_buffer=False)


def test_conv2d_float16_builds_to_source(device):
    """fp16 kernels use half math (cl_khr_fp16); they run only where the device has it."""
    func = conv.conv2d_nchw4c((1, 8, 6, 6), (8, 8, 3, 3), padding=1, dtype="float16", epilogue=Epilogue(bias=True))
    source = build.build(func).source
    assert "read_imageh" in source and "half" in source
    if not device.fp16:
        pytest.skip(f"{device.name} has no cl_khr_fp16: float16 conv built to source only")
    rng = np.random.default_rng(3)
    x, w = rand(rng, (1, 8, 6, 6), "float16"), rand(rng, (8, 8, 3, 3), "float16")
    got = ops.conv2d(x, w, padding=1, device=device)
    assert_close(got, reference_conv2d(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1), 1e-2)


# -- errors ---------------------------------------------------------------------------------------

X = np.zeros((1, 4, 6, 6), np.float32) + 1
W = np.zeros((8, 4, 3, 3), np.float32) + 1


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(x=[[1.0]]), TypeError, "x must be a numpy.ndarray"),
        (dict(x=X[0]), ValueError, "x must be 4-d"),
        (dict(x=X.astype(np.int32)), TypeError, "x has dtype int32"),
        (dict(w=W.astype(np.float16)), TypeError, "w has dtype float16"),
        (dict(w=W[0]), ValueError, "w must be 4-d"),
        (dict(w=np.ones((8, 3, 3, 3), np.float32)), ValueError, "w .* 3 input channels"),
        (dict(groups=3), ValueError, "groups=3 must divide"),
        (dict(groups=0), ValueError, "groups must be a positive int"),
        (dict(stride=0), ValueError, "strides and dilation must be >= 1"),
        (dict(dilation=(1, 2, 3)), ValueError, "dilation must be an int or a pair"),
        (dict(padding=(1, 2, 3)), ValueError, "padding must be an int, a pair or"),
        (dict(padding=-1), ValueError, "padding must be >= 0"),
        (dict(padding=1.5), ValueError, "padding must be"),
        (dict(w=np.ones((8, 4, 9, 9), np.float32)), ValueError, "empty output"),
        (dict(bias=np.ones((7,), np.float32)), ValueError, "bias must have shape"),
        (dict(bias=np.ones((8,), np.float64)), TypeError, "bias has dtype float64"),
        (dict(residual=np.ones((1, 8, 5, 5), np.float32)), ValueError, "residual must have shape"),
        (dict(residual=np.ones((1, 8, 4, 4), np.float64)), TypeError, "residual has dtype float64"),
        (dict(activation="mish"), ValueError, "activation must be one of"),
        (dict(algorithm="fft"), ValueError, "algorithm must be one of"),
    ],
)
def test_ops_conv2d_errors(device, kwargs, error, match):
    args = dict(x=X, w=W, device=device)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        ops.conv2d(**args)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: conv.ConvConfig(oc_block=5), ValueError, "oc_block must be an int in 1..4"),
        (lambda: conv.ConvConfig(w_block=0), ValueError, "w_block must be an int in 1..4"),
        (lambda: conv.ConvConfig(work_group=(8, 4)), ValueError, "work_group must be 3 positive ints"),
        (lambda: conv.ConvConfig(work_group=(16, 16, 2)), ValueError, "more than 256"),
        (lambda: conv.ConvConfig(register_window=1), ValueError, "register_window must be a bool"),
        (lambda: conv.ConvConfig(flat=1), ValueError, "flat must be a bool"),
        (lambda: conv.ConvConfig(work_group=(8, 4, 1), flat=True), ValueError, r"work_group must be \(g, 1, 1\)"),
        (lambda: conv.ConvConfig(work_group=(64, 1, 1), split_k=2, flat=True), ValueError, "split_k 1"),
        (
            lambda: conv.conv2d_nchw4c((1, 4, 6, 6), (4, 4, 3, 3), config=conv.ConvConfig(register_window=True)),
            ValueError,
            "register_window=True is for depthwise convs with multiplier 1; this conv has the blocked path",
        ),
        (
            lambda: conv.depthwise_conv2d_nchw4c(
                (1, 4, 6, 6), (8, 1, 3, 3), config=conv.ConvConfig(register_window=True)
            ),
            ValueError,
            "multiplier 2",
        ),
        (lambda: Epilogue(activation="mish"), ValueError, "activation must be one of"),
        (lambda: conv.conv2d_nchw4c((1, 4, 6, 6), (8, 4, 3, 3), scope="local"), ValueError, "scope must be"),
        (lambda: conv.conv2d_nchw4c((1, 4, 6, 6), (8, 4, 3, 3), dtype="int8"), TypeError, "dtype must be"),
        (lambda: conv.conv2d_nchw4c((1, 4, 6), (8, 4, 3, 3)), ValueError, "data_shape must be NCHW"),
        (lambda: conv.conv2d_nchw4c((1, 4, 6, 6), (8, 4, 3, 3), epilogue="relu"), TypeError, "epilogue must be"),
        (lambda: conv.depthwise_conv2d_nchw4c((1, 4, 6, 6), (8, 2, 3, 3)), ValueError, "needs C/groups = 1"),
    ],
)
def test_factory_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()
