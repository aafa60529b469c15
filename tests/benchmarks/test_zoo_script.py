"""benchmarks/zoo.py, models_e2e.py and conv_layers.py split in two: ``--build-only`` here,
``--from`` without TVM (what runs on the H200), on a tiny exported-style ONNX model or a few layers."""

import json
from pathlib import Path

import onnx
import pytest

from helpers.benchmarks import benchmark, script
from helpers.onnx_graphs import conv_bn, make, relu6_nodes, tensor

#: The tiny model run through zoo.py against onnxruntime (float32, one conv + BN + ReLU6).
ZOO_RTOL = 1e-5


def tiny_model(path: Path) -> Path:
    nodes, inits = conv_bn("input", "c1", "c1", 3, 8, k=3)
    act, bounds = relu6_nodes("c1", "output", "r1")
    onnx.save(make(nodes + act, [tensor("input", (1, 3, 8, 8))], [tensor("output", (1, 8, 8, 8))], inits + bounds), path)
    return path


@pytest.fixture(scope="module")
def onnx_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("onnx")
    tiny_model(directory / "tiny.onnx")
    return directory


def test_zoo_build_only_then_from_without_tvm(onnx_dir, tmp_path):
    # Run here first (no split): the model's output against onnxruntime.
    script("zoo.py", "--onnx-dir", onnx_dir, "--models", "tiny", "--results-dir", tmp_path / "checked")
    (checked,) = (tmp_path / "checked").glob("zoo-*.json")
    r = json.loads(checked.read_text())["results"]["tiny"]
    assert r["ok"] and r["relative_error"] <= ZOO_RTOL, r
    saved = tmp_path / "saved"
    script("zoo.py", "--onnx-dir", onnx_dir, "--models", "tiny,absent", "--build-only", saved, "--target", "pocl")
    assert not (saved / "tiny" / "weights.npz").exists()  # timing-only save
    assert json.loads((saved / "zoo-build.json").read_text())["target"] == "pocl"
    out = script("zoo.py", "--from", saved, "--models", "tiny", "--repeat", "2", "--results-dir", tmp_path, no_tvm=True)
    assert "timed" in out
    (result_file,) = tmp_path.glob("zoo-*.json")
    doc = json.loads(result_file.read_text())
    assert doc["target"] == "pocl" and "onnxruntime" in doc["note"]
    r = doc["results"]["tiny"]
    assert r["random_weights"] is True and "ok" not in r
    assert r["kernel_ms"] > 0 and r["wall_ms"] > 0 and r["compile_s"] > 0
    assert r["source"] == benchmark("common").source_revision() is not None  # the commit the plan was built from
    assert r["layout_transforms"] == 1 and r["calls"] == r["kernels"] >= 2  # the conv reads the input itself
    assert r["ours_share"] > 0.99 and r["upstream_kernels"] == {}


def test_models_e2e_takes_onnx_models(onnx_dir, tmp_path):
    saved = tmp_path / "saved"
    script("models_e2e.py", "--onnx", onnx_dir / "tiny.onnx", "--build-only", saved, "--target", "pocl", "--carry-weights-mb", "0")
    assert {p.name for p in saved.iterdir()} == {"tiny-ours", "tiny-ours_nofuse", "tiny-upstream"}
    assert not (saved / "tiny-ours" / "weights.npz").exists()
    script("models_e2e.py", "--from", saved, "--models", "tiny", "--repeat", "2", "--results-dir", tmp_path, no_tvm=True)
    (result_file,) = tmp_path.glob("models_e2e-*.json")
    (entry,) = json.loads(result_file.read_text())["results"]
    assert entry["model"] == "tiny" and entry["cudnn"] is None
    for way in ("ours", "upstream", "ours_nofuse"):
        assert entry[way]["random_weights"] is True and entry[way]["kernel_ms"] > 0
    # fuse_gain is the ratio of the two recorded kernel times; the tiny model has no depthwise -> 1x1
    # pair, so fusing only lets its conv read the input itself (no input layout kernel).
    assert entry["fuse_gain"] == pytest.approx(entry["ours_nofuse"]["kernel_ms"] / entry["ours"]["kernel_ms"])
    assert entry["ours_nofuse"]["calls"] == entry["ours"]["calls"] + 1
    assert entry["ours"]["calls"] < entry["upstream"]["calls"]  # conv + BatchNorm + ReLU6 fused
    # launch_us: the fast run's path (ctypes, no events), next to the old unbound path
    assert entry["ours"]["launcher"] == "ctypes" and entry["ours"]["launch_us"] > 0 and entry["ours"]["launch_us_unbound"] > 0
    assert entry["ours"]["io_ms"] > 0 and entry["ours"]["wall_ms"] > 0  # both measured (their order is timing, not asserted)
    # benchmarks/host_path.py on the same saved model, without TVM: five ways, same bits
    out = script("host_path.py", "--from", saved, "--chain", "6", "--repeat", "2", "--rounds", "1", "--results-dir", tmp_path,
                 no_tvm=True)
    assert out.splitlines()[-1].startswith("chain6  ")  # the table comes last
    (result_file,) = tmp_path.glob("host_path-*.json")
    tiny, chain = json.loads(result_file.read_text())["results"]
    assert (tiny["model"], chain["model"], chain["launches"], chain["chain_correct"]) == ("tiny", "chain6", 6, True)
    for entry in (tiny, chain):
        assert entry["kernel_ms"] > 0 and entry["io_ms"] > 0
        kinds = {name: (v["launcher"], v["queue"], v["pinned"]) for name, v in entry["variants"].items()}
        assert kinds == {"pyopencl+profiling": ("pyopencl", "profiling", False), "pyopencl+plain": ("pyopencl", "plain", False),
                         "ctypes+profiling": ("ctypes", "profiling", False), "ctypes+plain": ("ctypes", "plain", False),
                         "ctypes+plain+pinned": ("ctypes", "plain", True)}
        assert all(v["outputs_match"] and v["launch_us"] > 0 and v["wall_ms"] > 0 and v["io_ms"] > 0
                   for v in entry["variants"].values())


def test_conv_layers_ours_runs_the_strategys_plan(tmp_path):
    """conv_layers.py's way "ours" is what a compiled model runs: the strategy's plan for the
    target, with the records' choice where they hold the layer (here MobileNetV2's first
    depthwise conv on the 1-D-grid buffer schedule), the default elsewhere; built here, run
    without TVM, every output checked."""
    layers = benchmark("layers")

    from primfuncs.conv import ConvConfig, conv2d_geometry
    from primfuncs.epilogue import Epilogue
    from tir_adreno.strategy import records, conv as strategy
    from tir_adreno.strategy.profile import get_profile

    profile = get_profile("pocl")
    first, dw = layers.layers(["mobilenetv2"], 2)
    assert dw.depthwise and not first.depthwise
    geoms = {lay.key: conv2d_geometry(lay.data_shape, lay.weight_shape, lay.strides, lay.padding, lay.dilation, lay.groups)
             for lay in (first, dw)}
    choice = strategy.ConvChoice("direct", ConvConfig(1, 2, (64, 1, 1), register_window=True, flat=True), "buffer")
    recs = records.Records(profile)
    recs.add(records.conv2d_key(geoms[dw.key]), choice, {choice.name: 1e-3})
    path = recs.save(tmp_path / "records.json")

    saved = tmp_path / "saved"
    script("conv_layers.py", "--models", "mobilenetv2", "--limit", "2", "--only", "ours,upstream",
           "--build-only", saved, "--target", "pocl", "--records", path)
    out = script("conv_layers.py", "--from", saved, "--budget", "0.01", "--input-sets", "1", "--only", "ours,upstream",
                 "--results-dir", tmp_path, no_tvm=True)
    assert "depthwise min" in out and "ours/up" in out
    (result_file,) = tmp_path.glob("conv_layers-*.json")
    doc = json.loads(result_file.read_text())
    rows = {row["key"]: row["results"] for row in doc["layers"]}
    assert rows[dw.key]["ours"]["plan"] == {
        "algorithm": "direct", "placement": "buffer", "config": "oc1 w2 wg64x1x1 k1 reg flat buffer", "source": "records",
        "scopes": ["global", "global", "global"], "choice": choice.to_dict(),
    }
    default = strategy.conv2d_plan(geoms[first.key], Epilogue(), "float32", profile)
    assert rows[first.key]["ours"]["plan"]["source"] == "default"
    assert rows[first.key]["ours"]["plan"]["config"] == default.config_string
    assert rows[first.key]["ours"]["plan"]["placement"] == default.placement
    assert all(r[w]["ok"] and r[w]["time_s"] > 0 for r in rows.values() for w in ("ours", "upstream"))
    ratio = doc["summary"]["mobilenetv2"]["ours/upstream"]
    # The one depthwise layer is the minimum, and its ratio is upstream's time over ours.
    assert ratio["depthwise_min_layer"] == dw.key
    assert ratio["depthwise_min"] == pytest.approx(rows[dw.key]["upstream"]["time_s"] / rows[dw.key]["ours"]["time_s"])


def test_mobilenetv2_pairs_follow_the_block_structure():
    """layers.pairs: MobileNetV2's 17 depthwise convs each feed their block's 1x1 projection; a
    merged depthwise row feeds several projection rows; the blocks reproduce every row's count."""
    layers = benchmark("layers")

    rows = layers.MOBILENETV2
    pairs = layers.pairs(list(rows))
    assert sum(p.count for p in pairs) == 17 and all(p.depthwise.depthwise for p in pairs)
    by_dw = {}
    for p in pairs:
        by_dw.setdefault(p.depthwise.name, []).append((p.pointwise.name, p.count))
    assert by_dw["features.8-11.dw"] == [("features.8-10.proj", 3), ("features.11.proj", 1)]
    assert {k: sum(n for _, n in v) for k, v in by_dw.items()} == {r.name: r.count for r in rows if r.depthwise}
    counts = {}
    for block in layers._mobilenetv2_blocks():
        for conv in block:
            row = layers._row_of("mobilenetv2", conv)
            counts[row.name] = counts.get(row.name, 0) + 1
    assert counts == {r.name: r.count for r in rows[1:-1]}  # all but the stem and features.18
    assert layers.pairs(layers.layers(["mobilenetv2"], 2)) == [] and layers.pairs(list(layers.RESNET50)) == []


def test_conv_layers_fused_pair_as_the_model_runs(tmp_path):
    """Built for nvidia-h200 (which fuses every depthwise conv into its 1x1 projection), run
    here without TVM: the pair's row times the strategy's fused kernel, checked against the
    float64 depthwise-then-1x1 reference; its other ways are the two rows' sums; the summary
    "as the model runs" counts the pair instead of the depthwise row."""
    conv_layers, layers = benchmark("conv_layers"), benchmark("layers")

    from tir_adreno.strategy import fusion
    from tir_adreno.strategy.profile import get_profile

    stem, dw, pw = layers.layers(["mobilenetv2"], 3)
    key = f"{dw.key}+{pw.name}"
    plan = fusion.fuse_depthwise_pointwise(conv_layers.geometry(dw), conv_layers.geometry(pw), get_profile("nvidia-h200"))
    saved = tmp_path / "saved"
    script("conv_layers.py", "--models", "mobilenetv2", "--limit", "3", "--only", "ours,upstream",
           "--build-only", saved, "--target", "nvidia-h200")
    out = script("conv_layers.py", "--from", saved, "--budget", "0.01", "--input-sets", "1", "--results-dir", tmp_path,
                 no_tvm=True)
    (result_file,) = tmp_path.glob("conv_layers-*.json")
    doc = json.loads(result_file.read_text())
    (fused,) = doc["fused"]
    assert fused["key"] == key and fused["count"] == 1 and fused["flops"] == dw.flops + pw.flops
    ours, up = fused["results"]["ours"], fused["results"]["upstream"]
    assert ours["ok"] and ours["rel_err"] <= 1e-4 and ours["time_s"] > 0  # output poisoned first
    assert ours["plan"]["fused"] and ours["plan"]["config"] == plan.config_string
    rows = {row["key"]: row["results"] for row in doc["layers"]}
    assert set(rows) == {stem.key, dw.key, pw.key}
    assert up["time_s"] == rows[dw.key]["upstream"]["time_s"] + rows[pw.key]["upstream"]["time_s"]
    (dw_line,) = [line for line in out.splitlines() if line.startswith(dw.key + " ")]
    assert dw_line.rstrip().endswith("fused")
    per_conv, as_run = (doc[k]["mobilenetv2"] for k in ("summary", "summary_as_model_runs"))
    assert (per_conv["layers"], per_conv["conv_count"], as_run["layers"], as_run["conv_count"]) == (3, 3, 2, 3)
    assert per_conv["ours/upstream"]["depthwise_min_layer"] == dw.key
    assert as_run["ours/upstream"]["depthwise_min_layer"] == key
    assert out.rindex("as the model runs") > out.rindex("per conv (each conv alone)")


def test_conv_configs_buffer_placement_split(tmp_path):
    """conv_configs.py --placement buffer: its own grid (2-D and flat groups, split_k) with
    activations and weights in buffers, plus the "gpu" default on buffers and on textures;
    built here, run without TVM, every output checked; ``--layers pointwise`` picks the
    non-depthwise 1x1 stride-1 convs of both models."""
    conv_configs = benchmark("conv_configs")

    pointwise = conv_configs.parse_args(["--layers", "pointwise"]).selected
    assert len(pointwise) == 31 and {lay.model for lay in pointwise} == {"resnet50", "mobilenetv2"}
    assert all(lay.weight_shape[2:] == (1, 1) and lay.strides == (1, 1) and lay.groups == 1 for lay in pointwise)

    saved, layer = tmp_path / "saved", "mobilenetv2.features.14.proj"  # 576->160 1x1 @7x7: small
    script("conv_configs.py", "--placement", "buffer", "--layers", layer, "--build-only", saved)
    out = script("conv_configs.py", "--from", saved, "--budget", "0.005", "--results-dir", tmp_path, no_tvm=True)
    assert "(buffer kernels, fp32" in out and "geomean speed-up over default_gpu" in out
    (result_file,) = tmp_path.glob("conv_configs_buffer-*.json")
    doc = json.loads(result_file.read_text())
    assert doc["placement"] == "buffer"
    (row,) = doc["layers"]
    results = row["results"]
    assert row["key"] == layer and len(results) >= 10
    assert all(r["ok"] and r["rel_err"] <= conv_configs.RTOL and r["time_s"] > 0 for r in results)  # outputs poisoned first
    where = {r["config"]["placement"] for r in results if "texture_default_gpu" not in r["kinds"]}
    assert where == {"buffer"} and all(r["label"].endswith(" buf") for r in results if r["config"]["placement"] == "buffer")
    (tex,) = [r for r in results if "texture_default_gpu" in r["kinds"]]
    (buf,) = [r for r in results if "default_gpu" in r["kinds"]]
    assert tex["config"]["placement"] == "texture" and {**tex["config"], "placement": "buffer"} == buf["config"]
    assert any(r["config"]["flat"] for r in results) and any(r["config"]["split_k"] > 1 for r in results)
    assert {"default_gpu", "texture_default_gpu"} <= set(row["summary"])
