"""The ``gemm`` rule: matmuls on plain tensors as exporters write them (a Linear on tokens with
its bias and activation, a Linear on a channels-last map, Q Kᵀ through a Transpose, attention x V,
Kᵀ V with heads, a residual add) run as our GEMM kernel, against onnxruntime; the plan has no
upstream matmul and no layout transform."""

import dataclasses

import numpy as np
import pytest

from helpers.onnx_graphs import PATTERN_RTOL, f32, make, node, tensor
from tir_adreno import compile_model
from tir_adreno.reference import reference_outputs, relative_error

LAYOUT_KERNELS = ("nchw_to_nchw4c", "nhwc_to_nchw4c", "nchw4c_to_nchw", "nchw4c_to_nhwc", "copy")


def _run(model, inputs: dict, gemms: int):
    """Compile ``model`` for this device, check it against onnxruntime, and check its plan: ``gemms``
    launches of our GEMM, no upstream matmul, no layout transform. Returns the plan's rows."""
    compiled = compile_model(model, progress=lambda _: None)
    outs = compiled.run(inputs)
    refs = reference_outputs(model, inputs)
    for out, ref in zip(outs, refs):
        assert relative_error(out, ref) <= PATTERN_RTOL, relative_error(out, ref)
    rows = compiled.profile()
    ours = [r for r in rows if r["ours"] and r["op"].startswith("gemm")]
    assert len(ours) == gemms, rows
    assert not [r for r in rows if not r["ours"] and "matmul" in (r["op"] + r["kernel"]).lower()], rows
    assert not [r for r in rows if r["op"].startswith(LAYOUT_KERNELS)], rows
    return rows


def _inputs(rng, **shapes) -> dict:
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}


def test_linear_on_tokens_with_bias_and_activation():
    """``relu(x @ W + b)`` then ``@ W2 + b2 + x``: a transformer MLP on tokens ``[N, L, C]``, bias,
    activation and residual in the two kernels' epilogues (two launches, nothing else)."""
    nodes = [node("MatMul", ["x", "w1"], ["h"]), node("Add", ["h", "b1"], ["hb"]), node("Relu", ["hb"], ["r"]),
             node("MatMul", ["r", "w2"], ["o"]), node("Add", ["o", "b2"], ["ob"]), node("Add", ["ob", "x"], ["y"])]
    inits = [f32("w1", (12, 20)), f32("b1", (20,)), f32("w2", (20, 12)), f32("b2", (12,))]
    model = make(nodes, [tensor("x", [2, 7, 12])], [tensor("y", [2, 7, 12])], inits, opset=17)
    rows = _run(model, _inputs(np.random.default_rng(1), x=(2, 7, 12)), gemms=2)
    assert len(rows) == 2, rows


def test_gemm_op_on_flattened_tokens():
    """ONNX ``Gemm`` with ``transB`` (a Linear as older exporters write it) after a Reshape of
    tokens to rows: the constant transpose folds, the kernel takes the bias."""
    nodes = [node("Reshape", ["x", "shape"], ["rows"]), node("Gemm", ["rows", "w", "b"], ["y"], transB=1)]
    inits = [f32("w", (9, 6)), f32("b", (9,)), np.array([-1, 6], np.int64)]
    from onnx import numpy_helper

    inits[-1] = numpy_helper.from_array(inits[-1], "shape")
    model = make(nodes, [tensor("x", [2, 5, 6])], [tensor("y", [10, 9])], inits, opset=17)
    compiled = compile_model(model, progress=lambda _: None)
    x = _inputs(np.random.default_rng(2), x=(2, 5, 6))
    (out,) = compiled.run(x)
    (ref,) = reference_outputs(model, x)
    assert relative_error(out, ref) <= PATTERN_RTOL
    assert not [r for r in compiled.profile() if not r["ours"] and "matmul" in (r["op"] + r["kernel"]).lower()]


def test_linear_on_channels_last_map():
    """A Linear on an NHWC map ``[N, H, W, C]`` (a gated MLP on channels-last maps): rows are N*H*W."""
    nodes = [node("MatMul", ["x", "w"], ["h"]), node("Add", ["h", "b"], ["y"])]
    model = make(nodes, [tensor("x", [1, 5, 3, 8])], [tensor("y", [1, 5, 3, 11])], [f32("w", (8, 11)), f32("b", (11,))], opset=17)
    _run(model, _inputs(np.random.default_rng(3), x=(1, 5, 3, 8)), gemms=1)


def test_attention_scores_and_values():
    """``softmax(q Kᵀ) V`` on ``[N * heads, L, d]`` whose probabilities are also an output of the
    model: the ``softmax_attention`` pattern declines (a second reader), so Q Kᵀ reads K through its
    Transpose (no transpose kernel), attention x V is a batched GEMM and the softmax between them
    runs on the same plain buffers (``rules.rows``). With one reader it is one kernel
    (``tests/passes/test_softmax_attention_pattern.py``)."""
    nodes = [node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]), node("MatMul", ["q", "kt"], ["s"]),
             node("Softmax", ["s"], ["p"], axis=-1), node("MatMul", ["p", "v"], ["y"])]
    shapes = {"q": (3, 10, 5), "k": (3, 10, 5), "v": (3, 10, 7)}
    model = make(nodes, [tensor(n, list(s)) for n, s in shapes.items()], [tensor("y", [3, 10, 7]), tensor("p", [3, 10, 10])], [],
                 opset=17)
    rows = _run(model, _inputs(np.random.default_rng(4), **shapes), gemms=2)
    assert not [r for r in rows if "transpose" in r["op"].lower()], rows
    assert [r["op"] for r in rows if r["op"].startswith("softmax")] == ["softmax_rows"], rows


def test_scores_with_heads():
    """Q Kᵀ with heads ``[N, heads, L, d]`` (K transposed in its read), then a scalar scale and a
    bias over the keys (alpha and the bias of the one kernel)."""
    from onnx import numpy_helper

    nodes = [node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), node("MatMul", ["q", "kt"], ["s"]),
             node("Mul", ["s", "scale"], ["ss"]), node("Add", ["ss", "b"], ["y"])]
    shapes = {"q": (2, 3, 10, 5), "k": (2, 3, 11, 5)}
    inits = [f32("b", (11,)), numpy_helper.from_array(np.array(0.3, np.float32), "scale")]
    model = make(nodes, [tensor(n, list(s)) for n, s in shapes.items()], [tensor("y", [2, 3, 10, 11])], inits, opset=17)
    assert len(_run(model, _inputs(np.random.default_rng(6), **shapes), gemms=1)) == 1


def test_multi_query_attention():
    """Multi-query attention as timm's MobileNetV4 exports it: one K and V ``[N, 1, L, d]`` for
    every head of Q ``[N, heads, L, d]`` (the MatMul broadcasts the head axis): both products our
    GEMM, K and V read once per head, nothing expanded."""
    nodes = [node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), node("MatMul", ["q", "kt"], ["s"]),
             node("MatMul", ["s", "v"], ["y"])]
    shapes = {"q": (1, 4, 12, 8), "k": (1, 1, 7, 8), "v": (1, 1, 7, 8)}
    model = make(nodes, [tensor(n, list(s)) for n, s in shapes.items()], [tensor("y", [1, 4, 12, 8])], [], opset=17)
    _run(model, _inputs(np.random.default_rng(8), **shapes), gemms=2)


def test_linear_attention_context_with_heads():
    """``Kᵀ V`` (EfficientViT-style linear attention's context, ``[N, heads, L, d]``): the first
    operand read transposed; then ``Q ctx`` plus a bias over the last axis."""
    nodes = [node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), node("MatMul", ["kt", "v"], ["ctx"]),
             node("MatMul", ["q", "ctx"], ["o"]), node("Add", ["o", "b"], ["y"])]
    shapes = {"q": (2, 2, 9, 6), "k": (2, 2, 9, 6), "v": (2, 2, 9, 5)}
    model = make(nodes, [tensor(n, list(s)) for n, s in shapes.items()], [tensor("y", [2, 2, 9, 5])], [f32("b", (5,))], opset=17)
    _run(model, _inputs(np.random.default_rng(5), **shapes), gemms=2)


@pytest.mark.parametrize("profile,kernel", [("adreno", "gemm"), ("nvidia-h200", "gemm_tiled")])
def test_plan_for_other_devices(profile, kernel):
    """The rule plans one kernel on every profile, fused with its bias (the kernel and its config
    are the profile's: the smallest tiled config on nvidia-h200): compiled without a device."""
    from helpers.onnx_graphs import plan_kernels
    from tir_adreno.strategy.profile import get_profile

    nodes = [node("MatMul", ["x", "w"], ["h"]), node("Add", ["h", "b"], ["y"])]
    model = make(nodes, [tensor("x", [1, 49, 16])], [tensor("y", [1, 49, 24])], [f32("w", (16, 24)), f32("b", (24,))], opset=17)
    assert plan_kernels(model, get_profile(profile)) == [kernel]


def test_token_mlp_in_half_storage():
    """float16_acc32: the GEMMs' buffers between two of our kernels are half (the model's input and
    output stay float32); within half's rounding of onnxruntime."""
    nodes = [node("MatMul", ["x", "w1"], ["h"]), node("Add", ["h", "b1"], ["hb"]), node("Relu", ["hb"], ["r"]),
             node("MatMul", ["r", "w2"], ["y"])]
    inits = [f32("w1", (12, 20)), f32("b1", (20,)), f32("w2", (20, 12))]
    model = make(nodes, [tensor("x", [2, 7, 12])], [tensor("y", [2, 7, 12])], inits, opset=17)
    compiled = compile_model(model, progress=lambda _: None, precision="float16_acc32")
    x = _inputs(np.random.default_rng(7), x=(2, 7, 12))
    (out,), (ref,) = compiled.run(x), reference_outputs(model, x)
    assert relative_error(out, ref) <= 1e-2
    assert [r["op"][:4] for r in compiled.profile()] == ["gemm", "gemm"]
    storage = {t["kind"]: t["storage"] for t in compiled.plan.to_dict()["tensors"] if t["kind"] != "const"}
    assert storage == {"input": None, "temp": "float16", "output": None}, storage


def test_float16_plan_keeps_plain_tensors_float32():
    """precision float16 (planned for Adreno, no device): the GEMM on plain tensors is built float32,
    the dtype of the tensors upstream ops hand it."""
    from tir_adreno.compiler import compile_plan
    from tir_adreno.strategy.profile import get_profile

    nodes = [node("MatMul", ["x", "w"], ["y"])]
    model = make(nodes, [tensor("x", [1, 9, 8])], [tensor("y", [1, 9, 6])], [f32("w", (8, 6))], opset=17)
    plan, kernels, _ = compile_plan(model, get_profile("adreno"), progress=lambda _: None, precision="float16")
    tensors = plan.to_dict()["tensors"]
    assert [c["label"][:4] for c in plan.to_dict()["calls"]] == ["gemm"]
    assert {t["dtype"] for t in tensors} == {"float32"}, tensors


def test_gemm_configs_per_device_class():
    """Each class's tile, its work group cut to the grid and within the device's limit; the H200
    shrinks the tile row-wise on a small product (more work items), not on a large one."""
    from primfuncs.gemm import gemm_geometry, gemm_grid
    from tir_adreno.strategy import gemm as strategy
    from tir_adreno.strategy.profile import get_profile

    small, large = gemm_geometry((1, 49, 64), (64, 64)), gemm_geometry((8, 3136, 64), (64, 256))
    for name in ("adreno", "pocl", "nvidia-h200"):
        profile = get_profile(name)
        for geom in (small, large):
            config = strategy.gemm_config(geom, profile)
            grid = gemm_grid(geom, config)
            assert config.ty * config.tx <= profile.max_work_group_size
            assert config.ty <= max(1, 2 * grid.rows) and config.tx <= max(1, 2 * grid.cols), (name, config, grid)
    h200 = get_profile("nvidia-h200")
    big = strategy.gemm_config(large, h200)  # the tiled kernel's first (biggest) tile
    assert big.tiled and big.rows == strategy.TILED_GEMM_CONFIGS[0][0] == 4
    assert strategy.gemm_config(small, get_profile("adreno")).rows == 4
    assert strategy.gemm_config(large, get_profile("pocl")).cols == 2
    half = strategy.gemm_kwargs(large, "float16", h200)
    assert (half["dtype"], half["acc_dtype"]) == ("float16", "float32")
    assert "dtype" not in strategy.gemm_kwargs(large, "float16_acc32", h200)


def test_tiled_gemm_on_big_gpus_only():
    """The local-memory tiled kernel (``strategy.gemm.tiled_gemm_config``, prefetching) on nvidia-h200
    for a product that launches ``GEMM_FILL`` of ``tiled_min_groups`` work groups of a tiled config
    (the largest tile that does), its smallest config for a tiny one with a short K; never on pocl or adreno
    (``tiled_min_groups`` 0). Each chosen config fits local memory and the device's work group. In
    a plan: the rule's call is the tiled kernel on nvidia-h200 and the register one on pocl."""
    from primfuncs.conv.config import MAX_LOCAL_BYTES
    from primfuncs.gemm import gemm_geometry
    from primfuncs.gemm_tiled import tiled_local_bytes, tiled_work_groups
    from tir_adreno.compiler import compile_plan
    from tir_adreno.strategy import gemm as strategy
    from tir_adreno.strategy.profile import get_profile

    h200 = get_profile("nvidia-h200")
    tiny, qkv, big = gemm_geometry((1, 49, 64), (64, 64)), gemm_geometry((1, 197, 192), (192, 576)), gemm_geometry((8, 3136, 64), (64, 256))
    fc1 = gemm_geometry((1, 197, 192), (192, 768))  # the 4 x 1 tile launches 84 work groups: under 96, over GEMM_FILL of it
    for geom, tile in ((qkv, (2, 1)), (big, (4, 1)), (fc1, (4, 1))):  # qkv: 63 groups of the 4 x 1 tile, 126 of the 2 x 1
        config = strategy.gemm_config(geom, h200)
        assert config.tiled and config.prefetch and (config.rows, config.cols) == tile, config
        assert tiled_work_groups(geom, config) >= strategy.gemm_min_groups(h200) and tiled_local_bytes(config) <= MAX_LOCAL_BYTES
        assert config.ty * config.tx <= h200.max_work_group_size
    assert strategy.tiled_gemm_config(tiny, h200) is None and strategy.gemm_config(tiny, h200) == strategy.fitted_tiled_configs(tiny)[-1]
    for name in ("pocl", "adreno"):
        assert all(not strategy.gemm_config(g, get_profile(name)).tiled for g in (tiny, qkv, big))
    nodes = [node("MatMul", ["x", "w"], ["y"])]
    model = make(nodes, [tensor("x", [1, 197, 192])], [tensor("y", [1, 197, 576])], [f32("w", (192, 576))], opset=17)
    calls = {}
    for name in ("nvidia-h200", "pocl"):
        plan = compile_plan(model, get_profile(name), progress=lambda _: None)[0].to_dict()
        calls[name] = [c["label"] for c in plan["calls"]]
    assert calls == {"nvidia-h200": ["gemm_tiled"], "pocl": ["gemm"]}, calls


def test_tiled_gemm_configs_run_from_the_biggest_tile():
    """The fill rule takes the first config that launches enough work groups, so the list runs from
    the biggest work-group tile to the smallest (a smaller tile first would shadow a bigger one that
    fills), each fits local memory in float32, and the last (the fallback of a product none fills)
    launches the most groups: checked on a product big enough to fill with every entry."""
    from primfuncs.conv.config import MAX_LOCAL_BYTES
    from primfuncs.gemm import GemmConfig, gemm_geometry
    from primfuncs.gemm_tiled import tiled_local_bytes, tiled_work_groups
    from tir_adreno.strategy import gemm as strategy

    tiles = [rows * ty * cols * tx for rows, cols, ty, tx, _ in strategy.TILED_GEMM_CONFIGS]
    assert tiles == sorted(tiles, reverse=True) and len(set(tiles)) == len(tiles), strategy.TILED_GEMM_CONFIGS
    for rows, cols, ty, tx, k_chunk in strategy.TILED_GEMM_CONFIGS:
        assert tiled_local_bytes(GemmConfig(rows, cols, ty, tx, tiled=True, k_chunk=k_chunk)) <= MAX_LOCAL_BYTES
    big = gemm_geometry((4, 3136, 256), (256, 1024))
    groups = [tiled_work_groups(big, c) for c in strategy.fitted_tiled_configs(big)]
    assert groups == sorted(groups) and groups[-1] == max(groups), groups


def test_split_gemm_for_long_reductions_with_few_outputs():
    """On nvidia-h200 a product that no tiled config fills the GPU with and whose K is at least
    ``SPLIT_MIN_K`` (a classifier head, the last stage's MLP on 16-50 tokens, Kᵀ V over thousands of
    tokens) takes the split kernel: work group within the limits, each item at least
    ``MIN_SPLIT_BLOCKS`` blocks, more items than the register kernel launches; the same product
    stays on the register kernel on pocl and adreno. In a plan: the head is one ``gemm_split`` call."""
    from primfuncs.conv.config import MAX_LOCAL_BYTES
    from primfuncs.gemm import gemm_geometry, gemm_grid
    from primfuncs.gemm_split import split_local_bytes, split_work_groups
    from tir_adreno.compiler import compile_plan
    from tir_adreno.strategy import gemm as strategy
    from tir_adreno.strategy.profile import get_profile

    h200 = get_profile("nvidia-h200")
    for a, b, trans_a in (((1, 1152), (1152, 1000), False), ((1, 16, 768), (768, 384), False), ((1, 50, 1024), (1024, 256), False),
                          ((1, 8, 3137, 8), (1, 8, 3137, 8), True)):
        geom = gemm_geometry(a, b, trans_a)
        config = strategy.gemm_config(geom, h200)
        assert config.split_k > 1 and not config.tiled and strategy.tiled_gemm_config(geom, h200) is None, (a, config)
        assert config.split_k * config.tx <= h200.max_work_group_size and split_local_bytes(config) <= MAX_LOCAL_BYTES
        assert -(-geom.k // 4) >= strategy.MIN_SPLIT_BLOCKS * config.split_k
        register = gemm_grid(geom, strategy.gemm_config(geom, dataclasses.replace(h200, tiled_min_groups=0)))
        assert split_work_groups(geom, config) * config.split_k * config.tx > register.layers * register.rows * register.cols
        for name in ("pocl", "adreno"):
            assert strategy.gemm_config(geom, get_profile(name)).split_k == 1
    short = gemm_geometry((1, 16, strategy.SPLIT_MIN_K - 4), (strategy.SPLIT_MIN_K - 4, 384))
    assert strategy.gemm_config(short, h200).tiled
    nodes = [node("MatMul", ["x", "w"], ["y"])]
    model = make(nodes, [tensor("x", [1, 1152])], [tensor("y", [1, 1000])], [f32("w", (1152, 1000))], opset=17)
    plan = compile_plan(model, h200, progress=lambda _: None)[0].to_dict()
    assert [c["label"] for c in plan["calls"]] == ["gemm_split"], plan["calls"]


def test_split_gemm_for_long_reductions_on_many_outputs():
    """On nvidia-h200 a product the tiled kernel could fill the GPU with still takes the split
    kernel where its reduction is long for its outputs (``batch M N <= SPLIT_MAX_OUTPUTS_PER_K K``,
    ``K >= SPLIT_MIN_K``): DeiT's fc2 (197 x 768 -> 192), MLP-Mixer's channel fc2 (49 x 2048 ->
    512) and token fc2 (512 x 256 -> 49); MLP-Mixer's channel fc1 (49 x 512 -> 2048: 196 outputs
    per index), DeiT's qkv (K = 192) and proj stay tiled; pocl and adreno keep the register kernel."""
    from primfuncs.gemm import gemm_geometry
    from tir_adreno.strategy import gemm as strategy
    from tir_adreno.strategy.profile import get_profile

    h200 = get_profile("nvidia-h200")
    long = [gemm_geometry((1, 197, 768), (768, 192)), gemm_geometry((1, 49, 2048), (2048, 512)), gemm_geometry((1, 512, 256), (256, 49))]
    short = [gemm_geometry((1, 49, 512), (512, 2048)), gemm_geometry((1, 197, 192), (192, 576)), gemm_geometry((1, 197, 192), (192, 192))]
    for geom in long:
        assert strategy.tiled_gemm_config(geom, h200) is not None, geom
        config = strategy.gemm_config(geom, h200)
        assert config.split_k > 1 and config == strategy.split_gemm_config(geom), (geom, config)
    for geom in short:
        assert strategy.gemm_config(geom, h200) == strategy.tiled_gemm_config(geom, h200), geom
    for geom in long + short:
        for name in ("pocl", "adreno"):
            config = strategy.gemm_config(geom, get_profile(name))
            assert config.split_k == 1 and not config.tiled, (name, config)


def test_vit_attention_block_as_exported():
    """timm's ``Attention`` as ``torch.onnx.export`` writes it (opset 17): the qkv Linear, Reshape to
    ``[N, L, 3, heads, d]``, Transpose to ``[3, N, heads, L, d]``, Gather of q, k, v, ``q * scale``,
    Q Kᵀ through a Transpose, Softmax, attention x V, Transpose and Reshape back, the proj Linear:
    the two Linears run as our GEMM, the attention between them as one ``softmax_attention``
    kernel reading q, k and v in the qkv Linear's output (q's scale its alpha, K's transpose its
    read) and storing the heads as the proj Linear reads them."""
    from onnx import numpy_helper

    n, length, heads, d = 1, 12, 2, 4
    c = heads * d
    ints = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    inits = [f32("wqkv", (c, 3 * c)), f32("bqkv", (3 * c,)), f32("wproj", (c, c)), f32("bproj", (c,)),
             ints("shape5", [n, length, 3, heads, d]), ints("shape3", [n, length, c]), ints("i0", 0), ints("i1", 1), ints("i2", 2),
             numpy_helper.from_array(np.array(d**-0.5, np.float32), "scale")]
    nodes = [node("MatMul", ["x", "wqkv"], ["qkv0"]), node("Add", ["qkv0", "bqkv"], ["qkv1"]),
             node("Reshape", ["qkv1", "shape5"], ["qkv2"]), node("Transpose", ["qkv2"], ["qkv"], perm=[2, 0, 3, 1, 4]),
             node("Gather", ["qkv", "i0"], ["q0"], axis=0), node("Gather", ["qkv", "i1"], ["k"], axis=0),
             node("Gather", ["qkv", "i2"], ["v"], axis=0), node("Mul", ["q0", "scale"], ["q"]),
             node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), node("MatMul", ["q", "kt"], ["s"]),
             node("Softmax", ["s"], ["p"], axis=-1), node("MatMul", ["p", "v"], ["o"]),
             node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]), node("Reshape", ["ot", "shape3"], ["o3"]),
             node("MatMul", ["o3", "wproj"], ["y0"]), node("Add", ["y0", "bproj"], ["y"])]
    model = make(nodes, [tensor("x", [n, length, c])], [tensor("y", [n, length, c])], inits, opset=17)
    compiled = compile_model(model, progress=lambda _: None)
    x = _inputs(np.random.default_rng(8), x=(n, length, c))
    (out,), (ref,) = compiled.run(x), reference_outputs(model, x)
    assert relative_error(out, ref) <= PATTERN_RTOL
    rows = compiled.profile()
    # the qkv Linear, its transpose (three Gathers read it: one gather kernel), the attention, the proj Linear
    assert [r["op"].rstrip("0123456789") for r in rows] == ["gemm", "gather", "softmax_attention", "gemm"], rows
    assert sum(r["ours"] and r["op"].startswith("gemm") for r in rows) == 2, rows
    assert [r["op"] for r in rows if r["op"].startswith("softmax")] == ["softmax_attention"], rows


def test_workbench_reference_of_a_gemm(device):
    """``tir-adreno kernel --check``'s reference for our GEMM (``workbench.reference_case`` on the op
    info the rule records: operands as stored, transposes, alpha, epilogue) is what the kernel computes."""
    from helpers.numeric import run_kernel
    from primfuncs import gemm
    from primfuncs.epilogue import Epilogue
    from tir_adreno.tools import workbench

    info = {"op": "matmul", "inputs": [[2, 4, 3]], "output": [2, 3, 6], "gemm": {"a_shape": [2, 4, 3], "b_shape": [2, 6, 4],
            "trans_a": True, "trans_b": True, "alpha": 0.5},
            "attrs": {"epilogue": {"bias": True, "activation": "relu", "residual": True}}}
    inputs, ref, channels = workbench.reference_case(info, np.random.default_rng(9))
    func = gemm.gemm((2, 4, 3), (2, 6, 4), trans_a=True, trans_b=True, alpha=0.5,
                     epilogue=Epilogue(bias=True, activation="relu", residual=True))
    out = run_kernel(device, func, *[np.asarray(a, np.float32) for a in inputs])
    assert channels is None and out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
