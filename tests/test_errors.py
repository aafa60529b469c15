"""Bad input gets a clear exception naming what is wrong."""

import numpy as np
import pytest

from tir_adreno import ops, runtime, texture
from tir_adreno.bundle import TensorSpec


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
