"""Group norm (MobileViT-v2's GroupNorm1, issue 21) on NCHW4c textures: the ``group_norm`` kernel
and its split form for wide GPUs (``group_norm_partials`` -> ``group_norm_apply``) against float64
NumPy (fp32 and half images), the form each device profile gets, and graphs against onnxruntime
with the norm in one kernel (or the split pair) and no layout transform inside: timm's GroupNorm
as ``torch.onnx.export`` writes it (``Reshape`` -> ``InstanceNormalization`` -> ``Reshape`` ->
``Mul`` -> ``Add``, 1 and 2 groups) and ONNX ``GroupNormalization`` (``relax.nn.group_norm``)."""

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from onnx import helper

from helpers.numeric import pack_nchw4c, rand, run_kernel, unpack_nchw4c
from helpers.onnx_graphs import check_pattern, conv_node, group_norm_nodes, int_pattern_graph, pattern_graph, wide_profile
from primfuncs import layernorm
from primfuncs._common import TEXTURE, equal_slices
from primfuncs.lanes import blocked
from tir_adreno import reference
from tir_adreno.strategy.packing import pack_bias
from tir_adreno.strategy.width import ONE_GROUP_MAX_COMPUTE_UNITS
from tir_adreno.strategy.norm import group_norm_schedule
from tir_adreno.strategy.profile import get_profile

#: float32 statistics: the error grows with the mean in standard deviations (the float32 sums of
#: values around the mean). Measured 7.6e-8 (mean 0) and 2.2e-6 (mean 30 sigma) relative to the
#: output's magnitude, i.e. ~7e-8 x (1 + |mean| / std); held to 5e-7 x that.
RTOL = 5e-7


def _reference(x, groups, gamma, beta, eps, activation=None):
    """float64 group norm of NCHW ``x`` (population variance, as torch and ONNX)."""
    n, c, h, w = x.shape
    xg = x.astype(np.float64).reshape(n, groups, -1)
    y = (xg - xg.mean(axis=2, keepdims=True)) / np.sqrt(xg.var(axis=2, keepdims=True) + eps)
    y = y.reshape(n, c, h, w) * gamma[None, :, None, None] + beta[None, :, None, None]
    return np.maximum(y, 0.0) if activation == "relu" else y


@st.composite
def group_norm_cases(draw):
    """(n, channels, groups, h, w): one group of any channels, or groups of a multiple of 4 channels."""
    groups = draw(st.integers(1, 4))
    channels = draw(st.integers(1, 13)) if groups == 1 else 4 * groups * draw(st.integers(1, 3))
    return draw(st.integers(1, 2)), channels, groups, draw(st.integers(1, 9)), draw(st.integers(1, 11))


def _group_norm(device, x, groups, gamma, beta, activation, scope, storage, slices=None):
    """Y (NCHW4c) of the one kernel (``slices`` None) or of the split form: the partials, then the
    normalizing kernel reading them; and the partials (None for the one kernel)."""
    n, channels, h, w = x.shape
    shape = (n, blocked(channels), h, w, 4)
    params = [pack_bias(gamma), pack_bias(beta)]
    if slices is None:
        one = layernorm.group_norm(shape, channels, groups, 1e-5, activation, scope=scope)
        return run_kernel(device, one, pack_nchw4c(x), *params, storage=storage), None
    partials = run_kernel(device, layernorm.group_norm_partials(shape, channels, groups, slices, scope=scope), pack_nchw4c(x),
                          storage=storage)
    apply = layernorm.group_norm_apply(shape, channels, groups, slices, 1e-5, activation, scope=scope)
    return run_kernel(device, apply, pack_nchw4c(x), partials, *params, storage=storage), partials


def _check_output(y, x_in, channels, groups, gamma, beta, activation, rtol):
    ref = _reference(x_in, groups, gamma, beta, 1e-5, activation)
    got = unpack_nchw4c(y, channels).astype(np.float64)
    # |y| ~ |gamma| |z| + |beta|: float32 (or half output) rounding relative to that magnitude
    scale = np.abs(gamma)[None, :, None, None] * 4 + np.abs(beta)[None, :, None, None]
    assert np.all(np.abs(got - ref) <= rtol * scale), float(np.max(np.abs(got - ref) / scale))
    assert np.all(y[:, -1, :, :, (channels - 1) % 4 + 1 :] == 0), "padded lanes not zero"


def _case_inputs(case, precision, scope, offset, seed):
    n, channels, groups, h, w = case
    rng = np.random.default_rng(seed)
    x = rand(rng, (n, channels, h, w)) + np.float32(offset)
    gamma, beta = rand(rng, (channels,)) + 1.0, rand(rng, (channels,))
    storage = "float16" if precision == "float16_acc32" and scope == TEXTURE else None
    return x, gamma, beta, storage, (x.astype(np.float16) if storage else x)


@given(case=group_norm_cases(), scope=st.sampled_from([TEXTURE, "global"]), precision=st.sampled_from(["float32", "float16_acc32"]),
       activation=st.sampled_from([None, "relu"]), offset=st.sampled_from([0.0, 30.0]), seed=st.integers(0, 2**32 - 1))
@example(case=(1, 6, 1, 1, 1), scope=TEXTURE, precision="float32", activation=None, offset=0.0, seed=1)  # 6 elements, a padded block
@example(case=(2, 24, 3, 17, 23), scope="global", precision="float32", activation=None, offset=30.0, seed=2)  # > 64 pixels per item
def test_group_norm_kernel(device, case, scope, precision, activation, offset, seed):
    """Each (sample, group) normalized over its (C / groups, H, W) elements, then scaled and shifted
    per channel; padded lanes written as 0. ``offset``: a mean 30 standard deviations from 0 (a
    one-pass ``E[x^2] - E[x]^2`` loses ~7 digits there). Half images: the kernel reads x rounded
    to half and writes y rounded to half, its statistics float32."""
    _, channels, groups, _, _ = case
    x, gamma, beta, storage, x_in = _case_inputs(case, precision, scope, offset, seed)
    y, _ = _group_norm(device, x, groups, gamma, beta, activation, scope, storage)
    _check_output(y, x_in, channels, groups, gamma, beta, activation, 2.0**-10 if storage else RTOL * (1.0 + offset))  # std 1


@given(case=group_norm_cases(), wanted=st.integers(1, 200), scope=st.sampled_from([TEXTURE, "global"]),
       precision=st.sampled_from(["float32", "float16_acc32"]), activation=st.sampled_from([None, "relu"]),
       offset=st.sampled_from([0.0, 30.0]), seed=st.integers(0, 2**32 - 1))
@example(case=(1, 6, 1, 1, 2), wanted=2, scope=TEXTURE, precision="float32", activation=None, offset=30.0, seed=1)  # a pixel a slice
@example(case=(1, 8, 1, 17, 23), wanted=100, scope="global", precision="float32", activation="relu", offset=30.0, seed=2)  # > 64 slices
@example(case=(2, 24, 3, 17, 23), wanted=3, scope=TEXTURE, precision="float16_acc32", activation=None, offset=0.0, seed=3)  # > 64 pixels a slice
def test_group_norm_split_kernels(device, case, wanted, scope, precision, activation, offset, seed):
    """The split form: ``group_norm_partials`` gives each pixel slice's exact count, mean and M2
    (two passes: a mean 30 standard deviations off 0 keeps M2's digits), and ``group_norm_apply``
    combines them (Chan) into the same normalized output as the one kernel, whatever the number of
    slices (one pixel each, more slices than work items, a short last slice). Half images: the
    partials stay float32 (a buffer)."""
    n, channels, groups, h, w = case
    slices = equal_slices(layernorm.group_norm_pixels((n, blocked(channels), h, w, 4), groups), wanted)
    x, gamma, beta, storage, x_in = _case_inputs(case, precision, scope, offset, seed)
    y, partials = _group_norm(device, x, groups, gamma, beta, activation, scope, storage, slices)
    ref = reference.group_norm_partials(x_in.astype(np.float64), groups, slices)
    assert partials.dtype == np.float32 and partials.shape == ref.shape
    assert np.array_equal(partials[..., 0], ref[..., 0]), "counts"
    # float32 sums of values around the mean: error ~ u (|mean| + std) per term (RTOL's measurement)
    assert np.all(np.abs(partials[..., 1] - ref[..., 1]) <= RTOL * (1.0 + offset)), np.max(np.abs(partials[..., 1] - ref[..., 1]))
    assert np.all(np.abs(partials[..., 2] - ref[..., 2]) <= 1e-5 * (ref[..., 2] + ref[..., 0])), "M2"
    _check_output(y, x_in, channels, groups, gamma, beta, activation, 2.0**-10 if storage else RTOL * (1.0 + offset))


def test_equal_slices():
    """Slices of equal length, none empty; the split kernels refuse any other count."""
    assert [equal_slices(10, k) for k in (1, 2, 3, 4, 5, 6, 10, 99)] == [1, 2, 3, 4, 5, 5, 10, 10]
    with pytest.raises(ValueError, match="equal non-empty slices"):
        layernorm.group_norm_partials((1, 1, 2, 5, 4), 4, 1, 6)  # 10 pixels: 6 slices of 2 leave one empty
    with pytest.raises(ValueError, match="equal non-empty slices"):
        layernorm.group_norm_apply((1, 1, 2, 5, 4), 4, 1, 11)


def test_group_norm_form_by_profile():
    """The device profile picks the form: the H200 (132 compute units) splits MobileViT-v2's
    GroupNorm1 maps over ~4 work groups per unit, at least a work item's pixel per slice; PoCL and
    Adreno (a few units) keep one work group per (sample, group); a map of at most one work group's
    pixels stays one kernel anywhere."""
    h200 = get_profile("nvidia-h200")
    assert h200.compute_units > ONE_GROUP_MAX_COMPUTE_UNITS
    assert group_norm_schedule(h200, (1, 16, 32, 32, 4), 1) == {"slices": 256}  # 16384 pixels: 64 each
    assert group_norm_schedule(h200, (1, 32, 8, 8, 4), 1) == {"slices": 32}  # 2048 pixels: a work group's each
    assert group_norm_schedule(h200, (4, 16, 32, 32, 4), 2) == {"slices": 66}  # 8 groups x 66 slices = 4 x 132
    assert group_norm_schedule(h200, (1, 4, 4, 4, 4), 1) is None  # 64 pixels
    for name in ("pocl", "adreno"):
        assert group_norm_schedule(get_profile(name), (1, 16, 32, 32, 4), 1) is None
def test_group_norm_refuses_bad_groups():
    with pytest.raises(ValueError, match="groups of a multiple of 4"):
        layernorm.group_norm((1, 2, 3, 3, 4), 8, 4)  # 2 channels per group: groups inside a block
    with pytest.raises(ValueError, match="groups of a multiple of 4"):
        layernorm.group_norm((1, 3, 3, 3, 4), 12, 5)
    with pytest.raises(ValueError, match="does not fill"):
        layernorm.group_norm((1, 2, 3, 3, 4), 3, 1)
    with pytest.raises(ValueError, match="epsilon"):
        layernorm.group_norm((1, 1, 3, 3, 4), 4, 1, -1.0)


def _exported(channels, groups, size=11):
    """conv -> timm's GroupNorm -> 1x1 conv on a ``size`` x ``size`` map (11: more pixels per group
    than a work group has items, so a wide profile splits)."""
    rng, inits = np.random.default_rng(7), {}
    nodes = [conv_node(rng, inits, "x", "c", channels, 3), *group_norm_nodes("c", "n", inits, channels, groups, rng),
             conv_node(rng, inits, "n", "y", 4, channels, k=1)]
    return int_pattern_graph(nodes, inits, size=size)


def test_group_norm_form_in_plan():
    """Compiled for the nvidia-h200 profile (no device) the norm is the split pair, for pocl and
    adreno one kernel; in float16_acc32 the split pair's partials stay a float32 buffer while the
    activations around it are half."""
    from tir_adreno.compiler import compile_plan

    model = _exported(6, 1)
    for name, kernels in (("nvidia-h200", ["group_norm_partials", "group_norm_apply"]), ("pocl", ["group_norm"]), ("adreno", ["group_norm"])):
        plan, _, _ = compile_plan(model, get_profile(name), progress=lambda _: None)
        assert [c.label for c in plan.calls if c.label.startswith("group_norm")] == kernels, name
    plan, _, _ = compile_plan(model, get_profile("nvidia-h200"), progress=lambda _: None, precision="float16_acc32")
    partials, apply = (c for c in plan.calls if c.label.startswith("group_norm"))
    stats = plan.tensors[partials.args[-1]]
    assert apply.args[1] == partials.args[-1] and stats.shape == (1, 4, layernorm.PARTIAL_FIELDS), stats
    assert stats.dtype == "float32" and stats.storage_dtype == "float32", stats
    assert plan.tensors[apply.args[-1]].storage_dtype == "float16"  # the norm's output: half


def _norm_kernels(wide):
    return ["group_norm_partials", "group_norm_apply"] if wide else ["group_norm"]


@pytest.mark.parametrize("wide", [False, True], ids=["one-kernel", "split"])
@pytest.mark.parametrize("channels,groups", [(6, 1), (8, 2)])
def test_exported_group_norm_stays_on_textures(channels, groups, wide):
    """conv -> GroupNorm (1 group over 6 channels: a padded block; 2 groups of 4) -> conv: one
    group_norm kernel (the split pair on a wide profile), everything ours, no layout transform
    inside, the same outputs as onnxruntime (MobileViT-v2's GroupNorm1 is the 1-group case)."""
    names = check_pattern(_exported(channels, groups), size=11, profile=wide_profile() if wide else None)
    assert names[1:-1] == _norm_kernels(wide) and len(names) == 2 + (2 if wide else 1), names


@pytest.mark.parametrize("wide", [False, True], ids=["one-kernel", "split"])
def test_onnx_group_normalization_stays_on_textures(wide):
    """ONNX GroupNormalization (opset 21: per-channel scale and bias; ``relax.nn.group_norm``),
    then a Relu: one group_norm kernel (the split pair on a wide profile) with the activation fused."""
    rng, inits = np.random.default_rng(8), {}
    inits.update(g_s=rng.standard_normal(8), g_b=rng.standard_normal(8))
    nodes = [conv_node(rng, inits, "x", "c", 8, 3),
             helper.make_node("GroupNormalization", ["c", "g_s", "g_b"], ["n"], num_groups=2, epsilon=1e-5),
             helper.make_node("Relu", ["n"], ["r"]), conv_node(rng, inits, "r", "y", 4, 8, k=1)]
    names = check_pattern(pattern_graph(nodes, inits, size=11, opset=21), size=11, profile=wide_profile() if wide else None)
    assert names[1:-1] == _norm_kernels(wide) and len(names) == 2 + (2 if wide else 1), names  # the Relu fused


def _folded_graph(kind, channels, groups, size=28, reader="conv"):
    """conv (3 -> ``channels``) -> group norm (timm's export, "timm", or ONNX GroupNormalization at
    opset 21, "onnx") -> ``reader``: a 1x1 conv to 16 channels ("conv"; on a 28 x 28 map the H200's
    plan runs it tiled: at least ``tiled_min_groups`` work groups), a Relu then that conv ("relu"), or
    a 3x3 conv ("3x3")."""
    rng, inits = np.random.default_rng(9), {}
    first = conv_node(rng, inits, "x", "c", channels, 3)
    tail = ([helper.make_node("Relu", ["n"], ["r"])] if reader == "relu" else []) + [
        conv_node(rng, inits, "r" if reader == "relu" else "n", "y", 16, channels, k=3 if reader == "3x3" else 1)]
    if kind == "timm":
        return int_pattern_graph([first, *group_norm_nodes("c", "n", inits, channels, groups, rng), *tail], inits, size=size)
    inits.update(g_s=rng.uniform(0.5, 1.5, channels), g_b=rng.standard_normal(channels))
    norm = helper.make_node("GroupNormalization", ["c", "g_s", "g_b"], ["n"], num_groups=groups, epsilon=1e-5)
    return pattern_graph([first, norm, *tail], inits, size=size, opset=21)


@pytest.mark.parametrize("kind,channels,groups", [("timm", 6, 1), ("timm", 8, 2), ("onnx", 8, 1)])
def test_group_norm_folds_into_pwconv(kind, channels, groups):
    """conv -> GroupNorm (timm's GroupNorm1 over 6 channels: a padded block; 2 groups of 4; ONNX
    GroupNormalization) -> 1x1 conv, compiled for the H200's profile and run here against
    onnxruntime: the norm's statistics kernel, then the tiled conv reading them (the plan
    ``group_norm_partials -> conv``, no ``group_norm_apply``); PoCL's own plan keeps its one
    ``group_norm`` kernel (it never splits a group norm, so nothing folds)."""
    from tir_adreno.compiler import compile_plan

    model = _folded_graph(kind, channels, groups)
    names = check_pattern(model, size=28, profile=get_profile("nvidia-h200"))
    assert names[-2:] == ["group_norm_partials", "conv2d_tiled_nchw4c"] and "group_norm_apply" not in names, names
    plan, _, _ = compile_plan(model, get_profile("nvidia-h200"), progress=lambda _: None)
    partials = next(c for c in plan.calls if c.label.startswith("group_norm_partials"))
    conv = next(c for c in plan.calls if partials.args[-1] in c.args[:-1])
    assert conv.label.startswith("conv2d_tiled_nchw4c") and conv.args[1] == partials.args[-1], conv  # Stats right after X
    names = check_pattern(model, size=28, profile=get_profile("pocl"))
    assert [name.rstrip("0123456789") for name in names[-2:]] == ["group_norm", "conv2d_nchw4c"], names


@pytest.mark.parametrize("reader", ["relu", "3x3"])
def test_group_norm_kept_where_the_conv_cannot_fold_it(reader):
    """On the H200's plan a Relu after the norm or a 3x3 conv reading it: the split pair runs
    (``group_norm_apply`` with the Relu fused), still exact against onnxruntime."""
    names = check_pattern(_folded_graph("timm", 8, 1, reader=reader), size=28, profile=get_profile("nvidia-h200"))
    assert names[1:3] == ["group_norm_partials", "group_norm_apply"], names


def test_group_norm_fold_by_profile(monkeypatch):
    """``strategy.fusion.fold_group_norm``: MobileViT-v2's qkv projection (64 -> 129 channels on 4 x 196
    patches, tiled on the H200) folds its GroupNorm1 there; not on PoCL or Adreno (no folds, and no
    split norm to fold), not a direct plan's conv (a small map), not a 3x3 conv, not with
    ``FOLD_NORM_KINDS`` empty (``benchmarks/norm_fold.py``'s "apart" way)."""
    from primfuncs.conv import conv2d_geometry
    from primfuncs.conv.norm import GroupNormFold
    from tir_adreno.strategy import fusion as strategy

    h200 = get_profile("nvidia-h200")
    qkv, fold = conv2d_geometry((1, 64, 4, 196), (129, 64, 1, 1)), GroupNormFold(1, 196, 1e-5)
    assert strategy.fold_group_norm(qkv, fold, "float32", h200) and strategy.fold_group_norm(qkv, fold, "float16_acc32", h200)
    assert not strategy.fold_group_norm(qkv, fold, "float16", h200)
    assert not any(strategy.fold_group_norm(qkv, fold, "float32", get_profile(name)) for name in ("pocl", "adreno"))
    assert not strategy.fold_group_norm(conv2d_geometry((1, 8, 4, 4), (8, 8, 1, 1)), GroupNormFold(1, 2, 1e-5), "float32", h200)
    assert not strategy.fold_group_norm(conv2d_geometry((1, 64, 4, 196), (64, 64, 3, 3), padding=1), fold, "float32", h200)
    monkeypatch.setattr(strategy, "FOLD_NORM_KINDS", ())
    assert not strategy.fold_group_norm(qkv, fold, "float32", h200)
