"""benchmarks/launch_cost.py runs without TVM and writes one row per case."""

import json

from helpers.benchmarks import benchmark, script


def test_launch_cost_without_tvm(tmp_path):
    out = script("launch_cost.py", "--chain", "3", "--repeat", "2", "--rounds", "2", "--results-dir", tmp_path, no_tvm=True)
    assert out.strip().splitlines()[-1].split()[0] == "2"  # the table comes last: its last case has 2 buffers
    (result,) = tmp_path.glob("launch_cost-*.json")
    results = json.loads(result.read_text())["results"]
    cases = benchmark("launch_cost").CASES
    assert [(r["buffers"], r["images"]) for r in results] == [case[:2] for case in cases]
    for r, case in zip(results, cases):
        assert 0 < r["launch_us"] <= r["wall_us_per_launch"]  # the enqueue is part of the chain's wall
        assert (r["reqd_work_group_size"] is not None) == case[4]
