"""A conv's tail through the views from its map to tokens (``conv_emit._to_tokens``): the conv's
``[N, C, H, W]`` map reshaped to ``[N, C, H * W]`` and permuted to tokens ``[N, H * W, C]`` (views of
the same NCHW4c tensor), then a per-channel scale of the tokens and a residual add of tokens: XCiT's
local patch interaction, ``x + gamma * tokens(dwconv(bn(gelu(dwconv(map(x))))))``. The scale and
the add fold into the conv (its weights and epilogue), so no kernel runs after it. Against
onnxruntime, on the CPU's profile and the wide GPU's plans."""

import pytest

from helpers.onnx_graphs import batch_norm_inits, f32, i64, i_f32, make, node, run_all_ours, tensor

N, C, H, W = 1, 12, 5, 6
#: Kernels a step after the last conv would run as (none must).
AFTER_KERNELS = ("add", "multiply", "affine", "elementwise_plain", "gather")


def _patch_interaction(scale: bool, residual: bool):
    """x -> 1x1 conv -> tokens ``t``; ``t`` -> map -> depthwise 3x3 -> GELU -> BN -> depthwise 3x3
    -> tokens, then ``* gamma`` (``scale``) and ``t +`` (``residual``): the output ``y``."""
    nodes = [node("Conv", ["x", "w0"], ["m0"]), node("Reshape", ["m0", "s_ncl"], ["r0"]),
             node("Transpose", ["r0"], ["t"], perm=[0, 2, 1]),
             node("Transpose", ["t"], ["tc"], perm=[0, 2, 1]), node("Reshape", ["tc", "s_map"], ["m"]),
             node("Conv", ["m", "w1"], ["c1"], pads=[1, 1, 1, 1], group=C),
             node("Div", ["c1", "sqrt2"], ["g0"]), node("Erf", ["g0"], ["g1"]), node("Add", ["g1", "one"], ["g2"]),
             node("Mul", ["c1", "g2"], ["g3"]), node("Mul", ["g3", "half"], ["g"]),
             node("BatchNormalization", ["g", "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["b"]),
             node("Conv", ["b", "w2", "bias2"], ["c2"], pads=[1, 1, 1, 1], group=C),
             node("Reshape", ["c2", "s_ncl"], ["r2"])]
    inits = [f32("w0", (C, C, 1, 1), 0.4), i64("s_ncl", [N, C, H * W]), i64("s_map", [N, C, H, W]),
             f32("w1", (C, 1, 3, 3), 0.4), f32("w2", (C, 1, 3, 3), 0.4), f32("bias2", (C,), 0.2),
             i_f32("sqrt2", 2 ** 0.5), i_f32("one", 1.0), i_f32("half", 0.5), *batch_norm_inits("bn", C)]
    steps = [("Transpose", "perm")] + [("Mul", "gamma")] * scale + [("Add", "t")] * residual
    last = "r2"
    for i, (op, operand) in enumerate(steps):
        out = "y" if i == len(steps) - 1 else f"y{i}"
        nodes.append(node("Transpose", [last], [out], perm=[0, 2, 1]) if op == "Transpose" else node(op, [operand, last], [out]))
        last = out
    if scale:
        inits.append(f32("gamma", (C,), 0.5))
    return make(nodes, [tensor("x", [N, C, H, W])], [tensor("y", [N, H * W, C])], inits, opset=17)


@pytest.mark.parametrize("profile", [None, "nvidia-h200"])
@pytest.mark.parametrize("scale, residual", [(True, True), (False, True), (True, False)])
def test_scale_and_residual_on_tokens_fold_into_the_conv(profile, scale, residual):
    """``gamma *`` and ``t +`` on the tokens of the last depthwise conv's map run in that conv: no
    kernel after it but the output's layout transform (or none: the conv writes the tokens)."""
    ops, _ = run_all_ours(_patch_interaction(scale, residual), 2, (N, C, H, W), profile=profile)
    last_conv = max(i for i, op in enumerate(ops) if "conv2d" in op)
    assert not any(op.startswith(AFTER_KERNELS) for op in ops[last_conv + 1:]), ops


