"""The float64 conv reference every conv test compares with, against the conv written out as
sums (one output at a time, padding as taps that fall outside the input): strides, padding on
each side, dilation and groups (depthwise included) on random shapes."""

import numpy as np
import pytest

from tir_adreno.reference import conv2d_nchw


def _conv_as_sums(x, w, strides, padding, dilation, groups):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (pt, pl, pb, pr), (dh, dw) = strides, padding, dilation
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    og = o // groups
    out = np.zeros((n, o, oh, ow))
    for b in range(n):
        for k in range(o):
            g = k // og
            for i in range(oh):
                for j in range(ow):
                    total = 0.0
                    for ci in range(cg):
                        for p in range(kh):
                            for q in range(kw):
                                y, z = i * sh - pt + p * dh, j * sw - pl + q * dw
                                if 0 <= y < h and 0 <= z < wd:
                                    total += x[b, g * cg + ci, y, z] * w[k, ci, p, q]
                    out[b, k, i, j] = total
    return out


@pytest.mark.parametrize("seed", range(12))
def test_conv2d_nchw_is_the_written_out_sum(seed):
    rng = np.random.default_rng(seed)
    groups = int(rng.choice([1, 2, 3])) if seed % 4 else 5  # every fourth: depthwise (one channel a group)
    cg, og = (1, 1) if seed % 4 == 0 else (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    kh, kw = (int(v) for v in rng.integers(1, 4, 2))
    sh, sw = (int(v) for v in rng.integers(1, 3, 2))
    dh, dw = (int(v) for v in rng.integers(1, 3, 2))
    padding = tuple(int(v) for v in rng.integers(0, 3, 4))
    h, wd = dh * (kh - 1) + 1 + int(rng.integers(0, 6)), dw * (kw - 1) + 1 + int(rng.integers(0, 6))
    x = rng.standard_normal((int(rng.integers(1, 3)), groups * cg, h, wd))
    w = rng.standard_normal((groups * og, cg, kh, kw))
    want = _conv_as_sums(x, w, (sh, sw), padding, (dh, dw), groups)
    got = conv2d_nchw(x, w, (sh, sw), padding, (dh, dw), groups)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
