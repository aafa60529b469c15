"""On-disk cache files: written atomically, verified on load.

Each entry is ``MAGIC | sha256(payload) | payload``. A reader that finds a
short, corrupt or foreign file treats it as a miss (and the caller rebuilds
and rewrites it); concurrent writers each write a private temporary file and
``os.replace`` it, so readers only ever see a whole entry.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

MAGIC = b"TIRADRENO1"
_DIGEST = 32


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


def write(path: Path, payload: bytes) -> None:
    """Write ``payload`` to ``path`` atomically with an integrity header."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC + hashlib.sha256(payload).digest() + payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def read(path: Path) -> bytes | None:
    """The payload stored at ``path``, or None when missing, truncated or corrupt."""
    try:
        data = Path(path).read_bytes()
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        return None
    head = len(MAGIC) + _DIGEST
    if len(data) < head or not data.startswith(MAGIC):
        return None
    payload = data[head:]
    if hashlib.sha256(payload).digest() != data[len(MAGIC) : head]:
        return None
    return payload
