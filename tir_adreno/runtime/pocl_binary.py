"""PoCL program binaries without their LLVM IR: a warm start that does not parse the program.

A PoCL binary (``clGetProgramInfo(CL_PROGRAM_BINARIES)`` on PoCL; format in PoCL's
``lib/CL/pocl_binary.c``) is a header, the program's LLVM bitcode (``program.bc``) and, per
kernel, its metadata and the files of its cache folder, among them the work-group function
that PoCL compiles for any local size (folder ``0-0-0``) when the binary is asked for.
``clBuildProgram`` on such a binary parses the whole bitcode (PoCL 3.0:
``pocl_llvm_read_program_llvm_irs``), 30 ms for MobileNetV2's linked program on a quiet host,
in proportion to the code; the bitcode is needed only to compile work-group functions
specialised to a local size. :func:`without_ir` drops it: PoCL then runs every launch with
the generic work-group function (same results; the launch's loops are not specialised to
its local size) and loads the program without parsing anything, and a launch never waits
for a specialisation to compile.

The binary's build hash names the folder PoCL unpacks it into (its kernel cache); it is
replaced by one derived from it, so the unpacked folder is not the one the source build
left, which holds the bitcode PoCL would then read and parse anyway.

Only the layouts read here are rewritten (format versions :data:`VERSIONS`: PoCL 3.0 writes 8,
one file after the header; 3.1 writes 9, whose header counts the program's root entries and
whose entries are each preceded by their size); anything else (another version, a size that
does not add up) is left as it is (:func:`without_ir` returns None) and the caller keeps the
full binary.
"""

from __future__ import annotations

import hashlib
import os
import struct
from dataclasses import dataclass

MAGIC = b"poclbin\0"
#: What a binary-only entry is, for cache keys: a new form is a new key.
FORM = "pocl-no-ir-1"
#: ``$TIR_ADRENO_POCL_KEEP_IR=1`` caches PoCL binaries whole (work-group functions specialised
#: to each launch's local size, compiled on a process's first launch; the load parses the IR).
KEEP_IR_ENV = "TIR_ADRENO_POCL_KEEP_IR"
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
#: The file that stands in for program.bc: PoCL's reader expects a first file.
_PLACEHOLDER = "/tir_adreno_no_program_bc"


@dataclass(frozen=True)
class _Layout:
    """A format version's header (magic, device id u64, version u32, kernel count u32, flags
    u64, [version 9: root entry count u32,] build hash: 41 bytes, "XX/" + 38 letters A-P + NUL,
    PoCL's SHA1_digest_t) and whether each root entry is preceded by its size (u64)."""

    header: struct.Struct
    sized_entries: bool


_V7 = _Layout(struct.Struct("<8sQIIQ41s"), False)  # PoCL 3.0 writes 7 and 8 in one layout
_PER_VERSION = {7: _V7, 8: _V7, 9: _Layout(struct.Struct("<8sQIIQI41s"), True)}
#: Format versions whose header and kernel records :func:`without_ir` knows.
VERSIONS = tuple(_PER_VERSION)


def _file(binary: bytes, at: int) -> tuple[str, int, int]:
    """(relative path, content size, offset after it) of the serialized file at ``at``."""
    (name_len,) = _U32.unpack_from(binary, at)
    name = binary[at + 4:at + 4 + name_len].decode()
    (size,) = _U32.unpack_from(binary, at + 4 + name_len)
    return name, size, at + 8 + name_len + size


def _kernels_end(binary: bytes, at: int, count: int) -> int:
    """Offset after ``count`` kernel records from ``at`` (each starts with its own size)."""
    for _ in range(count):
        (record,) = _U64.unpack_from(binary, at)
        at += record
    return at


def _derived_hash(build_hash: bytes) -> bytes:
    digest = hashlib.sha1(FORM.encode() + build_hash).hexdigest()
    letters = "".join(chr(ord("A") + int(c, 16)) for c in digest)  # PoCL spells hashes in A-P
    return (letters[:2] + "/" + letters[2:40]).encode() + b"\0"


def is_pocl_binary(binary: bytes) -> bool:
    return binary[:len(MAGIC)] == MAGIC


def keep_ir() -> bool:
    """``$TIR_ADRENO_POCL_KEEP_IR`` (0 or 1, default 0); ValueError naming the variable otherwise."""
    value = os.environ.get(KEEP_IR_ENV, "").strip() or "0"
    if value not in ("0", "1"):
        raise ValueError(f"${KEEP_IR_ENV} must be 0 or 1, got {value!r}")
    return value == "1"


def form() -> str:
    """The form PoCL binaries are cached in now, for cache keys."""
    return "pocl-whole" if keep_ir() else FORM


def for_cache(binary: bytes) -> bytes:
    """What the binary cache stores for a driver's ``binary``: a PoCL one without its IR
    (unless :func:`keep_ir`, or it is not one :func:`without_ir` reads), any other as it is."""
    binary = bytes(binary)
    if is_pocl_binary(binary) and not keep_ir():
        return without_ir(binary) or binary
    return binary


def _first_file(binary: bytes):
    """(layout, header fields, first file's name, offset after the first root entry) of a PoCL
    binary of a version this module reads; None for any other or one malformed."""
    try:
        layout = _PER_VERSION.get(_U32.unpack_from(binary, len(MAGIC) + 8)[0])
        if binary[:len(MAGIC)] != MAGIC or layout is None:
            return None
        fields = layout.header.unpack_from(binary, 0)
        at = layout.header.size
        if layout.sized_entries:
            if fields[5] != 1:  # root entries: program.bc alone
                return None
            (size,) = _U64.unpack_from(binary, at)
            at += _U64.size
        name, _, after = _file(binary, at)
        if layout.sized_entries and after != at + size:
            return None
    except (struct.error, UnicodeDecodeError):
        return None
    return layout, fields, name, after


def build_hash(binary: bytes) -> bytes | None:
    """The build hash in PoCL binary ``binary``'s header (the folder PoCL unpacks it into)."""
    parsed = _first_file(bytes(binary))
    return parsed[1][-1] if parsed else None


def without_ir(binary: bytes) -> bytes | None:
    """``binary`` (a PoCL program binary) with its program.bc replaced by an empty placeholder
    and its build hash by one derived from it; None where the binary is not one this module
    reads (then keep it whole)."""
    binary = bytes(binary)
    parsed = _first_file(binary)
    if parsed is None:
        return None
    layout, fields, name, after_bc = parsed
    kernels = fields[3]
    try:
        if name != "/program.bc" or kernels == 0 or _kernels_end(binary, after_bc, kernels) != len(binary):
            return None
    except struct.error:
        return None
    placeholder = _PLACEHOLDER.encode()
    entry = _U32.pack(len(placeholder)) + placeholder + _U32.pack(1) + b"\0"
    if layout.sized_entries:
        entry = _U64.pack(len(entry)) + entry
    return layout.header.pack(*fields[:-1], _derived_hash(fields[-1])) + entry + binary[after_bc:]


def has_ir(binary: bytes) -> bool:
    """Whether PoCL binary ``binary`` carries its program's bitcode (False for one too short or
    malformed to tell, or of a version this module does not read)."""
    parsed = _first_file(bytes(binary))
    return parsed is not None and parsed[2] == "/program.bc"
