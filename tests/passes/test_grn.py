"""ConvNeXt-V2's global response norm (GRN, issue 21) as timm exports it, on our kernels: the
``grn_scale`` kernel (``Nx``, and GRN's scale ``1 + gamma * Nx``) against float64 NumPy (fp32 and
half storage) and GRN block graphs against onnxruntime with no layout transform inside: GRN in two
kernels and the 1x1 conv after it reading ``x * s`` (``beta`` in its bias), or apart where that conv
cannot read it."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from helpers.numeric import pack_nchw4c, run_kernel, unpack_nchw4c
from helpers.onnx_graphs import check_pattern, conv_node, grn_block, pattern_graph
from helpers.strategies import SCOPES, SEEDS
from primfuncs import grn
from primfuncs._common import BUFFER, TEXTURE
from tir_adreno import ops
from tir_adreno.reference import grn_nx
from tir_adreno.strategy.packing import pack_bias
from tir_adreno.strategy.profile import get_profile, resolve, without_fusion

#: float32 statistics over <= 40 channels: measured <= 3e-7.
RTOL = 2e-6


#: ``grn_scale``'s forms: one work item per block (None), one work group per sample of fewer
#: items than blocks (several rounds each), of more (idle items).
THREADS = st.sampled_from([None, 1, 4, 64])


@given(n=st.integers(1, 2), channels=st.integers(1, 40), scope=st.sampled_from([TEXTURE, "global"]),
       precision=st.sampled_from(["float32", "float16_acc32"]), threads=THREADS, seed=st.integers(0, 2**32 - 1))
@example(n=1, channels=6, scope=TEXTURE, precision="float32", threads=None, seed=1)  # each form with a padded block:
@example(n=2, channels=7, scope="global", precision="float32", threads=4, seed=2)  # the mean over C, not C rounded up
def test_grn_scale_kernel(device, n, channels, scope, precision, threads, seed):
    """``sqrt(S) / (mean_c sqrt(S) + eps)`` of sums of squares ``S`` (spread over 6 decades), the
    padded lanes left out of the mean and written as 0; in half images the kernel reads ``S``
    rounded to half and writes ``Nx`` rounded to half, its arithmetic float32."""
    rng = np.random.default_rng(seed)
    s = 10.0 ** rng.uniform(-3, 3, (n, channels, 1, 1))
    s[0, 0] = 0.0  # a channel that is all zeros
    storage = "float16" if precision == "float16_acc32" and scope == TEXTURE else None
    loaded, name = ops.compile(grn.grn_scale(pack_nchw4c(s).shape, channels, 1e-6, scope=scope, threads=threads), device)
    specs = [replace(spec, storage=storage) if spec.scope == TEXTURE else spec for spec in loaded[name].params]
    out = device.empty(specs[1]).poison()
    loaded(name, device.empty(specs[0]).upload(pack_nchw4c(s).astype(np.float32)), out)
    y = out.numpy()
    s_in = s.astype(np.float16 if storage else np.float32).astype(np.float64)
    ref = grn_nx(s_in, 1e-6)
    rtol = 2.0**-11 if storage else RTOL  # the half output's rounding
    np.testing.assert_allclose(unpack_nchw4c(y, channels), ref, rtol=rtol, atol=1e-30)
    assert np.all(y[:, -1, :, :, (channels - 1) % 4 + 1 :] == 0), "padded lanes not zero"


@given(n=st.integers(1, 2), channels=st.integers(1, 40), scope=SCOPES, precision=st.sampled_from(["float32", "float16_acc32"]),
       threads=THREADS, seed=SEEDS)
def test_grn_scale_gamma_kernel(device, n, channels, scope, precision, threads, seed):
    """``1 + gamma * Nx`` from float32 sums of squares ``S`` (up to 1e6, beyond half: ``S`` stays
    float32 under float16_acc32) and ``gamma`` (a buffer, half under float16_acc32, as a model's
    constants); padded lanes written as 1 (a gate on the input's zero lanes)."""
    rng = np.random.default_rng(seed)
    s = 10.0 ** rng.uniform(-3, 6, (n, channels, 1, 1))
    s[0, 0] = 0.0
    gamma = rng.standard_normal(channels).astype(np.float32)
    half = precision == "float16_acc32"
    func = grn.grn_scale(pack_nchw4c(s).shape, channels, 1e-6, scope=scope, gamma=True, threads=threads)
    y = run_kernel(device, func, pack_nchw4c(s).astype(np.float32), pack_bias(gamma), storage="float16" if half else None,
                   pinned=(0,), half=({1, 2} if scope == BUFFER else {1}) if half else ())
    term = gamma.astype(np.float16 if half else np.float32).astype(np.float64)[None, :, None, None] * grn_nx(s.astype(np.float32), 1e-6)
    rtol = 2.0**-11 if half else RTOL  # the half output's rounding
    err = np.abs(unpack_nchw4c(y, channels) - (1 + term)) / (1 + np.abs(term))  # 1 + term may cancel: its terms' scale
    assert np.all(err <= rtol), float(np.max(err))
    assert np.all(y[:, -1, :, :, (channels - 1) % 4 + 1 :] == 1), "padded lanes not 1"


@pytest.mark.parametrize("target", [None, "nvidia-h200", "adreno"])
def test_grn_block_stays_on_textures(target):
    """conv -> GRN -> 1x1 conv on each profile: GRN in two kernels (the sum of squares over H, W
    and ``grn_scale`` writing ``1 + gamma * Nx``), the 1x1 conv reading ``x * s`` with ``W . beta``
    in its bias; no multiply, per-channel or add kernel, no layout transform inside."""
    rng, inits = np.random.default_rng(4), {}
    names = check_pattern(pattern_graph(grn_block(rng, inits), inits), profile=target and get_profile(target))
    assert names == ["conv2d_nchw4c", "sum_squares_hw", "grn_scale", "conv2d_nchw4c1"], names


def test_grn_scale_folded_into_the_tiled_conv():
    """On a wide profile whose 1x1 conv after GRN runs tiled (the H200's, tiled from one work group
    up): no ``grn_scale`` launch, the conv computes GRN's scale from the float32 sums of squares
    itself (``strategy.fusion.fold_grn``); 38 channels (10 blocks, the last padded; more than the
    items that sum the square roots), exact against onnxruntime, no layout transform inside."""
    rng, inits = np.random.default_rng(7), {}
    wide = replace(get_profile("nvidia-h200"), tiled_min_groups=1)
    names = check_pattern(pattern_graph(grn_block(rng, inits, channels=38), inits, size=9), size=9, profile=wide)
    assert names == ["conv2d_tiled_nchw4c", "sum_squares_hw", "conv2d_tiled_nchw4c1"], names


@pytest.mark.parametrize("case", ["fusion off", "padded conv", "grouped conv"])
def test_grn_apart_where_the_conv_cannot_read_it(device, case):
    """Fusion off, a padded 3x3 conv after GRN (``beta`` would not be 0 in its padding) or a grouped
    1x1 conv (its input blocks whole, it reads a gate, but ``W . beta`` is the dense conv's): GRN's
    statistics in ``grn_scale`` (``Nx``) and its per-channel steps apart, still exact."""
    rng, inits = np.random.default_rng(5), {}
    profile = without_fusion(resolve(device)) if case == "fusion off" else None
    nodes = grn_block(rng, inits, k=3 if case == "padded conv" else 1, channels=8)
    if case == "grouped conv":
        nodes[-1] = conv_node(rng, inits, "r", "y", 8, 8, k=1, group=2)
    names = check_pattern(pattern_graph(nodes, inits), profile=profile)
    assert names.count("grn_scale") == 1 and "sum_squares_hw" not in names and "multiply_channels" in names, names
