"""Per-device conv2d algorithm choice (tir_adreno.tuning): measured once, cached atomically,
corrupt files rebuilt, and the choice used by ops.conv2d and the Relax pass.

Every test gets its own cache directory, so choices never leak into other tests
(the rest of the suite runs with the default mode, ``cached``, and an empty cache:
always the direct conv). Measurements are counted by wrapping
``tuning.measure_conv2d``; the tests that only need a choice fake the times.
"""

import json
import warnings

import numpy as np
import pytest
from test_conv2d import reference_conv2d
from util import assert_close, rand

from primfuncs.conv2d import conv2d_geometry
from tir_adreno import cache, compile_model, ops, texture, tuning
from tir_adreno.models import _model
from tir_adreno.reference import reference_outputs, relative_error

GEOM = conv2d_geometry((1, 8, 6, 6), (8, 8, 3, 3), padding=1)
TOLERANCE = {"direct": 1e-4, "winograd_2x2": 1e-4, "winograd_4x4": 1e-3}


@pytest.fixture
def tuning_env(tmp_path, monkeypatch):
    """A private cache directory, TIR_ADRENO_TUNING=on, and a list recording each measurement."""
    monkeypatch.setenv("TIR_ADRENO_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(tuning.ENV, "on")
    calls = []
    real = tuning.measure_conv2d

    def counting(geom, device, dtype="float32"):
        calls.append(tuning.conv2d_key(geom, dtype))
        return real(geom, device, dtype)

    monkeypatch.setattr(tuning, "measure_conv2d", counting)
    return calls


@pytest.fixture
def fake_times(tmp_path, monkeypatch):
    """Like ``tuning_env`` but measurements return fixed times (F(4x4) fastest), instantly."""
    monkeypatch.setenv("TIR_ADRENO_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(tuning.ENV, "on")
    calls = []

    def fake(geom, device, dtype="float32"):
        calls.append(tuning.conv2d_key(geom, dtype))
        return {"direct": 3e-3, "winograd_2x2": 2e-3, "winograd_4x4": 1e-3}

    monkeypatch.setattr(tuning, "measure_conv2d", fake)
    return calls


def test_choice_is_measured_once_then_read_from_the_device_file(device, tuning_env):
    first = tuning.choose_conv2d_algorithm(GEOM, device)
    assert first in tuning.ALGORITHMS and len(tuning_env) == 1
    path = tuning.tuning_path(device)
    assert path.parent == cache.cache_dir() / "tuning" and path.exists()
    data = json.loads(cache.read(path).decode())  # integrity-checked payload
    entry = data["choices"][tuning.conv2d_key(GEOM)]
    assert entry["algorithm"] == first and set(entry["times_s"]) == set(tuning.ALGORITHMS)
    assert first == tuning.pick_algorithm(entry["times_s"])
    assert data["device"] == device.name and data["kernels"] == tuning.kernels_version()
    assert tuning.choose_conv2d_algorithm(GEOM, device) == first and len(tuning_env) == 1  # not measured again


def test_corrupt_or_foreign_file_is_discarded_and_rebuilt(device, fake_times):
    assert tuning.choose_conv2d_algorithm(GEOM, device) == "winograd_4x4"
    path = tuning.tuning_path(device)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF  # flip a payload byte: the checksum no longer matches
    path.write_bytes(bytes(data))
    with pytest.warns(RuntimeWarning, match="corrupt tuning file discarded"):
        assert tuning.choose_conv2d_algorithm(GEOM, device) == "winograd_4x4"
    assert len(fake_times) == 2
    assert tuning.load_choices(device)  # rewritten whole and valid again
    cache.write(path, json.dumps({"format": 99, "choices": {}}).encode())  # valid checksum, foreign content
    with pytest.warns(RuntimeWarning, match="unreadable tuning file discarded"):
        tuning.choose_conv2d_algorithm(GEOM, device)
    assert len(fake_times) == 3
    path.write_bytes(b"")  # truncated
    with pytest.warns(RuntimeWarning, match="corrupt"):
        tuning.choose_conv2d_algorithm(GEOM, device)
    assert len(fake_times) == 4


def test_choices_of_other_kernels_are_stale(device, fake_times, monkeypatch):
    tuning.choose_conv2d_algorithm(GEOM, device)
    monkeypatch.setattr(tuning, "kernels_version", lambda: "edited-kernels")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # stale is expected, not worth a warning
        tuning.choose_conv2d_algorithm(GEOM, device)
    assert len(fake_times) == 2


def test_modes(device, fake_times, monkeypatch):
    monkeypatch.setenv(tuning.ENV, "off")
    assert tuning.choose_conv2d_algorithm(GEOM, device) == "direct"
    monkeypatch.setenv(tuning.ENV, "cached")
    assert tuning.choose_conv2d_algorithm(GEOM, device) == "direct"  # nothing recorded, nothing measured
    assert fake_times == [] and not tuning.tuning_path(device).exists()
    assert tuning.choose_conv2d_algorithm(GEOM, device, mode="on") == "winograd_4x4"
    assert tuning.choose_conv2d_algorithm(GEOM, device) == "winograd_4x4"  # cached: the recorded choice
    monkeypatch.setenv(tuning.ENV, "off")
    assert tuning.choose_conv2d_algorithm(GEOM, device) == "direct"
    assert len(fake_times) == 1
    monkeypatch.setenv(tuning.ENV, "fast")
    with pytest.raises(ValueError, match=r"\$TIR_ADRENO_TUNING must be one of"):
        tuning.choose_conv2d_algorithm(GEOM, device)


@pytest.mark.parametrize(
    "geom",
    [
        conv2d_geometry((1, 8, 6, 6), (8, 8, 3, 3), strides=2, padding=1),
        conv2d_geometry((1, 8, 6, 6), (8, 8, 1, 1)),
        conv2d_geometry((1, 8, 6, 6), (8, 4, 3, 3), groups=2),
        conv2d_geometry((1, 8, 9, 9), (8, 8, 3, 3), dilation=2),
    ],
    ids=["stride2", "1x1", "groups2", "dilation2"],
)
def test_ineligible_convs_are_direct_without_measuring(device, fake_times, geom):
    assert tuning.choose_conv2d_algorithm(geom, device) == "direct" and fake_times == []


def test_pick_prefers_the_more_accurate_algorithm_on_a_near_tie():
    assert tuning.pick_algorithm({"direct": 1.0, "winograd_2x2": 0.9, "winograd_4x4": 0.5}) == "winograd_4x4"
    assert tuning.pick_algorithm({"direct": 1.0, "winograd_2x2": 0.99, "winograd_4x4": 0.985}) == "direct"
    assert tuning.pick_algorithm({"direct": 2.0, "winograd_2x2": 1.0, "winograd_4x4": 0.99}) == "winograd_2x2"
    with pytest.raises(ValueError, match="no measurements"):
        tuning.pick_algorithm({})


def test_auto_measures_once_and_is_numerically_right(device, tuning_env):
    rng = np.random.default_rng(11)
    x, w, b = rand(rng, (1, 8, 6, 6)), rand(rng, (8, 8, 3, 3)), rand(rng, (8,))
    got = ops.conv2d(x, w, b, padding=1, activation="relu", algorithm="auto", device=device)
    algorithm = tuning.load_choices(device)[tuning.conv2d_key(GEOM)]["algorithm"]
    ref = np.maximum(reference_conv2d(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1) + b[None, :, None, None], 0)
    assert_close(got, ref, TOLERANCE[algorithm])
    x2 = rand(rng, (1, 8, 6, 6))
    got = ops.conv2d(x2, w, padding=1, device=device)  # the default algorithm is "auto": reuses the choice
    assert_close(got, reference_conv2d(x2, w, (1, 1), (1, 1, 1, 1), (1, 1), 1), TOLERANCE[algorithm])
    assert len(tuning_env) == 1


def test_relax_pass_uses_the_same_choice(device, fake_times):
    """A tuned device gets Winograd kernels in compiled models (F(4x4) here: faked fastest)."""

    def body(m, x):
        y = m.conv_bn(x, 6, 3)  # 3x3 stride 1: Winograd with batch norm, bias and relu fused
        return m.conv_bn(y, 5, 3, 2)  # stride 2: direct

    mod = _model("test", body, 1, 9, 0)
    compiled = compile_model(mod, device=device, progress=lambda _: None)
    x = np.random.default_rng(5).standard_normal((1, 3, 9, 9)).astype("float32")
    (out,) = compiled.run({"input": x})
    (ref,) = reference_outputs(mod, {"input": x})
    assert relative_error(out, ref) <= TOLERANCE["winograd_4x4"]
    ops_run = [p["op"] for p in compiled.profile()]
    assert [o for o in ops_run if "winograd" in o] == [
        "winograd4x4_input_transform", "winograd4x4_batched_gemm", "winograd4x4_output_transform"
    ], ops_run
    assert any(o.startswith("conv2d_nchw4c") for o in ops_run) and len(fake_times) == 1


def test_placement_falls_back_to_buffers():
    big = texture.DeviceLimits(16384, 16384, 2048)
    assert tuning.placement(GEOM, "winograd_4x4", big) == ("global.texture", "global.texture-weight", "global.texture")
    narrow = texture.DeviceLimits(8, 8, 2048)  # U has 32 rows (16 positions x 2 blocks), V 9 tile columns
    assert tuning.placement(GEOM, "winograd_2x2", narrow) == ("global.texture", "global", "global")
    with pytest.raises(texture.TextureLimitError):
        tuning.placement(GEOM, "winograd_2x2", narrow, allow_buffer=False)
    assert tuning.placement(GEOM, "direct", big, "global") == ("global", "global", "global")
