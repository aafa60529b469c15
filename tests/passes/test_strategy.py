"""Device profiles, the conv strategy and tuning records (tir_adreno.strategy.profile / strategy / records).

Records are written by hand here (the ``tune`` command is tested in test_tune.py):
the strategy must take their choice, fall back to the defaults without one, and
ignore (with one warning) records of another device or other kernels.
"""

import dataclasses
import json

import numpy as np
import pytest

from helpers.conv import ALGORITHM_RTOL, reference_conv2d
from helpers.numeric import assert_close, rand

from primfuncs._common import BUFFER, TEXTURE
from primfuncs.conv import ConvConfig, conv2d_geometry
from primfuncs.epilogue import Epilogue
from tir_adreno import compile_model, ops
from tir_adreno.runtime import cache, texture
from tir_adreno.strategy import defaults, fusion, records, conv as strategy
from tir_adreno.strategy.pool import group_threshold
from tir_adreno.strategy.precision import PrecisionError
from tir_adreno.tuning import programs as tuning
from tir_adreno.strategy.profile import PROFILES, DeviceProfile, get_profile
from tir_adreno.frontend.models import _model
from tir_adreno.reference import reference_outputs, relative_error

GEOM = conv2d_geometry((1, 8, 6, 6), (8, 8, 3, 3), padding=1)
TOLERANCE = ALGORITHM_RTOL


def test_profile_of_the_live_device(device):
    import pyopencl as cl

    profile = DeviceProfile.from_device(device)
    d = device.cl_device
    assert profile.limits == device.limits and profile.compute_units == d.max_compute_units
    assert profile.max_work_group_size == d.max_work_group_size and profile.local_memory_bytes == d.local_mem_size
    assert profile.kind == ("cpu" if d.type & cl.device_type.CPU else "gpu" if d.max_compute_units >= 16 else "mobile")
    assert profile.driver == d.driver_version.strip() and profile.driver in profile.key
    assert DeviceProfile.from_device(device) is profile  # one per device


def test_named_profiles():
    adreno, h200 = get_profile("adreno"), get_profile("nvidia-h200")
    assert (adreno.kind, h200.kind, get_profile("pocl").kind) == ("mobile", "gpu", "cpu")
    assert adreno.limits == texture.DeviceLimits(16384, 16384, 2048) and adreno.half_math
    assert h200.limits.image2d_max_width == 32768 and h200.compute_units == 132
    assert h200.half_math  # through the half prelude (runtime.half_compat), proven on the H200
    with pytest.raises(ValueError, match="unknown device profile 'tpu'; known profiles: adreno, nvidia-h200, pocl"):
        get_profile("tpu")
    with pytest.raises(ValueError, match="kind must be one of"):
        DeviceProfile("x", "tpu", "", adreno.limits, 1, 1, 1, False, False, "")


def test_defaults_follow_the_profile_kind():
    deep = conv2d_geometry((1, 64, 7, 7), (64, 64, 3, 3), padding=1)
    for name, profile in PROFILES.items():
        plan = strategy.conv2d_plan(deep, Epilogue(), "float32", profile)
        assert plan.source == "default" and plan.algorithm == "direct"
        assert plan.config == defaults.default_config(deep, defaults.kind_profile(profile.kind)), name
    assert strategy.conv2d_plan(deep, Epilogue(), "float32", get_profile("nvidia-h200")).config.split_k > 1
    with pytest.raises(ValueError, match="precision must be one of"):
        strategy.conv2d_plan(deep, Epilogue(), "float64", get_profile("adreno"))
    with pytest.raises(PrecisionError, match="'float16' needs half arithmetic.*pocl"):
        strategy.conv2d_plan(deep, Epilogue(), "float16", get_profile("pocl"))
    assert strategy.conv2d_plan(deep, Epilogue(), "float16", get_profile("adreno")).dtype == "float16"


def test_group_threshold_per_kind():
    assert group_threshold(get_profile("pocl")) is None
    assert group_threshold(get_profile("adreno")) == group_threshold(get_profile("nvidia-h200")) == 49


def _records(path, profile, choice, key=GEOM):
    recs = records.Records(profile)
    recs.add(records.conv2d_key(key), choice, {choice.name: 1e-3})
    return recs.save(path)


def test_strategy_takes_records_over_defaults(tmp_path):
    profile = get_profile("adreno")
    choice = strategy.ConvChoice("direct", ConvConfig(2, 2, (4, 4, 1)), "buffer")
    recs = records.load(_records(tmp_path / "r.json", profile, choice), profile)
    plan = strategy.conv2d_plan(GEOM, Epilogue(bias=True), "float32", profile, recs)
    assert (plan.source, plan.config, plan.scope, plan.placement) == ("records", choice.config, "global", "buffer")
    assert plan.config_string == "oc2 w2 wg4x4x1 k1 buffer"
    other = conv2d_geometry((1, 8, 6, 6), (8, 8, 1, 1))
    plan = strategy.conv2d_plan(other, Epilogue(), "float32", profile, recs)
    assert plan.source == "default" and plan.scope == "global.texture"
    assert strategy.ConvChoice.from_dict(choice.to_dict()) == choice


def test_depthwise_defaults_per_profile_and_layer_class(monkeypatch):
    """DEPTHWISE_DEFAULTS holds a placement and config per device profile (its name wins over
    its class) and per layer class; the strategy and tune's first candidate follow it."""
    import dataclasses

    from tir_adreno.tuning import tune

    table = dict(defaults.DEPTHWISE_DEFAULTS)
    table["nvidia-h200"] = {
        "w_block": 2, "threads": 256, "flat": True, "register_window": True, "placement": "buffer",
        "classes": {"stride2": {"w_block": 1}, "small": {"placement": "texture", "flat": False, "threads": 64}},
    }
    monkeypatch.setattr(defaults, "DEPTHWISE_DEFAULTS", table)
    h200 = get_profile("nvidia-h200")
    other_gpu = dataclasses.replace(h200, name="other-gpu", activation_placement="texture")

    def plan(shape, stride, profile):
        geom = conv2d_geometry(shape, (shape[1], 1, 3, 3), stride, 1, 1, shape[1])
        return strategy.conv2d_plan(geom, Epilogue(), "float32", profile)

    p = plan((1, 32, 28, 28), 1, h200)
    assert (p.placement, p.scope, p.source) == ("buffer", "global", "default")
    assert p.config == ConvConfig(1, 2, (256, 1, 1), register_window=True, flat=True)
    assert plan((1, 32, 56, 56), 2, h200).config == ConvConfig(1, 1, (256, 1, 1), register_window=True, flat=True)
    small = plan((1, 32, 7, 7), 1, h200)
    assert small.placement == "texture" and not small.config.flat and small.config.work_group == (4, 7, 1)  # ceil(7 / 2) x 7
    gpu = plan((1, 32, 28, 28), 1, other_gpu)  # the class's entry, the profile's placement
    assert gpu.placement == "texture" and gpu.config == defaults.default_config(gpu.geometry, defaults.kind_profile("gpu"))
    assert plan((1, 32, 28, 28), 1, dataclasses.replace(other_gpu, activation_placement="buffer")).placement == "buffer"
    assert plan((1, 32, 28, 28), 1, h200).primfuncs()  # builds as TIR
    dense = strategy.conv2d_plan(GEOM, Epilogue(), "float32", h200)
    assert dense.placement == "buffer"  # the profile's activation_placement (a small conv: under texture_min_macs)
    cands = tune.candidates(p.geometry, h200)
    assert cands[0] == strategy.ConvChoice("direct", None, "buffer")
    assert strategy.ConvChoice("direct", None, "texture") in cands and any(c.config and c.config.flat for c in cands)
    table["nvidia-h200"] = dict(table["nvidia-h200"], placement="gpu")
    with pytest.raises(ValueError, match=r"DEPTHWISE_DEFAULTS\['nvidia-h200'\].*placement 'gpu'"):
        plan((1, 32, 28, 28), 1, h200)


def test_choice_keeps_depthwise_knobs():
    """register_window and flat survive records (older records without them read as False)."""
    choice = strategy.ConvChoice("direct", ConvConfig(1, 2, (128, 1, 1), register_window=True, flat=True), "buffer")
    assert strategy.ConvChoice.from_dict(choice.to_dict()) == choice
    assert choice.name == "direct oc1 w2 wg128x1x1 k1 reg flat buffer"
    old = choice.to_dict()
    del old["config"]["register_window"], old["config"]["flat"]
    assert strategy.ConvChoice.from_dict(old).config == ConvConfig(1, 2, (128, 1, 1))


def test_records_of_another_device_or_kernels_are_ignored(tmp_path):
    choice = strategy.ConvChoice("winograd_4x4")
    path = _records(tmp_path / "r.json", get_profile("nvidia-h200"), choice)
    with pytest.warns(records.RecordsWarning, match="measured on nvidia-h200 .*not adreno"):
        recs = records.load(path, get_profile("adreno"))
    assert strategy.conv2d_plan(GEOM, Epilogue(), "float32", get_profile("adreno"), recs).source == "default"
    doc = json.loads(cache.read(path))
    doc["kernels"] = "0" * 16
    cache.write(path, json.dumps(doc).encode())
    with pytest.warns(records.RecordsWarning, match="other kernel sources"):
        assert not records.load(path, get_profile("nvidia-h200")).layers
    path.write_bytes(b"garbage")
    with pytest.warns(records.RecordsWarning, match="not a tir-adreno records file"):
        assert not records.load(path, get_profile("nvidia-h200")).layers
    live = DeviceProfile("nvidia-h200", "gpu", "", get_profile("nvidia-h200").limits, 1024, 1, 132, True, False, "", "580")
    _records(path, live, choice)
    assert records.load(path, get_profile("nvidia-h200")).layers  # a named profile takes any driver


def test_winograd_placement_falls_back_to_buffers():
    profile = get_profile("adreno")
    plan = strategy.conv2d_plan(GEOM, Epilogue(), "float32", profile, choice=strategy.ConvChoice("winograd_4x4"))
    assert (plan.scope, plan.weight_scope, plan.tile_scope) == ("global.texture", "global.texture-weight", "global.texture")
    narrow = DeviceProfile("narrow", "mobile", "", texture.DeviceLimits(8, 8, 2048), 256, 1, 1, False, False, "")
    plan = strategy.conv2d_plan(GEOM, Epilogue(), "float32", narrow, choice=strategy.ConvChoice("winograd_2x2"))
    assert (plan.scope, plan.weight_scope, plan.tile_scope) == ("global.texture", "global", "global")
    with pytest.raises(texture.TextureLimitError):
        strategy.conv2d_plan(GEOM, Epilogue(), "float32", narrow, choice=strategy.ConvChoice("winograd_2x2"), allow_buffer=False)


def test_pick_prefers_the_earlier_candidate_on_a_near_tie():
    assert tuning.pick_algorithm({"direct": 1.0, "winograd_2x2": 0.9, "winograd_4x4": 0.5}) == "winograd_4x4"
    assert tuning.pick_algorithm({"direct": 1.0, "winograd_2x2": 0.99, "winograd_4x4": 0.985}) == "direct"
    with pytest.raises(ValueError, match="no measurements"):
        tuning.pick_algorithm({})


def test_ops_conv2d_with_records(device, tmp_path):
    profile = DeviceProfile.from_device(device)
    path = _records(tmp_path / "r.json", profile, strategy.ConvChoice("winograd_2x2", None, "buffer"))
    rng = np.random.default_rng(11)
    x, w, b = rand(rng, (1, 8, 6, 6)), rand(rng, (8, 8, 3, 3)), rand(rng, (8,))
    got = ops.conv2d(x, w, b, padding=1, activation="relu", device=device, records=path)
    ref = np.maximum(reference_conv2d(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1) + b[None, :, None, None], 0)
    assert_close(got, ref, TOLERANCE["winograd_2x2"])


def test_compiled_model_uses_records(device, tmp_path):
    """Records give the Relax pass Winograd F(4x4) for the 3x3 stride-1 conv; profile rows say so."""

    def body(m, x):
        y = m.conv_bn(x, 6, 3)  # 3x3 stride 1: Winograd with batch norm, bias and relu fused
        return m.conv_bn(y, 5, 3, 2)  # stride 2: direct, default config

    mod = _model("test", body, 1, 9, 0)
    geom = conv2d_geometry((1, 3, 9, 9), (6, 3, 3, 3), padding=1)
    path = _records(tmp_path / "r.json", DeviceProfile.from_device(device), strategy.ConvChoice("winograd_4x4"), geom)
    compiled = compile_model(mod, device=device, records=path, progress=lambda _: None)
    x = np.random.default_rng(5).standard_normal((1, 3, 9, 9)).astype("float32")
    (out,) = compiled.run({"input": x})
    (ref,) = reference_outputs(mod, {"input": x})
    assert relative_error(out, ref) <= TOLERANCE["winograd_4x4"]
    rows = [p for p in compiled.profile() if "config" in p]
    assert [r["op"] for r in rows if r["source"] == "records"] == [
        "winograd4x4_input_transform", "winograd4x4_batched_gemm", "winograd4x4_output_transform"
    ], rows
    assert [r["op"].startswith("conv2d_nchw4c") for r in rows if r["source"] == "default"] == [True]
    assert all(r["config"].startswith("F4 ") for r in rows if r["source"] == "records")


def test_compiled_model_places_depthwise_by_its_defaults(device, monkeypatch):
    """A DEPTHWISE_DEFAULTS entry for this device's profile that puts depthwise convs on
    buffers with the 1-D grid: the Relax pass follows it (copies around the buffer conv),
    the output stays right and the profile rows show the choice."""
    profile = DeviceProfile.from_device(device)
    entry = {"w_block": 1, "threads": 64, "flat": True, "register_window": True, "placement": "buffer"}
    monkeypatch.setattr(defaults, "DEPTHWISE_DEFAULTS", {**defaults.DEPTHWISE_DEFAULTS, profile.name: entry})

    def body(m, x):
        y = m.conv_bn(x, 8, 3, act="relu6")
        y = m.conv_bn(y, 8, 3, 2, groups=8, act="relu6")  # depthwise, stride 2
        return m.conv_bn(y, 4, 1, act=None)

    mod = _model("test", body, 1, 9, 0)
    compiled = compile_model(mod, device=device, progress=lambda _: None, fuse=False)  # keep the depthwise conv apart
    x = np.random.default_rng(6).standard_normal((1, 3, 9, 9)).astype("float32")
    (out,) = compiled.run({"input": x})
    (ref,) = reference_outputs(mod, {"input": x})
    assert relative_error(out, ref) <= 1e-5  # measured 2.3e-7
    rows = [p for p in compiled.profile() if "config" in p]
    assert [r["config"] for r in rows if r["op"].startswith("depthwise")] == ["oc1 w1 wg64x1x1 k1 reg flat buffer"], rows


#: MobileNetV2's 17 inverted-residual tails at 224: (middle channels, input size, stride, output channels).
MOBILENET_V2_TAILS = [(32, 112, 1, 16), (96, 112, 2, 24), (144, 56, 1, 24), (144, 56, 2, 32), *[(192, 28, 1, 32)] * 2,
                      (192, 28, 2, 64), *[(384, 14, 1, 64)] * 3, (384, 14, 1, 96), *[(576, 14, 1, 96)] * 2,
                      (576, 14, 2, 160), *[(960, 7, 1, 160)] * 2, (960, 7, 1, 320)]


def _tail(c, size, stride, o):
    from primfuncs.conv import depthwise_pointwise_geometry

    return depthwise_pointwise_geometry((1, c, size, size), (c, 1, 3, 3), (o, c, 1, 1), stride, 1)


@pytest.mark.parametrize("name, fused", [("nvidia-h200", 17), ("adreno", 1), ("pocl", 1)])
def test_fusion_decision_per_profile(name, fused):
    """Launch-bound H200: every MobileNetV2 tail fuses; Adreno and PoCL only the first, whose 1x1
    conv has one channel tile (nothing recomputed). No launch cost: nothing fuses."""
    profile = get_profile(name)
    plans = [fusion.fuse_depthwise_pointwise(*_tail(*t), profile) for t in MOBILENET_V2_TAILS]
    assert sum(p is not None for p in plans) == fused
    first = plans[0]
    assert first is not None and first.recompute_macs == 0 and first.config_string.startswith("fused oc4")
    assert all(p.recompute_macs < profile.launch_cost_macs for p in plans if p is not None)
    off = dataclasses.replace(profile, launch_cost_macs=0)
    assert all(fusion.fuse_depthwise_pointwise(*_tail(*t), off) is None for t in MOBILENET_V2_TAILS)


def test_fusion_needs_a_multiplier_1_depthwise_and_a_blocked_1x1():
    """A dense 1x1, or a grouped one whose groups fill whole channel blocks (EfficientViT's
    aggregation; each tile recomputes its group's depthwise channels only: nothing extra)."""
    h200 = get_profile("nvidia-h200")
    dw, pw = _tail(16, 8, 1, 8)
    assert fusion.fuse_depthwise_pointwise(dw, pw, h200) is not None
    aligned_1x1 = conv2d_geometry((1, 16, 8, 8), (16, 4, 1, 1), groups=4)
    fused = fusion.fuse_depthwise_pointwise(dw, aligned_1x1, h200)
    assert fused is not None and fused.recompute_macs == 0, fused
    multiplier2 = conv2d_geometry((1, 16, 8, 8), (32, 1, 3, 3), padding=1, groups=16)
    grouped_1x1 = conv2d_geometry((1, 16, 8, 8), (8, 4, 1, 1), groups=4)  # 2 output channels a group
    strided_1x1 = conv2d_geometry((1, 16, 8, 8), (8, 16, 1, 1), strides=2)
    dense_3x3 = conv2d_geometry((1, 16, 8, 8), (16, 16, 3, 3), padding=1)
    for a, b in ((multiplier2, conv2d_geometry((1, 32, 8, 8), (8, 32, 1, 1))), (dw, grouped_1x1), (dw, strided_1x1),
                 (dense_3x3, pw)):
        assert fusion.fuse_depthwise_pointwise(a, b, h200) is None
    with pytest.raises(ValueError, match="launch_cost_macs"):
        dataclasses.replace(h200, launch_cost_macs=-1)


def test_h200_runs_big_1x1_and_stem_convs_tiled_on_buffers():
    """``DeviceProfile.tiled_min_groups``: on the H200 a 1x1, stem or patchify conv that launches enough
    work groups of the tiled kernel runs it on buffers; a deep 3x3 conv, a small 1x1 conv and
    every conv on Adreno / PoCL keep the direct kernel; a fused depthwise -> 1x1 pair keeps its
    prologue kernel."""
    h200 = get_profile("nvidia-h200")
    pointwise = conv2d_geometry((1, 256, 56, 56), (64, 256, 1, 1))
    stem = conv2d_geometry((1, 3, 224, 224), (64, 3, 7, 7), 2, 3)
    deep = conv2d_geometry((1, 64, 56, 56), (64, 64, 3, 3), padding=1)
    small = conv2d_geometry((1, 8, 6, 6), (8, 8, 1, 1))
    patchify = conv2d_geometry((1, 40, 56, 56), (80, 40, 2, 2), 2)  # ConvNeXt's downsample

    def plan(geom, profile=h200):
        return strategy.conv2d_plan(geom, Epilogue(), "float32", profile)

    assert (plan(pointwise).config.tiled, plan(pointwise).placement, plan(pointwise).config.split_k) == (True, "buffer", 4)
    assert (plan(stem).config.tiled, plan(stem).config.split_k, plan(stem).placement) == (True, 1, "buffer")
    assert not plan(deep).config.tiled and plan(deep).placement == "texture"
    assert not plan(small).config.tiled
    assert plan(patchify).config.tiled
    for name in ("adreno", "pocl"):
        assert not any(plan(g, get_profile(name)).config.tiled for g in (pointwise, stem, patchify))
    assert not plan(pointwise, dataclasses.replace(h200, tiled_min_groups=0)).config.tiled
    assert "tiled c4" in plan(pointwise).config_string
    with pytest.raises(ValueError, match="tiled_min_groups must be an int >= 0"):
        dataclasses.replace(h200, tiled_min_groups=-1)
    from primfuncs.conv import depthwise_pointwise_geometry

    dw, pw = depthwise_pointwise_geometry((1, 144, 56, 56), (144, 1, 3, 3), (24, 144, 1, 1), 1, 1)
    assert plan(pw).config.tiled
    fused = fusion.fuse_depthwise_pointwise(dw, pw, h200)
    assert fused is not None and not fused.config.tiled


def test_h200_runs_strided_convs_tiled_but_long_reductions_into_small_maps():
    """``defaults.is_strided`` convs (3x3/2 downsamples past the stem) run tiled on the H200: 2 x 2
    tiles where they launch ``tiled_min_groups`` work groups, else 1 x 1 tiles in 8 K slices, even
    below that; 7x7 outputs of 160+ input channels (``strided_runs_direct``) and Adreno / PoCL keep
    the direct kernel; a stride-1 3x3 conv, a patchify conv and a stem are not strided."""
    from tir_adreno.strategy import defaults

    h200 = get_profile("nvidia-h200")
    wide = conv2d_geometry((1, 32, 112, 112), (128, 32, 3, 3), 2, 1)  # MobileNetV4-hybrid's
    narrow = conv2d_geometry((1, 96, 14, 14), (176, 96, 3, 3), 2, 1)  # EfficientFormer-V2's last: 88 groups
    long_k = conv2d_geometry((1, 192, 14, 14), (288, 192, 3, 3), 2, 1)  # MambaOut's last
    short_k = conv2d_geometry((1, 152, 14, 14), (288, 152, 3, 3), 2, 1)
    wide_map = conv2d_geometry((1, 192, 28, 28), (288, 192, 3, 3), 2, 1)

    def config(geom, profile=h200):
        return strategy.conv2d_plan(geom, Epilogue(), "float32", profile).config

    assert all(defaults.is_strided(g) for g in (wide, narrow, long_k, short_k, wide_map))
    assert not any(defaults.is_strided(g) for g in (conv2d_geometry((1, 40, 56, 56), (80, 40, 2, 2), 2),
                                                    conv2d_geometry((1, 40, 56, 56), (80, 40, 3, 3), padding=1),
                                                    conv2d_geometry((1, 3, 224, 224), (8, 3, 3, 3), 2, 1)))
    first, last = defaults.TILED_CONFIGS[0], defaults.TILED_CONFIGS[-1]
    assert defaults.tiled_work_groups(wide, *first[:3]) >= h200.tiled_min_groups
    assert config(wide) == defaults.tiled_config(wide, first)
    assert defaults.tiled_work_groups(narrow, *last[:3]) < h200.tiled_min_groups
    assert config(narrow) == defaults.tiled_config(narrow, last)
    assert config(short_k) == defaults.tiled_config(short_k, last) and config(wide_map).tiled
    assert defaults.strided_runs_direct(long_k) and not config(long_k).tiled
    for name in ("adreno", "pocl"):
        assert not config(wide, get_profile(name)).tiled


def test_h200_stem_and_fused_configs():
    """The H200's swept rules (``conv_configs.py --grid stem`` / ``--grid fused``): a stem of few
    output blocks takes ``TILED_STEM`` with its whole window in one K step, ResNet's 64-channel
    stem ``TILED_STEM_WIDE`` (49 taps in four steps of 13 that fit local memory); a fused
    depthwise -> 1x1 conv a 4 x 1 tile whose ``split_k`` goes down to one channel block a slice
    (EfficientViT's grouped aggregation: 4 blocks a group, 4 slices)."""
    from primfuncs.conv import depthwise_pointwise_geometry
    from tir_adreno.strategy import defaults

    h200 = get_profile("nvidia-h200")
    small = defaults.default_config(conv2d_geometry((1, 3, 224, 224), (8, 3, 3, 3), 2, 1), h200)
    wide = defaults.default_config(conv2d_geometry((1, 3, 224, 224), (64, 3, 7, 7), 2, 3), h200)
    assert (small.tiled, small.oc_block, small.w_block, small.work_group, small.k_chunk) == (True, 2, 1, (64, 1, 1), 9)
    assert (wide.tiled, wide.oc_block, wide.w_block, wide.work_group, wide.k_chunk) == (True, 1, 4, (16, 8, 1), 13)
    dw, pw = depthwise_pointwise_geometry((1, 384, 7, 7), (384, 1, 5, 5), (384, 16, 1, 1), 1, 2, groups=24)
    grouped = fusion.fuse_depthwise_pointwise(dw, pw, h200).config
    assert (grouped.oc_block, grouped.w_block, grouped.split_k) == (4, 1, 4)
    dw, pw = depthwise_pointwise_geometry((1, 512, 7, 7), (512, 1, 3, 3), (128, 512, 1, 1), 1, 1)
    dense = fusion.fuse_depthwise_pointwise(dw, pw, h200).config
    assert (dense.oc_block, dense.w_block, dense.split_k) == (4, 1, 32)


def test_tiled_choice_survives_records(tmp_path):
    """A tiled config round-trips through records (tune writes them; compile reads them)."""
    choice = strategy.ConvChoice("direct", ConvConfig(2, 2, (16, 4, 1), 4, tiled=True, k_chunk=4), "buffer")
    assert strategy.ConvChoice.from_dict(json.loads(json.dumps(choice.to_dict()))) == choice


def test_convs_write_where_their_reader_conv_reads(device):
    """On a profile that runs 1x1 convs tiled on buffers and stride-1 3x3 convs on textures, a 1x1
    conv read by a 3x3 conv writes a texture (that reader's scope), the 3x3 conv writes the
    buffer the next 1x1 conv reads; no copy kernel, and the float32 reference holds on PoCL."""
    profile = dataclasses.replace(get_profile("nvidia-h200"), tiled_min_groups=1, texture_min_macs=1)

    def body(m, x):
        y = m.conv_bn(x, 8, 3)  # stem: tiled (one input channel block)
        y = m.conv_bn(y, 12, 1)  # tiled, read by the strided 3x3
        y = m.conv_bn(y, 12, 3)  # direct, textures (a stride-2 3x3 would run tiled)
        return m.conv_bn(y, 16, 1, act=None)  # tiled

    mod = _model("test", body, 1, 13, 0)
    compiled = compile_model(mod, device=device, profile=profile, progress=lambda _: None)
    plan = compiled.plan
    convs = [c for c in plan.calls if c.config is not None]
    assert ["tiled" in c.config for c in convs] == [True, True, False, True], [c.config for c in convs]
    assert not [c.label for c in plan.calls if c.label.startswith("copy")]
    out_scope = [plan.tensors[c.args[-1]].scope for c in convs]
    assert out_scope[1] == TEXTURE and out_scope[2] == BUFFER, out_scope
    x = np.random.default_rng(2).standard_normal((1, 3, 13, 13)).astype("float32")
    (out,) = compiled.run({"input": x})
    (ref,) = reference_outputs(mod, {"input": x})
    assert relative_error(out, ref) <= 1e-5  # measured 5.5e-7
