"""Placement: the profile's default scope of activations, mixed-scope convs, no copy kernels.

A conv at a texture/buffer boundary reads ``X`` (and ``Residual``) in one scope and writes
``Y`` in the other; every combination is checked against the float64 reference with a
poisoned output, and a whole model whose records alternate placements runs with no copy.
"""

import dataclasses
import json

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from helpers.benchmarks import script
from helpers.cli import cli
from helpers.conv import ALGORITHM_RTOL, check_blocked_output, fused_inputs, reference_conv2d, reference_epilogue
from helpers.numeric import assert_close, rand, run_kernel, sanitized, unpack_nchw4c
from helpers.strategies import CONV_3X3, DEPTHWISE_3X3, SCOPES, SEEDS, STRIDE1_RESIDUAL, conv_cases, fused_cases

from primfuncs import conv
from primfuncs._common import BUFFER, TEXTURE
from primfuncs.conv import ConvConfig, conv2d_geometry
from primfuncs.epilogue import Epilogue
from tir_adreno import compile_model, ops
from tir_adreno.strategy import records, conv as strategy
from tir_adreno.tuning import tune
from tir_adreno.strategy.profile import DeviceProfile, get_profile, with_placement
from tir_adreno.frontend.models import get_model
from tir_adreno.reference import reference_outputs, relative_error
from tir_adreno.tuning.tune import model_layers

#: (X, Y, Residual) scopes of a conv at a boundary (all eight are drawn; these two on every run).
MIXED = st.tuples(SCOPES, SCOPES, SCOPES)
RTOL = ALGORITHM_RTOL


def check_mixed(device, case, algorithm, placement, scopes, seed):
    rng = np.random.default_rng(seed)
    x, w = rand(rng, case["data_shape"]), rand(rng, case["weight_shape"])
    geom = conv2d_geometry(x.shape, w.shape, case["strides"], case["padding"], case["dilation"], case["groups"])
    epi = case["epilogue"]
    bias = rand(rng, (geom.o,)) if epi.bias else None
    residual = rand(rng, geom.out_shape) if epi.residual else None
    config = case["config"] if algorithm == "direct" else None
    in_scope, out_scope, residual_scope = scopes
    plan = strategy.conv2d_plan(geom, epi, "float32", DeviceProfile.from_device(device),
                                choice=strategy.ConvChoice(algorithm, config, placement),
                                in_scope=in_scope, out_scope=out_scope, residual_scope=residual_scope)
    assert (plan.tensor("X").scope, plan.tensor("Y").scope) == (in_scope, out_scope)
    if epi.residual:
        assert plan.tensor("Residual").scope == residual_scope
    with sanitized(seed):
        got = ops.run_conv_plan(plan, device, x, w, bias, residual)  # Y poisoned: unwritten pixels are NaN
    conv = reference_conv2d(x, w, geom.strides, geom.padding, geom.dilation, geom.groups)
    assert_close(got, reference_epilogue(conv, bias, residual, epi.activation, epi.clip_min, epi.clip_max), RTOL[algorithm])


@given(case=conv_cases(), placement=st.sampled_from(["texture", "buffer"]), scopes=MIXED, seed=SEEDS)
@example(case=CONV_3X3, placement="texture", scopes=(TEXTURE, BUFFER, TEXTURE), seed=0)
@example(case=CONV_3X3, placement="buffer", scopes=(BUFFER, TEXTURE, BUFFER), seed=1)
def test_mixed_scope_conv(device, case, placement, scopes, seed):
    check_mixed(device, case, "direct", placement, scopes, seed)


@given(case=conv_cases(depthwise=True), placement=st.sampled_from(["texture", "buffer"]), scopes=MIXED, seed=SEEDS)
@example(case=DEPTHWISE_3X3, placement="buffer", scopes=(TEXTURE, BUFFER, TEXTURE), seed=2)
def test_mixed_scope_depthwise(device, case, placement, scopes, seed):
    check_mixed(device, case, "direct", placement, scopes, seed)


@given(algorithm=st.sampled_from(["winograd_2x2", "winograd_4x4"]), placement=st.sampled_from(["texture", "buffer"]),
       scopes=MIXED, seed=SEEDS, c=st.integers(1, 9), o=st.integers(1, 9), h=st.integers(1, 9), w=st.integers(1, 9))
@example(algorithm="winograd_2x2", placement="texture", scopes=(BUFFER, TEXTURE, BUFFER), seed=3, c=5, o=6, h=7, w=5)
@example(algorithm="winograd_4x4", placement="buffer", scopes=(TEXTURE, BUFFER, TEXTURE), seed=4, c=6, o=7, h=9, w=6)
def test_mixed_scope_winograd(device, algorithm, placement, scopes, seed, c, o, h, w):
    case = dict(data_shape=(1, c, h, w), weight_shape=(o, c, 3, 3), strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1),
                groups=1, epilogue=Epilogue(bias=True, activation="relu", residual=True), config=ConvConfig(1, 1))
    check_mixed(device, case, algorithm, placement, scopes, seed)


@given(case=fused_cases(), scopes=MIXED, seed=SEEDS)
@example(case=STRIDE1_RESIDUAL, scopes=(BUFFER, TEXTURE, BUFFER), seed=0)
def test_mixed_scope_fused(device, case, scopes, seed):
    """The fused depthwise -> 1x1 kernel reads X and Residual and writes Y in either scope too."""
    inputs, ref = fused_inputs(np.random.default_rng(seed), case)
    in_scope, out_scope, residual_scope = scopes
    epilogue = replace(case["epilogue"], out_scope=out_scope, residual_scope=residual_scope)
    func = conv.depthwise_pointwise_nchw4c(**{**case, "epilogue": epilogue}, scope=in_scope)
    with sanitized(seed):
        loaded, name = ops.compile(func, device)
        assert (loaded[name].params[0].scope, loaded[name].params[-1].scope) == (in_scope, out_scope)
        out = run_kernel(device, func, *inputs)  # poisoned output
    check_blocked_output(out, ref.shape[1])
    assert_close(unpack_nchw4c(out, ref.shape[1]), ref, RTOL["direct"])


def test_profiles_place_activations():
    assert get_profile("nvidia-h200").activation_placement == "buffer"
    assert get_profile("adreno").activation_placement == get_profile("pocl").activation_placement == "texture"
    h200 = get_profile("nvidia-h200")
    pointwise = conv2d_geometry((1, 8, 6, 6), (8, 8, 1, 1))
    plan = strategy.conv2d_plan(pointwise, Epilogue(), "float32", h200)
    assert (plan.placement, plan.scope, plan.weight_scope) == ("buffer", BUFFER, BUFFER)
    # the H200's texture_min_macs: convs from 32M multiply-adds up on textures, the rest in buffers
    big = conv2d_geometry((1, 64, 56, 56), (64, 64, 3, 3), padding=1)  # 116M
    small = conv2d_geometry((1, 8, 6, 6), (8, 8, 3, 3), padding=1)
    depthwise = conv2d_geometry((1, 8, 6, 6), (8, 1, 3, 3), padding=1, groups=8)
    assert [strategy.conv2d_plan(g, Epilogue(), "float32", h200).placement for g in (big, small, depthwise)] == [
        "texture", "buffer", "buffer"]
    assert strategy.conv2d_plan(big, Epilogue(), "float32", dataclasses.replace(h200, texture_min_macs=0)).placement == "buffer"
    assert strategy.conv2d_plan(pointwise, Epilogue(), "float32", with_placement(h200, "texture")).scope == TEXTURE
    assert strategy.conv2d_plan(big, Epilogue(), "float32", with_placement(h200, "buffer")).scope == BUFFER  # every activation
    with pytest.raises(ValueError, match="placement must be one of"):
        with_placement(get_profile("adreno"), "image")
    with pytest.raises(ValueError, match="texture_min_macs must be an int >= 0"):
        dataclasses.replace(h200, texture_min_macs=-1)


def _alternating_records(path, model, profile, every=2):
    """Records placing every other conv of ``model`` in the profile's other scope."""
    other = {"texture": "buffer", "buffer": "texture"}[profile.activation_placement]
    recs = records.Records(profile)
    convs, _ = model_layers(model)
    for i, geom in enumerate(convs):
        placement = other if i % every == 0 else profile.activation_placement
        choice = strategy.ConvChoice("direct", None, placement)
        recs.add(records.conv2d_key(geom), choice, {choice.name: 1e-6}, 1e-6)
    return recs.save(path), len(convs)


def _kernels(compiled):
    return [c.label for c in compiled.plan.calls]


def test_alternating_placements_need_no_copy(device, tmp_path):
    """MobileNetV2 (32x32 input) with every other conv in buffers: mixed-scope convs at the
    boundaries, not one copy kernel, and the float32 reference matched."""
    model = get_model("mobilenet_v2", image_size=32, num_classes=10)
    profile = DeviceProfile.from_device(device)
    path, count = _alternating_records(tmp_path / "r.json", model, profile)
    compiled = compile_model(model, device, profile=profile, records=path, progress=lambda _: None)
    labels = _kernels(compiled)
    assert not [k for k in labels if k.startswith("copy")], labels
    tensors = compiled.plan.tensors
    mixed = [c.label for c in compiled.plan.calls
             if c.config is not None and {tensors[a].scope for a in c.args if tensors[a].kind == "temp"} == {TEXTURE, BUFFER}]
    assert len(mixed) >= count // 3, (count, mixed)  # the boundaries run mixed-scope convs (fused depthwise -> 1x1 too)
    x = np.random.default_rng(3).standard_normal(compiled.plan.tensors[compiled.plan.inputs[0][1]].shape).astype("float32")
    (out,) = compiled.run({compiled.plan.inputs[0][0]: x})
    (ref,) = reference_outputs(model, {compiled.plan.inputs[0][0]: x})
    assert relative_error(out, ref) <= 2e-5  # MobileNetV2 (32x32, built-in weights) with mixed placements: measured 6.6e-6


def test_records_replaced_keeps_the_layer_winner(tmp_path):
    profile = get_profile("pocl")
    recs = records.Records(profile)
    geom = conv2d_geometry((1, 8, 6, 6), (8, 8, 3, 3), padding=1)
    tuned = strategy.ConvChoice("winograd_2x2", None, "buffer")
    recs.add(records.conv2d_key(geom), tuned, {tuned.name: 1e-6})
    forced = recs.replaced(conv=lambda c: strategy.ConvChoice(c.algorithm, c.config, "texture"))
    assert forced.lookup(geom, "float32") == strategy.ConvChoice("winograd_2x2", None, "texture")
    assert forced.layers[records.conv2d_key(geom)]["layer_winner"] == tuned.name
    assert recs.lookup(geom, "float32") == tuned  # the original is unchanged
    default = recs.replaced(conv=lambda c: None)
    assert default.lookup(geom, "float32") == strategy.ConvChoice() and default.layers[records.conv2d_key(geom)]["choice"] is None
    forced.context = {"kept": "tuned, default placement"}
    path = forced.save(tmp_path / "r.json")
    assert records.load(path, profile).context == {"kept": "tuned, default placement"}


def test_profile_placement_reaches_every_kernel(two_convs, tmp_path):
    """nvidia-h200 plans every activation in buffers with no flag; --placement overrides a profile."""
    from tir_adreno.compiler import compile_plan

    plan, _, _ = compile_plan(str(two_convs), get_profile("nvidia-h200"), progress=lambda _: None)
    assert {t.scope for t in plan.tensors if t.kind == "temp"} == {BUFFER}
    plan, _, _ = compile_plan(str(two_convs), get_profile("nvidia-h200"), progress=lambda _: None, placement="texture")
    assert TEXTURE in {t.scope for t in plan.tensors if t.kind == "temp"}
    res = cli("run", str(two_convs), "--placement", "buffer", "--check", "--json", str(tmp_path / "r.json"))
    assert res.returncode == 0 and "check passed" in res.stdout, res.stdout + res.stderr[-2000:]
    rows = json.loads((tmp_path / "r.json").read_text())["profile"]
    assert {r["placement"] for r in rows} == {"buffer"}, rows
    res = cli("compile", str(two_convs), "-o", str(tmp_path / "m"), "--placement", "image")
    assert res.returncode == 2 and "--placement: invalid choice: 'image'" in res.stderr


def test_in_context_drops_records_that_slow_the_model(device, two_convs, tmp_path, monkeypatch):  # noqa: F811 (fixture)
    """Per-layer records that put the convs in textures on a buffer profile, on a device where
    every kernel touching an image costs a floor (the H200's driver, simulated: the model's time
    counts such kernels): the whole-model timing keeps the profile's placement."""
    from tir_adreno.runtime.texture import is_texture_scope

    def image_floor(compiled, runs):
        tensors = compiled.plan.tensors
        return 1e-5 * (1 + sum(any(is_texture_scope(tensors[a].scope) for a in c.args) for c in compiled.plan.calls))

    monkeypatch.setattr(tune, "time_model", image_floor)
    profile = with_placement(DeviceProfile.from_device(device), "buffer")
    path = tmp_path / "r.json"
    recs = records.Records(profile)
    for geom in model_layers(str(two_convs))[0]:
        choice = strategy.ConvChoice("direct", None, "texture")
        recs.add(records.conv2d_key(geom), choice, {choice.name: 1e-6}, 1e-6)
    recs.save(path)
    lines = []
    times = tune.in_context(str(two_convs), profile, path, device, progress=lines.append)
    assert times["tuned"] > times["default"] == times["tuned, default placement"], times
    doc = records.load(path, profile)
    assert doc.context["kept"] == "default" and all(e["choice"] is None for k, e in doc.layers.items() if k.startswith("conv2d"))
    assert "kept: default" in lines[-1] and all(name in lines[-1] for name in tune.CONTEXT_VARIANTS)
    compiled = compile_model(str(two_convs), device, profile=profile, records=path, progress=lambda _: None)
    assert {t.scope for t in compiled.plan.tensors if t.kind == "temp"} == {BUFFER}
    assert [c.source for c in compiled.plan.calls if c.config is not None] == ["records", "records"]


def test_models_e2e_times_the_other_placement(two_convs, tmp_path):  # noqa: F811 (fixture)
    """``models_e2e.py --placement buffer`` adds the way ours_buffer (built here, run without TVM)."""
    saved = tmp_path / "saved"
    script("models_e2e.py", "--onnx", two_convs, "--build-only", saved, "--target", "pocl", "--placement", "buffer")
    assert {p.name for p in saved.iterdir()} == {"two-ours", "two-upstream", "two-ours_nofuse", "two-ours_buffer"}
    out = script("models_e2e.py", "--from", saved, "--models", "two", "--repeat", "2", "--results-dir", tmp_path, no_tvm=True)
    assert "buffer " in out.splitlines()[-1]  # the table's last column: the other placement's times
    (entry,) = json.loads(next(tmp_path.glob("models_e2e-*.json")).read_text())["results"]
    assert entry["ours"]["texture_activations"] > 0 and entry["ours_buffer"]["texture_activations"] == 0
    assert entry["max_rel_diff_ours_buffer"] < 1e-4


def test_one_placement_rule(device):
    """strategy.placement decides every kernel's scope: the profile's placement (or an override),
    a texture only where every tensor fits, a named limit when buffers are forbidden; ``ops``
    places a kernel as the Relax pass would in a model."""
    from tir_adreno.runtime.texture import TextureLimitError
    from tir_adreno.strategy.placement import activation_scope

    adreno, h200 = get_profile("adreno"), get_profile("nvidia-h200")
    small, wide = (1, 2, 6, 6, 4), (1, 2, 1, adreno.limits.image2d_max_width + 1, 4)
    assert activation_scope([small], adreno) == TEXTURE and activation_scope([small], h200) == BUFFER
    assert activation_scope([small], h200, "texture") == TEXTURE and activation_scope([small], adreno, "buffer") == BUFFER
    assert activation_scope([small, wide], adreno) == BUFFER  # one scope for all of a kernel's tensors
    with pytest.raises(TextureLimitError, match="allow_buffer=True"):
        activation_scope([small, wide], adreno, allow_buffer=False)
    profile = DeviceProfile.from_device(device)
    for nchw in ((1, 5, 7, 3), (2, 3, 1, device.limits.image2d_max_width + 1)):
        expected = activation_scope([(nchw[0], -(-nchw[1] // 4), nchw[2], nchw[3], 4)], profile)
        assert ops.activation_scope(device, nchw) == expected


def test_tune_lists_the_convs_the_pass_takes(tmp_path):
    """``model_layers`` and the pass share one definition of a conv our kernels take: a conv whose
    weights are a model input runs upstream, so it is not tuned."""
    import onnx
    from onnx import TensorProto, helper

    w = helper.make_tensor("w", TensorProto.FLOAT, (8, 4, 3, 3), np.random.default_rng(0).standard_normal(288).astype("float32"))
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Conv", ["c", "v"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 4, 6, 6)),
         helper.make_tensor_value_info("v", TensorProto.FLOAT, (8, 8, 1, 1))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 8, 6, 6))], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(tmp_path / "m.onnx"))
    convs, _ = model_layers(str(tmp_path / "m.onnx"))
    assert [(g.c, g.o, g.kh) for g in convs] == [(4, 8, 3)]


def test_weight_scope_is_one_rule():
    """``strategy.placement.weight_scope``, the one rule every conv plan asks: packed weights in the
    weight texture beside texture activations where every one fits the images (a kernel reads its
    weights alike), else buffers; with ``allow_buffer=False`` one that does not fit raises."""
    from primfuncs._common import TEXTURE_WEIGHT
    from tir_adreno.runtime.texture import TextureLimitError
    from tir_adreno.strategy.placement import weight_scope

    adreno = get_profile("adreno")  # images 16384 pixels wide
    fits, too_wide = (4, 64, 3, 3, 4), (4, 20000, 1, 1, 4)  # one row per 4 outputs, I x KH x KW pixels
    assert weight_scope([fits], TEXTURE, adreno) == TEXTURE_WEIGHT
    assert weight_scope([fits], BUFFER, adreno) == BUFFER
    assert weight_scope([too_wide], TEXTURE, adreno) == BUFFER
    assert weight_scope([fits, too_wide], TEXTURE, adreno) == BUFFER
    with pytest.raises(TextureLimitError):
        weight_scope([too_wide], TEXTURE, adreno, allow_buffer=False)
    plan = strategy.conv2d_plan(conv2d_geometry((1, 64, 8, 8), (16, 64, 3, 3), padding=1), Epilogue(), "float32", adreno)
    assert (plan.scope, plan.weight_scope) == (TEXTURE, weight_scope([(4, 64, 3, 3, 4)], TEXTURE, adreno)) == (TEXTURE, TEXTURE_WEIGHT)
