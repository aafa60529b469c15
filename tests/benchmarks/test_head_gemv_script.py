"""benchmarks/head_gemv.py split in two: ``--build-only`` here (TVM) for the H200 profile, ``--from``
without TVM on this device, on a classifier head (conv -> pool -> Gemm -> LayerNorm -> HardSwish ->
Gemm): the heads before (pool, convs, norm, activation apart), the GEMV with the pool apart, and
the GEMVs with their prologues (two launches)."""

import numpy as np
from onnx import helper

from helpers.benchmarks import build_then_run
from helpers.onnx_graphs import conv_node, pattern_graph


def test_head_gemv_build_only_then_from_without_tvm(tmp_path):
    rng, inits, node = np.random.default_rng(5), {}, helper.make_node
    inits.update(g1_w=rng.standard_normal((24, 16)) / 4, g1_b=rng.standard_normal(24), ln_g=rng.uniform(0.5, 1.5, 24),
                 ln_b=rng.standard_normal(24), g2_w=rng.standard_normal((10, 24)) / 5, g2_b=rng.standard_normal(10))
    nodes = [conv_node(rng, inits, "x", "c", 16, 3), node("GlobalAveragePool", ["c"], ["p"]), node("Flatten", ["p"], ["f"]),
             node("Gemm", ["f", "g1_w", "g1_b"], ["h"], transB=1),
             node("LayerNormalization", ["h", "ln_g", "ln_b"], ["n"], axis=-1, epsilon=1e-5), node("HardSwish", ["n"], ["a"]),
             node("Gemm", ["a", "g2_w", "g2_b"], ["y"], transB=1)]
    r = build_then_run("head_gemv.py", pattern_graph(nodes, inits), "head", tmp_path, ["before", "apart", "after"])
    assert r["after"]["launches"] == r["apart"]["launches"] - 1 == r["before"]["launches"] - 3, r  # mean, LayerNorm, HardSwish gone
    assert "pooled_pointwise" in r["after"]["kernels"] and "pooled_pointwise" not in r["before"]["kernels"], r
    assert "mean_hw" in r["apart"]["kernels"] and "mean_hw" not in r["after"]["kernels"], r
    for way in ("apart", "after"):
        assert r[way]["relative_difference"] <= 1e-5, r[way]["relative_difference"]
