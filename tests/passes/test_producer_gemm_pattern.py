"""The ``producer_gemm`` pattern (``passes.patterns.producer_gemm``): an elementwise chain on plain
tensors read only by a Linear is computed by the GEMM as it reads A, against onnxruntime, on the
default profile and the nvidia-h200 one: a gated MLP as MambaOut's and a GLU's exports write it
(GELU spelled with Erf, the gate read through a Split of the first Linear's output), a chain
with a constant operand; the plan has no ``elementwise_plain`` kernel; with fusion off, and where
the strategy says the repeated evaluations cost more than a launch, the chain's kernel runs."""

import dataclasses
import math

import numpy as np
import pytest
from onnx import numpy_helper

from helpers.onnx_graphs import f32, make, node, run_ours, tensor
from primfuncs.gemm import gemm_geometry
from tir_adreno.strategy import fusion
from tir_adreno.strategy.gemm import a_reads, gemm_config, producer_gemm_config
from tir_adreno.strategy.profile import get_profile, without_fusion

def _gelu(x: str, y: str) -> list:
    """GELU as ``torch.onnx.export`` (opset 17) writes it: ``x * 0.5 * (1 + erf(x / sqrt(2)))``."""
    return [node("Div", [x, "sqrt2"], [f"{y}_d"]), node("Erf", [f"{y}_d"], [f"{y}_e"]), node("Add", [f"{y}_e", "one"], [f"{y}_a"]),
            node("Mul", [x, f"{y}_a"], [f"{y}_m"]), node("Mul", [f"{y}_m", "half"], [y])]


def _gated_mlp(hw=6, c=8, hidden=12, residual=True):
    """MambaOut's gated block on a channels-last map: ``fc2(gelu(g) * v) + x`` with ``g, v`` the two
    halves of ``fc1(x)`` (a Split of the Linear's output)."""
    nodes = [node("MatMul", ["x", "w1"], ["h0"]), node("Add", ["h0", "b1"], ["h"]),
             node("Split", ["h", "parts"], ["g", "v"], axis=-1), *_gelu("g", "ag"), node("Mul", ["ag", "v"], ["gated"]),
             node("MatMul", ["gated", "w2"], ["y0"]), node("Add", ["y0", "b2"], ["y1" if residual else "y"])]
    nodes += [node("Add", ["y1", "x"], ["y"])] if residual else []
    inits = [f32("w1", (c, 2 * hidden)), f32("b1", (2 * hidden,)), f32("w2", (hidden, c)), f32("b2", (c,)),
             numpy_helper.from_array(np.array([hidden, hidden], np.int64), "parts"),
             numpy_helper.from_array(np.array(math.sqrt(2.0), np.float32), "sqrt2"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"), numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    shapes = {"x": (1, hw, hw, c)}
    return make(nodes, [tensor("x", [1, hw, hw, c])], [tensor("y", [1, hw, hw, c])], inits, opset=17), shapes


@pytest.mark.parametrize("profile", [None, "nvidia-h200"])
@pytest.mark.parametrize("precision", ["float32", "float16_acc32"])
def test_gated_mlp_reads_its_gate_in_the_second_linear(profile, precision):
    """Two GEMMs: the gate ``gelu(g) * v`` is read by the second Linear, no kernel of its own (and
    no gather for the Split's halves: the producer reads them in the first Linear's output)."""
    model, shapes = _gated_mlp()
    ops = run_ours(model, shapes, seed=1, profile=profile and get_profile(profile), precision=precision)
    assert len(ops) == 2 and all(op.startswith("gemm") for op in ops), ops


def test_a_long_reduction_keeps_the_tiled_kernel_to_read_its_gate():
    """MambaOut-Femto's stage-3 block (14 x 14 tokens, 192 -> 2 x 512 -> 192) on the H200 profile:
    its second Linear's reduction is long for its outputs (split kernel without a gate), but with
    the gate folded it runs tiled (``strategy.gemm.producer_gemm_config``): two GEMMs, neither split."""
    model, shapes = _gated_mlp(hw=14, c=192, hidden=512)
    ops = run_ours(model, shapes, seed=5, profile=get_profile("nvidia-h200"))
    assert len(ops) == 2 and all(op.startswith("gemm_tiled") for op in ops), ops


def test_a_chain_with_a_constant_operand_and_no_residual():
    """``silu(a) * b * s + t`` with ``s`` a per-column constant vector, on tokens ``[N, L, C]``, the
    product with no residual: one launch for the chain and the Linear."""
    nodes = [node("Sigmoid", ["a"], ["sa"]), node("Mul", ["a", "sa"], ["silu"]), node("Mul", ["silu", "b"], ["m"]),
             node("Mul", ["m", "s"], ["ms"]), node("Add", ["ms", "t"], ["gated"]), node("MatMul", ["gated", "w"], ["y"])]
    inits = [f32("s", (10,)), numpy_helper.from_array(np.array(0.25, np.float32), "t"), f32("w", (10, 7))]
    shapes = {"a": (2, 9, 10), "b": (2, 9, 10)}
    model = make(nodes, [tensor(k, list(v)) for k, v in shapes.items()], [tensor("y", [2, 9, 7])], inits, opset=17)
    assert run_ours(model, shapes, seed=2) == ["gemm"]


def test_without_fusion_the_chain_runs_apart():
    model, shapes = _gated_mlp(residual=False)
    ops = run_ours(model, shapes, seed=3, profile=without_fusion(get_profile("pocl")))
    assert "elementwise_plain" in ops


def test_the_strategy_folds_where_repeated_evaluations_cost_less_than_a_launch():
    """``(reads - 1) M K ops <= launch_cost_macs`` (``strategy.gemm.a_reads``) of the product's config,
    else of its tiled one (``strategy.gemm.producer_gemm_config``): MambaOut-Femto's second Linears
    on the H200 profile fold in its first three stages (tiled: A read 1, 3 and 6 times;
    stage 3's long reduction leaves the split kernel for the fold) and not in its last (49 tokens:
    no tiled config fills the GPU; split, read by 72 column tiles); gMLP-Ti's second Linear folds
    on the split kernel (4 column tiles) and keeps it; no fold with fusion off."""
    h200 = get_profile("nvidia-h200")
    folds = {hw: fusion.can_fuse("producer_gemm", gemm_geometry((1, hw, hw, hidden), (hidden, c)), h200, ops=6) is not None
             for hw, c, hidden in ((56, 48, 128), (28, 96, 256), (14, 192, 512), (7, 288, 768))}
    assert folds == {56: True, 28: True, 14: True, 7: False}
    stage3, stage4 = gemm_geometry((1, 14, 14, 512), (512, 192)), gemm_geometry((1, 7, 7, 768), (768, 288))
    reads = [a_reads(g, producer_gemm_config(g, 6, h200)) for g in (gemm_geometry((1, hw, hw, hidden), (hidden, c))
                                                                     for hw, c, hidden in ((56, 48, 128), (28, 96, 256), (14, 192, 512)))]
    assert reads == [1, 3, 6], reads
    assert gemm_config(stage3, h200).split_k > 1 and producer_gemm_config(stage3, 6, h200).tiled
    assert producer_gemm_config(stage4, 6, h200) is None
    gmlp = gemm_geometry((1, 196, 384), (384, 128))
    assert gemm_config(gmlp, h200).split_k > 1 and producer_gemm_config(gmlp, 1, h200) == gemm_config(gmlp, h200)
    pocl = get_profile("pocl")  # no tiled kernel: its register kernel reads stage 3's A 6 times, so no fold
    assert producer_gemm_config(stage3, 6, pocl) is None
    assert producer_gemm_config(gemm_geometry((1, 14, 14, 512), (512, 8)), 6, pocl) == gemm_config(gemm_geometry((1, 14, 14, 512), (512, 8)), pocl)
    assert fusion.can_fuse("producer_gemm", gemm_geometry((1, 56, 56, 128), (128, 48)), without_fusion(h200), ops=6) is None
    cheap = dataclasses.replace(h200, launch_cost_macs=10**9)
    assert fusion.can_fuse("producer_gemm", gemm_geometry((1, 14, 14, 512), (512, 192)), cheap, ops=6) is not None


def test_a_costly_fold_leaves_the_chain_kernel():
    """The same block where the strategy declines (a profile whose launch costs nothing worth a
    repeated evaluation; 40 output columns: 5 column tiles read each element of A): the chain's
    own kernel, then the GEMM."""
    model, shapes = _gated_mlp(c=40, residual=False)
    stingy = dataclasses.replace(get_profile("pocl"), launch_cost_macs=1)
    assert "elementwise_plain" in run_ours(model, shapes, seed=4, profile=stingy)


def test_a_chain_read_by_a_linear_leaves_the_conv_writing_plain():
    """SwiftFormer's normalized key: a conv's map as tokens, divided by its row norms, read by a
    Linear. The division (the pattern's anchor) reads the tokens plain, so the conv writes them
    plain (``Pattern.reads_plain``: a pattern taking a reader is not a blocked reader here): no
    layout transform, the GEMM computing ``t / sqrt(s)`` as it reads A (before: the conv wrote
    blocked, and two transforms ran)."""
    nodes = [node("Conv", ["x", "w"], ["y"], kernel_shape=[1, 1]), node("Reshape", ["y", "shape"], ["r"]),
             node("Transpose", ["r"], ["t"], perm=[0, 2, 1]), node("Mul", ["t", "t"], ["sq"]),
             node("ReduceSum", ["sq", "axes"], ["s"], keepdims=1), node("Sqrt", ["s"], ["n"]), node("Div", ["t", "n"], ["d"]),
             node("MatMul", ["d", "w2"], ["z"])]
    inits = [f32("w", (16, 8, 1, 1)), f32("w2", (16, 12)), numpy_helper.from_array(np.array([1, 16, 196], np.int64), "shape"),
             numpy_helper.from_array(np.array([-1], np.int64), "axes")]
    model = make(nodes, [tensor("x", [1, 8, 14, 14])], [tensor("z", [1, 196, 12])], inits, opset=17)
    for profile in (None, get_profile("nvidia-h200")):
        ops = run_ours(model, {"x": (1, 8, 14, 14)}, seed=5, profile=profile)
        assert ops[:3] == ["conv2d_nchw4c", "elementwise_plain", "sum_rows"] and ops[3].startswith("gemm") and len(ops) == 4, ops
