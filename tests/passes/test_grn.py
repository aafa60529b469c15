"""ConvNeXt-V2's global response norm (GRN, issue 21) as timm exports it, on our kernels: the
``grn_scale`` kernel against float64 NumPy (fp32 and half images) and a GRN block graph against
onnxruntime with no layout transform inside."""

from dataclasses import replace

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from onnx import helper

from helpers.numeric import pack_nchw4c, unpack_nchw4c
from helpers.onnx_graphs import check_pattern, conv_node, pattern_graph
from primfuncs import grn
from primfuncs._common import TEXTURE
from tir_adreno import ops

#: float32 statistics over <= 40 channels: measured <= 3e-7.
RTOL = 2e-6


@given(n=st.integers(1, 2), channels=st.integers(1, 40), scope=st.sampled_from([TEXTURE, "global"]),
       precision=st.sampled_from(["float32", "float16_acc32"]), seed=st.integers(0, 2**32 - 1))
def test_grn_scale_kernel(device, n, channels, scope, precision, seed):
    """``sqrt(S) / (mean_c sqrt(S) + eps)`` of sums of squares ``S`` (spread over 6 decades), the
    padded lanes left out of the mean and written as 0; in half images the kernel reads ``S``
    rounded to half and writes ``Nx`` rounded to half, its arithmetic float32."""
    rng = np.random.default_rng(seed)
    s = 10.0 ** rng.uniform(-3, 3, (n, channels, 1, 1))
    s[0, 0] = 0.0  # a channel that is all zeros
    storage = "float16" if precision == "float16_acc32" and scope == TEXTURE else None
    loaded, name = ops.compile(grn.grn_scale(pack_nchw4c(s).shape, channels, 1e-6, scope=scope), device)
    specs = [replace(spec, storage=storage) if spec.scope == TEXTURE else spec for spec in loaded[name].params]
    out = device.empty(specs[1]).poison()
    loaded(name, device.empty(specs[0]).upload(pack_nchw4c(s).astype(np.float32)), out)
    y = out.numpy()
    s_in = s.astype(np.float16 if storage else np.float32).astype(np.float64)
    g = np.sqrt(s_in)
    ref = g / (g.mean(axis=1, keepdims=True) + 1e-6)
    rtol = 2.0**-11 if storage else RTOL  # the half output's rounding
    np.testing.assert_allclose(unpack_nchw4c(y, channels), ref, rtol=rtol, atol=1e-30)
    assert np.all(y[:, -1, :, :, (channels - 1) % 4 + 1 :] == 0), "padded lanes not zero"


def _grn_nodes(x, y, inits, channels, rng):
    """GRN as torch.onnx.export writes timm's GlobalResponseNorm (opset 17), then the residual:
    ``y = x + (bias + weight * (x * Nx) * 1)``."""
    inits.update(grn_w=rng.standard_normal((1, channels, 1, 1)), grn_b=rng.standard_normal((1, channels, 1, 1)),
                 grn_eps=np.float32(1e-6), grn_one=np.ones(1, np.float32))
    node = helper.make_node
    return [
        node("ReduceL2", [x], ["g"], axes=[2, 3], keepdims=1),
        node("ReduceMean", ["g"], ["gm"], axes=[1], keepdims=1),
        node("Add", ["gm", "grn_eps"], ["ge"]),
        node("Div", ["g", "ge"], ["nx"]),
        node("Mul", [x, "nx"], ["xn"]),
        node("Mul", ["grn_w", "xn"], ["wx"]),
        node("Mul", ["wx", "grn_one"], ["wx1"]),
        node("Add", ["grn_b", "wx1"], ["t"]),
        node("Add", [x, "t"], [y]),
    ]


def test_grn_block_stays_on_textures():
    """conv -> GRN (6 channels: a padded block) -> conv: the GRN statistics in one grn_scale kernel,
    everything ours, no layout transform inside."""
    rng, inits = np.random.default_rng(4), {}
    nodes = [conv_node(rng, inits, "x", "c", 6, 3), *_grn_nodes("c", "r", inits, 6, rng), conv_node(rng, inits, "r", "y", 4, 6, k=1)]
    names = check_pattern(pattern_graph(nodes, inits))
    assert names.count("grn_scale") == 1, names
