"""benchmarks/conv_configs.py --grid fused: the fused depthwise -> 1x1 layers taken from a plan
rebuild the plan's kernels (also after their JSON round trip), and the sweep splits in two,
``--build-only`` here for the H200 profile, ``--from`` without TVM on this device, every output
checked against float64 NumPy."""

import json

import numpy as np
import pytest
from onnx import helper

from helpers.benchmarks import benchmark, script
from helpers.onnx_graphs import conv_node, pattern_graph, scalars


def dwpw_model():
    """Three depthwise -> 1x1 pairs on 8 channels of 14 x 14: two equal ones (3x3, ReLU, 1x1, bias,
    residual), then a stride-2 one with a Clip to [-1, 3] into a grouped 1x1 (2 groups, 8 -> 16)."""
    rng, inits, nodes = np.random.default_rng(7), {}, []
    x = "x"
    for i in (1, 2):
        nodes += [conv_node(rng, inits, x, f"d{i}", 8, 8, k=3, group=8), helper.make_node("Relu", [f"d{i}"], [f"r{i}"]),
                  conv_node(rng, inits, f"r{i}", f"p{i}", 8, 8, k=1), helper.make_node("Add", [f"p{i}", x], [f"y{i}"])]
        x = f"y{i}"
    scalars(inits, lo=-1.0, hi=3.0)
    nodes += [conv_node(rng, inits, x, "d3", 8, 8, k=3, group=8, strides=[2, 2]), helper.make_node("Clip", ["d3", "lo", "hi"], ["r3"]),
              conv_node(rng, inits, "r3", "y", 16, 8, k=1, group=2)]
    return pattern_graph(nodes, inits, channels=8, size=14)


@pytest.fixture(scope="module")
def onnx_dir(tmp_path_factory):
    import onnx

    directory = tmp_path_factory.mktemp("onnx")
    onnx.save(dwpw_model(), directory / "dwpw.onnx")
    return directory


def test_fused_layers_rebuild_the_plans_kernels(onnx_dir):
    """Each distinct fused kernel of the H200 plan becomes one layer (equal ones counted), and the
    layer, through its JSON, rebuilt with the planned config gives the plan's OpenCL; the grid's
    "default" is the planned config (no records), its first kind."""
    from tir_adreno.codegen import build
    from tir_adreno.compiler import compile_plan
    from tir_adreno.passes import kernel_index
    from tir_adreno.strategy.profile import get_profile

    conv_configs, layers = benchmark("conv_configs"), benchmark("layers")
    h200 = get_profile("nvidia-h200")
    plan, kernels, _ = compile_plan(onnx_dir / "dwpw.onnx", h200, progress=lambda _: None)
    fused = [c for c in plan.to_dict()["calls"] if c["label"].startswith("depthwise_pointwise")]
    assert len(fused) == 3 and len({c["kernel"] for c in fused}) == 2
    planned = sorted(kernels[c["kernel"]].source for c in {c["kernel"]: c for c in fused}.values())

    found = conv_configs.fused_layers(["dwpw", "absent"], onnx_dir, h200)
    assert [(lay.key, lay.count, lay.models) for lay in found] == [("dwpw.dwpw0", 2, ("dwpw",)), ("dwpw.dwpw1", 1, ("dwpw",))]
    assert found[0].kernel["epilogue"] == {"bias": True, "activation": None, "residual": True, "clip_min": 0.0, "clip_max": 6.0}
    assert found[1].kernel["dw_epilogue"] == {"bias": True, "activation": "clip", "residual": False, "clip_min": -1.0, "clip_max": 3.0}
    assert found[1].kernel["groups"] == 2
    assert found[1].info["attrs"]["strides"] == [2, 2] and found[1].placement == "buffer"  # the H200 plans buffers
    rebuilt = []
    for layer in found:
        layer = layers.layer_from_dict(json.loads(json.dumps(layer.to_dict())))
        config = conv_configs.conv_config(layer.config)
        func = kernel_index.kernel_func(kernel_index.emitted(conv_configs.case_primfunc(layer, config, None, None)))
        rebuilt.append(build.build_cached(func).source)  # named as the pass names its kernels
        grid = conv_configs.fused_grid(layer, h200)
        assert grid[0] == ("default", config) and grid[1] == ("plan", config) and layer.source == "default"
        assert all(c.split_k <= layer.kernel["pw_weight_shape"][1] // 4 for _, c in grid)  # no more slices than blocks
    assert sorted(rebuilt) == planned


def test_fused_sweep_build_only_then_from_without_tvm(onnx_dir, tmp_path):
    conv_configs = benchmark("conv_configs")
    saved, layer = tmp_path / "saved", "dwpw.dwpw1"
    script("conv_configs.py", "--grid", "fused", "--target", "nvidia-h200", "--onnx-dir", onnx_dir, "--models", "dwpw",
           "--layers", layer, "--build-only", saved)
    out = script("conv_configs.py", "--from", saved, "--budget", "0.002", "--jobs", "2", "--results-dir", tmp_path, no_tvm=True)
    assert out.rstrip().splitlines()[-4].startswith("for a rule")  # the rule table last: title, header, rule, one row
    (result_file,) = tmp_path.glob("conv_configs_fused-*.json")
    doc = json.loads(result_file.read_text())
    assert doc["grid"] == "fused" and doc["target"] == "nvidia-h200"
    (row,) = doc["layers"]
    results, summary = row["results"], row["summary"]
    assert row["key"] == layer and row["layer"]["kind"] == "fused" and len(results) >= 8  # a 7x7 map: tiles share work groups
    assert all(r["ok"] and r["rel_err"] <= conv_configs.RTOL and r["time_s"] > 0 for r in results)  # outputs poisoned first
    (default,) = [r for r in results if "default" in r["kinds"]]
    assert default["kinds"][:2] == ["default", "plan"] and default["config"]["placement"] == "buffer"
    assert summary["default_over_best"] >= 1 and summary["best"]["time_s"] <= default["time_s"]
    assert {r["config"]["split_k"] for r in results} == {1}  # 1 input channel block a group: nothing to split
