"""Hypothesis strategies shared by the kernel properties, and the examples every CI run hits.

``@example``s run on every run in addition to the drawn cases, so each conv property sees a
3x3 conv and a block-aligned grouped conv (C/groups and O/groups multiples of 4) whatever
the ``ci`` profile's few random draws are.
"""

import dataclasses
import itertools

from hypothesis import assume
from hypothesis import strategies as st

from primfuncs.conv import winograd as wg
from primfuncs._common import BUFFER, TEXTURE
from primfuncs.conv import ConvConfig
from primfuncs.conv.config import MAX_LOCAL_BYTES
from primfuncs.conv.prologue import Prologue
from primfuncs.conv.tiled import tiled_local_bytes
from primfuncs.epilogue import ACTIVATIONS, Epilogue
from tir_adreno.reference import REDUCTIONS

SEEDS = st.integers(0, 2**32 - 1)
SCOPES = st.sampled_from([TEXTURE, BUFFER])
#: (N, C, H, W, seed) of a small NCHW tensor: C not a multiple of 4, odd sizes.
NCHW_SEEDS = st.tuples(st.integers(1, 3), st.integers(1, 13), st.integers(1, 9), st.integers(1, 9), SEEDS)
WORK_GROUPS = [(1, 1, 1), (4, 2, 1), (8, 4, 1), (2, 2, 2)]
#: ``ConvConfig.flat`` work groups: 1-D, one not dividing the grid, one larger than small grids.
FLAT_WORK_GROUPS = [(1, 1, 1), (7, 1, 1), (64, 1, 1)]


@st.composite
def epilogues(draw):
    return Epilogue(bias=draw(st.booleans()), activation=draw(st.sampled_from(ACTIVATIONS)), residual=draw(st.booleans()))


@st.composite
def conv_configs(draw):
    flat = draw(st.booleans())  # a 1-D grid in output memory order, or the 3-D one
    return ConvConfig(
        oc_block=draw(st.integers(1, 4)), w_block=draw(st.integers(1, 4)),
        work_group=draw(st.sampled_from(FLAT_WORK_GROUPS if flat else WORK_GROUPS)), flat=flat,
    )


@st.composite
def tiled_configs(draw):
    """Configs of the local-memory tiled kernel (``ConvConfig.tiled``): odd work groups and K
    slices too, within the local memory every GPU has."""
    work_group = draw(st.sampled_from([(2, 2, 1), (4, 2, 1), (3, 5, 1), (8, 4, 1), (16, 8, 1)]))
    config = ConvConfig(
        oc_block=draw(st.integers(1, 4)), w_block=draw(st.integers(1, 4)), work_group=work_group,
        split_k=draw(st.sampled_from([s for s in (1, 1, 2, 3, 4) if s * work_group[0] * work_group[1] <= 256])),
        tiled=True, k_chunk=draw(st.integers(1, 8)),
    )
    assume(tiled_local_bytes(config) <= MAX_LOCAL_BYTES)
    return config


@st.composite
def conv_cases(draw, depthwise=False):
    """A small conv2d: odd sizes, C/O not multiples of 4, asymmetric padding, groups."""
    n = draw(st.integers(1, 3))
    kh, kw = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    # Dilation up to 3 while the dilated window still fits 12 pixels.
    dh = draw(st.integers(1, min(3, 11 // max(kh - 1, 1))))
    dw = draw(st.integers(1, min(3, 11 // max(kw - 1, 1))))
    # Padding up to the dilated kernel's extent - 1 (any value is legal; larger only adds zeros).
    pad = tuple(draw(st.integers(0, min(d * (k - 1), 3))) for d, k in ((dh, kh), (dw, kw), (dh, kh), (dw, kw)))
    pt, pl, pb, pr = pad
    h = draw(st.integers(max(1, dh * (kh - 1) + 1 - pt - pb), 12))
    w = draw(st.integers(max(1, dw * (kw - 1) + 1 - pl - pr), 12))
    if depthwise:
        c = draw(st.integers(1, 12))
        o, groups = c * draw(st.integers(1, 4)), c
    else:
        groups = draw(st.sampled_from([1, 1, 2, 3, 4]))
        c = groups * draw(st.integers(1, max(1, 12 // groups)))
        o = groups * draw(st.integers(1, max(1, 12 // groups)))
    config = draw(conv_configs())
    # The depthwise window-in-registers body (multiplier 1) half the time; not for C = 1, which
    # is a dense conv to the strategy (``ConvGeometry.is_depthwise`` needs groups > 1).
    if depthwise and o == c > 1:
        config = dataclasses.replace(config, register_window=draw(st.booleans()))
    return dict(
        data_shape=(n, c, h, w), weight_shape=(o, c // groups, kh, kw), strides=(sh, sw), padding=pad,
        dilation=(dh, dw), groups=groups, epilogue=draw(epilogues()), config=config,
    )


def conv_case(data_shape, weight_shape, groups=1, strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1),
              epilogue=Epilogue(bias=True, activation="relu", residual=True), config=ConvConfig(2, 2, (4, 2, 1))):
    """A fixed :func:`conv_cases` case (for ``@example``)."""
    return dict(data_shape=data_shape, weight_shape=weight_shape, strides=strides, padding=padding,
                dilation=dilation, groups=groups, epilogue=epilogue, config=config)


#: Every CI run: a 3x3 conv with padding, and a block-aligned grouped 3x3 conv (2 groups of 8 -> 8).
CONV_3X3 = conv_case((2, 6, 7, 9), (10, 6, 3, 3))
CONV_GROUPED_ALIGNED = conv_case((1, 16, 6, 5), (16, 8, 3, 3), groups=2, strides=(2, 1), padding=(1, 0, 1, 2))
#: The depthwise property's: a 3x3 depthwise conv with a channel multiplier of 2, and one on whole blocks.
DEPTHWISE_3X3 = conv_case((1, 6, 7, 9), (12, 1, 3, 3), groups=6)
DEPTHWISE_ALIGNED = conv_case((2, 8, 5, 6), (8, 1, 3, 3), groups=8, strides=(2, 2), padding=(0, 1, 2, 1))
#: MobileNet's stride-2 depthwise on the NVIDIA buffer schedule: 1-D grid (groups not dividing it),
#: window in registers, batch 2, a C tail.
DEPTHWISE_FLAT = conv_case((2, 7, 9, 8), (7, 1, 3, 3), groups=7, strides=(2, 2),
                           config=ConvConfig(1, 1, (32, 1, 1), register_window=True, flat=True))


@st.composite
def split_cases(draw):
    """A dense or block-aligned grouped conv with >= 2 input channel blocks, split 2..8 ways."""
    n = draw(st.integers(1, 2))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride = draw(st.integers(1, 2))
    pad = tuple(draw(st.integers(0, k - 1)) for k in (kh, kw, kh, kw))
    h, w = draw(st.integers(kh, 9)), draw(st.integers(kw, 9))
    groups = draw(st.sampled_from([1, 1, 2]))
    if groups == 1:
        c = draw(st.integers(8, 30))  # a tail block when C % 4 != 0
    else:
        c = groups * 4 * draw(st.integers(2, 3))  # aligned groups: C/groups and O/groups multiples of 4
    o = groups * 4 * draw(st.integers(1, 3)) if groups > 1 else draw(st.integers(1, 13))
    ocb, wb = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    split = draw(st.integers(2, 8))  # not a power of two either; more slices than blocks is clamped
    wg_ = draw(st.sampled_from([(1, 1, 1), (4, 2, 1), (2, 2, 2), (8, 1, 1)]))
    return dict(
        data_shape=(n, c, h, w), weight_shape=(o, c // groups, kh, kw), strides=stride, padding=pad, dilation=1,
        groups=groups, epilogue=draw(epilogues()), config=ConvConfig(ocb, wb, wg_, split),
    )


#: The split-k property's examples: a 3x3 conv over 3 channel blocks split 3 ways, an aligned grouped 3x3 split 2 ways.
SPLIT_3X3 = conv_case((1, 11, 6, 7), (6, 11, 3, 3), strides=1, dilation=1, config=ConvConfig(2, 2, (4, 2, 1), 3))
SPLIT_GROUPED_ALIGNED = conv_case((2, 16, 5, 5), (8, 8, 3, 3), groups=2, strides=2, padding=(1, 1, 0, 0),
                                  dilation=1, config=ConvConfig(1, 2, (2, 2, 2), 2))


@st.composite
def winograd_cases(draw):
    """A small Winograd-eligible conv: odd sizes, maps smaller than a tile, C/O not multiples of 4."""
    pad = tuple(draw(st.integers(0, 2)) for _ in range(4))  # top, left, bottom, right
    h = draw(st.integers(max(1, 3 - pad[0] - pad[2]), 11))
    w = draw(st.integers(max(1, 3 - pad[1] - pad[3]), 11))
    return dict(
        m=draw(st.sampled_from(wg.TILE_SIZES)),
        data_shape=(draw(st.integers(1, 3)), draw(st.integers(1, 9)), h, w),
        out_channels=draw(st.integers(1, 9)),
        padding=pad,
        epilogue=draw(epilogues()),
        config=draw(conv_configs()),
        scope=draw(SCOPES),
    )


@st.composite
def upstream_conv_cases(draw):
    """(n, groups, C/groups, O/groups, H, W, K, stride, padding, seed) for upstream's generic conv."""
    return (
        draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 5)), draw(st.integers(1, 4)),
        draw(st.integers(1, 11)), draw(st.integers(1, 11)), draw(st.integers(1, 3)), draw(st.integers(1, 2)),
        draw(st.integers(0, 2)), draw(SEEDS),
    )


#: Upstream conv examples: a padded 3x3, and 2 block-aligned groups of 4 -> 4 (3x3).
UPSTREAM_3X3 = (1, 1, 5, 3, 7, 8, 3, 1, 1, 0)
UPSTREAM_GROUPED_ALIGNED = (1, 2, 4, 4, 6, 5, 3, 2, 1, 1)


# -- pooling and reductions ----------------------------------------------------------------
#: The schedules the pooling and reduction properties force: a work item or a work group per output.
STRATEGIES = ["thread", "group"]


@st.composite
def pool_cases(draw):
    """A small pooling case: any window, dilation, stride and padding up to half the window span."""
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    span_h, span_w = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    top, bottom = draw(st.integers(0, span_h // 2)), draw(st.integers(0, span_h // 2))
    left, right = draw(st.integers(0, span_w // 2)), draw(st.integers(0, span_w // 2))
    return dict(
        n=draw(st.integers(1, 2)),
        c=draw(st.integers(1, 9)),
        h=draw(st.integers(max(1, span_h - top - bottom), span_h + 6)),
        w=draw(st.integers(max(1, span_w - left - right), span_w + 6)),
        pool_type=draw(st.sampled_from(["max", "avg"])),
        pool_size=(kh, kw),
        strides=(draw(st.integers(1, 3)), draw(st.integers(1, 3))),
        padding=(top, left, bottom, right),
        dilation=(dh, dw),
        ceil_mode=draw(st.booleans()),
        count_include_pad=draw(st.booleans()),
        scope=draw(SCOPES),
        group_size=draw(st.sampled_from([2, 4, 64])),  # 2, 4: several rounds of taps per work item
        seed=draw(SEEDS),
    )


#: ``@given(**ADAPTIVE_POOL_ARGS)``: an input and an output size per dim of grow + input's.
ADAPTIVE_POOL_ARGS = dict(
    n=st.integers(1, 2), c=st.integers(1, 9), h=st.integers(1, 10), w=st.integers(1, 10),
    grow=st.tuples(st.integers(-9, 3), st.integers(-9, 3)),  # output smaller or larger than the input
    pool_type=st.sampled_from(["max", "avg"]), scope=SCOPES,
    strategy=st.sampled_from(STRATEGIES), seed=SEEDS,
)

#: Every non-empty subset of the C, H, W axes.
REDUCE_AXES = [a for r in (1, 2, 3) for a in itertools.combinations((1, 2, 3), r)]
#: ``@given(**REDUCE_ARGS)``: a reduction over any of C, H, W.
REDUCE_ARGS = dict(
    n=st.integers(1, 2), c=st.integers(1, 11), h=st.integers(1, 7), w=st.integers(1, 7),
    op=st.sampled_from(sorted(REDUCTIONS)), axis=st.sampled_from(REDUCE_AXES), negative_axes=st.booleans(),
    keepdims=st.booleans(), scope=SCOPES, group_size=st.sampled_from([2, 64]),
    seed=SEEDS,
)
#: ``@given(**SOFTMAX_ARGS)``: a softmax over C.
SOFTMAX_ARGS = dict(
    n=st.integers(1, 2), c=st.integers(1, 11), h=st.integers(1, 4), w=st.integers(1, 4),
    scale=st.sampled_from([1.0, 60.0]),  # 60: exp(x) alone would overflow float32
    scope=SCOPES, seed=SEEDS,
)


# -- the fused depthwise -> 1x1 conv ------------------------------------------------------------


@st.composite
def fused_cases(draw):
    """A small depthwise (3x3 or 1x1, stride 1 or 2, asymmetric padding) -> 1x1 pair."""
    n, c, o = draw(st.integers(1, 2)), draw(st.integers(1, 10)), draw(st.integers(1, 10))
    k = draw(st.sampled_from([3, 3, 1]))
    stride = draw(st.integers(1, 2))
    padding = tuple(draw(st.integers(0, k // 2)) for _ in range(4))
    h, w = draw(st.integers(k, 9)), draw(st.integers(k, 9))
    dw_epilogue = Epilogue(bias=draw(st.booleans()), activation=draw(st.sampled_from([None, "relu6", "sigmoid"])))
    epilogue = Epilogue(bias=draw(st.booleans()), activation=draw(st.sampled_from([None, "relu", "relu6"])),
                        residual=draw(st.booleans()))
    grid = draw(st.sampled_from(["3d", "3d", "split", "flat"]))  # ConvConfig.flat: a 1-D grid of (g, 1, 1) groups
    work_group = (draw(st.sampled_from([1, 5, 16])), 1, 1) if grid == "flat" else draw(st.sampled_from(WORK_GROUPS))
    config = ConvConfig(draw(st.integers(1, 4)), draw(st.integers(1, 4)), work_group, split_k=2 if grid == "split" else 1,
                        flat=grid == "flat")
    return dict(data_shape=(n, c, h, w), dw_weight_shape=(c, 1, k, k), pw_weight_shape=(o, c, 1, 1), strides=stride,
                padding=padding, prologue=Prologue(depthwise=dw_epilogue), epilogue=epilogue, config=config)


# MobileNetV2's block tails: stride 1 with the residual add, stride 2 without (C and O tails).
STRIDE1_RESIDUAL = dict(data_shape=(1, 6, 7, 9), dw_weight_shape=(6, 1, 3, 3), pw_weight_shape=(9, 6, 1, 1), strides=1,
                        padding=1, prologue=Prologue(depthwise=Epilogue(bias=True, activation="relu6")),
                        epilogue=Epilogue(bias=True, residual=True), config=ConvConfig(2, 3, (4, 2, 1)))
