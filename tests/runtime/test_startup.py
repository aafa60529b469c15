"""Start-up: a warm start builds no program from source, and the start-up report's phases are
there and add up (in a fresh process each, as a user's start is)."""

import io
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tir_adreno import compile_model
from tir_adreno.runtime import weights as saved_weights
from tir_adreno.runtime.startup import ProgramCounts, StartupReport

from helpers import ROOT, refuse_imports
from helpers.onnx_graphs import tiny_model

#: Loads a saved model in a process that cannot import TVM, runs it on a seeded input; prints its start-up report, the
#: device's program counts and the outputs as JSON.
_LOAD = refuse_imports("tvm", "tvm_ffi", "onnx") + textwrap.dedent(
    """
    import dataclasses, json
    from tir_adreno.runtime.executor import load_model

    import numpy as np
    model = load_model(sys.argv[1])
    rng = np.random.default_rng(0)
    out = model.run([rng.standard_normal(model.plan.tensors[i].shape).astype(model.plan.tensors[i].dtype)
                     for _, i in model.plan.inputs])
    print(json.dumps({"startup": model.startup.to_dict(), "device": dataclasses.asdict(model.device.program_counts),
                      "output": [o.tolist() for o in out]}))
    """
)


def _load_in_fresh_process(folder, cache_dir):
    env = {**os.environ, "TIR_ADRENO_CACHE_DIR": str(cache_dir)}
    res = subprocess.run([sys.executable, "-c", _LOAD, str(folder)], cwd=ROOT, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def saved(device, tmp_path_factory):
    compiled = compile_model(tiny_model(), device, progress=lambda _: None)
    return compiled, compiled.save(tmp_path_factory.mktemp("startup") / "tiny")


def test_warm_start_builds_no_program_from_source(saved, tmp_path):
    """Cold: the model's kernels (several distinct sources) build as one program, from source;
    warm (a fresh process on that cache): that one program from its binary, none from source."""
    _, folder = saved
    assert len({m.source for m in saved[0].kernels.values()}) > 1, "the model must have kernels to link"
    cold = _load_in_fresh_process(folder, tmp_path / "cache")  # an empty cache: every program from source
    warm = _load_in_fresh_process(folder, tmp_path / "cache")
    assert (cold["device"]["from_source"], cold["device"]["from_binary"]) == (1, 0), "one program per model, built cold"
    assert warm["device"]["from_source"] == 0, "a warm start built a program from source"
    assert warm["device"]["from_binary"] == 1
    assert warm["output"] == cold["output"], "the program from its binary computes otherwise"  # PoCL: without IR
    for run in (cold, warm):  # the model's own counts are the device's in a fresh process
        programs = run["startup"]["programs"]
        assert {k: programs[k] for k in ("from_source", "from_binary", "in_process")} == \
            {k: run["device"][k] for k in ("from_source", "from_binary", "in_process")}


def test_startup_report_fields_add_up(saved, tmp_path):
    _, folder = saved
    report = _load_in_fresh_process(folder, tmp_path / "cache")["startup"]
    for phase in StartupReport.PHASES + ("total_ms", "import_ms", "other_ms"):
        assert report[phase] >= 0, phase
    assert report["import_ms"] > 0, "the runtime's import was not measured"
    phases = sum(report[p] for p in StartupReport.PHASES)
    assert phases <= report["total_ms"] + 1e-6
    assert report["total_ms"] == pytest.approx(phases + report["other_ms"])
    # every phase a load goes through was measured (no ratio of times: a loaded host stretches any phase)
    for phase in ("read_ms", "verify_ms", "device_ms", "programs_ms", "upload_ms", "bind_ms"):
        assert report[phase] > 0, f"{phase} was not measured: {report}"
    programs = report["programs"]  # built in threads while the weights were read: their ms overlap
    assert programs["from_source_ms"] > 0 or programs["from_binary_ms"] > 0
    assert report["weight_bytes"] > 0


def test_a_second_load_in_process_reuses_programs(saved, device):
    compiled, folder = saved
    from tir_adreno.runtime.executor import load_model

    load_model(folder, device)  # its program is keyed by model.json's checksum: not compile_model's
    again = load_model(folder, device)
    counts = again.startup.programs
    assert (counts.from_source, counts.from_binary, counts.in_process) == (0, 0, 1), "the model's one program, reused"
    assert compiled.startup.total_ms > 0 and compiled.startup.read_ms == 0  # compile_model reads no files
    assert "startup" in again.startup.line() and "from binaries" in again.startup.line()


def test_program_counts_add():
    counts = ProgramCounts()
    counts.add("source", 5.0)
    counts.add("binary", 1.0)
    counts.add("binary", 2.0)
    counts.add("in_process")
    assert (counts.from_source, counts.from_binary, counts.in_process) == (1, 2, 1)
    assert (counts.from_source_ms, counts.from_binary_ms) == (5.0, 3.0)


@pytest.mark.parametrize("compress", [False, True])
def test_saved_weights_read_as_views_equal_np_load(compress, tmp_path):
    """weights.arrays: the same arrays as np.load (dtypes, shapes incl. 0-d, empty and
    Fortran-ordered), as read-only views into the bytes where members are stored uncompressed."""
    rng = np.random.default_rng(7)
    saved = {
        "0": rng.standard_normal((3, 5, 7, 4)).astype(np.float32),
        "1": rng.standard_normal((9,)).astype(np.float16),
        "2": np.asfortranarray(rng.standard_normal((4, 6))),
        "3": np.float32(rng.standard_normal()),
        "4": np.zeros((0, 3), np.float32),
        "5": rng.integers(-9, 9, (2, 3), dtype=np.int64),
        # a header longer than the first bytes read of it (numpy's reader parses this one)
        "6": np.zeros(3, [(f"field_with_a_long_name_{i}", np.float32) for i in range(12)]),
    }
    buf = io.BytesIO()
    (np.savez_compressed if compress else np.savez)(buf, **saved)
    payload = buf.getvalue()
    got = saved_weights.arrays(payload)
    with np.load(io.BytesIO(payload)) as npz:
        want = {k: npz[k] for k in npz.files}
    assert sorted(got) == sorted(want)
    for k in want:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape
        np.testing.assert_array_equal(got[k], want[k])
    if not compress:
        assert all(not a.flags.writeable for a in got.values() if a.size), "expected views into the bytes"
