"""EdgeNeXt's hierarchical split depthwise conv, one step per launch
(``primfuncs.hierarchical.hierarchical_depthwise``) against float64 NumPy: the conv of
``P[c - width] + X[c]`` over channels ``[begin, begin + width)``, the channels before copied from
``P`` (or ``X`` at step 0), the rest from ``X``; a whole chain of steps against timm's block
written in NumPy. Fresh random inputs, NaN-poisoned outputs (every pixel written, padded lanes
0), both scopes, float32 and float16_acc32 (half images and buffers, float32 arithmetic), chunk
boundaries inside 4-lane blocks, even and odd kernels, a constant map added or not, half of the
examples under the texture bounds sanitizer."""

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from helpers.conv import CONV_RTOL, check_blocked_output
from helpers.numeric import as_read, assert_close, pack_nchw4c, rand, run_kernel, sanitized, unpack_nchw4c
from helpers.strategies import SEEDS

from primfuncs import hierarchical
from primfuncs._common import BUFFER, TEXTURE
from tir_adreno.codegen import build
from tir_adreno.reference import conv2d_nchw
from tir_adreno.strategy.packing import pack_channel_range

#: float16_acc32: the output's half rounding (2^-11 of each element) dominates.
HALF_RTOL = 2.0**-10


@st.composite
def steps(draw):
    """(n, channels, h, w, begin, width, kernel (kh, kw), padding, previous, addend): chunks of
    1..6 channels (boundaries anywhere in a block), the step's chunk at any position, channels after
    it or not, 1x1 up to 5x5 kernels (even ones padded unevenly), maps down to 1x1, a constant map
    added or not."""
    width, index = draw(st.integers(1, 6)), draw(st.integers(0, 3))
    previous = index > 0 and draw(st.booleans())
    begin = index * width
    channels = begin + width + draw(st.integers(0, 5))
    kh, kw = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    top, left = draw(st.integers(0, kh - 1)), draw(st.integers(0, kw - 1))
    return (draw(st.integers(1, 2)), channels, draw(st.integers(1, 6)), draw(st.integers(1, 7)), begin, width, (kh, kw),
            (top, left, kh - 1 - top, kw - 1 - left), previous, draw(st.booleans()))


def reference_step(x, p, w, b, a, begin, padding, previous):
    """One step in float64 (the factory's formula); ``p`` None without ``previous``, ``a`` (C, H, W)
    None without an addend."""
    width = w.shape[0]
    y = np.array(p if previous else x, np.float64)
    y[:, begin + width :] = x[:, begin + width :]
    z = x[:, begin : begin + width] + (p[:, begin - width : begin] if previous else 0)
    y[:, begin : begin + width] = conv2d_nchw(z, w, padding=padding, groups=width) + b[None, :, None, None]
    return y if a is None else y + a[None]


def run_step(device, case, x, p, w, b, a, scope, precision):
    n, channels, h, w_, begin, width, kernel, padding, previous, addend = case
    func = hierarchical.hierarchical_depthwise((n, -(-channels // 4), h, w_, 4), channels, begin, width, kernel, padding, previous,
                                               addend=addend, scope=scope)
    inputs = [pack_nchw4c(x), *([pack_nchw4c(p)] if previous else []), pack_channel_range(w[:, 0], channels, begin),
              pack_channel_range(b, channels, begin), *([pack_channel_range(a, channels, 0)] if addend else [])]
    half = precision == "float16_acc32"
    y = run_kernel(device, func, *inputs, storage="float16" if half and scope == TEXTURE else None, half=build.ALL_BUFFERS if half else ())
    check_blocked_output(y, channels)
    return unpack_nchw4c(y, channels)


@given(case=steps(), scope=st.sampled_from([TEXTURE, BUFFER]), precision=st.sampled_from(["float32", "float16_acc32"]), seed=SEEDS)
@example(case=(1, 88, 3, 4, 30, 30, (3, 3), (1, 1, 1, 1), True, False), scope=TEXTURE, precision="float32", seed=0)  # EdgeNeXt-XXS stage 3, step 1
@example(case=(2, 11, 5, 3, 6, 3, (2, 4), (0, 2, 1, 1), True, True), scope=BUFFER, precision="float16_acc32", seed=1)
@example(case=(1, 7, 1, 1, 0, 7, (3, 3), (1, 1, 1, 1), False, True), scope=TEXTURE, precision="float32", seed=2)  # every channel, 1x1 map
def test_step_matches_numpy(device, case, scope, precision, seed):
    n, channels, h, w_, begin, width, kernel, padding, previous, addend = case
    rng = np.random.default_rng(seed)
    x, p = rand(rng, (n, channels, h, w_)), rand(rng, (n, channels, h, w_))
    w, b, a = rand(rng, (width, 1, *kernel)), rand(rng, (width,)), rand(rng, (channels, h, w_))
    with sanitized(seed):
        y = run_step(device, case, x, p, w, b, a, scope, precision)
    half = precision == "float16_acc32"
    ref = reference_step(*(as_read(v, half) for v in (x, p, w, b)), as_read(a, half) if addend else None, begin, padding, previous)
    assert_close(y, ref, HALF_RTOL if half else CONV_RTOL)


def timm_block(x, ws, bs, padding):
    """timm's SplitTransposeBlock split convs in float64: ``x.chunk(k + 1)``, ``sp = conv_i(sp +
    spx[i])``, ``cat``."""
    width = ws[0].shape[0]
    spx = [x[:, i * width : (i + 1) * width] for i in range(len(ws))] + [x[:, len(ws) * width :]]
    out, sp = [], None
    for i, (w, b) in enumerate(zip(ws, bs)):
        sp = spx[i] if i == 0 else sp + spx[i]
        sp = conv2d_nchw(sp, w, padding=padding, groups=width) + b[None, :, None, None]
        out.append(sp)
    return np.concatenate(out + [spx[-1]], axis=1)


@pytest.mark.parametrize("channels, steps_", [(48, 1), (88, 2), (168, 3), (13, 3)])
def test_chain_is_the_timm_block(device, channels, steps_):
    """``steps_`` launches, each reading the previous one's map, give timm's block (EdgeNeXt-XXS's
    three: 48 = 24 + 24, 88 = 30 + 30 + 28, 168 = 4 x 42; and 13 = 3 x 4 + 1, a last chunk of one
    channel)."""
    rng = np.random.default_rng(channels)
    width = -(-channels // (steps_ + 1))
    x = rand(rng, (1, channels, 7, 6))
    ws, bs = [rand(rng, (width, 1, 3, 3)) for _ in range(steps_)], [rand(rng, (width,)) for _ in range(steps_)]
    p = None
    for i in range(steps_):
        case = (1, channels, 7, 6, i * width, width, (3, 3), (1, 1, 1, 1), i > 0, False)
        p = run_step(device, case, x, p, ws[i], bs[i], None, TEXTURE, "float32")
    assert_close(p, timm_block(x.astype(np.float64), ws, bs, (1, 1, 1, 1)), CONV_RTOL)


def test_bad_arguments():
    shape = (1, 3, 4, 4, 4)
    with pytest.raises(ValueError, match="must lie in"):
        hierarchical.hierarchical_depthwise(shape, 12, 8, 5, (3, 3), (1, 1, 1, 1))
    with pytest.raises(ValueError, match="needs begin >= width"):
        hierarchical.hierarchical_depthwise(shape, 12, 3, 4, (3, 3), (1, 1, 1, 1), previous=True)
    with pytest.raises(ValueError, match="keep the map's size"):
        hierarchical.hierarchical_depthwise(shape, 12, 0, 4, (3, 3), (0, 0, 0, 0))
    with pytest.raises(ValueError, match="does not fill"):
        hierarchical.hierarchical_depthwise(shape, 5, 0, 4, (3, 3), (1, 1, 1, 1))
