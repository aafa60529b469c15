"""benchmarks/gemm_configs.py split in two as on the H200: ``--build-only`` here (TVM) for the
nvidia-h200 profile on one shape (LeViT's stage-3 fc2: 16 tokens, K = 768, the split kernel's
product), ``--from`` with tvm, onnx and torch unimportable on this device: every config (prefetched tiled ones too) checked
against float64 NumPy and timed, the table last, the register, tiled, split and rule's times in the JSON."""

import json

from helpers.benchmarks import benchmark, script


def test_gemm_configs_build_only_then_from_without_tvm(tmp_path):
    saved = tmp_path / "saved"
    script("gemm_configs.py", "--build-only", saved, "--shapes", "levit_128s.s3_fc2")
    out = script("gemm_configs.py", "--from", saved, "--budget", "0.05", "--results-dir", tmp_path / "results", no_tvm=True)
    assert out.strip().splitlines()[-1].startswith("levit_128s.s3_fc2 ")  # the table comes last
    (path,) = (tmp_path / "results").glob("gemm_configs-*.json")
    result = json.loads(path.read_text())
    (row,) = result["rows"]
    assert row["register_s"] > 0 and row["tiled_default_s"] > 0 and row["tiled_kind"] == "tiled_small" and row["cublas_s"] is None
    assert row["split_s"] > 0 and row["best_split_s"] <= row["split_s"] and row["rule_s"] == row["split_s"] and " split" in row["rule"]
    assert not row["wrong"] and not row["errors"] and row["macs"] == 16 * 768 * 384
    cases = result["results"]["levit_128s.s3_fc2"]
    kinds = [k for r in cases for k in r["kinds"]]
    assert kinds.count("register") == kinds.count("tiled_small") == kinds.count("split") == kinds.count("rule") == 1
    assert kinds.count("tiled_neighbour") >= 4 and kinds.count("split_neighbour") >= 4 and kinds.count("unprefetched") >= 4
    assert row["best_prefetch_s"] > 0 and " pf" in row["best_prefetch"] and row["best_unprefetched_s"] > 0
    assert all(r["ok"] for r in cases)


def test_explore_adds_tiled_configs_that_fit_local_memory():
    """``--explore``: the rule's candidates first, then each EXPLORE tile x work group x k_chunk
    whose tiles fit local memory (MambaOut's stage-3 fc1), all tiled and prefetched."""
    from primfuncs.conv.config import MAX_LOCAL_BYTES
    from primfuncs.gemm_tiled import tiled_local_bytes
    from tir_adreno.strategy.profile import get_profile

    gemm_configs = benchmark("gemm_configs")
    h200 = get_profile("nvidia-h200")
    plain = gemm_configs.candidates("mambaout_femto.s3_fc1", h200)
    wide = gemm_configs.candidates("mambaout_femto.s3_fc1", h200, explore=True)
    explored = [c for kind, c in wide if kind == "explore"]
    assert wide[:len(plain)] == plain and len(wide) == len(plain) + len(explored) >= 40
    assert all(c.tiled and c.prefetch and tiled_local_bytes(c) <= MAX_LOCAL_BYTES for c in explored)
    assert len(explored) < len(gemm_configs.EXPLORE["tiles"]) * len(gemm_configs.EXPLORE["groups"]) * len(gemm_configs.EXPLORE["k_chunks"])
