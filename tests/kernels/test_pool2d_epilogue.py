"""Pooling, resize, concat and norm kernels with an expression epilogue (issue 34: map kernels are
anchors like the convs) against float64 NumPy: max/avg pool2d, adaptive/global average pooling (both
schedules), nearest/bilinear resize, channel concat, the layer norm over channels (both forms) and the
group norm (one kernel and the split form's apply), textures and buffers, float32 and float16_acc32
storage (half images or half buffers, float32 arithmetic).

The epilogue is the convs' (``primfuncs.epilogue.store_output_pixel``): per-channel constants packed
beside a bias, one other activation in full or broadcast per channel / per pixel, the padding lanes
of the last channel block kept 0 (sigmoid(0) = 0.5 would leak into them). Outputs are poisoned.
"""

import numpy as np
import pytest
from hypothesis import example, given, strategies as st

from helpers.conv import check_blocked_output
from helpers.numeric import assert_close, pack_nchw4c, rand, run_kernel, sanitized, unpack_nchw4c
from helpers.strategies import SEEDS, STRATEGIES
from primfuncs import epilogue_expr as ex
from primfuncs import concat, layernorm, pool2d, reduce, resize
from primfuncs._common import BUFFER, TEXTURE
from primfuncs.activation_table import numpy_activation
from primfuncs.epilogue import Epilogue
from tir_adreno import reference
from tir_adreno.codegen import build
from tir_adreno.strategy.packing import pack_bias

X = ex.X()
#: name -> (epilogue, number of per-channel constants after the bias, operand kind or None)
EPILOGUES = {
    "sigmoid_scale_minus_pixel": Epilogue(expr=ex.Binary("subtract", ex.Binary("multiply", ex.Unary("sigmoid", X), ex.Channel(0)),
                                                         ex.Operand("pixel"))),
    "relu_plus_full": Epilogue(expr=ex.Unary("relu", ex.Binary("add", X, ex.Operand("full")))),
    "tanh_times_channel_operand": Epilogue(expr=ex.Binary("add", ex.Unary("tanh", ex.Binary("multiply", ex.Operand("channel"), X)),
                                                          ex.Const(0.5))),
    "square_over_abs": Epilogue(expr=ex.Binary("divide", ex.Binary("pow", X, ex.Const(2.0)),
                                               ex.Binary("add", ex.Unary("abs", X), ex.Channel(0)))),
    "bias_leaky_then_expr": Epilogue(bias=True, activation="leaky_relu", activation_params=(("alpha", 0.2),),
                                     expr=ex.Binary("multiply", ex.Unary("gelu", X), ex.Channel(0))),
}
#: float16_acc32 against the reference of the half-rounded inputs: the output's rounding to half
#: (2^-11 relative) and float32 arithmetic, normwise
HALF_RTOL = 2e-3
RTOL = 1e-5


def _operand_shape(kind, n, c, oh, ow):
    return {"full": (n, c, oh, ow), "channel": (n, c, 1, 1), "pixel": (n, 1, oh, ow)}[kind]


def half(x):
    return np.asarray(x, np.float32).astype(np.float16).astype(np.float64)


def run_pool_epilogue(device, func, x, epilogue, c, out_hw, rng, scope, storage, params=()):
    """(blocked output, float64 reference of the epilogue on ``pooled``-to-be): the kernel run on ``x``
    (a map, or a list of maps: a concat's), then ``params`` (a norm's: arrays as the kernel takes
    them), with fresh random constants and operand; ``storage``
    "float16": half images (textures) or half buffers (buffers), else float32. Returns (blocked
    output, the inputs as the kernel saw them)."""
    maps = x if isinstance(x, list) else [x]
    n = maps[0].shape[0]
    oh, ow = out_hw
    bias = rand(rng, (c,)) if epilogue.bias else None
    channels = [rng.uniform(0.5, 2.0, c).astype(np.float32) for _ in range(epilogue.channel_rows)]  # > 0: divides
    kind = epilogue.operand_kinds[0] if epilogue.operand_kinds else None  # a pool reads one
    operand = rand(rng, _operand_shape(kind, n, c, oh, ow)) if kind is not None else None
    inputs = [pack_nchw4c(m) for m in maps] + list(params)
    rows = ([bias] if bias is not None else []) + channels
    if rows:
        inputs.append(np.concatenate([pack_bias(r) for r in rows], axis=1))
    if operand is not None:
        inputs.append(pack_nchw4c(operand))
    on_half_buffers = storage == "float16" and scope == BUFFER
    y = run_kernel(device, func, *inputs, storage=storage if scope == TEXTURE else None,
                   half=build.ALL_BUFFERS if on_half_buffers else frozenset())
    rounded = half if storage == "float16" else (lambda v: np.asarray(v, np.float64))
    seen = dict(x=[rounded(m) for m in maps] if isinstance(x, list) else rounded(x), bias=None if bias is None else (rounded(bias) if on_half_buffers else bias),
                channels=[rounded(r) if on_half_buffers else r for r in channels],
                operand=None if operand is None else rounded(operand))
    return y, seen


def epilogue_reference(pooled, epilogue, seen):
    y = pooled if seen["bias"] is None else pooled + np.asarray(seen["bias"], np.float64).reshape(1, -1, 1, 1)
    if epilogue.activation is not None:
        y = numpy_activation(y, epilogue.activation, **dict(epilogue.activation_params))
    return ex.numpy_evaluate(epilogue.expr, y, operands=[] if seen["operand"] is None else [seen["operand"]],
                             channels=seen["channels"])


def check(y, ref, c, storage):
    check_blocked_output(y, c)  # every pixel written, padding lanes 0
    got = unpack_nchw4c(y, c)
    if storage == "float16":
        assert np.array_equal(got, got.astype(np.float16).astype(np.float32)), "not stored in half"
    assert_close(got, ref, HALF_RTOL if storage == "float16" else RTOL)


@st.composite
def windows(draw):
    """A sliding window (dilation 1, padding up to half the window: every window holds an input)."""
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    pads = tuple(draw(st.integers(0, k // 2)) for k in (kh, kw, kh, kw))
    return dict(pool_size=(kh, kw), strides=(draw(st.integers(1, 2)), draw(st.integers(1, 2))), padding=pads,
                ceil_mode=draw(st.booleans()), count_include_pad=draw(st.booleans()))


STORAGES = st.sampled_from([None, "float16"])


@example(pool_type="avg", window=dict(pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), ceil_mode=True, count_include_pad=False),
         name="sigmoid_scale_minus_pixel", c=6, h=7, w=6, scope=TEXTURE, strategy="group", storage="float16", seed=0)
@example(pool_type="max", window=dict(pool_size=(2, 2), strides=(2, 2), padding=(0, 0, 0, 0), ceil_mode=False, count_include_pad=False),
         name="bias_leaky_then_expr", c=5, h=6, w=6, scope=BUFFER, strategy="thread", storage="float16", seed=2)
@given(pool_type=st.sampled_from(["max", "avg"]), window=windows(), name=st.sampled_from(sorted(EPILOGUES)),
       c=st.integers(1, 9), h=st.integers(3, 8), w=st.integers(3, 8), scope=st.sampled_from([TEXTURE, BUFFER]),
       strategy=st.sampled_from(STRATEGIES), storage=STORAGES, seed=SEEDS)
def test_pool2d_with_an_expression_epilogue(device, pool_type, window, name, c, h, w, scope, strategy, storage, seed):
    rng = np.random.default_rng(seed)
    epilogue = EPILOGUES[name]
    x = rand(rng, (1, c, h, w))
    with sanitized(seed):
        func = pool2d.pool2d(pack_nchw4c(x).shape, pool_type, **window, scope=scope, strategy=strategy, group_size=4,
                             epilogue=epilogue, channels=c)
        out5 = pool2d.pool2d_output_shape(pack_nchw4c(x).shape, window["pool_size"], window["strides"], window["padding"],
                                          ceil_mode=window["ceil_mode"])
        y, seen = run_pool_epilogue(device, func, x, epilogue, c, out5[2:4], rng, scope, storage)
    pooled = reference.pool2d(seen["x"], pool_type, window["pool_size"], window["strides"], window["padding"], (1, 1),
                              window["ceil_mode"], window["count_include_pad"])
    check(y, epilogue_reference(pooled, epilogue, seen), c, storage)


@given(name=st.sampled_from(sorted(EPILOGUES)), n=st.integers(1, 2), c=st.integers(1, 9), h=st.integers(1, 9),
       w=st.integers(1, 9), out=st.sampled_from([(1, 1), (2, 3)]), scope=st.sampled_from([TEXTURE, BUFFER]),
       strategy=st.sampled_from(STRATEGIES), storage=STORAGES, seed=SEEDS)
def test_adaptive_and_global_average_pool_with_an_expression_epilogue(device, name, n, c, h, w, out, scope, strategy, storage, seed):
    """``out`` (1, 1): the global average pool of a classifier head or an SE block."""
    rng = np.random.default_rng(seed)
    epilogue = EPILOGUES[name]
    x = rand(rng, (n, c, h, w))
    with sanitized(seed):
        func = pool2d.adaptive_avg_pool2d(pack_nchw4c(x).shape, out, scope=scope, strategy=strategy, group_size=8,
                                          epilogue=epilogue, channels=c)
        y, seen = run_pool_epilogue(device, func, x, epilogue, c, out, rng, scope, storage)
    check(y, epilogue_reference(reference.adaptive_pool2d(seen["x"], "avg", out), epilogue, seen), c, storage)


@example(method="nearest", mode="asymmetric", name="relu_plus_full", c=6, size=(4, 3), out=(8, 6), scope=TEXTURE, storage=None, seed=0)
@given(method=st.sampled_from(resize.METHODS), mode=st.sampled_from(resize.COORDINATE_MODES), name=st.sampled_from(sorted(EPILOGUES)),
       c=st.integers(1, 9), size=st.tuples(st.integers(1, 6), st.integers(1, 6)), out=st.tuples(st.integers(1, 9), st.integers(1, 9)),
       scope=st.sampled_from([TEXTURE, BUFFER]), storage=STORAGES, seed=SEEDS)
def test_resize_with_an_expression_epilogue(device, method, mode, name, c, size, out, scope, storage, seed):
    """The example: GhostNet-v2's gate ``x * upsample(g)`` and FPN's ``upsample(p) + lateral`` read a
    full-size operand beside the upsampled value."""
    rng = np.random.default_rng(seed)
    epilogue = EPILOGUES[name]
    x = rand(rng, (1, c, *size))
    with sanitized(seed):
        func = resize.resize2d(pack_nchw4c(x).shape, out, method, mode, scope=scope, epilogue=epilogue, channels=c)
        y, seen = run_pool_epilogue(device, func, x, epilogue, c, out, rng, scope, storage)
    check(y, epilogue_reference(reference.resize2d_nchw(seen["x"], out, method, mode), epilogue, seen), c, storage)


@example(name="relu_plus_full", chans=(4, 8), h=3, w=4, scope=TEXTURE, storage=None, seed=0)  # GhostNet's cat + shortcut
# 5 channels: 3 padded lanes in the last block, where the expression of 0 is 0.5 (tanh(0) + 0.5), not 0
@example(name="tanh_times_channel_operand", chans=(3, 2), h=3, w=2, scope=BUFFER, storage=None, seed=1)
@given(name=st.sampled_from(sorted(EPILOGUES)), chans=st.lists(st.integers(1, 9), min_size=2, max_size=concat.MAX_INPUTS).map(tuple),
       h=st.integers(1, 6), w=st.integers(1, 6), scope=st.sampled_from([TEXTURE, BUFFER]), storage=STORAGES, seed=SEEDS)
def test_concat_with_an_expression_epilogue(device, name, chans, h, w, scope, storage, seed):
    """Aligned parts (each a multiple of 4 channels: one block read per output block) and parts whose
    lanes straddle blocks; the padded lanes of the last block stay 0."""
    rng = np.random.default_rng(seed)
    epilogue = EPILOGUES[name]
    maps = [rand(rng, (1, c, h, w)) for c in chans]
    with sanitized(seed):
        func = concat.concat_channels(1, chans, h, w, scope=scope, epilogue=epilogue)
        y, seen = run_pool_epilogue(device, func, maps, epilogue, sum(chans), (h, w), rng, scope, storage)
    check(y, epilogue_reference(np.concatenate(seen["x"], axis=1), epilogue, seen), sum(chans), storage)


def test_the_epilogue_adds_only_the_inputs_it_reads():
    shape = (1, 2, 6, 6, 4)
    names = lambda f: [p.name for p in f.params]  # noqa: E731
    assert len(names(pool2d.max_pool2d(shape, 2))) == 2
    assert len(names(pool2d.max_pool2d(shape, 2, epilogue=Epilogue(expr=ex.Unary("tanh", X)), channels=7))) == 2
    assert len(names(pool2d.max_pool2d(shape, 2, epilogue=EPILOGUES["relu_plus_full"], channels=7))) == 3
    assert len(names(pool2d.max_pool2d(shape, 2, epilogue=EPILOGUES["sigmoid_scale_minus_pixel"], channels=7))) == 4
    assert len(names(resize.resize2d(shape, (12, 12)))) == 2
    assert len(names(resize.resize2d(shape, (12, 12), epilogue=EPILOGUES["relu_plus_full"], channels=7))) == 3
    with pytest.raises(ValueError, match="resize epilogue writes the blocked output"):
        resize.resize2d(shape, (12, 12), epilogue=Epilogue(out_layout="NHWC"), channels=7)


def test_bad_epilogues_are_refused():
    shape = (1, 2, 6, 6, 4)
    with pytest.raises(TypeError, match="epilogue must be an Epilogue"):
        pool2d.max_pool2d(shape, 2, epilogue="relu")
    with pytest.raises(ValueError, match="pooling epilogue writes the blocked output"):
        pool2d.max_pool2d(shape, 2, epilogue=Epilogue(expr=ex.Unary("tanh", X), out_layout="NHWC"))
    with pytest.raises(ValueError, match="channels=9 does not fill"):
        pool2d.max_pool2d(shape, 2, epilogue=Epilogue(expr=ex.Unary("tanh", X)), channels=9)
    with pytest.raises(ValueError, match="pooling epilogue writes the blocked output"):  # a float32 sum of a half map
        reduce.reduce(shape, 7, "sum", (2, 3), dtype="float16", out_dtype="float32", epilogue=Epilogue(expr=ex.Unary("tanh", X)))
    with pytest.raises(ValueError, match="pooling epilogue writes the blocked output"):  # a mean over C folds the lanes
        reduce.reduce(shape, 7, "mean", (1,), epilogue=Epilogue(expr=ex.Unary("tanh", X)))


@pytest.mark.parametrize("scope, operand_scope", [(TEXTURE, BUFFER), (BUFFER, TEXTURE)])
def test_the_operand_is_read_where_it_lives(device, scope, operand_scope):
    """At a placement boundary the rule passes the operand's own scope (``residual_scope``): a texture
    pool reading a buffer operand and the other way round, no copy kernel."""
    from dataclasses import replace

    rng = np.random.default_rng(12)
    epilogue = replace(EPILOGUES["relu_plus_full"], residual_scope=operand_scope)
    x, c = rand(rng, (1, 7, 9, 8)), 7
    func = pool2d.max_pool2d(pack_nchw4c(x).shape, 3, 2, 1, scope=scope, epilogue=epilogue, channels=c)
    assert [b.scope() for b in func.params] == [scope, operand_scope, scope]  # A, Residual, Out
    y, seen = run_pool_epilogue(device, func, x, epilogue, c, (5, 4), rng, scope, None)
    pooled = reference.pool2d(seen["x"], "max", (3, 3), (2, 2), (1, 1, 1, 1))
    check(y, epilogue_reference(pooled, epilogue, seen), c, None)


NORM_FORMS = ("layer_norm", "layer_norm_wide", "group_norm", "group_norm_apply")


@example(form="group_norm_apply", name="relu_plus_full", groups=2, c=8, h=3, w=5, scope=TEXTURE, storage="float16", seed=0)
@example(form="layer_norm", name="sigmoid_scale_minus_pixel", groups=1, c=7, h=2, w=3, scope=BUFFER, storage="float16", seed=1)
@given(form=st.sampled_from(NORM_FORMS), name=st.sampled_from(sorted(EPILOGUES)), groups=st.sampled_from([1, 2]),
       c=st.integers(2, 12), h=st.integers(1, 5), w=st.integers(1, 5), scope=st.sampled_from([TEXTURE, BUFFER]),
       storage=STORAGES, seed=SEEDS)
def test_norms_with_an_expression_epilogue(device, form, name, groups, c, h, w, scope, storage, seed):
    """The norm of each pixel's channels (layer norm) or of each (sample, group) (group norm: ``c`` a
    multiple of 4 per group), times gamma plus beta, then the epilogue. Gamma and beta are multiples
    of 1/4 (exact in half buffers); the split form's apply reads float32 partials computed here."""
    rng = np.random.default_rng(seed)
    epilogue = EPILOGUES[name]
    groups = 1 if form.startswith("layer") else groups
    c = 4 * groups * max(1, c // (4 * groups)) if groups > 1 else c
    x = rand(rng, (1, c, h, w))
    gamma, beta = (rng.integers(-8, 9, c) / 4.0 for _ in range(2))
    shape, eps = pack_nchw4c(x).shape, 1e-5
    slices = min(2, (shape[1] // groups) * h * w)
    with sanitized(seed):
        if form == "layer_norm":
            func = layernorm.layer_norm_channels(shape, c, eps, scope=scope, epilogue=epilogue)
        elif form == "layer_norm_wide":
            func = layernorm.layer_norm_channels_wide(shape, c, eps, scope=scope, threads=2, epilogue=epilogue)
        elif form == "group_norm":
            func = layernorm.group_norm(shape, c, groups, eps, scope=scope, threads=4, epilogue=epilogue)
        else:
            func = layernorm.group_norm_apply(shape, c, groups, slices, eps, scope=scope, threads=4, epilogue=epilogue)
        rounded = half(x) if storage == "float16" and scope == TEXTURE else x  # the split form's partials: of x as stored
        partials = [reference.group_norm_partials(rounded, groups, slices).astype(np.float32)] if form == "group_norm_apply" else []
        params = [*partials, pack_bias(gamma.astype(np.float32)), pack_bias(beta.astype(np.float32))]
        y, seen = run_pool_epilogue(device, func, x, epilogue, c, (h, w), rng, scope, storage, params)
    if groups == 1 and form.startswith("layer"):
        normalized = reference.layer_norm(seen["x"], np.ones(c), np.zeros(c), axis=1, epsilon=eps)
    else:
        normalized = reference.group_norm(seen["x"], groups, eps)
    check(y, epilogue_reference(normalized * gamma.reshape(1, -1, 1, 1) + beta.reshape(1, -1, 1, 1), epilogue, seen), c, storage)


def test_a_norm_takes_the_epilogue_inputs_it_reads():
    shape = (1, 2, 3, 3, 4)
    names = lambda f: [p.name for p in f.params]  # noqa: E731
    assert names(layernorm.layer_norm_channels(shape, 7)) == ["X", "Gamma", "Beta", "Y"]
    assert names(layernorm.layer_norm_channels(shape, 7, epilogue=EPILOGUES["sigmoid_scale_minus_pixel"])) == \
        ["X", "Gamma", "Beta", "Bias", "Residual", "Y"]
    assert names(layernorm.group_norm_apply(shape, 8, 2, 2, epilogue=EPILOGUES["relu_plus_full"])) == \
        ["X", "P", "Gamma", "Beta", "Residual", "Y"]
    with pytest.raises(ValueError, match="group norm epilogue writes the blocked output"):
        layernorm.group_norm(shape, 8, 2, epilogue=Epilogue(expr=ex.Unary("tanh", X), out_layout="NHWC"))
