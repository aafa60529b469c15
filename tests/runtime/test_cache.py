"""Caches are atomic and verified: corrupt or truncated entries are rebuilt, concurrent fills succeed."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from helpers import ROOT

from primfuncs import elementwise
from tir_adreno.codegen import build
from tir_adreno.runtime import cache, opencl as runtime


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TIR_ADRENO_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(build, "_memory_cache", {})
    return tmp_path


def test_entry_roundtrip_and_corruption(tmp_path):
    path = tmp_path / "entry"
    cache.write(path, b"payload" * 100)
    assert cache.read(path) == b"payload" * 100
    data = path.read_bytes()
    path.write_bytes(data[:-5])  # truncated
    assert cache.read(path) is None
    flipped = bytearray(data)
    flipped[-1] ^= 0xFF  # one bit of payload
    path.write_bytes(bytes(flipped))
    assert cache.read(path) is None
    path.write_bytes(b"foreign file")
    assert cache.read(path) is None
    assert cache.read(tmp_path / "missing") is None
    assert not list(tmp_path.glob("*.tmp")), "temporary files left behind"


def _corrupt_all(paths, how):
    assert paths, "expected cache entries to exist"
    for p in paths:
        data = p.read_bytes()
        p.write_bytes(data[: len(data) // 2] if how == "truncate" else data[:-1] + bytes([data[-1] ^ 1]))


@pytest.mark.parametrize("how", ["truncate", "flip"])
def test_corrupt_bundle_is_rebuilt(cache_dir, how):
    func = elementwise.relu((1, 2, 3, 3, 4))
    first = build.build_cached(func)
    bundles = list((cache_dir / "bundles").glob("*.json"))
    _corrupt_all(bundles, how)
    build._memory_cache.clear()
    again = build.build_cached(func)
    assert again.to_json() == first.to_json()
    assert cache.read(bundles[0], bundles[0].stem) is not None, "the rebuilt entry was not rewritten"


@pytest.mark.parametrize("how", ["truncate", "flip"])
def test_corrupt_program_binary_is_rebuilt(cache_dir, device, how):
    module = build.build(elementwise.relu((1, 2, 3, 3, 4)))
    device.build_program(module.source)
    binaries = list((cache_dir / "programs").glob("*.bin"))
    _corrupt_all(binaries, how)
    program = device.build_program(module.source)  # must not crash, must rebuild
    assert {k.function_name for k in program.all_kernels()} == {"relu_kernel"}
    assert cache.read(binaries[0], binaries[0].stem) is not None, "the rebuilt binary was not rewritten"
    loaded = runtime.LoadedModule(device, module, program)
    x = np.random.default_rng(0).standard_normal((1, 2, 3, 3, 4)).astype("float32")
    a, b = device.array(x, "global.texture"), device.empty(module["relu"].params[1]).poison()
    loaded("relu", a, b)
    np.testing.assert_array_equal(b.numpy(), np.maximum(x, 0))


def test_two_processes_fill_the_cache_at_once(tmp_path):
    script = textwrap.dedent(
        """
        import numpy as np
        from tir_adreno import ops
        x = np.random.default_rng(1).standard_normal((2, 6, 5, 7)).astype("float32")
        y = np.random.default_rng(2).standard_normal((2, 6, 5, 7)).astype("float32")
        np.testing.assert_array_equal(ops.add(x, y), x + y)
        np.testing.assert_array_equal(ops.relu(x), np.maximum(x, 0))
        print("ok")
        """
    )
    env = dict(os.environ, TIR_ADRENO_CACHE_DIR=str(tmp_path))
    root = ROOT
    procs = [
        subprocess.Popen([sys.executable, "-c", script], cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err.decode()[-2000:]
        assert out.decode().strip() == "ok"
    entries = list(tmp_path.rglob("*.json")) + list(tmp_path.rglob("*.bin"))
    assert entries and all(cache.read(e, e.stem) is not None for e in entries)
    assert not list(tmp_path.rglob("*.tmp"))


def test_entry_belongs_to_its_key(tmp_path):
    path = tmp_path / "entry"
    cache.write(path, b"payload", key="a")
    assert cache.read(path, key="a") == b"payload"
    assert cache.read(path, key="b") is None, "an entry written under another key was accepted"
    assert cache.read(path) is None


def _swap(a: Path, b: Path):
    data_a, data_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(data_b)
    b.write_bytes(data_a)


def test_swapped_bundles_are_rebuilt(cache_dir):
    """Two entries swapped on disk (valid checksums, wrong keys) are misses, rebuilt and rewritten."""
    funcs = [elementwise.relu((1, 2, 3, 3, 4)), elementwise.relu((1, 1, 2, 5, 4))]
    first = [build.build_cached(f) for f in funcs]
    paths = [cache_dir / "bundles" / f"{build.module_key(f)}.json" for f in funcs]
    _swap(*paths)
    build._memory_cache.clear()
    again = [build.build_cached(f) for f in funcs]
    assert [m.to_json() for m in again] == [m.to_json() for m in first]
    for f, p in zip(funcs, paths):
        assert cache.read(p, build.module_key(f)) is not None, "the rebuilt entry was not rewritten under its key"


def test_swapped_program_binaries_are_rebuilt(cache_dir, device):
    modules = [build.build(elementwise.relu((1, 2, 3, 3, 4))), build.build(elementwise.add((1, 2, 3, 3, 4)))]
    for m in modules:
        device.build_program(m.source)
    paths = [cache_dir / "programs" / f"{device._binary_key(m.source, device.build_options)}.bin" for m in modules]
    _swap(*paths)
    programs = [device.build_program(m.source) for m in modules]
    assert [{k.function_name for k in p.all_kernels()} for p in programs] == [{"relu_kernel"}, {"add_kernel"}]
    for m, p in zip(modules, paths):
        assert cache.read(p, device._binary_key(m.source, device.build_options)) is not None, "the rebuilt binary was not rewritten under its key"


def _build_without_disk_cache(device):
    """A cold build and launch that must work with an unusable cache folder."""
    module = build.build_cached(elementwise.relu((1, 1, 3, 4, 4)))
    program = device.build_program(module.source + "\n// uncached\n")  # a source no other test cached
    loaded = runtime.LoadedModule(device, module, program)
    x = np.random.default_rng(3).standard_normal((1, 1, 3, 4, 4)).astype("float32")
    a, b = device.array(x, "global.texture"), device.empty(module["relu"].params[1]).poison()
    loaded("relu", a, b)
    np.testing.assert_array_equal(b.numpy(), np.maximum(x, 0))


@pytest.mark.parametrize("how", ["not creatable", "write fails"])
def test_unusable_cache_folder_warns_once(tmp_path, monkeypatch, device, how):
    monkeypatch.setattr(build, "_memory_cache", {})
    monkeypatch.setattr(cache, "_warned", False)
    if how == "not creatable":  # a folder below a regular file (root ignores chmod, not this)
        blocker = tmp_path / "file"
        blocker.write_text("")
        monkeypatch.setenv("TIR_ADRENO_CACHE_DIR", str(blocker / "sub"))
    else:
        monkeypatch.setenv("TIR_ADRENO_CACHE_DIR", str(tmp_path / "cache"))

        def read_only(*args, **kwargs):
            raise OSError(30, "Read-only file system")

        monkeypatch.setattr(cache.tempfile, "mkstemp", read_only)
    with pytest.warns(cache.CacheWarning) as record:
        _build_without_disk_cache(device)
        _build_without_disk_cache(device)
    assert len(record) == 1, [str(r.message) for r in record]
    message = str(record[0].message)
    assert str(cache.cache_dir()) in message and "working without the disk cache" in message
    assert not list(tmp_path.rglob("*.tmp"))


def test_a_saved_file_is_verified_once_per_identity(cache_dir, monkeypatch):
    """read_once_verified hashes a file the first time, trusts its stamp after, and hashes
    again (finding the damage) once the file changed, even with its size and mtime restored;
    a corrupt stamp is no stamp."""
    path = cache_dir / "saved" / "weights.npz"
    cache.write(path, b"weights" * 1000)
    hashed, verify = [], cache.verify
    # counts the hashing of the file (the stamps, a few bytes, are verified too)
    monkeypatch.setattr(cache, "verify", lambda data, *key: (len(data) > 1000 and hashed.append(1)) or verify(data, *key))
    payload, digest = cache.read_once_verified(path)
    assert bytes(payload) == b"weights" * 1000 and len(digest) == 32 and hashed == [1]
    assert bytes(cache.read_once_verified(path)[0]) == b"weights" * 1000
    assert hashed == [1], "a verified file was hashed again"
    for stamp in (cache_dir / "verified").glob("*.stamp"):
        stamp.write_bytes(stamp.read_bytes()[:-1] + b"x")
    assert bytes(cache.read_once_verified(path)[0]) == b"weights" * 1000
    assert hashed == [1, 1], "a corrupt stamp was trusted"
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert cache.read_once_verified(path) is None, "a file changed after its first check was trusted"


def test_a_failed_write_leaves_the_old_entry_and_no_temporary_file(tmp_path):
    path = tmp_path / "entry.bin"
    cache.write(path, b"old payload", "k")

    def fill(f):
        f.write(b"half of a new payl")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        cache.write_with(path, fill, "k")
    assert cache.read(path, "k") == b"old payload"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry.bin"]
