"""PoCL binaries stored without their LLVM IR (runtime/pocl_binary.py): what PoCL loads from one
computes what the source build computes, at every local size and with barriers and local memory
(PoCL runs its generic work-group function there), and anything this module does not know is
left whole."""

import struct

import numpy as np
import pyopencl as cl
import pytest

from tir_adreno.runtime import cache, pocl_binary

#: A work-group reduction (local memory, barriers) and a plain map: a launch's local size matters.
SOURCE = """
__kernel void group_sums(__global const float* x, __global float* sums, __local float* part) {
  int l = get_local_id(0), n = get_local_size(0);
  part[l] = x[get_global_id(0)];
  for (int s = n / 2; s > 0; s /= 2) {
    barrier(CLK_LOCAL_MEM_FENCE);
    if (l < s) part[l] += part[l + s];
  }
  if (l == 0) sums[get_group_id(0)] = part[0];
}
__kernel void scale(__global const float* x, __global float* y) {
  y[get_global_id(0)] = 3.0f * x[get_global_id(0)];
}
"""


@pytest.fixture(scope="module")
def pocl(device):
    if not pocl_binary.is_pocl_binary(_build(device, SOURCE).get_info(cl.program_info.BINARIES)[0]):
        pytest.skip(f"{device.name} is not PoCL: its binaries are stored as the driver gives them")
    return device


def _build(device, source: str) -> cl.Program:
    return cl.Program(device.context, source).build(devices=[device.cl_device])


def _from_binary(device, binary: bytes) -> cl.Program:
    return cl.Program(device.context, [device.cl_device], [binary]).build(devices=[device.cl_device])


def _group_sums(device, program, x: np.ndarray, local: int) -> np.ndarray:
    mf = cl.mem_flags
    xs = cl.Buffer(device.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
    sums = np.full(x.size // local, np.nan, np.float32)  # poisoned: every group must write its sum
    out = cl.Buffer(device.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=sums)
    program.group_sums(device.queue, (x.size,), (local,), xs, out, cl.LocalMemory(4 * local))
    cl.enqueue_copy(device.queue, sums, out)
    return sums


def test_without_ir_drops_the_bitcode_and_keeps_every_kernel(pocl):
    binary = bytes(_build(pocl, SOURCE).get_info(cl.program_info.BINARIES)[0])
    stripped = pocl_binary.without_ir(binary)
    assert stripped is not None and pocl_binary.has_ir(binary) and not pocl_binary.has_ir(stripped)
    assert len(stripped) < len(binary) - 1000, "the bitcode was not dropped"
    program = _from_binary(pocl, stripped)
    assert sorted(k.function_name for k in program.all_kernels()) == ["group_sums", "scale"]


@pytest.mark.parametrize("local", [2, 8, 64])
def test_a_program_without_ir_computes_what_the_source_build_does(pocl, local):
    """Every local size (PoCL cannot specialise without the bitcode: its generic work-group
    function runs), with local memory and barriers, against float64 NumPy and the source build."""
    rng = np.random.default_rng(local)
    x = rng.standard_normal(256).astype(np.float32)
    built = _build(pocl, SOURCE)
    program = _from_binary(pocl, pocl_binary.without_ir(built.get_info(cl.program_info.BINARIES)[0]))
    want = x.astype(np.float64).reshape(-1, local).sum(axis=1)
    got = _group_sums(pocl, program, x, local)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got, _group_sums(pocl, built, x, local))


def test_its_unpacked_folder_is_not_the_source_builds(pocl):
    """The derived build hash: PoCL unpacks into a folder of its own (the source build's folder
    holds program.bc, which PoCL would read and parse); same binary, same hash."""
    binary = bytes(_build(pocl, SOURCE).get_info(cl.program_info.BINARIES)[0])
    stripped = pocl_binary.without_ir(binary)
    hashes = [pocl_binary.build_hash(b) for b in (binary, stripped, pocl_binary.without_ir(binary))]
    assert hashes[0] != hashes[1] and hashes[1] == hashes[2]
    assert len(hashes[1]) == 41 and hashes[1][2:3] == b"/" and set(hashes[1][3:40]) <= set(b"ABCDEFGHIJKLMNOP")


def test_binaries_it_does_not_read_are_left_whole(pocl):
    binary = bytes(_build(pocl, SOURCE).get_info(cl.program_info.BINARIES)[0])
    other_version = binary[:16] + struct.pack("<I", 99) + binary[20:]  # after magic and device id
    for bad in (b"", b"poclbin\0", binary[:200], binary[:-1], binary + b"\0", other_version, b"\x7fELF" + binary[4:],
                pocl_binary.without_ir(binary)):  # already without IR: its first file is not program.bc
        assert pocl_binary.without_ir(bad) is None


def test_the_binary_cache_stores_pocl_programs_without_ir(pocl, tmp_path, monkeypatch):
    """A source build's cache entry is the binary without IR, and the warm build from it
    computes the same; the key names the form, so full binaries stored before are not reused."""
    monkeypatch.setenv("TIR_ADRENO_CACHE_DIR", str(tmp_path))
    key = pocl._binary_key(SOURCE, pocl.build_options)
    assert pocl_binary.FORM in pocl._device_identity()  # the default form
    x = np.random.default_rng(3).standard_normal(128).astype(np.float32)
    from tir_adreno.runtime import programs

    how_cold, _, cold = programs.build(pocl, SOURCE, pocl.build_options, key)
    entry = cache.read(tmp_path / "programs" / f"{key}.bin", key)
    assert how_cold == "source" and entry is not None and not pocl_binary.has_ir(entry)
    how_warm, _, warm = programs.build(pocl, SOURCE, pocl.build_options, key)
    assert how_warm == "binary"
    np.testing.assert_array_equal(_group_sums(pocl, warm, x, 16), _group_sums(pocl, cold, x, 16))


def test_keep_ir_caches_whole_binaries_under_another_key(pocl, tmp_path, monkeypatch):
    monkeypatch.setenv("TIR_ADRENO_CACHE_DIR", str(tmp_path))
    from tir_adreno.runtime import programs

    stripped_key = pocl._binary_key(SOURCE, pocl.build_options)
    monkeypatch.setenv(pocl_binary.KEEP_IR_ENV, "1")
    key = pocl._binary_key(SOURCE, pocl.build_options)
    assert key != stripped_key, "a whole binary must not be found under the stripped form's key"
    programs.build(pocl, SOURCE, pocl.build_options, key)
    assert pocl_binary.has_ir(cache.read(tmp_path / "programs" / f"{key}.bin", key))
    monkeypatch.setenv(pocl_binary.KEEP_IR_ENV, "yes")
    with pytest.raises(ValueError, match=pocl_binary.KEEP_IR_ENV):
        pocl_binary.for_cache(b"poclbin\0")


def test_a_stripped_binary_pocl_refuses_is_cached_whole(pocl, tmp_path, monkeypatch):
    """Should a PoCL refuse the binary without IR, the cold build caches the whole binary (the
    next start then loads that) instead of failing."""
    monkeypatch.setenv("TIR_ADRENO_CACHE_DIR", str(tmp_path))
    from tir_adreno.runtime import programs

    monkeypatch.setattr(pocl_binary, "without_ir", lambda b: b"poclbin\0" + b"\0" * 64)  # a binary PoCL refuses
    key = pocl._binary_key(SOURCE, pocl.build_options)
    how, _, _ = programs.build(pocl, SOURCE, pocl.build_options, key)
    entry = cache.read(tmp_path / "programs" / f"{key}.bin", key)
    assert how == "source" and pocl_binary.has_ir(entry)
    assert programs.build(pocl, SOURCE, pocl.build_options, key)[0] == "binary"


def test_a_binary_kept_whole_is_not_loaded_again_at_the_cold_build(pocl, tmp_path, monkeypatch):
    """A PoCL format this module does not read is cached whole; the cold build makes no second
    program from it (the load that unpacks a stripped binary into PoCL's cache is for those only)."""
    monkeypatch.setenv("TIR_ADRENO_CACHE_DIR", str(tmp_path))
    from tir_adreno.runtime import programs

    monkeypatch.setattr(pocl_binary, "_PER_VERSION", {})  # as a PoCL writing a newer format
    real, made = cl._cl._Program, []
    monkeypatch.setattr(cl._cl, "_Program", lambda *args: made.append(len(args)) or real(*args))
    key = pocl._binary_key(SOURCE, pocl.build_options)
    how, _, _ = programs.build(pocl, SOURCE, pocl.build_options, key)
    entry = cache.read(tmp_path / "programs" / f"{key}.bin", key)
    assert how == "source" and entry is not None and entry[:len(pocl_binary.MAGIC)] == pocl_binary.MAGIC
    assert made == [2], f"programs made (argument counts; 3: from a binary): {made}"


def _synthetic(version: int, bitcode: bytes, kernels: list[bytes], root_entries: int = 1) -> bytes:
    """A binary in PoCL's layout of ``version`` (3.0: 8, 3.1: 9; lib/CL/pocl_binary.c): header,
    program.bc, then kernel records that each start with their size."""
    build_hash = b"AB/" + b"C" * 37 + b"\0"
    name = b"/program.bc"
    first = struct.pack("<I", len(name)) + name + struct.pack("<I", len(bitcode)) + bitcode
    if version == 9:
        head = struct.pack("<8sQIIQI41s", b"poclbin\0", 7, version, len(kernels), 1, root_entries, build_hash)
        first = struct.pack("<Q", len(first)) + first
    else:
        head = struct.pack("<8sQIIQ41s", b"poclbin\0", 7, version, len(kernels), 1, build_hash)
    return head + first + b"".join(struct.pack("<Q", 8 + len(k)) + k for k in kernels)


@pytest.mark.parametrize("version", [8, 9])
def test_both_layouts_lose_only_their_bitcode(version):
    """PoCL 3.0's layout and 3.1's, whichever PoCL this host has: the kernel records come
    through byte for byte, the header's other fields too, and the size prefix of 3.1's entry
    matches the placeholder."""
    kernels = [b"kernel-one-files", b"kernel-two"]
    binary = _synthetic(version, b"\x42" * 5000, kernels)
    stripped = pocl_binary.without_ir(binary)
    assert stripped is not None and pocl_binary.has_ir(binary) and not pocl_binary.has_ir(stripped)
    assert stripped.endswith(binary[-(2 * 8 + sum(map(len, kernels))):]) and len(stripped) < len(binary) - 4900
    assert pocl_binary.build_hash(stripped) not in (None, pocl_binary.build_hash(binary))
    header = struct.calcsize("<8sQIIQI" if version == 9 else "<8sQIIQ")
    assert stripped[:header] == binary[:header]
    assert pocl_binary.without_ir(stripped) is None  # already without IR


def test_a_layout_it_cannot_account_for_is_left_whole():
    """3.1's layout with two root entries (a device that serialises more than program.bc), and
    an entry whose size prefix disagrees with its file: kept whole."""
    assert pocl_binary.without_ir(_synthetic(9, b"\x42" * 64, [b"k"], root_entries=2)) is None
    bad_size = bytearray(_synthetic(9, b"\x42" * 64, [b"k"]))
    struct.pack_into("<Q", bad_size, struct.calcsize("<8sQIIQI41s"), 3)
    assert pocl_binary.without_ir(bytes(bad_size)) is None and not pocl_binary.has_ir(bytes(bad_size))
