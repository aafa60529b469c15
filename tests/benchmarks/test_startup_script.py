"""benchmarks/startup.py split in two: ``--build-only`` here (TVM), ``--from`` without TVM, on a tiny ONNX model."""

import json

from helpers.benchmarks import script
from helpers.onnx_graphs import tiny_model


def test_startup_build_only_then_from_without_tvm(tmp_path):
    import onnx

    onnx.save(tiny_model(), tmp_path / "tiny.onnx")
    saved = tmp_path / "saved"
    script("startup.py", "--models", "", "--onnx", f"tiny={tmp_path / 'tiny.onnx'}", "--build-only", saved, "--target", "pocl")
    assert (saved / "tiny" / "model.json").exists()
    out = script("startup.py", "--from", saved, "--repeat", "2", "--results-dir", tmp_path / "results", no_tvm=True)
    assert out.strip().splitlines()[-1].startswith("tiny") and "warm" in out.strip().splitlines()[-1]  # the table comes last
    (result,) = (tmp_path / "results").glob("startup-*.json")
    assert result.with_suffix(".png").exists()
    (r,) = json.loads(result.read_text())["results"]
    cold, warm = r["cold"]["startup"], r["warm"]
    assert r["model"] == "tiny" and len(warm) == 2
    assert cold["programs"]["from_source"] > 0 and cold["programs"]["from_binary"] == 0  # empty caches
    assert all(w["startup"]["programs"]["from_source"] == 0 for w in warm)  # the cold start filled them
    assert r["warm_median"]["total_ms"] > 0 and r["warm_median"]["import_ms"] > 0
