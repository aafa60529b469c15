"""Issue 14, part 2: resize2d, GELU (and what follows in ConvNeXt-style blocks) as TVM's
ONNX importer writes them, on our kernels: one onnx.helper graph per pattern against
onnxruntime (1e-3) with the plan asserted, plus the kernels against float64 references."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import helper, numpy_helper
from test_coverage import _conv, _graph, _scalars, check
from util import rand, run_kernel

from primfuncs import elementwise, resize
from tir_adreno.blocked import pack_nchw4c, unpack_nchw4c
from tir_adreno.reference import gelu, resize2d_nchw

# -- GELU ------------------------------------------------------------------------------------


def _gelu_nodes(x, y):
    """GELU as torch.onnx.export (opset 17) writes it: x * (erf(x / sqrt 2) + 1) * 0.5."""
    return [
        helper.make_node("Div", [x, "sqrt2"], ["g_d"]),
        helper.make_node("Erf", ["g_d"], ["g_e"]),
        helper.make_node("Add", ["g_e", "one"], ["g_a"]),
        helper.make_node("Mul", [x, "g_a"], ["g_m"]),
        helper.make_node("Mul", ["g_m", "half"], [y]),
    ]


GELU_SCALARS = dict(sqrt2=np.sqrt(2.0), one=1.0, half=0.5)


def test_gelu_fuses_into_conv(monkeypatch):
    from tir_adreno import relax_pass

    seen = []
    real = relax_pass.Epilogue
    monkeypatch.setattr(relax_pass, "Epilogue", lambda **kw: seen.append(kw["activation"]) or real(**kw))
    rng, inits = np.random.default_rng(0), {}
    _scalars(inits, **GELU_SCALARS)
    assert check(_graph([_conv(rng, inits, "x", "c", 8, 3), *_gelu_nodes("c", "y")], inits)) == ["conv2d_nchw4c"]
    assert seen == ["gelu"]


def test_gelu_standalone_kernel():
    inits = {}
    _scalars(inits, **GELU_SCALARS)
    nodes = [helper.make_node("MaxPool", ["x"], ["c"], kernel_shape=[2, 2]), *_gelu_nodes("c", "y")]
    assert check(_graph(nodes, inits, channels=6), channels=6) == ["max_pool2d", "gelu"]


blocked_shapes = st.tuples(st.integers(1, 2), st.integers(1, 3), st.integers(1, 6), st.integers(1, 7), st.integers(0, 2**32 - 1))
scopes = st.sampled_from(["global.texture", "global"])


@given(blocked_shapes, scopes, st.sampled_from(["gelu", "gelu_tanh"]))
def test_gelu_kernel(device, d, scope, name):
    *shape, seed = d
    x = rand(np.random.default_rng(seed), (*shape, 4)) * 4
    x.reshape(-1)[:3] = [np.nan, np.inf, -np.inf]  # as the NumPy formula: NaN, inf, NaN (-inf * 0)
    y = run_kernel(device, elementwise.activation((*shape, 4), name, scope=scope), x)
    np.testing.assert_allclose(y, gelu(x, "tanh" if name == "gelu_tanh" else "none"), rtol=1e-5, atol=1e-6)


# -- resize2d --------------------------------------------------------------------------------

# A non-integer ratio comes with ``sizes`` (as F.interpolate(size=...) exports it): with
# ``scales``, ONNX maps coordinates by the scale, TVM's importer by in/out sizes.
RESIZES = {
    # torch nn.Upsample(scale_factor=2, mode="nearest") at opset 17
    "nearest_upsample": (dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"), [1, 1, 2, 2], "resize2d_nearest"),
    "nearest_half_pixel": (dict(mode="nearest", coordinate_transformation_mode="half_pixel", nearest_mode="round_prefer_floor"), [1, 6, 10, 5], "resize2d_nearest"),
    # F.interpolate(mode="bilinear", align_corners=False / True)
    "bilinear": (dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel"), [1, 6, 14, 11], "resize2d_linear"),
    "bilinear_align_corners": (dict(mode="linear", coordinate_transformation_mode="align_corners"), [1, 6, 4, 13], "resize2d_linear"),
}


@pytest.mark.parametrize("name", sorted(RESIZES))
def test_resize_after_conv(name):
    attrs, target, kernel = RESIZES[name]
    rng = np.random.default_rng(1)
    sizes = len(target) == 4 and target[1] == 6  # else scales
    inits = {}
    inputs = ["c", "", "", "target"] if sizes else ["c", "", "target"]
    nodes = [_conv(rng, inits, "x", "c", 6, 3), helper.make_node("Resize", inputs, ["y"], **attrs)]
    model = _graph(nodes, inits)
    model.graph.initializer.append(numpy_helper.from_array(np.asarray(target, np.int64 if sizes else np.float32), "target"))
    assert check(model) == ["conv2d_nchw4c", kernel]


def test_resize_cubic_stays_upstream():
    """An attribute we do not cover (cubic) goes upstream, with the right numbers."""
    from tir_adreno import compile_model
    from tir_adreno.reference import reference_outputs, relative_error

    inits = {"scales": np.asarray([1, 1, 2, 2])}
    model = _graph([helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="cubic")], inits)
    compiled = compile_model(model, progress=lambda _: None)
    x = rand(np.random.default_rng(2), (1, 3, 7, 7))
    (out,) = compiled.run({"x": x})
    assert relative_error(out, reference_outputs(model, {"x": x})[0]) <= 1e-3
    assert not any(p["op"].startswith("resize2d_") for p in compiled.profile())


@given(
    st.tuples(st.integers(1, 2), st.integers(1, 6), st.integers(1, 6), st.integers(1, 9), st.integers(1, 9), st.integers(1, 9), st.integers(0, 2**32 - 1)),
    st.sampled_from(["nearest", "linear"]),
    st.sampled_from(resize.COORDINATE_MODES),
    st.sampled_from(resize.ROUNDING_METHODS),
    scopes,
)
def test_resize_kernel(device, d, method, mode, rounding, scope):
    n, c, h, w, oh, ow, seed = d
    rng = np.random.default_rng(seed)
    x = rand(rng, (n, c, h, w))
    func = resize.resize2d((n, -(-c // 4), h, w, 4), (oh, ow), method, mode, rounding, scope=scope)
    y = unpack_nchw4c(run_kernel(device, func, pack_nchw4c(x)), c)
    ref = resize2d_nchw(x, (oh, ow), method, mode, rounding)
    if method == "nearest":
        np.testing.assert_array_equal(y, ref.astype(np.float32))  # an exact copy of the right pixel
    else:
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_resize_bad_arguments():
    with pytest.raises(ValueError, match="method"):
        resize.resize2d((1, 1, 2, 2, 4), (4, 4), "cubic")
    with pytest.raises(ValueError, match="coordinate_transformation_mode"):
        resize.resize2d((1, 1, 2, 2, 4), (4, 4), "linear", "tf_crop_and_resize")
    with pytest.raises(ValueError, match="rounding_method"):
        resize.resize2d((1, 1, 2, 2, 4), (4, 4), "nearest", "asymmetric", "round")
    with pytest.raises(ValueError, match="out_h"):
        resize.resize2d((1, 1, 2, 2, 4), (0, 4))
    with pytest.raises(ValueError, match="NCHW4c"):
        resize.resize2d((1, 4, 2, 2), (4, 4))
