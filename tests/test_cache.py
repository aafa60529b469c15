"""Caches are atomic and verified: corrupt or truncated entries are rebuilt, concurrent fills succeed."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from primfuncs import elementwise
from tir_adreno import build, cache, runtime


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
    assert cache.read(bundles[0]) is not None, "the rebuilt entry was not rewritten"


@pytest.mark.parametrize("how", ["truncate", "flip"])
def test_corrupt_program_binary_is_rebuilt(cache_dir, device, how):
    module = build.build(elementwise.relu((1, 2, 3, 3, 4)))
    device.build_program(module.source)
    binaries = list((cache_dir / "programs").glob("*.bin"))
    _corrupt_all(binaries, how)
    program = device.build_program(module.source)  # must not crash, must rebuild
    assert {k.function_name for k in program.all_kernels()} == {"relu_kernel"}
    assert cache.read(binaries[0]) is not None, "the rebuilt binary was not rewritten"
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
    root = Path(__file__).resolve().parents[1]
    procs = [
        subprocess.Popen([sys.executable, "-c", script], cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err.decode()[-2000:]
        assert out.decode().strip() == "ok"
    entries = list(tmp_path.rglob("*.json")) + list(tmp_path.rglob("*.bin"))
    assert entries and all(cache.read(e) is not None for e in entries)
    assert not list(tmp_path.rglob("*.tmp"))
