"""The committed H200 run of benchmarks/float16.py holds its targets (docs/precision.md)."""

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
#: Every kernel family the float16 kernel cases cover (benchmarks/float16_kernels.py).
FAMILIES = ("add/", "multiply/", "bias_add/", "relu6/", "sigmoid/", "silu/", "hardswish/", "gelu/", "max_pool2d/",
            "avg_pool2d/", "global_avg_pool2d/", "sum_hw/", "max_c/", "softmax/", "nchw_to_nchw4c/", "nchw4c_to_nchw/",
            "concat/", "conv/3x3/direct/", "conv/1x1_tiled/", "conv/depthwise/", "conv/3x3_winograd/winograd_2x2/")
#: Misses measured and explained in docs/precision.md ("ResNet-50"): the built-in ResNet-50 amplifies
#: the rounding of its activations to half storage past 1e-2 (float16_acc32: 1.6e-2). float16 meets 2e-2
#: since its long convs accumulate in float32 (1.5e-2; 4.6e-2 with half accumulators).
KNOWN_MISSES = {"resnet50/float16_acc32"}
MEMORY_RATIO = 0.55


def _doc():
    return json.loads((RESULTS / "float16-nvidia-h200.json").read_text())


def test_every_float16_kernel_family_ran_on_the_h200_within_the_fp16_bound():
    doc = _doc()
    assert doc["probe"]["half_mode"] == "prelude" and not doc["probe"]["cl_khr_fp16"]  # NVIDIA: through the prelude
    kernels = doc["kernels"]
    assert all(k["ok"] and 0 <= k["bound_ratio"] <= 1 and k["kernel_us"] > 0 for k in kernels), [k for k in kernels if not k["ok"]]
    for family in FAMILIES:
        assert any(k["case"].startswith(family) for k in kernels), family
    assert {k["case"].rsplit("/", 1)[-1] for k in kernels} >= {"texture", "buffer", "global"}  # both placements


def test_whole_models_on_the_h200_halve_memory_and_meet_their_targets():
    doc = _doc()
    rows = {(r["model"], r["precision"]): r for r in doc["models"]}
    assert {m for m, _ in rows} == {"mobilenet_v2", "efficientnet_b0", "resnet50"}
    misses = set()
    for (model, precision), r in rows.items():
        assert r["finite"] and r["kernel_ms"] > 0 and r["wall_ms"] > 0, (model, precision)
        if precision == "float32":
            continue
        if r["relative_error"] > r["target"]:
            misses.add(f"{model}/{precision}")
        if precision == "float16":
            base = rows[model, "float32"]
            ratio = (r["weights_mib"] + r["intermediates_mib"]) / (base["weights_mib"] + base["intermediates_mib"])
            assert ratio <= MEMORY_RATIO, (model, ratio)
            assert r["relative_error"] > 1e-4  # half really computed
    assert misses == KNOWN_MISSES
    assert set(doc["summary"]["models_missing_target"]) == KNOWN_MISSES
    # The raw EfficientNet-B0 export underflows half (activations ~1e-11): recorded, excluded, explained.
    (raw,) = [r for r in doc["models_excluded"] if r["precision"] == "float16"]
    assert raw["relative_error"] == 1.0
