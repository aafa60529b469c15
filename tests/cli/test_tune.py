"""tune -> compile -> run on the command line (PoCL): records written, resumed, used; cross-compiling.

One tiny ONNX model with two convs (a 1x1 and a 3x3 stride-2: no Winograd, so a
handful of candidates each) and a max pool keeps this to a minute or two.
"""

import json
import re

import numpy as np
import onnxruntime
import pytest

from helpers.cli import assert_user_error, cli
from helpers.docs import matches, output_block

from tir_adreno.reference import relative_error
from tir_adreno.runtime import cache
from tir_adreno.tuning import tune, programs as tuning

#: The two convs and a pool in float32 against onnxruntime (measured: see docs/testing.md).
RTOL = 1e-5


@pytest.fixture(scope="module")
def tuned(two_convs, tmp_path_factory):
    """Records after two tune runs: the first (budget 0) tunes one layer, the second the others."""
    records = tmp_path_factory.mktemp("tune") / "records.json"
    first = cli("tune", str(two_convs), "--records", str(records), "--budget-s", "0")
    assert first.returncode == 0, first.stderr[-2000:]
    doc = json.loads(cache.read(records))
    assert len(doc["layers"]) == 1 and "2 layers left for the next run" in first.stdout
    second = cli("tune", str(two_convs), "--records", str(records))
    assert second.returncode == 0, second.stderr[-2000:]
    # what is left and about how long, on stderr after each layer (the last one: nothing left)
    assert re.fullmatch(r"tir-adreno: tune: 1 layer left, about \d+ s at \d+ s a layer \(then the whole model is timed; "
                        r"--budget-s stops earlier, the next run resumes\)\n", second.stderr), second.stderr
    return records, first.stdout, second.stdout


def run_saved_against_onnxruntime(saved, model_path, tmp_path):
    """Run the saved model on the command line with random inputs; its output must match
    onnxruntime's; returns the conv rows of its profile."""
    x = np.random.default_rng(3).standard_normal((1, 4, 6, 6)).astype("float32")
    np.savez(tmp_path / "in.npz", image=x)
    res = cli("run", str(saved), "--inputs", str(tmp_path / "in.npz"), "--outputs", str(tmp_path / "out.npz"),
              "--json", str(tmp_path / "r.json"))
    assert res.returncode == 0, res.stderr[-2000:]
    (ref,) = onnxruntime.InferenceSession(str(model_path), providers=["CPUExecutionProvider"]).run(None, {"image": x})
    assert relative_error(np.load(tmp_path / "out.npz")["output0"], ref) <= RTOL
    return [p for p in json.loads((tmp_path / "r.json").read_text())["profile"] if "config" in p]


def test_tune_writes_and_resumes_records(tuned):
    records, first, second = tuned
    doc = json.loads(cache.read(records))
    assert doc["device"]["name"] == "pocl" and doc["precision"] == "float32" and len(doc["layers"]) == 3
    (pool,) = [e for k, e in doc["layers"].items() if k.startswith("pool2d max")]
    assert set(pool["times_s"]) == {"auto", "thread", "group"} and pool["choice"]["strategy"] in pool["times_s"]
    for entry in doc["layers"].values():
        # The per-layer winner is a timed candidate; the whole-model step (below) may replace the
        # choice by a variant of it that was not timed alone, keeping the winner as layer_winner.
        winner = entry.get("layer_winner", entry["name"])
        assert entry["default_s"] > 0 and winner in entry["times_s"]
        assert len(entry["times_s"]) >= 3  # conv: default, other configs, buffer placement
        assert min(t for t in entry["times_s"].values() if t) == pytest.approx(entry["times_s"][winner], rel=0.031)
    assert "recorded, skipped" in second and second.count("building candidates") == 2
    assert "sum over layers" in second and records.with_suffix(".png").exists()
    # Placement in context: the whole model timed three ways once every layer is recorded; the kept
    # variant is never slower than the profile's default beyond the tie margin.
    assert "whole model" not in first and "whole model (kernel time" in second
    context = doc["context"]
    assert set(context["model_s"]) == set(tune.CONTEXT_VARIANTS) and context["placement"] == "texture"
    assert context["model_s"][context["kept"]] <= context["model_s"]["default"] * (1 + tuning.TIE_MARGIN)
    # Which variant wins depends on timings; what each variant writes does not.
    if context["kept"] == "default":
        assert all(e["name"] in ("default", "auto") for e in doc["layers"].values())
    elif context["kept"] == "tuned":
        assert all("layer_winner" not in e for e in doc["layers"].values())
    else:  # tuned, default placement
        convs = [e for k, e in doc["layers"].items() if k.startswith("conv2d ") and e["choice"]]
        assert all(e["choice"]["placement"] == context["placement"] for e in convs)


def test_docs_show_the_whole_model_line_tune_prints(tuned):
    """docs/tuning-and-deployment.md's sample line is what tune prints now, numbers aside."""
    _, _, second = tuned
    block = output_block("tune-context")
    (line,) = [line for line in second.splitlines() if line.startswith("whole model")]
    (shown, shown_kept), (printed, kept) = block.text.strip().split("; kept: "), line.split("; kept: ")
    assert matches(shown, printed), f"{block.name} shows {block.text!r}; tune prints {line!r}"
    assert {shown_kept, kept} <= set(tune.CONTEXT_VARIANTS)  # which one is kept depends on the timings


def test_compile_with_records_and_run_the_saved_model(tuned, two_convs, tmp_path):
    records, _, _ = tuned
    out = tmp_path / "model"
    res = cli("compile", str(two_convs), "-o", str(out), "--target", "pocl", "--records", str(records))
    assert res.returncode == 0 and "2 conv kernels (2 from records)" in res.stdout, res.stdout + res.stderr[-2000:]
    rows = run_saved_against_onnxruntime(out, two_convs, tmp_path)
    assert [r["source"] for r in rows] == ["records", "records"]
    assert_user_error(cli("run", str(out), "--records", str(records)), "--records needs a model file")


def test_compile_for_adreno_here_and_run(two_convs, tmp_path):
    out = tmp_path / "adreno"
    res = cli("compile", str(two_convs), "-o", str(out), "--target", "adreno")
    assert res.returncode == 0 and "target: adreno (mobile)" in res.stdout, res.stderr[-2000:]
    rows = run_saved_against_onnxruntime(out, two_convs, tmp_path)
    assert len(rows) == 2 and all(r["source"] == "default" for r in rows)


def test_unknown_profile_is_a_user_error(two_convs, tmp_path):
    res = cli("compile", str(two_convs), "-o", str(tmp_path / "m"), "--target", "tpu")
    assert_user_error(res, "compile: argument --target: invalid choice: 'tpu' (choose from 'adreno', 'nvidia-h200', 'pocl')")


def test_records_of_another_device_warn_and_are_ignored(tuned, two_convs, tmp_path):
    records, _, _ = tuned
    res = cli("compile", str(two_convs), "-o", str(tmp_path / "m"), "--target", "adreno", "--records", str(records))
    assert res.returncode == 0 and "(0 from records)" in res.stdout, res.stderr[-2000:]
    warnings = [line for line in res.stderr.splitlines() if "records ignored" in line]
    assert len(warnings) == 1 and "measured on pocl" in warnings[0] and warnings[0].startswith("tir-adreno: warning:")


def test_export_measure_import(two_convs, tmp_path):
    """Build here (--export), time with numpy + pyopencl only (--measure), then write the records."""
    folder, records = tmp_path / "jobs", tmp_path / "r.json"
    args = ("tune", str(two_convs), "--export", str(folder), "--target", "pocl", "--records", str(records))
    res = cli(*args)
    assert res.returncode == 0 and "exported" in res.stdout and not records.exists(), res.stderr[-2000:]
    res = cli("tune", "--measure", str(folder))
    assert res.returncode == 0 and res.stdout.count("measured ") >= 8, res.stderr[-2000:]
    res = cli(*args)
    assert res.returncode == 0 and "sum over layers" in res.stdout, res.stdout + res.stderr[-2000:]
    doc = json.loads(cache.read(records))
    assert doc["device"] == {"name": "pocl", "driver": "", "kind": "cpu"} and len(doc["layers"]) == 3
    # Placement in context, split the same way: the whole model saved three ways, timed there, kept here.
    assert "exported the whole model 3 ways" in res.stdout and not doc["context"]
    res = cli("tune", "--measure", str(folder))
    assert res.returncode == 0 and res.stdout.count("whole model ") == 3, res.stdout + res.stderr[-2000:]
    res = cli(*args)
    assert res.returncode == 0 and "whole model (kernel time, measured on the device)" in res.stdout, res.stdout + res.stderr[-2000:]
    context = json.loads(cache.read(records))["context"]
    assert set(context["model_s"]) == set(tune.CONTEXT_VARIANTS) and context["kept"] in tune.CONTEXT_VARIANTS


def test_missing_records_file_is_a_user_error(two_convs, tmp_path):
    res = cli("compile", str(two_convs), "-o", str(tmp_path / "m"), "--records", str(tmp_path / "absent.json"))
    assert_user_error(res, "absent.json: no such records file")


def test_gpu_candidates_include_the_tiled_kernel():
    """On a big GPU a dense conv's candidates add the tiled kernel's configs on buffers, and when
    the default is tiled, the direct kernel in its own placement; a CPU profile gets neither."""
    from primfuncs.conv import conv2d_geometry
    from tir_adreno.tuning import tune
    from tir_adreno.strategy.profile import get_profile

    pointwise = conv2d_geometry((1, 256, 56, 56), (64, 256, 1, 1))
    gpu = tune.candidates(pointwise, get_profile("nvidia-h200"))
    assert gpu[0].config.tiled and len(gpu) == len(set(gpu))
    assert any(c.config is not None and not c.config.tiled and c.placement == "texture" for c in gpu)
    assert sum(c.config is not None and c.config.tiled for c in gpu) >= 3
    assert not any(c.config is not None and c.config.tiled for c in tune.candidates(pointwise, get_profile("pocl")))
