"""Bad input gets a clear exception naming what is wrong."""

import re

import numpy as np
import pytest

from tir_adreno import ops
from tir_adreno.runtime import opencl as runtime, texture
from tir_adreno.runtime.bundle import TensorSpec


def test_unknown_device_name():
    with pytest.raises(runtime.DeviceNotFoundError, match="no OpenCL device matches 'no-such-gpu'; available: "):
        runtime.get_device("no-such-gpu")


def test_device_from_environment(monkeypatch):
    monkeypatch.setenv("TIR_ADRENO_DEVICE", "no-such-gpu")
    with pytest.raises(runtime.DeviceNotFoundError):
        runtime.get_device()


def test_texture_over_device_limits(device):
    """A tensor wider than the device's images: an error when buffers are forbidden,
    correct numbers through buffers otherwise."""
    width = device.limits.image2d_max_width + 1
    x = np.random.default_rng(0).standard_normal((1, 3, 1, width)).astype("float32")
    with pytest.raises(texture.TextureLimitError, match=f"{width} x 1 x 1"):
        ops.relu(x, allow_buffer=False)
    assert ops.activation_scope(device, x.shape) == "global"
    np.testing.assert_array_equal(ops.relu(x), np.maximum(x, 0))


def test_tensor_upload_checks_shape_and_dtype(device):
    t = device.empty(TensorSpec("x", (1, 1, 2, 2, 4), "float32", "global.texture"))
    with pytest.raises(ValueError, match="x: shape"):
        t.upload(np.zeros((1, 1, 2, 3, 4), "float32"))
    with pytest.raises(TypeError, match="x: dtype"):
        t.upload(np.zeros((1, 1, 2, 2, 4), "float64"))


def test_texture_shape_rules():
    assert texture.texture_extent((2, 3, 5, 7, 4), "global.texture") == (7, 5, 6)
    assert texture.texture_extent((8, 16, 3, 3, 4), "global.texture-weight") == (16 * 9, 8, 1)
    assert texture.texture_extent((2, 5, 7, 3, 4), "global.texture-nhwc") == (7 * 3, 5, 2)
    with pytest.raises(ValueError, match="last axis of 4"):
        texture.texture_extent((2, 3, 5, 7), "global.texture")
    with pytest.raises(ValueError, match="not a texture scope"):
        texture.texture_extent((2, 3, 5, 7, 4), "shared")
    with pytest.raises(TypeError, match="no texture format"):
        texture.image_format("int8")


def test_fp16_needs_the_extension(device):
    x = np.ones((1, 4, 2, 2), "float16")
    if device.fp16:
        np.testing.assert_array_equal(ops.relu(x), x)
    else:
        with pytest.raises(TypeError, match="cl_khr_fp16"):
            ops.relu(x)


def test_garbage_environment_setting(monkeypatch):
    from tir_adreno.runtime import bounds

    monkeypatch.setenv("TIR_ADRENO_CHECK_BOUNDS", "bogus")
    with pytest.raises(ValueError, match=r"\$TIR_ADRENO_CHECK_BOUNDS must be 0 or 1, got 'bogus'"):
        bounds.enabled()


def test_float16_model_rejected_before_building(device, monkeypatch):
    """A float16 model on a device without half arithmetic: a ModelError naming the device, no build."""
    from onnx import TensorProto, helper, numpy_helper

    from tir_adreno import compile_model
    from tir_adreno.codegen import build
    from tir_adreno.compiler import ModelError

    if device.fp16:
        pytest.skip(f"{device.name} has cl_khr_fp16: a float16 model runs there")
    w = numpy_helper.from_array(np.random.default_rng(5).standard_normal((4, 4, 1, 1)).astype("float16"), "w")
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT16, (1, 4, 3, 3)) for n in ("x", "y")]
    model = helper.make_model(helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"])], "g", io[:1], io[1:], [w]))

    def no_build(*args, **kwargs):
        raise AssertionError("built a kernel for a model the device cannot run")

    monkeypatch.setattr(build, "build_cached", no_build)
    with pytest.raises(ModelError, match=rf"float16 but device {re.escape(repr(device.name))} has no cl_khr_fp16"):
        compile_model(model, device, progress=lambda _: None)
