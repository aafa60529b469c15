"""The whole-model compile cache of `tir-adreno compile` (issue 22): the same request again is a
hit that imports no TVM and writes the same bytes; any part of the key changed is a miss; a
corrupt entry is a miss that the compile rewrites; the cache stays within its bounds."""

import json
import shutil

import pytest

from helpers.cli import cli, cli_without_tvm
from tir_adreno.cli import compile_cache
from tir_adreno.cli.args import build_parser
from tir_adreno.cli.checks import check_arguments
from tir_adreno.runtime import cache

SAVED = ("model.json", "weights.npz")
HIT = "from the compile cache"


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    """An empty cache folder of this test's own (also for the fresh processes it starts)."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("TIR_ADRENO_CACHE_DIR", str(folder))
    return folder


def _bytes(folder, names=SAVED) -> dict:
    return {name: (folder / name).read_bytes() for name in names}


def _compiled(res, hit: bool):
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    assert (HIT in res.stdout) == hit, res.stdout
    assert ("lower for" in res.stdout) != hit, res.stdout  # a hit lowers nothing


def test_same_request_is_a_hit_without_tvm_and_the_same_bytes(private_cache, tiny_onnx, tmp_path):
    first, again = tmp_path / "first", tmp_path / "again"
    compiled = cli("compile", str(tiny_onnx), "-o", str(first), "--target", "pocl", "--check")
    _compiled(compiled, hit=False)
    # a fresh process in which importing tvm, tvm_ffi or onnx raises: the hit needs none of them
    argv = ["compile", str(tiny_onnx), "-o", str(again), "--target", "pocl", "--check"]
    res = cli_without_tvm({"hit": {"argv": argv}}, tmp_path)["hit"]
    _compiled(res, hit=True)
    names = (*SAVED, "reference.npz")
    assert _bytes(again, names) == _bytes(first, names)
    wrote = [line for line in compiled.stdout.splitlines() if line.startswith(f"wrote {first}: ")]
    assert res.stdout.splitlines()[-2] == wrote[0].replace(str(first), str(again)), res.stdout


def _args(*argv):
    args = build_parser("test").parse_args(["compile", *argv])
    check_arguments(args)
    return args


def test_every_part_of_the_request_is_in_the_key(tiny_onnx, two_convs, tmp_path, monkeypatch):
    records = tmp_path / "records.json"
    records.write_text("{}")
    model = tmp_path / "model.onnx"
    shutil.copyfile(tiny_onnx, model)
    base = ["-o", str(tmp_path / "m"), "--target", "pocl"]
    key = lambda *extra, model=model: compile_cache.request_key(_args(str(model), *base, *extra))  # noqa: E731
    first = key()
    assert key() == first
    # what does not change the files: the output folder, the model file's path, run-time settings
    assert compile_cache.request_key(_args(str(tiny_onnx), *base[:1], str(tmp_path / "other"), *base[2:])) == first
    assert key("--quiet") == first  # what is printed, not what is written
    monkeypatch.setenv("TIR_ADRENO_DEVICE", "NVIDIA")
    monkeypatch.setenv("TIR_ADRENO_LAUNCHER", "pyopencl")
    assert key() == first
    changed = {
        "target": key("--target", "adreno"),
        "precision": key("--precision", "float16_acc32"),
        "placement": key("--placement", "buffer"),
        "no fuse": key("--no-fuse"),
        "check": key("--check"),
        "records": key("--records", str(records)),
        "another model": key(model=two_convs),
        "built-in": compile_cache.request_key(_args("--builtin", "resnet18", *base)),
    }
    records.write_text('{"other": 1}')
    changed["records' bytes"] = key("--records", str(records))
    model.write_bytes(model.read_bytes() + b"\n")  # same path, other bytes (a trailing field separator)
    changed["model's bytes"] = key()
    model.write_bytes(tiny_onnx.read_bytes())
    assert key() == first
    monkeypatch.setenv("TIR_ADRENO_CHECK_BOUNDS", "1")  # a compile setting
    changed["TIR_ADRENO_CHECK_BOUNDS"] = key()
    monkeypatch.delenv("TIR_ADRENO_CHECK_BOUNDS")
    monkeypatch.setattr(compile_cache, "tvm_identity", lambda: "another TVM")
    changed["TVM"] = key()
    keys = list(changed.values())
    assert first not in keys and len(set(keys)) == len(keys), changed


def test_an_edited_source_file_is_a_new_key(tmp_path, monkeypatch):
    """Every module of both packages is hashed (this one and a kernel module among them); a copy of
    the tree with one byte changed hashes differently."""
    sources = compile_cache.package_sources()
    assert "tir_adreno/cli/compile_cache.py" in sources and "primfuncs/conv/__init__.py" in sources
    assert len([n for n in sources if n.startswith("primfuncs/")]) >= 5
    copies = {}
    for name, path in sources.items():
        copies[name] = tmp_path / name
        copies[name].parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, copies[name])
    before = compile_cache.sources_digest()
    monkeypatch.setattr(compile_cache, "package_sources", lambda: copies)
    assert compile_cache.sources_digest() == before
    kernel = copies["primfuncs/conv/__init__.py"]
    kernel.write_text(kernel.read_text() + "\n# edited\n")
    assert compile_cache.sources_digest() != before


def test_a_changed_key_is_a_miss(run_cli, tiny_onnx, tmp_path, monkeypatch):
    argv = ("compile", str(tiny_onnx), "-o", str(tmp_path / "m"), "--target", "pocl")
    run_cli(*argv)
    _compiled(run_cli(*argv), hit=True)
    digest = compile_cache.sources_digest()
    monkeypatch.setattr(compile_cache, "sources_digest", lambda: cache.key("edited", digest))
    _compiled(run_cli(*argv), hit=False)
    _compiled(run_cli(*argv), hit=True)


def _entry(key):
    return json.loads(cache.read(compile_cache._manifest(key), key))


def _flip_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40
    with open(path, "r+b") as f:  # in place, as a disk error would (a new inode would be a new identity anyway)
        f.write(data)


def _corrupt(kind, key, other_key):
    manifest = compile_cache._manifest(key)
    stored = {name: compile_cache._stored(d) for name, d in _entry(key)["files"].items()}
    if kind == "weights byte flipped":
        _flip_byte(stored["weights.npz"])
    elif kind == "model.json missing":
        stored["model.json"].unlink()
    elif kind == "manifest truncated":
        manifest.write_bytes(manifest.read_bytes()[:-5])
    elif kind == "manifest of another request":
        shutil.copyfile(compile_cache._manifest(other_key), manifest)
    else:
        raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["weights byte flipped", "model.json missing", "manifest truncated", "manifest of another request"])
def test_a_corrupt_entry_is_a_miss_and_is_rewritten(run_cli, private_cache, tiny_onnx, tmp_path, kind):
    out = tmp_path / "m"
    argv = ("compile", str(tiny_onnx), "-o", str(out), "--target", "pocl")
    _compiled(run_cli(*argv), hit=False)
    want = _bytes(out)
    _compiled(run_cli(*argv, "--precision", "float16_acc32"), hit=False)  # another entry
    key = compile_cache.request_key(_args(*argv[1:]))
    other_key = compile_cache.request_key(_args(*argv[1:], "--precision", "float16_acc32"))
    _corrupt(kind, key, other_key)
    for name in SAVED:
        (out / name).unlink()
    _compiled(run_cli(*argv), hit=False)
    assert _bytes(out) == want
    _compiled(run_cli(*argv), hit=True)  # rewritten
    assert _bytes(out) == want


def test_no_cache_neither_reads_nor_writes(run_cli, private_cache, tiny_onnx, tmp_path):
    argv = ("compile", str(tiny_onnx), "-o", str(tmp_path / "m"), "--target", "pocl")
    _compiled(run_cli(*argv, "--no-cache"), hit=False)
    assert not (private_cache / compile_cache.FOLDER).exists()
    _compiled(run_cli(*argv), hit=False)
    _compiled(run_cli(*argv, "--no-cache"), hit=False)
    _compiled(run_cli(*argv), hit=True)


def _saved_file(folder, name, payload: bytes):
    folder.mkdir(parents=True, exist_ok=True)
    cache.write(folder / name, payload)  # a saved model's files are cache entries (key "")


def test_eviction_keeps_recent_entries_within_the_bounds(private_cache, tmp_path):
    """Four entries of two files each, the weights shared by the first two: the bound in bytes
    keeps the newest entries that fit, and a stored file goes with the last entry naming it."""
    import os

    for i in range(4):
        out = tmp_path / f"out{i}"
        _saved_file(out, "model.json", bytes([i]) * 1000)
        _saved_file(out, "weights.npz", b"w" * 1000 if i < 2 else bytes([i]) * 999)
        assert compile_cache.store(f"k{i}", out, SAVED, f"entry {i}")
        manifest = compile_cache._manifest(f"k{i}")
        os.utime(manifest, ns=(i * 10**9, i * 10**9))  # k3 is the most recent
    assert sorted(p.stem for p in (private_cache / "compile").glob("*.json")) == ["k0", "k1", "k2", "k3"]
    files = lambda: {p.stem for p in (private_cache / "compile" / "files").glob("*.bin")}  # noqa: E731
    named = lambda *keys: {d for k in keys for d in _entry(k)["files"].values()}  # noqa: E731
    assert files() == named("k0", "k1", "k2", "k3") and len(files()) == 7
    size = (tmp_path / "out0" / "model.json").stat().st_size
    # k3, k2 (two files each) and k1 (two: the weights it shares with k0) fit; k0's model.json does not
    assert compile_cache.evict(max_bytes=6 * size) == ["k0"]
    assert files() == named("k1", "k2", "k3") and len(files()) == 6
    assert compile_cache.evict(max_bytes=6 * size, max_entries=2) == ["k1"]
    assert files() == named("k2", "k3") and len(files()) == 4
    assert compile_cache.evict(max_bytes=0) == ["k2"]  # the newest entry stays, whatever its size
    assert compile_cache.lookup("k3", tmp_path / "back") is not None
    assert _bytes(tmp_path / "back") == _bytes(tmp_path / "out3")


def test_a_hit_repeats_the_warnings_of_the_compile(run_cli, private_cache, tiny_onnx, tmp_path):
    records = tmp_path / "records.json"
    records.write_text("{}")  # not a records file: ignored with one warning
    argv = ("compile", str(tiny_onnx), "-o", str(tmp_path / "m"), "--target", "pocl", "--records", str(records))
    compiled = run_cli(*argv)
    _compiled(compiled, hit=False)
    lines = compiled.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tir-adreno: warning:") and "records ignored" in lines[0], compiled.stderr
    hit = run_cli(*argv)
    _compiled(hit, hit=True)
    assert hit.stderr == compiled.stderr
