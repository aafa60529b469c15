"""benchmarks/conv_configs.py --grid fused, stem and strided: the fused depthwise -> 1x1 layers,
the first dense conv (the stem) and the dense strided convs past it taken from a plan rebuild the
plan's kernels (also after their JSON round trip), and the sweep splits in two, ``--build-only``
here for the H200 profile, ``--from`` without TVM on this device, every output checked against
float64 NumPy."""

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


def stem_model():
    """A stem as the models have it: 3 -> 8 channels, 3x3 stride 2 on 160 x 160 (the H200 plans it
    tiled: 100 work groups of ``defaults.TILED_STEM``), HardSwish, then a dense 1x1 conv (not taken)."""
    rng, inits = np.random.default_rng(8), {}
    nodes = [conv_node(rng, inits, "x", "s", 8, 3, k=3, strides=[2, 2]), helper.make_node("HardSwish", ["s"], ["h"]),
             conv_node(rng, inits, "h", "y", 8, 8, k=1)]
    return pattern_graph(nodes, inits, channels=3, size=160)


def strided_model():
    """The stem (3 -> 8, 3x3/2 on 32 x 32), a 2x2/2 patchify conv (not taken), a 3x3/2 downsample
    (8 -> 16: the strided layer) read as channels-last tokens by a layer norm and a Linear, as
    MambaOut's (the conv writes them plain)."""
    rng, inits = np.random.default_rng(9), {}
    inits.update(g=1 + 0.3 * rng.standard_normal(16), b=0.3 * rng.standard_normal(16), w=rng.standard_normal((16, 8)) / 4)
    nodes = [conv_node(rng, inits, "x", "s", 8, 3, k=3, strides=[2, 2]),
             conv_node(rng, inits, "s", "p", 8, 8, k=2, strides=[2, 2], pads=[0] * 4),
             conv_node(rng, inits, "p", "d", 16, 8, k=3, strides=[2, 2]), helper.make_node("Transpose", ["d"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("LayerNormalization", ["t", "g", "b"], ["n"], axis=-1, epsilon=1e-6), helper.make_node("MatMul", ["n", "w"], ["y"])]
    return pattern_graph(nodes, inits, channels=3, size=32)


@pytest.fixture(scope="module")
def onnx_dir(tmp_path_factory):
    import onnx

    directory = tmp_path_factory.mktemp("onnx")
    onnx.save(dwpw_model(), directory / "dwpw.onnx")
    onnx.save(stem_model(), directory / "stem.onnx")
    onnx.save(strided_model(), directory / "strided.onnx")
    return directory


def rebuilt_sources(conv_configs, layers, found):
    """The OpenCL of each plan layer of ``found`` rebuilt through its JSON with its planned config."""
    from tir_adreno.codegen import build
    from tir_adreno.passes import kernel_index

    sources = []
    for layer in found:
        layer = layers.layer_from_dict(json.loads(json.dumps(layer.to_dict())))
        config = conv_configs.conv_config(layer.config)
        func = kernel_index.kernel_func(kernel_index.emitted(conv_configs.case_primfunc(layer, config, None, None)))
        sources.append(build.build_cached(func).source)  # named as the pass names its kernels
    return sources


def planned_calls(onnx_dir, name, profile):
    """(the calls of ``name``'s plan on ``profile``, its kernels)."""
    from tir_adreno.compiler import compile_plan

    plan, kernels, _ = compile_plan(onnx_dir / f"{name}.onnx", profile, progress=lambda _: None)
    return plan.to_dict()["calls"], kernels


def test_fused_layers_rebuild_the_plans_kernels(onnx_dir):
    """Each distinct fused kernel of the H200 plan becomes one layer (equal ones counted), and the
    layer, through its JSON, rebuilt with the planned config gives the plan's OpenCL; the grid's
    "default" is the planned config (no records), its first kind."""
    from tir_adreno.strategy.profile import get_profile

    conv_configs, layers = benchmark("conv_configs"), benchmark("layers")
    h200 = get_profile("nvidia-h200")
    calls, kernels = planned_calls(onnx_dir, "dwpw", h200)
    fused = [c for c in calls if c["label"].startswith("depthwise_pointwise")]
    assert len(fused) == 3 and len({c["kernel"] for c in fused}) == 2
    planned = sorted(kernels[c["kernel"]].source for c in {c["kernel"]: c for c in fused}.values())

    found = conv_configs.plans_layers(["dwpw", "absent"], onnx_dir, h200, "fused")
    assert [(lay.key, lay.count, lay.models) for lay in found] == [("dwpw.dwpw0", 2, ("dwpw",)), ("dwpw.dwpw1", 1, ("dwpw",))]
    unset = {"activation_params": [], "out_scope": None, "residual_scope": None, "expr": None, "out_layout": "NCHW4c",
             "residual_layout": "NCHW4c"}
    assert found[0].kernel["epilogue"] == {"bias": True, "activation": None, "residual": True, "clip_min": 0.0, "clip_max": 6.0,
                                           **unset, "out_scope": "global", "residual_scope": "global"}
    assert found[1].kernel["prologue"]["depthwise"] == {"bias": True, "activation": "clip", "residual": False, "clip_min": -1.0,
                                                        "clip_max": 3.0, **unset}
    assert found[1].kernel["groups"] == 2
    assert found[1].info["attrs"]["strides"] == [2, 2] and found[1].placement == "buffer"  # the H200 plans buffers
    for layer in found:
        config = conv_configs.conv_config(layer.config)
        grid = conv_configs.fused_grid(layer, h200)
        assert grid[0] == ("default", config) and grid[1] == ("plan", config) and layer.source == "default"
        assert all(c.split_k <= layer.kernel["pw_weight_shape"][1] // 4 for _, c in grid)  # no more slices than blocks
    assert sorted(rebuilt_sources(conv_configs, layers, found)) == planned


def test_stem_layer_rebuilds_the_plans_kernel(onnx_dir):
    """The first dense conv of each H200 plan becomes the model's stem layer (a plan without one,
    all fused, adds none); through its JSON, rebuilt with the planned config (``TILED_STEM``), it
    gives the plan's OpenCL. Its grid: the default and the plan's config first, the direct rule,
    the tiled configs with gy at most the output blocks of the tile and a work group per SM."""
    from tir_adreno.strategy import defaults
    from tir_adreno.strategy.profile import get_profile

    conv_configs, layers = benchmark("conv_configs"), benchmark("layers")
    h200 = get_profile("nvidia-h200")
    calls, kernels = planned_calls(onnx_dir, "stem", h200)
    first = next(c for c in calls if c["label"].startswith("conv2d"))
    assert first["label"].startswith("conv2d_tiled")

    (layer,) = conv_configs.plans_layers(["dwpw", "stem", "absent"], onnx_dir, h200, "stem")
    assert (layer.key, layer.count, layer.models, layer.placement) == ("stem.stem", 1, ("stem",), "buffer")
    assert layer.kernel["data_layout"] == "NCHW" and layer.kernel["epilogue"]["activation"] == "hardswish"
    assert layer.description == "3->8 3x3/2 @160x160 hardswish buf" and layer.flops == 2 * 8 * 80 * 80 * 27
    assert rebuilt_sources(conv_configs, layers, [layer]) == [kernels[first["kernel"]].source]

    geom = conv_configs.plan_kwargs(layer, None)["geometry"]
    stem = defaults.tiled_config(geom, defaults.TILED_STEM)
    assert stem.k_chunk == 9  # the 3x3 window in one K step
    grid = conv_configs.stem_grid(layer, h200)
    assert grid[:2] == [("default", stem), ("plan", stem)] and grid[2][0] == "gpu_default" and not grid[2][1].tiled
    sweep = [c for kind, c in grid if kind == "sweep"]
    assert len(sweep) >= 4 and len(grid) <= 40  # 80 x 80 outputs: few configs give 132 work groups
    for c in sweep:
        gx, gy, _ = c.work_group
        assert c.tiled and c.split_k == 1 and gy <= -(-geom.o4 // c.oc_block) and 32 <= gx * gy <= 256
        assert defaults.tiled_work_groups(geom, c.oc_block, c.w_block, c.work_group) >= h200.compute_units
        assert c.k_chunk == 9 or gx * c.w_block > 128  # the 9 taps in one step where local memory allows


def test_strided_layers_are_the_downsamples_past_the_stem(onnx_dir):
    """``--grid strided`` takes the dense 3x3/2 conv past the stem, not the stem nor the patchify
    conv; through its JSON, rebuilt with the planned config, it gives the plan's OpenCL. Its
    grid: the default and the plan's config first, the direct kernel's tiles (no split_k: 2 input
    channel blocks), the tiled kernel's grid."""
    from tir_adreno.strategy import defaults
    from tir_adreno.strategy.profile import get_profile

    conv_configs, layers = benchmark("conv_configs"), benchmark("layers")
    h200 = get_profile("nvidia-h200")
    (layer,) = conv_configs.plans_layers(["strided", "stem"], onnx_dir, h200, "strided")
    assert (layer.key, layer.count, layer.models, layer.placement) == ("strided.s0", 1, ("strided",), "buffer")
    assert layer.description.startswith("8->16 3x3/2 @8x8") and layer.flops == 2 * 16 * 4 * 4 * 8 * 9
    assert layer.kernel["epilogue"]["out_layout"] == "NHWC"  # the tokens the layer norm reads
    calls, kernels = planned_calls(onnx_dir, "strided", h200)
    assert rebuilt_sources(conv_configs, layers, [layer])[0] in {kernels[c["kernel"]].source for c in calls}
    grid = conv_configs.strided_grid(layer, h200)
    config = conv_configs.conv_config(layer.config)
    assert grid[0] == ("default", config) and grid[1] == ("plan", config) and grid[2][0] == "gpu_default"
    direct = [c for kind, c in grid if kind == "direct"]
    tiled = [c for kind, c in grid if kind == "sweep"]
    assert len(direct) == len(conv_configs.STRIDED_DIRECT_TILES) and all(c.split_k == 1 and not c.tiled for c in direct)
    stem_configs = 2  # TILED_STEM, TILED_STEM_WIDE
    assert len(tiled) == len(defaults.TILED_CONFIGS) + stem_configs + len(conv_configs.STRIDED_TILED) and all(c.tiled for c in tiled)


@pytest.mark.parametrize("grid, model, layer", [("fused", "dwpw", "dwpw.dwpw1"), ("stem", "stem", "stem.stem"),
                                                ("strided", "strided", "strided.s0")])
def test_plan_sweep_build_only_then_from_without_tvm(onnx_dir, tmp_path, grid, model, layer):
    conv_configs = benchmark("conv_configs")
    saved = tmp_path / "saved"
    script("conv_configs.py", "--grid", grid, "--target", "nvidia-h200", "--onnx-dir", onnx_dir, "--models", model,
           "--layers", layer, "--build-only", saved)
    out = script("conv_configs.py", "--from", saved, "--budget", "0.002", "--jobs", "2", "--results-dir", tmp_path, no_tvm=True)
    assert out.rstrip().splitlines()[-4].startswith("for a rule")  # the rule table last: title, header, rule, one row
    (result_file,) = tmp_path.glob(f"conv_configs_{grid}-*.json")
    doc = json.loads(result_file.read_text())
    assert doc["grid"] == grid and doc["target"] == "nvidia-h200"
    (row,) = doc["layers"]
    results, summary = row["results"], row["summary"]
    assert row["key"] == layer and row["layer"]["kind"] == grid and len(results) >= 8  # fused: a 7x7 map, tiles share work groups
    assert all(r["ok"] and r["rel_err"] <= conv_configs.RTOL and r["time_s"] > 0 for r in results)  # outputs poisoned first
    (default,) = [r for r in results if "default" in r["kinds"]]
    assert default["kinds"][:2] == ["default", "plan"] and default["config"]["placement"] == "buffer"
    assert summary["default_over_best"] >= 1 and summary["best"]["time_s"] <= default["time_s"]
    if grid != "strided":  # the tiled grid splits K
        assert {r["config"]["split_k"] for r in results} == {1}  # fused: 1 input channel block a group; stem: none split
    if grid in ("stem", "strided"):  # the tiled kernel's configs next to the direct kernel's, the direct rule among them
        assert {r["config"]["tiled"] for r in results} == {True, False} and "gpu_default" in summary
        assert doc[grid]["default_over_best"] >= 1


def test_precompile_starts_no_build_after_the_time_limit():
    """``--jobs`` with ``--time-limit``: the parallel compile starts no program past the deadline
    (the run then records its cases as skipped and writes the JSON instead of compiling on)."""
    import time

    conv_configs = benchmark("conv_configs")

    class Device:
        built = []

        def build_program(self, source):
            self.built.append(source)

    dev = Device()
    assert conv_configs.precompile(dev, {"a", "b", "c"}, 2, deadline=time.perf_counter() - 1) == 0 and dev.built == []
    assert conv_configs.precompile(dev, {"a", "b", "c"}, 2) == 3 and sorted(dev.built) == ["a", "b", "c"]
