"""A saved model's weights (an uncompressed ``.npz``, as ``np.savez`` writes it) read without copies.

``weights.npz`` is framed by :mod:`tir_adreno.runtime.cache` (a SHA-256 over every byte), so
once that checksum holds, ``np.load``'s per-member work is redundant: it copies every array
out of the zip and computes each member's CRC-32 again (measured on MobileNetV2's 14 MB on
PoCL's 2-core host: as long as the SHA-256 itself). :func:`arrays` gives read-only NumPy
views into the verified bytes instead, found from the zip's directory and each member's
``.npy`` header.
"""

from __future__ import annotations

import io
import math
import re
import struct
import zipfile

import numpy as np

_LOCAL_HEADER = 30  # bytes of a zip local file header before its name and extra field
_HEAD_GUESS = 256  # bytes read first of a member's .npy header (copying 64 KiB a member cost 6 ms a model)


def arrays(payload) -> dict[str, np.ndarray]:
    """The members of the ``.npz`` in ``payload`` (bytes or a memoryview, e.g. of a mapped
    file) by name (without ``.npy``): read-only views into ``payload`` where members are
    stored uncompressed, else copies (``np.load``)."""
    with zipfile.ZipFile(_Reader(payload)) as archive:  # reads the zip's directory only
        members = archive.infolist()
    views = {m.filename.removesuffix(".npy"): _view(payload, m) for m in members}
    if any(v is None for v in views.values()):  # compressed, or a .npy header version we do not parse
        with np.load(io.BytesIO(payload)) as npz:
            return {k: npz[k] for k in npz.files}
    return views


class _Reader:
    """A read-only file over a buffer without copying it (``io.BytesIO`` copies a memoryview)."""

    def __init__(self, buffer):
        self._view, self._pos = memoryview(buffer), 0

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self._pos = (offset, self._pos + offset, len(self._view) + offset)[whence]
        return self._pos

    def read(self, n: int = -1) -> bytes:
        end = len(self._view) if n is None or n < 0 else min(len(self._view), self._pos + n)
        data, self._pos = bytes(self._view[self._pos:end]), max(self._pos, end)
        return data


def _view(payload, member: zipfile.ZipInfo) -> np.ndarray | None:
    """The array of one stored (uncompressed) member as a view into ``payload``; None otherwise."""
    if member.compress_type != zipfile.ZIP_STORED:
        return None
    start = member.header_offset
    name_len, extra_len = struct.unpack("<HH", payload[start + 26 : start + _LOCAL_HEADER])
    data = start + _LOCAL_HEADER + name_len + extra_len
    parsed = _header(payload, data, member.file_size)
    if parsed is None:
        return None
    shape, fortran_order, dtype, offset = parsed
    if dtype.hasobject:
        return None
    count = math.prod(shape)
    if count == 0:
        return np.empty(shape, dtype)
    array = np.frombuffer(payload, dtype, count=count, offset=offset)
    return array.reshape(shape, order="F" if fortran_order else "C")


#: The header ``np.save`` writes (numpy's own reader runs ``ast.literal_eval`` on it: 0.1 ms a member).
_NPY_HEADER = re.compile(r"\{'descr': '([<>|=]?[a-zA-Z]\d*)', 'fortran_order': (True|False), 'shape': \(((?:\d+, ?)*\d*)\), \}\s*$")


def _header(payload, start: int, size: int):
    """(shape, fortran order, dtype, offset of the data) of the ``.npy`` member at ``start``,
    parsed by :data:`_NPY_HEADER`, else by numpy's reader; None for a version it does not read."""
    head = bytes(payload[start : start + min(size, _HEAD_GUESS)])  # np.save pads its header to 128 bytes
    if head[:6] == b"\x93NUMPY" and head[6:7] in (b"\x01", b"\x02"):
        length_fmt = "<H" if head[6] == 1 else "<I"
        begin = 8 + struct.calcsize(length_fmt)
        (length,) = struct.unpack_from(length_fmt, head, 8)
        if begin + length > len(head):  # a longer header: read all of it (up to 64 KiB)
            head = bytes(payload[start : start + min(size, begin + length, 1 << 16)])
        match = _NPY_HEADER.match(head[begin : begin + length].decode("latin1"))
        if match:
            shape = tuple(int(d) for d in match[3].replace(" ", "").split(",") if d)
            return shape, match[2] == "True", np.dtype(match[1]), start + begin + length
    header = io.BytesIO(head)
    version = np.lib.format.read_magic(header)
    readers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
    if version not in readers:
        return None
    shape, fortran_order, dtype = readers[version](header)
    return shape, fortran_order, dtype, start + header.tell()
