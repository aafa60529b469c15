"""The texture bounds sanitizer (tir_adreno.runtime.bounds): every kernel family runs clean under it,
and a conv that lost its coordinate clamps is caught (PoCL's clamp sampler returns 0 for
an out-of-range read, which equals the padding, so no numeric test can see it)."""

import dataclasses
import warnings

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from primfuncs import attention, elementwise, excite, grn, layernorm, resize
from primfuncs._common import TEXTURE
from primfuncs.conv import ConvConfig, conv2d_nchw4c, depthwise_conv2d_nchw4c
from tir_adreno.runtime import bounds
from tir_adreno.codegen import build
from tir_adreno.tools import tour
from tir_adreno.runtime import opencl as runtime
from tir_adreno.runtime.opencl import BoundsError
from tir_adreno.reference import resize2d_nchw

from helpers.numeric import pack_nchw4c, rand, run_kernel, sanitized, unpack_nchw4c

#: Batch 2 (several array layers), C not a multiple of 4, odd H and W: every family pads somewhere.
SHAPE = (2, 5, 9, 7)


@pytest.fixture
def cl12_device(device):
    """This device, building as for an OpenCL C 1.2 driver (runtime.CL12_OPTIONS: TVM's READ_IMAGEF
    takes its sampler-less branch, which many Adreno drivers compile and PoCL otherwise never does)."""
    saved = device.build_options
    device.build_options = runtime.CL12_OPTIONS
    yield device
    device.build_options = saved


@pytest.mark.filterwarnings("ignore::pyopencl.CompilerWarning")  # CL12_OPTIONS redefine CL_VERSION_*: expected
@pytest.mark.parametrize("case", tour.CASES, ids=lambda c: c.name)
def test_every_family_is_in_bounds_on_opencl_c_1_2(cl12_device, check_bounds, case):
    """The kernel tour, once: every case matches NumPy built as for OpenCL C 1.2, every image access in range."""
    result = tour.check(case, cl12_device, np.random.default_rng(3), SHAPE)
    assert result == "ok", result


def test_sanitized_build_checks_every_image_access(check_bounds):
    module = build.build_cached(conv2d_nchw4c((1, 6, 7, 9), (8, 6, 3, 3), padding=1))
    plain = build.build(conv2d_nchw4c((1, 6, 7, 9), (8, 6, 3, 3), padding=1), check_bounds=False)
    assert module.check_bounds and not plain.check_bounds
    reads = plain.source.count("READ_IMAGEF(X_ptr") + plain.source.count("READ_IMAGEF(W_ptr")
    assert reads > 0 and module.source.count("TIR_ADRENO_READ(READ_IMAGEF,") == reads
    assert module.source.count("TIR_ADRENO_WRITE(write_imagef,") == plain.source.count("write_imagef(") > 0
    assert all(launch.args[-1].kind == "bounds" for launch in module["conv2d_nchw4c"].launches)
    assert build.module_key(conv2d_nchw4c((1, 6, 7, 9), (8, 6, 3, 3), padding=1)) != build.module_key(
        conv2d_nchw4c((1, 6, 7, 9), (8, 6, 3, 3), padding=1), check_bounds=False
    )


def _run(device, module, name, rng):
    loaded = device.load(module)
    specs = module[name].params
    tensors = [device.empty(s).upload(rng.standard_normal(s.shape).astype(s.dtype)) for s in specs[:-1]]
    return loaded(name, *tensors, device.empty(specs[-1]).poison())


def _without_clamps(module):
    """The conv's source with every min/max (its coordinate clamps) replaced by the first argument."""
    marker = "#endif\n#endif\n"  # end of TVM's READ_IMAGEF definitions, before any kernel
    assert marker in module.source
    source = module.source.replace(marker, marker + "#define max(a, b) (a)\n#define min(a, b) (a)\n", 1)
    return dataclasses.replace(module, source=source)


def test_conv_without_clamps_is_caught(device):
    func = conv2d_nchw4c((1, 6, 7, 9), (8, 6, 3, 3), padding=1)  # no activation: min/max are clamps only
    mutant = _without_clamps(build.build(func, check_bounds=False))
    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "max redefined" compiler output
        _run(device, mutant, "conv2d_nchw4c", rng)  # unchecked: runs, nothing reports it
        with pytest.raises(BoundsError, match=r"conv2d_nchw4c_kernel: parameter X read at \(x=-1, y=-1, layer=0\) outside 9 x 7 x 2"):
            _run(device, bounds.instrument(mutant), "conv2d_nchw4c", rng)
    _run(device, bounds.instrument(build.build(func, check_bounds=False)), "conv2d_nchw4c", rng)  # the real conv: clean


def test_tiled_conv_without_clamps_is_caught(device):
    """The tiled kernel's im2col copies clamp their coordinates too: without the clamps the
    sanitizer names the read into the padding; with them a stem-like 7x7/2 conv is clean."""
    config = ConvConfig(1, 4, (8, 2, 1), split_k=2, tiled=True, k_chunk=4)
    func = conv2d_nchw4c((2, 3, 9, 7), (5, 3, 7, 7), strides=2, padding=3, config=config)
    mutant = _without_clamps(build.build(func, check_bounds=False))
    rng = np.random.default_rng(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "max redefined" compiler output
        with pytest.raises(BoundsError, match=r"conv2d_tiled_nchw4c_kernel: parameter X read at"):
            _run(device, bounds.instrument(mutant), "conv2d_tiled_nchw4c", rng)
    _run(device, bounds.instrument(build.build(func, check_bounds=False)), "conv2d_tiled_nchw4c", rng)


@pytest.mark.parametrize("w_block", [1, 2])
def test_flat_depthwise_is_in_bounds(device, w_block):
    """The 1-D grid (ConvConfig.flat; its group does not divide the grid) with the window in
    registers, stride 2, batch 2, odd sizes: every image access in range."""
    config = ConvConfig(1, w_block, (48, 1, 1), register_window=True, flat=True)
    func = depthwise_conv2d_nchw4c((2, 6, 9, 7), (6, 1, 3, 3), strides=2, padding=1, config=config)
    _run(device, bounds.instrument(build.build(func, check_bounds=False)), "depthwise_conv2d_nchw4c",
         np.random.default_rng(4))


def test_out_of_range_write_is_named(device):
    """A kernel whose store runs one column past the image: the write is reported with its parameter."""
    module = build.build(elementwise.relu((1, 2, 3, 5, 4)), check_bounds=False)
    source = module.source.replace("write_imagef(C_ptr, (int4)(", "write_imagef(C_ptr, (int4)(1 + ", 1)
    assert source != module.source
    with pytest.raises(BoundsError, match=r"relu_kernel: parameter C wrote at \(x=5, y=\d, layer=\d\) outside 5 x 3 x 2"):
        _run(device, bounds.instrument(dataclasses.replace(module, source=source)), "relu", np.random.default_rng(1))


def test_env_setting(monkeypatch):
    monkeypatch.setenv(bounds.ENV, "0")
    assert not bounds.enabled()
    monkeypatch.setenv(bounds.ENV, "1")
    assert bounds.enabled()
    monkeypatch.setenv(bounds.ENV, "maybe")
    with pytest.raises(ValueError, match="TIR_ADRENO_CHECK_BOUNDS must be 0 or 1, got 'maybe'"):
        bounds.enabled()


def test_model_under_the_sanitizer(check_bounds):
    """A compiled model's kernels are instrumented too; the executor checks after each run."""
    from tvm import relax

    from tir_adreno import compile_model
    from tir_adreno.frontend.models import _model
    from tir_adreno.reference import reference_outputs, relative_error

    def body(m, x):
        x = m.conv_bn(x, 6, 3)
        return m.bb.emit(relax.op.nn.max_pool2d(x, 3, 2, 1))

    mod = _model("bounds", body, 2, 9, 0)
    compiled = compile_model(mod, progress=lambda _: None)
    assert compiled.kernels and all(k.check_bounds for k in compiled.kernels.values())
    assert compiled.launcher is None  # the fast run goes call by call: each zeroes its record
    x = np.random.default_rng(4).standard_normal((2, 3, 9, 9)).astype("float32")
    (out,) = compiled.run({"input": x})
    (ref,) = reference_outputs(mod, {"input": x})
    assert relative_error(out, ref) <= 1e-4


# -- families whose properties live elsewhere, under the sanitizer on their corners ----------------


@given(size=st.tuples(st.integers(1, 2), st.integers(1, 6), st.integers(1, 7), st.integers(1, 7), st.integers(1, 9), st.integers(1, 9)),
       method=st.sampled_from(["nearest", "linear"]), mode=st.sampled_from(resize.COORDINATE_MODES),
       rounding=st.sampled_from(resize.ROUNDING_METHODS), seed=st.integers(0, 2**32 - 1))
# a 1 x 1 map blown up (align_corners divides by size - 1 = 0), a map shrunk to one pixel, a
# ratio that is no integer, rounding up at the last column
@example(size=(1, 3, 1, 1, 5, 4), method="linear", mode="align_corners", rounding="floor", seed=0)
@example(size=(2, 5, 7, 6, 1, 1), method="linear", mode="half_pixel", rounding="floor", seed=2)
@example(size=(1, 6, 5, 7, 9, 3), method="nearest", mode="asymmetric", rounding="ceil", seed=4)
@example(size=(1, 2, 4, 3, 7, 8), method="nearest", mode="half_pixel", rounding="round_prefer_ceil", seed=6)
def test_resize_is_in_bounds(device, size, method, mode, rounding, seed):
    """resize2d on images, under the sanitizer for even seeds (the examples): every read in range
    (a source index rounded past the edge reads the clamp sampler's 0 there, which an output
    check may miss), and its numbers."""
    n, c, h, w, oh, ow = size
    x = rand(np.random.default_rng(seed), (n, c, h, w))
    with sanitized(seed):
        func = resize.resize2d(pack_nchw4c(x).shape, (oh, ow), method, mode, rounding, scope=TEXTURE)
        y = unpack_nchw4c(run_kernel(device, func, pack_nchw4c(x)), c)
    ref = resize2d_nchw(x, (oh, ow), method, mode, rounding)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


#: Statistics and attention kernels (numerics: tests/passes/test_grn.py, test_excite.py,
#: test_group_norm.py, test_attention.py) on batch 2, channels that leave a padded block, odd maps.
IMAGE_STATISTICS = {
    "grn_scale": lambda: grn.grn_scale((2, 2, 1, 1, 4), 7, 1e-6, scope=TEXTURE, gamma=True, threads=4),
    "excitation": lambda: excite.excitation((2, 2, 5, 3, 4), 7, 3, 7, scope=TEXTURE, threads=8),
    "group_norm": lambda: layernorm.group_norm((2, 2, 5, 7, 4), 6, 1, 1e-5, scope=TEXTURE),
    "group_norm_partials": lambda: layernorm.group_norm_partials((2, 2, 5, 7, 4), 8, 2, 5, scope=TEXTURE),
    "group_norm_apply": lambda: layernorm.group_norm_apply((2, 2, 5, 7, 4), 8, 2, 5, scope=TEXTURE),
    "layer_norm_channels_wide": lambda: layernorm.layer_norm_channels_wide((2, 2, 3, 5, 4), 7, scope=TEXTURE, threads=4),
    "xca_weights": lambda: attention.xca_weights((2, 5, 3, 5, 4), 18, 2, 3, 0, 6, scope=TEXTURE),
    "xca_partials": lambda: attention.xca_partials((2, 5, 3, 5, 4), 18, 2, 3, 0, 6, 4, scope=TEXTURE),
    "xca_apply": lambda: attention.xca_apply((2, 5, 3, 5, 4), 18, 2, 3, 12, scope=TEXTURE),
    "linear_kv": lambda: attention.linear_kv((2, 5, 3, 5, 4), 18, 2, 3, 6, 12, scope=TEXTURE),
    "linear_apply": lambda: attention.linear_apply((2, 5, 3, 5, 4), 18, 2, 3, 0, scope=TEXTURE),
}


@pytest.mark.parametrize("name", sorted(IMAGE_STATISTICS))
def test_statistics_and_attention_kernels_are_in_bounds(device, name):
    """Each kernel sanitized, on random inputs: every image read and write in range (BoundsError
    otherwise; the instrumented source does check its images)."""
    module = bounds.instrument(build.build(IMAGE_STATISTICS[name](), check_bounds=False))
    (fname,) = module.functions
    assert module.check_bounds and "TIR_ADRENO_READ(" in module.source
    _run(device, module, fname, np.random.default_rng(5))
