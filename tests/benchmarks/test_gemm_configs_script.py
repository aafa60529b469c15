"""benchmarks/gemm_configs.py split in two as on the H200: ``--build-only`` here (TVM) for the
nvidia-h200 profile on one shape (LeViT's Q Kᵀ, K read transposed), ``--from`` with tvm, onnx and
torch unimportable on this device: every config checked against float64 NumPy and timed, the
table last, the register and tiled defaults in the JSON."""

import json

from helpers.benchmarks import script


def test_gemm_configs_build_only_then_from_without_tvm(tmp_path):
    saved = tmp_path / "saved"
    script("gemm_configs.py", "--build-only", saved, "--shapes", "levit_128s.s1_q_kT")
    out = script("gemm_configs.py", "--from", saved, "--budget", "0.05", "--results-dir", tmp_path / "results", no_tvm=True)
    assert out.strip().splitlines()[-1].startswith("levit_128s.s1_q_kT ")  # the table comes last
    (path,) = (tmp_path / "results").glob("gemm_configs-*.json")
    result = json.loads(path.read_text())
    (row,) = result["rows"]
    assert row["register_s"] > 0 and row["tiled_default_s"] > 0 and row["tiled_kind"] == "tiled" and row["cublas_s"] is None
    assert not row["wrong"] and not row["errors"] and row["macs"] == 4 * 196 * 16 * 196
    kinds = [k for r in result["results"]["levit_128s.s1_q_kT"] for k in r["kinds"]]
    assert kinds.count("register") == 1 and kinds.count("tiled") == 1 and kinds.count("tiled_neighbour") >= 4
    assert all(r["ok"] for r in result["results"]["levit_128s.s1_q_kT"])
