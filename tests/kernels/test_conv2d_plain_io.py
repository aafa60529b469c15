"""Convs at the boundary between maps and tokens: reading X from a plain channels-last buffer
(``Prologue(data_layout="NHWC")``: tokens ``[N, H * W, C]`` read as their map) and writing Y as a
plain buffer (``Epilogue(out_layout="NHWC" | "NCHW")``), direct, tiled and depthwise, against the
float64 NumPy conv. Fresh random inputs, poisoned outputs (every element must be written), C and O
not multiples of 4, the residual blocked in ``scope``; X read as a channel slice of a wider buffer
through a view (``Prologue.x_view``); even seeds run under the bounds sanitizer
(the weights and a blocked X or Residual are images in texture scope)."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from helpers.conv import CONV_RTOL as RTOL
from helpers.conv import reference_conv2d, reference_epilogue, to_nchw4c, to_oihw4o, from_nchw4c
from helpers.numeric import assert_close, rand, sanitized
from helpers.strategies import SEEDS, conv_case, conv_cases, tiled_configs

from primfuncs import conv, gather
from primfuncs.conv.geometry import InputLayout
from primfuncs._common import BUFFER, TEXTURE, TEXTURE_WEIGHT
from primfuncs.conv.prologue import Prologue
from primfuncs.epilogue import Epilogue
from tir_adreno import ops

IN_LAYOUTS = ("NCHW4c", "NHWC")
OUT_LAYOUTS = ("NCHW4c", "NHWC", "NCHW")


def _plain(x, layout):
    """NCHW ``x`` as stored in ``layout``: channels-last, NCHW itself, or blocked."""
    return {"NHWC": lambda: np.ascontiguousarray(x.transpose(0, 2, 3, 1)), "NCHW": lambda: x}.get(layout, lambda: to_nchw4c(x))()


def _from(y, layout, o):
    return {"NHWC": lambda: y.transpose(0, 3, 1, 2), "NCHW": lambda: y}.get(layout, lambda: from_nchw4c(y, o))()


def _in_wider(x_stored, layout, before, after):
    """(buffer, view): ``x_stored`` as the channels ``before .. before + C`` of a buffer with
    ``after`` more channels (a Linear's output split by channels), and the gather steps reading it;
    blocked: as channel blocks ``before .. before + C/4`` of a wider map (a slice of whole blocks)."""
    axis = 3 if layout == "NHWC" else 1
    pads = [(0, 0)] * x_stored.ndim
    pads[axis] = (before, after)
    buffer = np.pad(x_stored, pads, constant_values=np.nan)  # a read outside the slice shows as NaN
    begin = tuple(before if a == axis else 0 for a in range(x_stored.ndim))
    return buffer, (gather.Affine(buffer.shape, begin, (1,) * x_stored.ndim),)


def run_plain_io(device, case, kind, scope, in_layout, out_layout, rng, wider=None):
    """Run ``case`` (``kind``: "direct", "tiled" or "depthwise") reading X in ``in_layout`` and
    writing Y in ``out_layout`` (plain ones in buffers, blocked ones, weights and Residual in
    ``scope``); ``wider`` (channels before, after): X read through a view as a channel slice of a
    wider plain buffer (``Prologue.x_view``). Returns (NCHW out, float64 reference, Y as stored)."""
    x, w = rand(rng, case["data_shape"]), rand(rng, case["weight_shape"])
    geom = conv.conv2d_geometry(x.shape, w.shape, case["strides"], case["padding"], case["dilation"], case["groups"])
    epi = case["epilogue"]
    bias = rand(rng, (geom.o,)) if epi.bias else None
    residual = rand(rng, geom.out_shape) if epi.residual else None
    ref = reference_epilogue(reference_conv2d(x, w, geom.strides, geom.padding, geom.dilation, geom.groups), bias, residual,
                             epi.activation)
    x_scope = BUFFER if in_layout != "NCHW4c" else scope
    y_scope = BUFFER if out_layout != "NCHW4c" else scope
    weight_scope = TEXTURE_WEIGHT if scope == TEXTURE else BUFFER
    x_stored, x_view = _plain(x, in_layout), ()
    if wider is not None:
        x_stored, x_view = _in_wider(x_stored, in_layout, *wider)
    tensors = [device.array(x_stored, x_scope, "X"), device.array(to_oihw4o(w), weight_scope, "W")]
    if bias is not None:
        tensors.append(device.array(to_nchw4c(bias.reshape(1, -1, 1, 1)).reshape(geom.o4, 4), BUFFER, "Bias"))
    if residual is not None:
        tensors.append(device.array(to_nchw4c(residual), scope, "Residual"))
    epilogue = replace(epi, out_scope=y_scope, residual_scope=scope, out_layout=out_layout)
    if out_layout == "NCHW4c":
        out = ops.empty_nchw4c(device, geom.out_shape, "float32", scope, "Y")  # poisoned
    else:
        out = device.array(np.full(epilogue.out_shape(geom.n, geom.o, geom.oh, geom.ow), np.nan, np.float32), BUFFER, "Y")
    tensors.append(out)
    prologue = Prologue(weight_scope=weight_scope, data_layout=in_layout, x_view=x_view)
    args = dict(case, epilogue=epilogue, prologue=prologue, scope=x_scope)
    if kind == "depthwise":
        args.pop("groups")
        func = conv.depthwise_conv2d_nchw4c(**args)
    else:
        func = conv.conv2d_nchw4c(**args)
    ops.launch(func, tensors, device)
    stored = out.numpy()
    assert np.all(np.isfinite(stored)), "output element not written (poison survived)"
    return _from(stored, out_layout, geom.o), ref, stored


def _dense(case):
    o = case["weight_shape"][0] // case["groups"]
    return dict(case, groups=1, weight_shape=(o, case["data_shape"][1], *case["weight_shape"][2:]))


#: Tokens of 13 channels on a 5x7 map read by a 3x3 conv writing 10-channel tokens, and a 1x1
#: (a Linear on tokens) with channel tails both sides.
TOKENS_3X3 = conv_case((2, 13, 5, 7), (10, 13, 3, 3))
TOKENS_1X1 = conv_case((1, 6, 4, 3), (9, 6, 1, 1), padding=(0, 0, 0, 0), epilogue=Epilogue(bias=True, activation="gelu"))


@pytest.mark.parametrize("scope", [TEXTURE, BUFFER])
@given(case=conv_cases(), in_layout=st.sampled_from(IN_LAYOUTS), out_layout=st.sampled_from(OUT_LAYOUTS),
       tiled=st.one_of(st.none(), tiled_configs()), seed=SEEDS)
@example(case=TOKENS_3X3, in_layout="NHWC", out_layout="NHWC", tiled=None, seed=0)
@example(case=TOKENS_1X1, in_layout="NHWC", out_layout="NCHW", tiled=None, seed=1)
@example(case=TOKENS_3X3, in_layout="NHWC", out_layout="NHWC", tiled=conv.ConvConfig(2, 3, (4, 2, 1), tiled=True, k_chunk=3),
         seed=2)
def test_dense_conv_plain_io_matches_numpy(device, scope, case, in_layout, out_layout, tiled, seed):
    """Dense convs, direct (any config: split_k too) or tiled, any pair of input and output layouts."""
    case = _dense(case)
    if tiled is not None:
        case["config"] = tiled
    with sanitized(seed):
        got, ref, _ = run_plain_io(device, case, "direct", scope, in_layout, out_layout, np.random.default_rng(seed))
    assert_close(got, ref, RTOL)


@pytest.mark.parametrize("scope", [TEXTURE, BUFFER])
@given(case=conv_cases(depthwise=True), in_layout=st.sampled_from((*IN_LAYOUTS, "NCHW")), out_layout=st.sampled_from(OUT_LAYOUTS),
       seed=SEEDS)
@example(case=conv_case((1, 7, 6, 5), (7, 1, 3, 3), groups=7), in_layout="NHWC", out_layout="NHWC", seed=0)
@example(case=conv_case((3, 7, 7, 6), (7, 1, 5, 5), padding=(2, 2, 2, 2), groups=7), in_layout="NCHW", out_layout="NCHW", seed=1)
@example(case=conv_case((1, 8, 6, 5), (8, 1, 7, 7), padding=(3, 3, 3, 3), groups=8,
                        config=conv.ConvConfig(1, 1, (64, 1, 1), register_window=True, flat=True)),
         in_layout="NHWC", out_layout="NHWC", seed=2)  # MambaOut's on the wide GPU: whole NHWC blocks, vector reads
def test_depthwise_conv_plain_io_matches_numpy(device, scope, case, in_layout, out_layout, seed):
    """Depthwise convs (any multiplier; the window in registers too) reading tokens or a plain NCHW
    map (a query split off a plain map: EfficientViT) and writing them."""
    with sanitized(seed):
        got, ref, _ = run_plain_io(device, case, "depthwise", scope, in_layout, out_layout, np.random.default_rng(seed))
    assert_close(got, ref, RTOL)


@given(case=conv_cases(depthwise=True), kind=st.sampled_from(["depthwise", "direct", "tiled"]),
       in_layout=st.sampled_from(["NHWC", "NCHW", "NCHW4c"]), before=st.integers(0, 9), after=st.integers(0, 6), seed=SEEDS)
@example(case=conv_case((1, 8, 6, 5), (8, 1, 7, 7), padding=(3, 3, 3, 3), groups=8,
                        config=conv.ConvConfig(1, 1, (64, 1, 1), register_window=True, flat=True)),
         kind="depthwise", in_layout="NHWC", before=8, after=0, seed=0)  # MambaOut's: the last 8 of 16 channels, vector reads
@example(case=conv_case((1, 7, 6, 5), (7, 1, 3, 3), groups=7), kind="depthwise", in_layout="NHWC", before=3, after=2, seed=1)  # scalar
@example(case=conv_case((1, 6, 5, 4), (6, 1, 3, 3), groups=6), kind="direct", in_layout="NCHW", before=2, after=5, seed=2)
@example(case=conv_case((2, 16, 7, 7), (48, 16, 1, 1), padding=(0, 0, 0, 0)), kind="tiled", in_layout="NCHW4c", before=4, after=8,
         seed=4)  # EfficientViT-M0's qkv conv on the first head's window of 4 windows' maps
@example(case=conv_case((1, 6, 5, 4), (6, 1, 3, 3), groups=6), kind="depthwise", in_layout="NCHW4c", before=1, after=0, seed=3)
def test_conv_reads_a_channel_slice_in_place(device, case, kind, in_layout, before, after, seed):
    """A conv reading its plain input as a channel slice of a wider buffer through ``x_view`` (the
    buffer's other channels NaN: a read outside the slice poisons the output), depthwise, direct
    and tiled, NHWC (vector reads where the slice starts at a multiple of 4 in rows of a multiple
    of 4) and NCHW; and a blocked input as a window of whole channel blocks of a wider map
    (``before``, ``after``: blocks; a slice of a map's channels read in place, EfficientViT's heads)."""
    if kind != "depthwise":
        case = _dense(case)
        case["config"] = conv.ConvConfig(2, 1, (4, 2, 1), tiled=True, k_chunk=2) if kind == "tiled" else None
    with sanitized(seed):
        got, ref, _ = run_plain_io(device, case, "depthwise" if kind == "depthwise" else "direct", BUFFER, in_layout, "NCHW4c",
                                   np.random.default_rng(seed), wider=(before, after))
    assert_close(got, ref, RTOL)


def test_view_vector_reads_need_aligned_channels():
    """NHWC reads through a view are one vector per block only where the slice starts at a multiple
    of 4 in a buffer whose pixels are a multiple of 4 channels; a view with a pad is refused."""
    geom = conv.conv2d_geometry((1, 8, 4, 4), (8, 1, 3, 3), groups=8)

    def layout(channels, begin):
        return InputLayout(geom, "NHWC", BUFFER, view=(gather.Affine((1, 4, 4, channels), (0, 0, 0, begin), (1, 1, 1, 1)),))

    assert layout(16, 8).vector and layout(12, 4).vector and layout(8, 0).vector
    assert not layout(16, 6).vector and not layout(10, 2).vector
    assert layout(16, 8).shape(geom, 4, 4) == (1, 4, 4, 16)
    with pytest.raises(ValueError, match="unread"):
        layout(8, 2)


def test_plain_output_keeps_channels_last_order(device):
    """The NHWC buffer is the tokens ``[N, H * W, C]`` themselves: element (n, l, c) is output
    channel c of pixel l = h * W + w (not only equal up to a permutation the helper undoes)."""
    case = conv_case((1, 5, 3, 4), (6, 5, 1, 1), padding=(0, 0, 0, 0), epilogue=Epilogue())
    got, ref, stored = run_plain_io(device, case, "direct", BUFFER, "NCHW4c", "NHWC", np.random.default_rng(7))
    n, o, h, w = ref.shape
    tokens = ref.reshape(n, o, h * w).transpose(0, 2, 1)
    assert_close(stored.reshape(n, h * w, o), tokens, RTOL)


@pytest.mark.parametrize("call, match", [
    (lambda: conv.conv2d_nchw4c((1, 4, 8, 8), (8, 4, 1, 1), epilogue=Epilogue(out_layout="NHWC"), scope=TEXTURE), "buffer"),
    (lambda: Epilogue(out_layout="NLC"), "out_layout must be"),
    (lambda: conv.conv2d_winograd_nchw4c((1, 4, 8, 8), (8, 4, 3, 3), padding=1, epilogue=Epilogue(out_layout="NHWC", out_scope=BUFFER),
                                         scope=BUFFER), "Winograd"),
    (lambda: conv.depthwise_conv2d_nchw4c((1, 8, 8, 8), (8, 1, 3, 3), prologue=Prologue(data_layout="NHWC"), scope=TEXTURE),
     "from a buffer"),
    (lambda: conv.conv2d_nchw4c((1, 6, 8, 8), (6, 2, 3, 3), groups=3, prologue=Prologue(data_layout="NHWC"), scope=BUFFER),
     "blocked path"),
])
def test_plain_io_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()
