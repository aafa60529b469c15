"""The Relax pass on small graphs: fusion, layouts, scopes, fallback to upstream — each
checked numerically against TVM's LLVM build of the same module."""

import numpy as np
import pytest
from tvm import relax

from tir_adreno import compile_model
from tir_adreno.runtime import texture
from tir_adreno.frontend.models import _Builder, _model
from tir_adreno.reference import reference_outputs, relative_error

RTOL = 1e-5  # float32 graphs through the pass: measured at most 3.6e-7


def run_and_check(body, size=12, channels=3, **kwargs):
    mod = _model("test", body, 1, size, 0)
    if channels != 3:
        mod = _with_input_channels(body, size, channels)
    compiled = compile_model(mod, progress=lambda _: None, **kwargs)
    x = np.random.default_rng(5).standard_normal(compiled.plan.tensors[compiled.plan.inputs[0][1]].shape).astype("float32")
    outputs = compiled.run({"input": x})
    refs = reference_outputs(mod, {"input": x})
    for out, ref in zip(outputs, refs):
        assert relative_error(out, ref) <= RTOL
    return [p["op"] for p in compiled.profile()], compiled


def _with_input_channels(body, size, channels):
    bb = relax.BlockBuilder()
    x = relax.Var("input", relax.TensorType((1, channels, size, size), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(body(_Builder(bb, 0), x))
        bb.emit_func_output(out)
    return bb.get()


def _residual_block(m, x):
    x = m.conv_bn(x, 6, 3)
    y = m.conv_bn(m.conv_bn(x, 6, 3), 6, 3, act=None)
    return m.activate(m.bb.emit(relax.op.add(y, x)), "relu")


def test_conv_bn_residual_relu_fuse_into_conv_kernels():
    ops, _ = run_and_check(_residual_block)
    assert ops == ["conv2d_nchw4c", "conv2d_nchw4c1", "conv2d_nchw4c2", "nchw4c_to_nchw"]  # the first conv reads the input


def test_downsample_branch_takes_the_main_branch_as_residual():
    def body(m, x):
        x = m.conv_bn(x, 5, 3)
        y = m.conv_bn(m.conv_bn(x, 10, 3, 2), 10, 3, act=None)
        s = m.conv_bn(x, 10, 1, 2, act=None)
        return m.activate(m.bb.emit(relax.op.add(y, s)), "relu")

    ops, _ = run_and_check(body, size=11)
    assert not any(op.startswith(("add", "relu")) for op in ops), ops


@pytest.mark.parametrize("fuse", [True, False])
def test_depthwise_relu6_linear_bottleneck(fuse):
    """Fused (PoCL's profile fuses a block this small): the depthwise conv, its BN and ReLU6 run
    inside the projection's kernel, which adds the residual; unfused: two kernels."""
    def body(m, x):
        x = m.conv_bn(x, 8, 3, act="relu6")
        y = m.conv_bn(x, 48, 1, act="relu6")
        y = m.conv_bn(y, 48, 3, 1, groups=48, act="relu6")
        y = m.conv_bn(y, 8, 1, act=None)
        return m.bb.emit(relax.op.add(y, x))

    ops, _ = run_and_check(body, fuse=fuse)
    assert not any(op.startswith(("clip", "add")) for op in ops), ops
    assert ops.count("depthwise_conv2d_nchw4c") == (0 if fuse else 1), ops
    assert ops.count("depthwise_pointwise_nchw4c") == (1 if fuse else 0), ops
    assert len(ops) == (4 if fuse else 6), ops  # fused, the first conv reads the input: no input layout kernel


def test_pool_reduce_softmax_concat():
    def body(m, x):
        x = m.conv_bn(x, 6, 3)
        a = m.bb.emit(relax.op.nn.max_pool2d(x, 3, 2, 1))
        b = m.bb.emit(relax.op.nn.avg_pool2d(x, 2, 2, ceil_mode=True))
        c = m.bb.emit(relax.op.concat([a, b], axis=1))  # both 5 x 5: ceil_mode keeps the partial window
        d = m.bb.emit(relax.op.nn.softmax(c, axis=1))
        return m.bb.emit(relax.op.mean(d, axis=[2, 3], keepdims=True))

    ops, _ = run_and_check(body, size=9)
    for op in ("max_pool2d", "avg_pool2d", "concat_channels", "softmax", "mean"):
        assert any(o.startswith(op) for o in ops), (op, ops)


def test_unsupported_op_falls_back_with_transforms_only_around_it():
    def body(m, x):
        x = m.conv_bn(x, 7, 3)
        y = m.bb.emit(relax.op.cos(x))  # not ours: upstream TVM on buffers
        return m.conv_bn(y, 5, 3)

    ops, compiled = run_and_check(body)
    # each conv reads its plain input (the model's, upstream's cos's) itself
    # and the first writes the plain map cos reads itself (passes.map_boundary: no unpack before cos)
    assert ops == ["conv2d_nchw4c", "tir_cos", "conv2d_nchw4c1", "nchw4c_to_nchw"]
    assert [p["ours"] for p in compiled.profile()] == [True, False, True, True]


def test_nhwc_model():
    def body(m, x):
        w = m.rng.standard_normal((3, 3, 4, 6)).astype("float32") * 0.3  # HWIO
        y = m.bb.emit(relax.op.nn.conv2d(x, m.const(w), padding=1, data_layout="NHWC", kernel_layout="HWIO"))
        return m.bb.emit(relax.op.nn.relu(y))

    bb = relax.BlockBuilder()
    x = relax.Var("input", relax.TensorType((2, 7, 9, 4), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(body(_Builder(bb, 0), x))
        bb.emit_func_output(out)
    mod = bb.get()
    compiled = compile_model(mod, progress=lambda _: None)
    xin = np.random.default_rng(0).standard_normal((2, 7, 9, 4)).astype("float32")
    (out,) = compiled.run({"input": xin})
    (ref,) = reference_outputs(mod, {"input": xin})
    assert relative_error(out, ref) <= RTOL
    ops = [p["op"] for p in compiled.profile()]
    assert ops[0] == "nhwc_to_nchw4c" and ops[-1] == "nchw4c_to_nhwc" and any(o.startswith("conv2d") for o in ops)


def test_tensors_over_the_image_limits_go_to_buffers():
    small = texture.DeviceLimits(image2d_max_width=8, image2d_max_height=64, image_max_array_size=64)
    ops, compiled = run_and_check(_residual_block, size=12, limits=small)  # 12 columns > 8
    scopes = {t.scope for t in compiled.plan.tensors}
    assert "global.texture" not in scopes
    with pytest.raises(texture.TextureLimitError):
        compile_model(_model("test", _residual_block, 1, 12, 0), progress=lambda _: None, limits=small, allow_buffer=False)


def test_pool_strategy_follows_ops_rule():
    """A 7x7 global pool (49 taps, at primfuncs.pool2d.GROUP_THRESHOLD) is grouped (a work group
    per output, shared memory) on the GPU profiles and never on CPU OpenCL (a work group runs on
    one core there). Literal expectations: the pass and ops share strategy.pool.group_threshold."""
    from tir_adreno.compiler import dispatch_to_textures
    from tir_adreno.strategy.profile import get_profile

    def body(m, x):
        a = m.bb.emit(relax.op.nn.adaptive_avg_pool2d(x, 1))
        b = m.bb.emit(relax.op.nn.max_pool2d(x, 7))
        return m.bb.emit(relax.op.add(a, b))

    for profile, grouped in (("pocl", False), ("adreno", True), ("nvidia-h200", True)):
        mod = dispatch_to_textures(_model("test", body, 1, 7, 0), get_profile(profile))
        pools = [f.script() for gv, f in mod.functions.items() if "pool2d" in gv.name_hint]
        assert len(pools) == 2
        assert [('scope="shared"' in s) for s in pools] == [grouped, grouped], profile


def test_rules_registry_order():
    """The fusion patterns, then the single-op rules, per op: an add/multiply starting a chain on
    plain tensors that only a Linear reads is that GEMM's (``producer_gemm``: it declines operands
    held only blocked); else an add/multiply of two activations is a
    binary kernel before it may be an activation chain or an affine step, then a broadcast one, and on
    plain tensors a chain of ours last;
    GRN from its ``x * x`` and a squeeze-excitation's gate multiply are read by the conv after them
    before they may be binary kernels; a squeeze-excitation and a wide GPU's classifier head before
    its pool or first conv; every pattern and rule says None when it does not apply
    (tests/passes/test_patterns.py: the precedence of every pair of patterns)."""
    from tir_adreno.passes.patterns import PATTERNS
    from tir_adreno.passes.rules import RULES, by_op

    index = by_op((*PATTERNS, *RULES))
    assert [r.name for r in index["relax.add"]] == ["producer_gemm", "binary", "elementwise", "broadcast_binary", "token_elementwise"]
    assert [r.name for r in index["relax.multiply"]] == ["grn_gated_conv2d", "gated_conv2d", "producer_gemm", "binary", "elementwise",
                                                         "broadcast_binary", "token_elementwise"]
    # SE's two 1x1 convs, a head's GEMV, a depthwise conv with the SE block pooling it or its 1x1 reader, before one conv
    assert [r.name for r in index["relax.nn.conv2d"]] == ["excitation", "head_gemv", "depthwise_excitation", "depthwise_pointwise", "conv2d"]
    assert [r.name for r in index["relax.mean"]] == ["pooled_excitation", "head_gemv", "pooled_pointwise", "reduction_rows", "reduction"]
    # an op on a plain tensor is the rows rules' (they decline a blocked map), before the map rules
    assert [r.name for r in index["relax.nn.softmax"]] == ["softmax_rows", "softmax"]
    # an RMS norm as exported starts with Pow: the whole norm before a plain elementwise chain
    assert [r.name for r in index["relax.power"]][-2:] == ["rms_norm_rows", "token_elementwise"]
    assert len({r.name for r in (*PATTERNS, *RULES)}) == len(PATTERNS) + len(RULES)
