"""On-disk cache files: written atomically, verified on load.

Each entry is ``MAGIC | sha256(body) | body`` with ``body = len(key) | key |
payload``: the key the entry was written under is checked with the payload,
so an entry copied or renamed onto another key's path is a miss too. A reader
that finds a short, corrupt, foreign or misplaced file treats it as a miss (and
the caller rebuilds and rewrites it); concurrent writers each write a private
temporary file and ``os.replace`` it, so readers only ever see a whole entry.

A saved model's files are read with :func:`read_once_verified`: memory-mapped, and their
checksum computed once per file identity (see there).

A cache folder that cannot be written (read-only, not creatable) is not an
error: :func:`store` warns once per process and the caller goes on without it.
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import tempfile
import warnings
from pathlib import Path

MAGIC = b"TIRADRENO2"
_DIGEST = 32
_KEY_LEN = 4  # bytes of the key's length field


class CacheWarning(UserWarning):
    """The disk cache cannot be written; work goes on without it."""


_warned = False


def cache_dir() -> Path:
    """``$TIR_ADRENO_CACHE_DIR``, else ``$XDG_CACHE_HOME/tir-adreno``, else ``~/.cache/tir-adreno``."""
    env = os.environ.get("TIR_ADRENO_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tir-adreno"


def key(*parts) -> str:
    """A stable hex key from strings/bytes."""
    h = hashlib.sha256()
    for part in parts:
        data = part if isinstance(part, bytes) else str(part).encode()
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def package_files(package) -> dict[str, Path]:
    """Every module of the imported ``package``, subpackages included, keyed by its path inside
    the package, in a fixed order. Found by walking the package's folders rather than from a list
    of names, so a module that is added or moved is covered without anyone listing it (and
    without importing it, as ``pkgutil.walk_packages`` would)."""
    files = {}
    for folder in map(Path, package.__path__):
        for path in folder.rglob("*.py"):
            if "__pycache__" not in path.parts:
                files.setdefault(path.relative_to(folder).as_posix(), path)
    return dict(sorted(files.items()))


def files_key(tag: str, files: dict) -> str:
    """:func:`key` over the names and bytes of ``files`` ({name: path}, e.g. :func:`package_files`)."""
    return key(tag, *[part for name, path in files.items() for part in (name, Path(path).read_bytes())])


def _key_field(key: str) -> bytes:
    k = key.encode()
    return len(k).to_bytes(_KEY_LEN, "little") + k


def write(path: Path, payload: bytes, key: str = "") -> None:
    """Write ``payload`` to ``path`` atomically with an integrity header that covers ``key``."""
    write_with(path, lambda f: f.write(payload), key)


def write_with(path: Path, fill, key: str = "") -> None:
    """:func:`write` of the payload that ``fill(file)`` writes (it may seek within what it
    wrote, as ``zipfile`` does): streamed to a private temporary file, so a large payload
    (a model's weights) is never held in memory twice; the checksum is then read back from
    that file before it replaces ``path``."""
    head = len(MAGIC) + _DIGEST
    with replacing(path) as tmp, open(tmp, "w+b") as f:
        f.write(MAGIC + bytes(_DIGEST) + _key_field(key))
        fill(f)
        f.flush()
        f.seek(head)
        digest = _sha256_rest(f)
        f.seek(len(MAGIC))
        f.write(digest)
        f.flush()
        os.fsync(f.fileno())


@contextlib.contextmanager
def replacing(path: Path):
    """The name of a private temporary file in ``path``'s folder for the block to write (and
    sync): it replaces ``path`` when the block ends, and is removed if the block raises, so a
    reader of ``path`` only ever sees a whole file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def read(path: Path, key: str = "") -> bytes | None:
    """The payload stored at ``path`` under ``key``; None when missing, truncated, corrupt or another key's."""
    data = read_raw(path)
    return None if data is None else verify(data, key)


def read_raw(path: Path) -> bytes | None:
    """The whole entry at ``path``, unchecked (see :func:`verify`); None when it cannot be read."""
    try:
        return Path(path).read_bytes()
    except OSError:  # missing, a folder, unreadable, or a parent that is a file
        return None


def verify(data: bytes, key: str = "") -> bytes | None:
    """The payload of entry ``data`` (from :func:`read_raw`) written under ``key``; None when
    it is truncated, corrupt or another key's."""
    head = len(MAGIC) + _DIGEST
    if digest(data) is None:
        return None
    if hashlib.sha256(memoryview(data)[head:]).digest() != data[len(MAGIC) : head]:  # no copy of a large entry
        return None
    return _payload(data, key)


def digest(data) -> bytes | None:
    """The SHA-256 an entry's header claims for its body (None: not an entry)."""
    head = len(MAGIC) + _DIGEST
    return bytes(data[len(MAGIC):head]) if len(data) >= head + _KEY_LEN and data[:len(MAGIC)] == MAGIC else None


def read_once_verified(path: Path, key: str = "") -> tuple[memoryview, bytes] | None:
    """(payload, the entry's SHA-256) of the entry at ``path``, memory-mapped (no copy), or
    None when missing, truncated, corrupt or another key's: :func:`read` for large files read
    often, such as a saved model's weights. The SHA-256 over the whole file is computed the
    first time a file is seen; a stamp in the cache (keyed by the file's path and identity:
    device, inode, size, modification and change times; holding the digest) lets later reads
    trust it. Any change made through the file system (a write, a replacement, a copy, even a
    restored mtime: the change time moves) makes a new identity and a full check again; what
    the stamp cannot see is a file corrupted below the file system after its first check."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            try:
                data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if st.st_size else b""
            except (OSError, ValueError):  # a file system that cannot map it: read it instead
                data = f.read()
    except OSError:  # missing, a folder, unreadable
        return None
    claimed = digest(data)
    if claimed is None:
        return None
    stamp, stamp_key = _stamp(path, st)
    view = memoryview(data)
    if read(stamp, stamp_key) == claimed:
        payload = _payload(view, key)
    else:
        payload = verify(view, key)
        if payload is not None:
            store(stamp, claimed, stamp_key)
    return None if payload is None else (payload, claimed)


def _stamp(path, st, kind: str = "verified") -> tuple[Path, str]:
    """Where the stamp ``kind`` of the file at ``path`` with ``os.stat`` result ``st`` lives, and its key."""
    stamp_key = key(kind, os.path.abspath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    return cache_dir() / kind / f"{stamp_key}.stamp", stamp_key


def file_digest(path) -> bytes:
    """The SHA-256 of any file's bytes (an ONNX model, a records file), computed once per file
    identity: a stamp as :func:`read_once_verified`'s holds it (kind "digest"). OSError when
    the file cannot be read."""
    st = os.stat(path)
    stamp, stamp_key = _stamp(path, st, "digest")
    known = read(stamp, stamp_key)
    if known is not None and len(known) == _DIGEST:
        return known
    with open(path, "rb") as f:
        digest = _sha256_rest(f)
    if _stamp(path, os.stat(path), "digest")[1] == stamp_key:  # not changed while it was read
        store(stamp, digest, stamp_key)
    return digest


def _sha256_rest(f) -> bytes:
    """SHA-256 of what is left to read of file ``f``, in 4 MiB chunks (a large file is never held whole)."""
    h = hashlib.sha256()
    while chunk := f.read(1 << 22):
        h.update(chunk)
    return h.digest()


def _payload(data, key: str):
    """The payload of entry ``data`` whose digest is trusted, if written under ``key``."""
    head = len(MAGIC) + _DIGEST
    field = _key_field(key)
    if memoryview(data)[head : head + len(field)] != field:
        return None
    return data[head + len(field):]


def store(path: Path, payload: bytes, key: str = "") -> bool:
    """:func:`write` for caches: an unusable cache folder gives one :class:`CacheWarning`
    per process instead of an error. True when the entry was written."""
    try:
        write(path, payload, key)
        return True
    except OSError as err:
        warn_unusable(err)
        return False


def warn_unusable(err: OSError) -> None:
    """The one :class:`CacheWarning` per process about a cache folder that cannot be written."""
    global _warned
    if not _warned:
        _warned = True
        reason = err.strerror or type(err).__name__
        warnings.warn(f"cache folder {cache_dir()} is not usable ({reason}); working without the disk cache", CacheWarning, stacklevel=3)
