"""The gather family (``primfuncs.gather``) against NumPy's own data movement: random chains of
transpose, reshape, strided slice (negative steps too), pad with a constant, tile and broadcast on
ranks 1-4, optionally concatenated with other inputs along any axis; every output element equals
NumPy's exactly (a copy rounds nothing; under float16_acc32 both sides are the half values), on
NaN-poisoned outputs, float32 and half buffers."""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from helpers.numeric import rand, run_kernel
from primfuncs import gather as G
from tir_adreno.codegen import build

DIMS = st.integers(1, 6)


@st.composite
def op(draw, shape):
    """One op on a tensor of ``shape``: (numpy function, gather step from after to before, shape after)."""
    rank = len(shape)
    kind = draw(st.sampled_from(["transpose", "reshape", "slice", "pad", "tile", "broadcast"]))
    if kind == "transpose":
        axes = tuple(draw(st.permutations(range(rank))))
        return (lambda x: x.transpose(axes)), G.Permute(axes), tuple(shape[a] for a in axes)
    if kind == "reshape":
        flat = int(np.prod(shape))
        divisors = [d for d in range(1, flat + 1) if flat % d == 0]
        lead = draw(st.sampled_from(divisors))
        new = draw(st.sampled_from([(flat,), (lead, flat // lead), (1, lead, flat // lead), (lead, 1, flat // lead)]))
        return (lambda x: x.reshape(new)), G.Reshape(shape), new
    if kind == "slice":
        begins, steps, sizes, slices = [], [], [], []
        for d in shape:
            step = draw(st.sampled_from([1, 1, 2, 3, -1, -2]))
            begin = draw(st.integers(0, d - 1))
            room = begin // -step + 1 if step < 0 else (d - 1 - begin) // step + 1
            n = draw(st.integers(1, room))
            end = begin + step * (n - 1)
            slices.append(slice(begin, end + 1, step) if step > 0 else slice(begin, end - 1 if end > 0 else None, step))
            begins, steps, sizes = begins + [begin], steps + [step], sizes + [n]
        return (lambda x: x[tuple(slices)]), G.Affine(shape, tuple(begins), tuple(steps)), tuple(sizes)
    if kind == "pad":
        pads = [(draw(st.integers(0, 3)), draw(st.integers(0, 3))) for _ in shape]
        after = tuple(d + a + b for d, (a, b) in zip(shape, pads))
        return (lambda x: np.pad(x, pads, constant_values=PAD)), G.Affine(shape, tuple(-a for a, _ in pads), (1,) * rank), after
    if kind == "tile":
        reps = tuple(draw(st.integers(1, 3)) for _ in shape)
        return (lambda x: np.tile(x, reps)), G.Tile(shape), tuple(d * r for d, r in zip(shape, reps))
    # broadcast: dims of 1 grow (the first op's input gets some dims of 1 for it)
    after = tuple(draw(st.integers(1, 5)) if d == 1 else d for d in shape)
    return (lambda x: np.broadcast_to(x, after)), G.Affine(shape, (0,) * rank, tuple(0 if d == 1 else 1 for d in shape)), after


PAD = -7.25  # a pad value no random input equals


@st.composite
def chains(draw, shape=None):
    """(input shape, numpy function, steps from the output to the input, output shape)."""
    shape = shape or tuple(draw(st.lists(st.one_of(DIMS, st.just(1)), min_size=1, max_size=4)))
    fns, steps, cur = [], [], shape
    for _ in range(draw(st.integers(1, 3))):
        fn, step, cur_next = draw(op(cur))
        if int(np.prod(cur_next)) > 4096:
            break
        fns.append(fn)
        steps.insert(0, step)
        cur = cur_next

    def apply(x):
        for fn in fns:
            x = fn(x)
        return np.ascontiguousarray(x)

    return shape, apply, tuple(steps), cur


@st.composite
def cases(draw):
    """(input shapes, numpy function of the inputs, sources, output shape): one chain, or a concat of
    it with 1-3 more inputs (each read through a transpose or as stored) along a random axis."""
    shape, apply, steps, out = draw(chains())
    if not draw(st.booleans()):
        return [shape], (lambda xs: apply(xs[0])), (G.Source(0, steps),), out
    axis = draw(st.integers(0, len(out) - 1))
    shapes, fns, sources, offset = [shape], [apply], [G.Source(0, (G.Affine(out, tuple(0 for _ in out), (1,) * len(out)), *steps))], out[axis]
    for i in range(1, draw(st.integers(2, G.MAX_INPUTS))):
        part = tuple(draw(DIMS) if a == axis else d for a, d in enumerate(out))
        perm = tuple(draw(st.permutations(range(len(out)))))
        stored = [0] * len(out)
        for a, src in enumerate(perm):  # x.transpose(perm) has shape ``part``
            stored[src] = part[a]
        begin = tuple(-offset if a == axis else 0 for a in range(len(out)))
        sources.append(G.Source(i, (G.Affine(part, begin, (1,) * len(out)), G.Permute(perm))))
        shapes.append(tuple(stored))
        fns.append(lambda x, perm=perm: x.transpose(perm))
        offset += part[axis]
    out_shape = tuple(offset if a == axis else d for a, d in enumerate(out))
    return shapes, (lambda xs: np.concatenate([f(x) for f, x in zip(fns, xs)], axis=axis)), tuple(sources), out_shape


def _check(device, shapes, fn, sources, out_shape, seed, half):
    rng = np.random.default_rng(seed)
    xs = [rand(rng, s) for s in shapes]
    func = G.gather(shapes, out_shape, sources, pad_value=PAD)
    got = run_kernel(device, func, *xs, half=build.ALL_BUFFERS if half else ())
    if half:
        xs = [x.astype(np.float16).astype(np.float32) for x in xs]
    ref = fn(xs)
    assert got.shape == ref.shape == tuple(out_shape)
    assert not np.isnan(got).any(), "an output element was not written (poison survived)"
    np.testing.assert_array_equal(got, ref)


@settings(deadline=None, max_examples=40)
@given(case=cases(), seed=st.integers(0, 2**32 - 1), half=st.booleans())
@example(case=([(1, 197, 3, 3, 64)], lambda xs: np.ascontiguousarray(xs[0].transpose(2, 0, 3, 1, 4)[1]),
               (G.Source(0, (G.Reshape((1, 1, 3, 197, 64)), G.Affine((3, 1, 3, 197, 64), (1, 0, 0, 0, 0), (1,) * 5),
                             G.Permute((2, 0, 3, 1, 4)))),), (1, 3, 197, 64)), seed=1, half=False)  # DeiT's k: one vector gather
@example(case=([(2, 5, 3), (2, 5, 4)], lambda xs: np.concatenate(xs, axis=2),
               (G.Source(0, (G.Affine((2, 5, 3), (0, 0, 0), (1, 1, 1)),)), G.Source(1, (G.Affine((2, 5, 4), (0, 0, -3), (1, 1, 1)),))),
               (2, 5, 7)), seed=2, half=True)  # concat on the last axis, odd width: scalar lanes
def test_gather_matches_numpy(device, case, seed, half):
    shapes, fn, sources, out_shape = case
    _check(device, shapes, fn, sources, out_shape, seed, half)


def test_vector_path_is_taken_where_contiguous():
    """A transpose that keeps the last axis (width a multiple of 4) is one vector load per 4
    elements; one that moves it reads scalars."""
    keep = G.gather([(2, 8, 16)], (8, 2, 16), [G.Source(0, (G.Permute((1, 0, 2)),))])
    move = G.gather([(2, 8, 16)], (2, 16, 8), [G.Source(0, (G.Permute((0, 2, 1)),))])
    assert "T.Ramp" in keep.script() and "T.Ramp" not in move.script()
    assert G.contiguous_last_axis(G.Source(0, (G.Affine((4, 8), (0, 4), (1, 1)), G.Reshape((2, 16)))), (4, 4))
    assert not G.contiguous_last_axis(G.Source(0, (G.Affine((4, 8), (0, 2), (1, 1)),)), (4, 4))  # misaligned


def test_gather_bad_arguments():
    with pytest.raises(ValueError, match="element count"):
        G.gather([(2, 3)], (7,), [G.Source(0, (G.Reshape((2, 3)),))])
    with pytest.raises(ValueError, match="no permutation"):
        G.gather([(2, 3)], (3, 2), [G.Source(0, (G.Permute((0, 0)),))])
    with pytest.raises(ValueError, match="input 1"):
        G.gather([(2, 3)], (2, 3), [G.Source(1, ())])
    with pytest.raises(ValueError, match="reads shape"):
        G.gather([(2, 4)], (2, 3), [G.Source(0, ())])
    with pytest.raises(ValueError, match="inputs"):
        G.gather([(1,)] * 5, (1,), [G.Source(0, ())])
    with pytest.raises(TypeError, match="dtype"):
        G.gather([(2,)], (2,), [G.Source(0, ())], dtype="int8")
