"""benchmarks/catalogue.py: the catalogue as data, and its coverage run (compile, run, check
against onnxruntime at every optimization level, coverage from the profile) on a tiny
exported-style ONNX model, resumed and forced as a long run is."""

import json
import re

import pytest

from helpers.benchmarks import benchmark, script
from test_zoo_script import tiny_model

catalogue = benchmark("catalogue")


def test_the_catalogue_meets_the_issue():
    names = [m.name for m in catalogue.CATALOGUE]
    last_wave = {m.name for m in catalogue.LAST_WAVE}
    assert len(set(names)) == len(names) >= 20 and not set(names) & last_wave and len(last_wave) == 8
    mixers = [m for m in catalogue.CATALOGUE if m.family in ("attention", "token mixer")]
    assert len({m.design for m in mixers}) == len(mixers) >= 12  # each a design of its own
    assert {m.family for m in catalogue.CATALOGUE} == {"attention", "token mixer", "CNN"}
    assert all(m.input_size == 224 for m in catalogue.CATALOGUE)  # torch_models.py exports at 224


@pytest.mark.parametrize("op, transform", [("nchw_to_nchw4c", True), ("nchw4c_to_tokens3", True), ("layout_transform2", True),
                                           ("conv2d_nchw4c", False), ("fused_matmul3_add2", False), ("softmax_tokens", False)])
def test_layout_transforms_are_the_blocked_plain_converters(op, transform):
    assert catalogue.is_layout_transform(op) is transform


def test_judge_leaves_the_error_out_where_onnxruntime_disagrees_with_itself_or_the_output_is_constant():
    stats = {"ours_share": 0.98, "layout_transforms": 4}
    assert catalogue.judge(5e-5, 1e-6, stats) == {"error_ok": True, "ort_agrees": True, "constant_reference": False,
                                                  "share_ok": True, "transforms_ok": True}
    assert catalogue.judge(2e-4, 1e-6, stats)["error_ok"] is False
    assert catalogue.judge(0.0, 0.0, stats, constant=True)["error_ok"] is None  # a constant output checks nothing
    assert catalogue.judge(0.5, 0.3, {"ours_share": 0.5, "layout_transforms": 5}) == {
        "error_ok": None, "ort_agrees": False, "constant_reference": False, "share_ok": False, "transforms_ok": False}


def test_coverage_run_checks_counts_and_resumes(tmp_path):
    onnx_dir = tmp_path / "onnx"
    onnx_dir.mkdir()
    tiny_model(onnx_dir / "tiny.onnx")
    args = ("--onnx-dir", onnx_dir, "--models", "tiny", "--results-dir", tmp_path)
    out = script("catalogue.py", *args)
    assert out.strip().splitlines()[-1].startswith("tiny ")  # the table comes last
    (path,) = tmp_path.glob("catalogue-*.json")
    r = json.loads(path.read_text())["results"]["tiny"]
    assert r["relative_error"] <= catalogue.RTOL and r["ort_spread"] <= catalogue.RTOL and r["error_ok"] is True
    assert r["constant_reference"] is False
    assert set(r["ort_level_errors"]) == set(catalogue.ORT_LEVELS[:-1])
    assert r["launches"] >= 2 and r["kernel_ms"] > 0 and 0.99 < r["ours_share"] <= 1.0 and r["upstream_kernels"] == {}
    assert r["layout_transforms"] == len(r["transform_ops"]) == 1 and r["transform_ops"][0].startswith("nchw4c_to_nchw")
    assert path.with_suffix(".png").stat().st_size > 0
    first = path.read_text()
    shown = script("catalogue.py", *args, "--markdown")  # resumed: nothing to run, the results untouched
    assert json.loads(path.read_text())["results"] == json.loads(first)["results"]
    assert "| tiny | - | " in shown and "other models: 1 of 1 run; 1 within 0.0001 of onnxruntime (0 not judged" in shown
    assert shown.strip().endswith("1 with <= 4 layout transforms; 1 meet all three.")
    script("catalogue.py", *args, "--force")  # forced: run again
    assert json.loads(path.read_text())["date"] >= json.loads(first)["date"]
    assert json.loads(path.read_text())["results"]["tiny"]["compile_s"] != r["compile_s"]


catalogue_e2e = benchmark("catalogue_e2e")


def test_parts_cover_every_model_once():
    names = [f"m{i}" for i in range(35)]
    parts = [catalogue_e2e._part(names, f"{k}/2") for k in (1, 2)]
    assert sorted(parts[0] + parts[1]) == sorted(names) and abs(len(parts[0]) - len(parts[1])) <= 1
    assert catalogue_e2e._part(names, None) == names


def test_the_ratio_is_against_the_faster_graph():
    entry = {"eager": {"graph_wall_ms": 1.2, "ours_wall_paired_ms": 1.0}, "trace": {"graph_wall_ms": 0.8, "ours_wall_paired_ms": 0.9},
             "ours": {}}
    assert catalogue_e2e.summarize(entry) == {"faster_graph": "trace", "ratio": 0.9 / 0.8}
    assert catalogue_e2e.summarize({"ours": {}, "eager": {"error": "x"}, "trace": {"error": "y"}}) == {}


def test_paired_walls_run_in_interleaved_blocks_each_side_first_in_turn():
    calls = []

    def timer(side):
        return lambda: calls.append(side) or len(calls)

    a, b = benchmark("torch_baselines").interleaved_blocks(timer("graph"), timer("ours"), blocks=3, runs=2)
    assert calls == ["graph"] * 2 + ["ours"] * 4 + ["graph"] * 4 + ["ours"] * 2
    assert a == [1, 2, 7, 8, 9, 10] and b == [3, 4, 5, 6, 11, 12]
    assert benchmark("torch_baselines").interleaved_blocks(timer("graph"), None, blocks=2, runs=1)[1] == []


def test_walls_by_place_in_block_take_the_median_of_each_place_over_the_blocks():
    by_place = benchmark("torch_baselines").by_place_in_block
    # three blocks of three runs; the first run of each block pays for the switch
    assert by_place([9, 1, 2, 8, 1, 3, 7, 2, 2], 3) == [8, 1, 2]
    assert by_place([5, 6], 4) == [5, 6]


def test_h200_script_builds_here_and_runs_each_model_in_its_own_process(tmp_path):
    onnx_dir = tmp_path / "onnx"
    onnx_dir.mkdir()
    for stem in ("tiny", "broken"):
        tiny_model(onnx_dir / f"{stem}.onnx")
        (onnx_dir / f"{stem}.pt.xz").write_bytes(b"not a trace")
    saved = tmp_path / "saved"
    script("catalogue_e2e.py", "--build-only", saved, "--target", "pocl", "--onnx-dir", onnx_dir, "--models", "tiny,broken")
    assert (saved / "torchscript" / "tiny.pt.xz").exists() and not (saved / "tiny" / "weights.npz").exists()
    (saved / "broken" / "model.json").write_text("{")  # its process fails; the other model is measured all the same
    out = script("catalogue_e2e.py", "--from", saved, "--repeat", "2", "--block-runs", "3", "--results-dir", tmp_path, no_tvm=True)
    assert out.strip().splitlines()[-1].startswith("ours paired wall / the faster graph's wall: geomean")
    (path,) = tmp_path.glob("catalogue_e2e-*.json")
    results = json.loads(path.read_text())["results"]
    assert json.loads(path.read_text())["block_runs"] == 3
    assert results["broken"]["failure"].startswith("exit ") and "ratio" not in results["broken"]
    tiny = results["tiny"]
    assert tiny["ours"]["kernel_ms"] > 0 and tiny["ours"]["wall_ms"] > 0 and tiny["ours"]["launches"] >= 2
    assert tiny["ours"]["layout_transforms"] == 1 and tiny["ours"]["ours_share"] > 0.99
    assert all("error" in tiny[w] for w in catalogue_e2e.BASELINES)  # no CUDA here: said per baseline, not raised
    # the plans' code: the checkout's commit when built, in the build index and each model's results
    built = json.loads((saved / "catalogue_e2e-build.json").read_text())["models"]
    assert built["tiny"]["source"] == benchmark("common").source_revision() == tiny["source"]
    assert re.fullmatch(r"[0-9a-f]{7}(\+dirty)?", tiny["source"]), tiny["source"]
