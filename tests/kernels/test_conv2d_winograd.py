"""Winograd conv2d F(2x2, 3x3) and F(4x4, 3x3) (primfuncs.conv.winograd) against a float64 NumPy conv.

The three chained kernels run on OpenCL (PoCL here) with fresh random inputs; the
output and both intermediates are poisoned first, so a pixel no stage wrote shows
up as NaN. Tolerances (relative to max |reference|, float32), from the measured error
(helpers.conv.ALGORITHM_RTOL): F(2x2) 3e-6, F(4x4) 3e-5, because its transforms carry
coefficients up to 8 and 5 (measured: at most 3.6e-6 on these small convs; 1e-5..1e-4 on
ResNet layers, whose larger C the properties do not draw).
"""

import numpy as np
import pytest
from hypothesis import example, given

from helpers.conv import ALGORITHM_RTOL, check_blocked_output, reference_conv2d, reference_epilogue
from helpers.numeric import assert_close, pack_nchw4c, rand, sanitized, unpack_nchw4c
from helpers.strategies import SEEDS, winograd_cases

from primfuncs.conv import winograd as wg
from primfuncs._common import BUFFER, TEXTURE
from primfuncs.conv import ConvConfig
from primfuncs.epilogue import Epilogue
from primfuncs.conv.prologue import Prologue
from tir_adreno import ops
from tir_adreno.codegen import build
from tir_adreno.strategy.packing import pack_bias
from tir_adreno.tuning.programs import ConvProgram

#: Relative error bound per output tile size m (float32; measured, see helpers.conv.ALGORITHM_RTOL).
RTOL = {m: ALGORITHM_RTOL[f"winograd_{m}x{m}"] for m in wg.TILE_SIZES}


# -- the algorithm in NumPy (no device) -----------------------------------------------------------


@pytest.mark.parametrize("m", wg.TILE_SIZES)
def test_transforms_compute_the_correlation(m):
    """A^T [(G g G^T) . (B^T d B)] A == the 3x3 correlation of an alpha x alpha patch, in float64."""
    bt, g, at = wg.winograd_matrices(m)
    rng = np.random.default_rng(m)
    kernel, patch = rng.standard_normal((3, 3)), rng.standard_normal((m + 2, m + 2))
    y = at @ ((g @ kernel @ g.T) * (bt @ patch @ bt.T)) @ at.T
    ref = np.array([[np.sum(kernel * patch[i : i + 3, j : j + 3]) for j in range(m)] for i in range(m)])
    np.testing.assert_allclose(y, ref, rtol=0, atol=1e-12)


def test_weight_transform_layout():
    """U[e * O/4 + o // 4, c, o % 4] = (G g[o, c] G^T)[e]; padded channels zero; float64 then cast."""
    rng = np.random.default_rng(0)
    w = rand(rng, (6, 5, 3, 3))
    for m in wg.TILE_SIZES:
        _, g, _ = wg.winograd_matrices(m)
        a2 = (m + 2) ** 2
        u = wg.winograd_weight_transform(w, m)
        assert u.shape == (a2 * 2, 8, 4) and u.dtype == np.float32
        full = np.zeros((a2, 8, 8))
        for o in range(6):
            for c in range(5):
                full[:, o, c] = (g @ w[o, c].astype(np.float64) @ g.T).reshape(-1)
        expect = full.reshape(a2, 2, 4, 8).transpose(0, 1, 3, 2).reshape(a2 * 2, 8, 4)
        np.testing.assert_allclose(u, expect, rtol=2**-23, atol=1e-15)  # float64, rounded once to float32
    with pytest.raises(ValueError, match="w_oihw must be OIHW with a 3x3 kernel"):
        wg.winograd_weight_transform(np.ones((4, 4, 5, 5), np.float32), 2)
    with pytest.raises(ValueError, match="m .* must be one of"):
        wg.winograd_weight_transform(w, 3)


# -- the kernels on the device --------------------------------------------------------------------


def run_winograd(device, case, rng):
    """Build the chain of ``case``, run it on poisoned tensors; returns (NCHW out, reference, blocked out)."""
    n, c, h, w = case["data_shape"]
    o, m, epi, scope = case["out_channels"], case["m"], case["epilogue"], case["scope"]
    kernels = wg.conv2d_winograd_nchw4c(
        (n, c, h, w), (o, c, 3, 3), padding=case["padding"], m=m, epilogue=epi, config=case["config"], scope=scope
    )
    geom = kernels.geometry
    x, wt = rand(rng, (n, c, h, w)), rand(rng, (o, c, 3, 3))
    bias = rand(rng, (o,)) if epi.bias else None
    residual = rand(rng, geom.out_shape) if epi.residual else None
    ref = reference_epilogue(reference_conv2d(x, wt, (1, 1), geom.padding, (1, 1), 1), bias, residual, epi.activation)

    program = ConvProgram(f"winograd_{m}x{m}", build.build_cached(kernels.module()), kernels.names)
    assert program.inputs == ("X", "U", *(["Bias"] if epi.bias else []), *(["Residual"] if epi.residual else []))
    assert program.intermediates == ("V", "M")
    tensors = {
        "X": device.array(pack_nchw4c(x), scope, "X"),
        "U": device.array(wg.winograd_weight_transform(wt, m), kernels.weight_scope, "U"),
        "Y": ops.empty_nchw4c(device, geom.out_shape, "float32", scope, "Y"),  # poisoned
    }
    if bias is not None:
        tensors["Bias"] = device.array(pack_bias(bias), BUFFER, "Bias")
    if residual is not None:
        tensors["Residual"] = device.array(pack_nchw4c(residual), scope, "Residual")
    program.run(device, tensors)  # V and M are allocated poisoned
    blocked_out = tensors["Y"].numpy()
    return unpack_nchw4c(blocked_out, o), ref, blocked_out


# Every run covers both tile sizes, whatever the few random draws are (one of them sanitized).
F2_CASE = dict(m=2, data_shape=(2, 5, 7, 6), out_channels=6, padding=(1, 1, 1, 1), scope=TEXTURE,
               epilogue=Epilogue(bias=True, activation="relu", residual=True), config=ConvConfig(2, 2, (4, 2, 1)))
F4_CASE = dict(m=4, data_shape=(1, 7, 9, 10), out_channels=5, padding=(1, 0, 2, 1), scope=BUFFER,
               epilogue=Epilogue(bias=True, activation="relu6"), config=ConvConfig(1, 3, (8, 4, 1)))


@given(case=winograd_cases(), seed=SEEDS)
@example(case=F2_CASE, seed=0)
@example(case=F4_CASE, seed=1)
def test_winograd_matches_numpy(device, case, seed):
    with sanitized(seed):
        got, ref, blocked_out = run_winograd(device, case, np.random.default_rng(seed))
    check_blocked_output(blocked_out, case["out_channels"])
    assert_close(got, ref, RTOL[case["m"]])


@pytest.mark.parametrize(
    "case",
    [
        # A 1x2 map inside one 4x4 tile, batch 2, C and O tails, the whole epilogue, textures.
        dict(m=4, data_shape=(2, 5, 1, 2), out_channels=7, padding=(1, 1, 1, 1), scope=TEXTURE,
             epilogue=Epilogue(bias=True, activation="relu6", residual=True), config=ConvConfig(3, 3)),
        # Asymmetric padding, odd sizes, overhanging border tiles and register tiles, buffers.
        dict(m=2, data_shape=(1, 6, 9, 7), out_channels=9, padding=(0, 2, 1, 0), scope=BUFFER,
             epilogue=Epilogue(bias=True, activation="relu"), config=ConvConfig(2, 3, (4, 2, 1))),
    ],
    ids=["tiny-map-batch2-F4", "asymmetric-F2"],
)
def test_winograd_border_cases(device, case):
    got, ref, blocked_out = run_winograd(device, case, np.random.default_rng(7))
    check_blocked_output(blocked_out, case["out_channels"])
    assert_close(got, ref, RTOL[case["m"]])


def test_transforms_have_no_zero_terms():
    """The transforms' zero coefficients fold away (``_entry``): no multiply by 0 in the OpenCL."""
    kernels = wg.conv2d_winograd_nchw4c((1, 4, 8, 8), (4, 4, 3, 3), padding=1, m=4)
    source = build.build_cached(kernels.module()).source
    assert "read_imagef" in source.lower() and "write_imagef" in source
    assert "0.000000e+00f *" not in source and "* 0.000000e+00f" not in source


# -- ops.conv2d ------------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm, m", [("winograd", 2), ("winograd_4x4", 4)])
def test_ops_conv2d_winograd(device, algorithm, m):
    rng = np.random.default_rng(3)
    x, w, b = rand(rng, (2, 6, 7, 5)), rand(rng, (5, 6, 3, 3)), rand(rng, (5,))
    residual = rand(rng, (2, 5, 7, 6))
    got = ops.conv2d(x, w, b, padding=(1, 1, 1, 2), activation="relu", residual=residual, algorithm=algorithm, device=device)
    ref = reference_epilogue(reference_conv2d(x, w, (1, 1), (1, 1, 1, 2), (1, 1), 1), b, residual, "relu")
    assert_close(got, ref, RTOL[m])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(w=np.ones((4, 4, 5, 5), np.float32), padding=2), "kernel must be 3x3, got 5x5"),
        (dict(stride=2), r"strides must be 1, got \(2, 2\)"),
        (dict(dilation=(1, 2), padding=2), r"dilation must be 1, got \(1, 2\)"),
        (dict(w=np.ones((4, 2, 3, 3), np.float32), groups=2), "groups must be 1, got 2"),
    ],
)
@pytest.mark.parametrize("algorithm", ["winograd", "winograd_4x4"])
def test_ops_conv2d_winograd_rejects_ineligible_convs(device, algorithm, kwargs, match):
    args = dict(x=np.ones((1, 4, 8, 8), np.float32), w=np.ones((4, 4, 3, 3), np.float32), device=device, algorithm=algorithm)
    args.update(kwargs)
    with pytest.raises(ValueError, match=f"algorithm='{algorithm}' needs a 3x3 kernel.*{match}"):
        ops.conv2d(**args)


def test_factory_errors():
    with pytest.raises(ValueError, match="stride 1.*strides must be 1"):
        wg.conv2d_winograd_nchw4c((1, 4, 8, 8), (4, 4, 3, 3), strides=2)
    with pytest.raises(ValueError, match="m .* must be one of"):
        wg.conv2d_winograd_nchw4c((1, 4, 8, 8), (4, 4, 3, 3), m=6)
    with pytest.raises(TypeError, match="epilogue must be an Epilogue"):
        wg.conv2d_winograd_nchw4c((1, 4, 8, 8), (4, 4, 3, 3), epilogue="relu")
    with pytest.raises(ValueError, match="scope must be one of"):
        wg.conv2d_winograd_nchw4c((1, 4, 8, 8), (4, 4, 3, 3), prologue=Prologue(tile_scope="local"))


def test_winograd_float16_builds_to_source(device):
    """fp16 Winograd uses half math (cl_khr_fp16); it runs only where the device has it."""
    kernels = wg.conv2d_winograd_nchw4c((1, 8, 6, 6), (8, 8, 3, 3), padding=1, m=2, dtype="float16")
    source = build.build_cached(kernels.module()).source
    assert "read_imageh" in source and "half" in source
    if not device.fp16:
        pytest.skip(f"{device.name} has no cl_khr_fp16: float16 Winograd built to source only")
    rng = np.random.default_rng(4)
    x, w = rand(rng, (1, 8, 6, 6), "float16"), rand(rng, (8, 8, 3, 3), "float16")
    got = ops.conv2d(x, w, padding=1, algorithm="winograd", device=device)
    assert_close(got, reference_conv2d(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1), 1e-2)
