"""Faults while a saved model is written (issue 36): a compile killed, or failing with a full disk,
at each write step leaves the previous model or the new one, never a mix and never the previous
model's reference beside the new model; two compiles into one folder leave one whole model; the
files follow the user's umask; ``tune`` never overwrites records it ignored."""

import errno
import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap

import pytest

from helpers import ROOT
from helpers.cli import assert_user_error, cli
from helpers.saved_models import conv_relu, doc, files, is_whole, without_digests
from tir_adreno.runtime import cache, saved

#: Where a write can be cut: a file's data synced, a file renamed into place, modes set, the
#: folder swapped in. Every call of these during a command is one step.
STEPS = ((os, "fsync"), (os, "replace"), (os, "rename"), (os, "chmod"), (saved, "_exchange"))

#: ``main`` with the step ``argv[1]`` ending the process at once (``os._exit``: no cleanup, as a
#: SIGKILL); the number of steps taken goes to the file ``argv[2]`` when the command ends. Killed,
#: the clean-up after the swap (``shutil.rmtree``) is a step too.
_KILLED_AT_STEP = textwrap.dedent(
    """
    import os, shutil, sys
    from tir_adreno.runtime import cache, saved
    at, count_file, argv, calls = int(sys.argv[1]), sys.argv[2], sys.argv[3:], [0]

    def wrap(fn):
        def step(*args, **kwargs):
            calls[0] += 1
            if calls[0] == at:
                os._exit(137)
            return fn(*args, **kwargs)
        return step

    steps = ((os, "fsync"), (os, "replace"), (os, "rename"), (os, "chmod"), (saved, "_exchange"), (shutil, "rmtree"))
    for module, name in steps:
        setattr(module, name, wrap(getattr(module, name)))
    from tir_adreno.cli import main
    code = main(argv)
    open(count_file, "w").write(str(calls[0]))
    sys.exit(code)
    """
)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Two models of one architecture (A, B), each compiled once: A with its reference, B without."""
    folder = tmp_path_factory.mktemp("faults")
    a, b = conv_relu(folder / "a.onnx", 1), conv_relu(folder / "b.onnx", 2)
    for onnx_file, out, extra in ((a, "a", ["--check"]), (b, "b", [])):
        res = cli("compile", str(onnx_file), "-o", str(folder / out), "--target", "pocl", *extra)
        assert res.returncode == 0, res.stderr[-3000:]
    return {"a": a, "b": b, "old": files(folder / "a"), "new": doc(folder / "b")}


def _state(folder, models) -> str:
    """"old" (model A byte for byte, its reference included), "new" (model B whole, no reference) or "mixed"."""
    if files(folder) == models["old"]:
        return "old"
    if is_whole(folder) and without_digests(doc(folder)) == without_digests(models["new"]) \
            and set(doc(folder)[saved.FILES_KEY]) == {saved.WEIGHTS_FILE}:
        return "new"
    return "mixed"


def _restore_old(folder, models) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    for name, data in models["old"].items():
        (folder / name).write_bytes(data)


def _killed_compile(at: int, out, models, tmp_path, *extra):
    count = tmp_path / "steps"
    args = ["compile", str(models["b"]), "-o", str(out), "--target", "pocl", *extra]
    temp = tmp_path / "tmp"  # what a process killed mid-compile leaves of TVM's temporary folders stays here
    temp.mkdir(exist_ok=True)
    res = subprocess.run([sys.executable, "-c", _KILLED_AT_STEP, str(at), str(count), *args], cwd=ROOT,
                         capture_output=True, text=True, timeout=600, env={**os.environ, "TMPDIR": str(temp)})
    return res, (int(count.read_text()) if res.returncode != 137 else None)


def test_kill_at_every_write_step_leaves_the_old_or_the_new_model(models, tmp_path):
    """Through the compile cache (B was compiled before: no TVM in these processes), killed at each step."""
    out = tmp_path / "out"
    _restore_old(out, models)
    seen = []
    for at in range(1, 100):  # until a run takes fewer steps (the first one also stamps files in the cache)
        _restore_old(out, models)
        res, steps = _killed_compile(at, out, models, tmp_path)
        seen.append(_state(out, models))
        assert seen[-1] in ("old", "new"), (at, sorted(os.listdir(out)))
        if res.returncode != 137:
            break
    assert res.returncode == 0 and "from the compile cache" in res.stdout, res.stderr[-3000:]
    assert seen[-1] == "new" and at > 6, seen  # files copied (data synced, renamed), modes, the swap, the clean-up
    assert "old" in seen and "new" in seen[:-1], seen  # killed before the swap: the old model; after it: the new one


class _Fault(Exception):
    """Stands for whatever a step raises (below: a full disk, or Ctrl-C)."""


def _inject(monkeypatch, at: int, error):
    """Every step counted (:data:`STEPS`); the ``at``-th raises ``error()``. Returns the counter."""
    calls = [0]
    for module, name in STEPS:
        fn = getattr(module, name)

        def step(*args, _fn=fn, **kwargs):
            calls[0] += 1
            if calls[0] == at:
                raise error()
            return _fn(*args, **kwargs)

        monkeypatch.setattr(module, name, step)
    return calls


def test_full_disk_at_every_write_step_of_a_compile(models, run_cli, monkeypatch, tmp_path):
    """A real compile (no cache), a full disk (ENOSPC) injected at each step: one line and exit 2,
    the old model untouched and no temporary folder left beside it; Ctrl-C at a step: exit 130."""
    out = tmp_path / "out"
    args = ("compile", str(models["b"]), "-o", str(out), "--target", "pocl", "--no-cache")
    _restore_old(out, models)
    with monkeypatch.context() as m:
        steps = _inject(m, 0, _Fault)
        res = run_cli(*args)
    assert res.returncode == 0 and _state(out, models) == "new", res.stderr[-3000:]
    full = lambda: OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # noqa: E731
    failed = 0
    for at in range(1, steps[0] + 1):
        _restore_old(out, models)
        with monkeypatch.context() as m:
            _inject(m, at, full)
            res = run_cli(*args)
        state = _state(out, models)
        if res.returncode == 0:  # a step of a cache (programs, stamps): one warning, the model written
            assert state == "new", at
            continue
        assert_user_error(res, f"-o {out}: No space left on device while writing the saved model", before_compile=False)
        assert state == "old", (at, sorted(os.listdir(out)))
        assert sorted(os.listdir(tmp_path)) == ["out"], at  # the temporary sibling folder is gone
        failed += 1
    assert failed >= 6, failed  # each file's data and rename, the modes, the swap
    _restore_old(out, models)
    with monkeypatch.context() as m:
        _inject(m, steps[0] - 1, KeyboardInterrupt)
        res = run_cli(*args)
    assert res.returncode == 130 and res.stderr.strip() == "tir-adreno: interrupted", res.stderr
    assert _state(out, models) == "old"


def test_two_compiles_into_one_folder_leave_one_whole_model(models, tmp_path):
    out = tmp_path / "out"
    for _ in range(3):
        procs = [subprocess.Popen([sys.executable, "-m", "tir_adreno.cli", "compile", str(models[m]), "-o", str(out),
                                   "--target", "pocl", *extra], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for m, extra in (("a", ["--check"]), ("b", []))]
        for p in procs:
            _, err = p.communicate(timeout=600)
            assert p.returncode == 0, err.decode()[-2000:]
        assert _state(out, models) in ("old", "new"), sorted(os.listdir(out))
        assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_saved_files_follow_the_umask_and_the_cache_stays_private(models, run_cli, tmp_path):
    out = tmp_path / "out"
    old = os.umask(0o027)
    try:
        res = run_cli("compile", str(models["b"]), "-o", str(out), "--target", "pocl")
    finally:
        os.umask(old)
    assert res.returncode == 0, res.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o750
    assert {stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()} == {0o640}
    cached = [p for p in cache.cache_dir().rglob("*") if p.is_file()]
    assert cached and all(stat.S_IMODE(p.stat().st_mode) & 0o077 == 0 for p in cached), cache.cache_dir()


def test_tune_keeps_records_it_would_ignore_byte_for_byte(run_cli, two_convs, tmp_path):
    """Records of another precision (and a file that is no records at all): tune refuses, in one
    line, before measuring anything, and the file is unchanged."""
    from tir_adreno.strategy.profile import DeviceProfile
    from tir_adreno.strategy.records import Records

    half = Records(DeviceProfile.from_device(None), "float16_acc32", {}, tmp_path / "half.json")
    half.layers["conv2d some layer"] = {"choice": None, "name": "default", "times_s": {"default": 1.0}}
    half.save()
    notes = tmp_path / "notes.json"
    notes.write_text(json.dumps({"my": "measurements"}))
    for path, reason in ((tmp_path / "half.json", "measured in float16_acc32, not float32"), (notes, "not a tir-adreno records file")):
        before = path.read_bytes()
        res = run_cli("tune", str(two_convs), "--records", str(path))
        assert_user_error(res, f"--records {path}", reason, "give another --records file", before_compile=False)
        assert "building candidates" not in res.stdout
        assert path.read_bytes() == before
    assert cache.read(tmp_path / "half.json") is not None


def test_without_an_atomic_exchange_two_renames_swap_the_model_in(models, run_cli, monkeypatch, tmp_path):
    """Where renameat2 is missing (another OS, a file system without it): the old folder is moved
    aside whole, the new one moved in, the old one removed; nothing is left beside the folder."""
    out = tmp_path / "out"
    _restore_old(out, models)
    monkeypatch.setattr(saved, "_exchange", lambda a, b: False)
    res = run_cli("compile", str(models["b"]), "-o", str(out), "--target", "pocl")
    assert res.returncode == 0 and _state(out, models) == "new", res.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_a_link_to_a_folder_replaces_the_folder_it_names(models, run_cli, tmp_path):
    real, link = tmp_path / "real", tmp_path / "link"
    _restore_old(real, models)
    link.symlink_to(real)
    res = run_cli("compile", str(models["b"]), "-o", str(link), "--target", "pocl")
    assert res.returncode == 0, res.stderr
    assert link.is_symlink() and _state(real, models) == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]
