"""The row kernels on plain tensors (``primfuncs.rows``: softmax, layer norm, RMS norm, reductions,
the per-channel affine) against float64 NumPy: random ranks, shapes (odd sizes, rows longer than
the work group) and axes (the last: contiguous rows; others: strided rows), random work groups;
float32 and float16_acc32 (the float32 kernel on half buffers: statistics float32, a row whose
half sum overflows), on NaN-poisoned outputs. Plain buffers only: no image is read, so there is
nothing for the bounds sanitizer to check."""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from helpers.numeric import as_read, rand, run_kernel
from primfuncs import gather, rows
from tir_adreno.codegen import build
from test_gather import chains

U32 = 2.0**-24  # float32 unit roundoff
HALF_RTOL = 2.0**-11  # float16_acc32: the output rounded to half once
HALF_ABS = 2.0**-25  # ... where it is below half's normal range: half its smallest subnormal
THREADS = st.sampled_from([1, 2, 8, 32, 64, 256])
PRECISIONS = st.sampled_from(["float32", "float16_acc32"])


@st.composite
def shapes_and_axis(draw, max_rank=4):
    """(shape, axis): rank 1-4, dims 1-13 but the reduced one, which is up to 300 (a token row longer
    than a work group of 64 or 256)."""
    rank = draw(st.integers(1, max_rank))
    shape = [draw(st.integers(1, 13)) for _ in range(rank)]
    axis = draw(st.integers(-rank, rank - 1))
    shape[axis] = draw(st.sampled_from([1, 3, 5, 17, 64, 197, 300]))
    return tuple(shape), axis


def _run(device, func, inputs, half: bool):
    got = run_kernel(device, func, *inputs, half=build.ALL_BUFFERS if half else ())
    assert np.all(np.isfinite(got)), "an output element was not written (poison survived)"
    return got


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@given(case=shapes_and_axis(), threads=THREADS, precision=PRECISIONS, seed=st.integers(0, 2**32 - 1),
       offset=st.sampled_from([0.0, 100.0]))
@example(case=((2, 3, 197, 197), -1), threads=64, precision="float32", seed=1, offset=0.0)  # DeiT's attention rows
@example(case=((4, 300, 3), 1), threads=64, precision="float16_acc32", seed=2, offset=100.0)  # strided rows
@example(case=((1, 7), 0), threads=256, precision="float32", seed=3, offset=100.0)  # more items than elements
def test_softmax_rows(device, case, threads, precision, seed, offset):
    """Softmax over any axis within float32's error of the float64 reference (``(L + 8) u`` of each
    value), plus half's rounding under float16_acc32; inputs around ``offset`` = 100 with a spread
    of 20 overflow ``exp`` unless the row's max is subtracted first."""
    shape, axis = case
    half = precision == "float16_acc32"
    x = rand(np.random.default_rng(seed), shape) * 20 + np.float32(offset)
    got = _run(device, rows.softmax(shape, axis, threads=threads), [x], half)
    ref = _softmax(as_read(x, half), axis)
    length = shape[axis]
    bound = (length + 8) * 4 * U32 * ref + 1e-30 + (HALF_RTOL * ref + HALF_ABS if half else 0.0)
    assert np.all(np.abs(got - ref) <= bound), f"max error {float(np.max(np.abs(got - ref) - bound)):.3g} over the bound"


@given(case=shapes_and_axis(), rms=st.booleans(), threads=THREADS, precision=PRECISIONS, seed=st.integers(0, 2**32 - 1),
       eps=st.sampled_from([1e-5, 1e-6, 0.5]))
@example(case=((1, 197, 192), -1), rms=False, threads=64, precision="float32", seed=1, eps=1e-6)  # DeiT's norms
@example(case=((1, 2, 2048), -1), rms=False, threads=64, precision="float16_acc32", seed=2, eps=1e-5)  # half sum overflows
@example(case=((1, 3, 2048), -1), rms=True, threads=32, precision="float16_acc32", seed=3, eps=1e-5)
@example(case=((2, 5, 3, 7), 1), rms=False, threads=8, precision="float32", seed=4, eps=0.5)  # three trailing axes
def test_layer_norm_rows(device, case, rms, threads, precision, seed, eps):
    """Layer norm (or RMS norm) over the axes from ``axis`` to the last, gamma and beta of their
    shape, within float32's error; rows around 40 (a half sum of 2048 of them is past half's
    65504: float16_acc32 passes only with float32 statistics) and eps 0.5 (an eps dropped shows)."""
    shape, axis = case
    axis %= len(shape)
    half = precision == "float16_acc32"
    rng = np.random.default_rng(seed)
    x = rand(rng, shape) + np.float32(40.0 if shape[-1] >= 2048 else 0.0)
    gamma, beta = rand(rng, shape[axis:]), rand(rng, shape[axis:])
    func = rows.layer_norm(shape, axis, eps, threads=threads, rms=rms)
    got = _run(device, func, [x, gamma] + ([] if rms else [beta]), half)
    xs, g, b = as_read(x, half), as_read(gamma, half), as_read(beta, half)
    axes = tuple(range(axis, len(shape)))
    if rms:
        normalized = xs / np.sqrt(np.mean(xs * xs, axis=axes, keepdims=True) + eps)
        ref = normalized * g
    else:
        mean = xs.mean(axis=axes, keepdims=True)
        normalized = (xs - mean) / np.sqrt(xs.var(axis=axes, keepdims=True) + eps)
        ref = normalized * g + b
    length = int(np.prod(shape[axis:]))
    magnitude = np.abs(normalized * g) + (0.0 if rms else np.abs(b))
    # the mean's error relative to the row's spread grows with |mean| / std (rows around 40: x100)
    spread = np.abs(xs).max(axis=axes, keepdims=True) / np.maximum(np.sqrt(xs.var(axis=axes, keepdims=True) + eps), 1e-30)
    bound = (length + 16) * 4 * U32 * (magnitude + np.abs(g) * spread) + (HALF_RTOL * np.abs(ref) + HALF_ABS if half else 0.0)
    assert np.all(np.abs(got - ref) <= bound), f"max error {float(np.max(np.abs(got - ref) - bound)):.3g} over the bound"


@st.composite
def reductions(draw):
    """(shape, consecutive axes, op, keepdims)."""
    shape, axis = draw(shapes_and_axis())
    rank = len(shape)
    first = axis % rank
    last = draw(st.integers(first, rank - 1))
    return shape, tuple(range(first, last + 1)), draw(st.sampled_from(rows.ROW_OPS)), draw(st.booleans())


@given(case=reductions(), threads=THREADS, precision=PRECISIONS, seed=st.integers(0, 2**32 - 1))
@example(case=((1, 196, 384), (1,), "mean", False), threads=64, precision="float32", seed=1)  # LeViT's token mean
@example(case=((1, 7, 7, 24), (1, 2), "mean", True), threads=64, precision="float32", seed=2)  # a channels-last pool
@example(case=((2, 2048), (1,), "sum", True), threads=16, precision="float16_acc32", seed=3)  # sum past half's range
def test_reduce_rows(device, case, threads, precision, seed):
    """Sum, mean, max or min over consecutive axes, the output of the kept (or dropped) axes, within
    float32 summation's error of the absolute values' sum; max and min exact."""
    shape, axes, op, keepdims = case
    half = precision == "float16_acc32"
    x = rand(np.random.default_rng(seed), shape) + np.float32(40.0 if op == "sum" else 0.0)
    func = rows.reduce(shape, axes, op, keepdims, threads=threads)
    got = _run(device, func, [x], half and op != "sum")  # a half sum's output would overflow half itself
    xs = as_read(x, half and op != "sum")
    ref = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}[op](xs, axis=axes, keepdims=keepdims)
    scale = np.abs(xs).sum(axis=axes, keepdims=keepdims) / (np.prod([shape[a] for a in axes]) if op == "mean" else 1)
    assert got.shape == ref.shape
    length = int(np.prod([shape[a] for a in axes]))
    bound = (length + 4) * U32 * scale + (HALF_RTOL * np.abs(ref) + HALF_ABS if half and op != "sum" else 0.0)
    assert np.all(np.abs(got - ref) <= bound), f"max error {float(np.max(np.abs(got - ref) - bound)):.3g} over the bound"


def test_sum_of_a_long_half_row_is_float32(device):
    """float16_acc32: a row of 2048 values around 40 read from a half buffer sums to 81920, past
    half's largest 65504; the float32 kernel's float32 sum (written to a float32 output) is exact
    to float32's rounding."""
    x = (np.random.default_rng(5).standard_normal((3, 2048)) + 40).astype(np.float32)
    got = run_kernel(device, rows.reduce(x.shape, 1, "sum", False), x, half=frozenset({0}))
    ref = x.astype(np.float16).astype(np.float64).sum(axis=1)
    assert np.all(np.abs(got - ref) <= 2100 * U32 * ref)


@given(case=shapes_and_axis(max_rank=3), precision=PRECISIONS, seed=st.integers(0, 2**32 - 1))
@example(case=((2, 5, 9), 1), precision="float32", seed=1)  # BatchNorm1d on [N, C, L]
@example(case=((196, 128), 1), precision="float16_acc32", seed=2)  # LeViT's [L, C]
def test_channel_affine(device, case, precision, seed):
    """``x * scale[c] + shift[c]`` along any axis (a batch norm on tokens)."""
    shape, axis = case
    half = precision == "float16_acc32"
    rng = np.random.default_rng(seed)
    x, scale, shift = rand(rng, shape), rand(rng, (shape[axis],)), rand(rng, (shape[axis],))
    got = _run(device, rows.channel_affine(shape, axis), [x, scale, shift], half)
    view = [1] * len(shape)
    view[axis] = shape[axis]
    xs, s, b = as_read(x, half), as_read(scale, half).reshape(view), as_read(shift, half).reshape(view)
    ref = xs * s + b
    bound = 4 * U32 * (np.abs(xs * s) + np.abs(b)) + (HALF_RTOL * np.abs(ref) + HALF_ABS if half else 0.0)
    assert np.all(np.abs(got - ref) <= bound)


VIEWED = chains().filter(lambda c: gather.covers_all(gather.Source(0, c[2]), c[3]))  # no pad: every element read


@settings(deadline=None, max_examples=max(2, settings().max_examples // 4))  # each example builds two kernels
@given(case=VIEWED, op=st.sampled_from(["softmax", "layer_norm", "rms", "sum", "max"]), threads=THREADS,
       precision=PRECISIONS, seed=st.integers(0, 2**32 - 1), data=st.data())
@example(case=((1, 5, 12), lambda x: np.ascontiguousarray(x[:, :, 6:]), (gather.Affine((1, 5, 12), (0, 0, 6), (1, 1, 1)),), (1, 5, 6)),
         op="layer_norm", threads=2, precision="float32", seed=1, data=None)  # gMLP's chunk of the fc1 output, normalized
@example(case=((3, 4, 7), lambda x: np.ascontiguousarray(x.transpose(0, 2, 1)), (gather.Permute((0, 2, 1)),), (3, 7, 4)),
         op="softmax", threads=8, precision="float16_acc32", seed=2, data=None)  # rows strided in the buffer
@example(case=((1, 1, 3, 1), lambda x: np.ascontiguousarray(np.tile(x.reshape(3), 3)[5::-1]),
               (gather.Affine((9,), (5,), (-1,)), gather.Tile((3,)), gather.Reshape((1, 1, 3, 1))), (6,)),
         op="rms", threads=32, precision="float32", seed=3, data=None)  # a reversed slice of a tile: (5 - t) % 3
@example(case=((2, 6), lambda x: np.ascontiguousarray(x.reshape(12)[::-1].reshape(4, 3)),
               (gather.Reshape((12,)), gather.Affine((12,), (11,), (-1,)), gather.Reshape((2, 6))), (4, 3)),
         op="softmax", threads=8, precision="float32", seed=4, data=None)  # a reversed run reshaped: (11 - i) // 6
def test_rows_read_through_views(device, case, op, threads, precision, seed, data):
    """A row kernel reading its input through gather steps (``x_view``: slices, transposes,
    reshapes, tiles, broadcasts of the buffer) writes exactly what it writes on the gathered tensor
    stored: the same float32 arithmetic, only the addresses differ."""
    in_shape, apply, steps, out = case
    axis = data.draw(st.integers(0, len(out) - 1)) if data is not None else len(out) - 1
    x = np.random.default_rng(seed).standard_normal(in_shape).astype(np.float32)
    half = precision == "float16_acc32"

    def make(view):
        if op == "softmax":
            return rows.softmax(out, axis, threads=threads, x_view=view)
        if op in ("layer_norm", "rms"):
            return rows.layer_norm(out, axis, 1e-5, threads=threads, rms=op == "rms", x_view=view)
        return rows.reduce(out, axis, op, True, threads=threads, x_view=view)

    params = [] if op in ("softmax", "sum", "max") else [rand(np.random.default_rng(seed + 1), out[axis:])] * (1 if op == "rms" else 2)
    viewed = _run(device, make(steps), [x.reshape(gather.view_buffer(out, steps)[1]), *params], half)  # trailing reshapes dropped
    direct = _run(device, make(None), [apply(x), *params], half)
    assert np.array_equal(viewed, direct)


def test_rows_refuse_a_view_with_a_pad():
    with pytest.raises(ValueError, match="unread"):
        rows.softmax((1, 5), -1, x_view=(gather.Affine((1, 3), (0, -1), (1, 1)),))


def test_nan_in_a_row(device):
    """A NaN makes its softmax row and its max/min NaN (NumPy, onnxruntime); other rows are untouched."""
    x = np.random.default_rng(6).standard_normal((3, 70)).astype(np.float32)
    x[1, 45] = np.nan
    soft = run_kernel(device, rows.softmax(x.shape, -1, threads=64), x, poison=7.0)
    assert np.all(np.isnan(soft[1])) and np.allclose(soft[[0, 2]], _softmax(x[[0, 2]].astype(np.float64), -1), rtol=1e-5)
    for op, fn in (("max", np.max), ("min", np.min)):
        got = run_kernel(device, rows.reduce(x.shape, 1, op, False, threads=16), x, poison=7.0)
        assert np.isnan(got[1]) and np.array_equal(got[[0, 2]], fn(x[[0, 2]], axis=1))


def test_float16_kernel_keeps_float32_statistics():
    """A half kernel (``dtype="float16"``) reads half and keeps its statistics float32: its source
    declares float local memory (PoCL has no half math, so it is built, not run)."""
    source = build.build(rows.layer_norm((2, 40), -1, dtype="float16")).source
    assert "half" in source and "__local float" in source


def test_bad_arguments():
    with pytest.raises(ValueError, match="consecutive"):
        rows.reduce((2, 3, 4), (0, 2), "sum")
    with pytest.raises(ValueError, match="axes"):
        rows.softmax((2, 3), 2)
    with pytest.raises(ValueError, match="threads"):
        rows.softmax((2, 3), -1, threads=48)
    with pytest.raises(ValueError, match="op"):
        rows.reduce((2, 3), 1, "prod")
    with pytest.raises(ValueError, match="epsilon"):
        rows.layer_norm((2, 3), -1, epsilon=-1.0)
    with pytest.raises(TypeError, match="dtype"):
        rows.softmax((2, 3), dtype="int8")
    with pytest.raises(ValueError, match="dims"):
        rows.softmax((2, 0))
