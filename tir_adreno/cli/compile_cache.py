"""The whole-model compile cache of ``tir-adreno compile`` (issue 22): an unchanged request is
answered from the cache in a fresh process without importing TVM (whose import alone, 1.7-3 s on
2 cores, is more than the issue's 2 s for a warm recompile).

Key (:func:`request_key`): SHA-256 over the package's own sources (every ``.py`` of
``tir_adreno`` and ``primfuncs``, names and bytes: ~100 files, a few ms), TVM's identity (its
version file and the size and time of its libraries, read without importing it), NumPy's and
ONNX's versions, the command's options normalized (the ONNX file and the records file by the
SHA-256 of their bytes, the built-in model by name; every option but the output folder, so an
option added later is in the key without anyone listing it) and every ``TIR_ADRENO_*``
environment variable but those read only at run time (:data:`RUNTIME_ENV`).

Value: the files ``compile`` wrote (``model.json``, ``weights.npz``, and ``reference.npz`` with
``--check``), byte for byte, and the summary line it printed. Layout under
``$TIR_ADRENO_CACHE_DIR/compile/``: ``<key>.json``, a ``runtime.cache`` entry (atomic, checksummed,
written under its key: a corrupt, truncated or foreign one is a miss) naming each file by its
SHA-256, and ``files/<sha256>.bin``, the file itself. A saved model's files are ``runtime.cache``
entries themselves, so a stored file is checked by its own frame (``cache.read_once_verified``:
once per file identity) and against the digest its manifest names; any mismatch is a miss, and
the compile that follows rewrites the entry. A hit copies the files into the temporary sibling
folder that ``compile`` then swaps into place (``runtime.saved.replacing_folder``), as a compile's
own files are; nothing is written before every file of the entry checked out.

Bounded: after each store the least recently used entries (a hit touches its manifest) beyond
:data:`MAX_BYTES` or :data:`MAX_ENTRIES` are removed, then every stored file no entry names.
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import importlib.util
import json
import os
import shutil
import time
import warnings
from pathlib import Path

import numpy as np

from tir_adreno.runtime import cache

#: Bump when what an entry holds changes.
FORMAT = 1
#: Folder of the cache, under ``cache.cache_dir()``.
FOLDER = "compile"
#: Bounds of the cache: total bytes of stored files, and entries (ResNet-50: 104 MB an entry).
MAX_BYTES = 2 << 30
MAX_ENTRIES = 64
#: Environment variables that do not change what ``compile`` writes: where the caches live, and
#: settings read only when a model runs. Every other ``TIR_ADRENO_*`` variable is in the key.
RUNTIME_ENV = (
    "TIR_ADRENO_CACHE_DIR", "TIR_ADRENO_DEVICE", "TIR_ADRENO_LAUNCHER", "TIR_ADRENO_PINNED", "TIR_ADRENO_POCL_KEEP_IR",
)
#: Parsed arguments that do not change what is written (``input_shape``: its parsed form,
#: ``input_shapes``, is in the key; ``model`` and ``records`` go in as their files' digests).
NOT_IN_KEY = ("output", "paths", "no_cache", "quiet", "force", "input_shape", "model", "records", "builtin")
#: A stored file no entry names is removed only this much later (a concurrent store writes its
#: files before its manifest).
ORPHAN_GRACE_S = 300


def _folder() -> Path:
    return cache.cache_dir() / FOLDER


def _manifest(key: str) -> Path:
    return _folder() / f"{key}.json"


def _stored(digest: str) -> Path:
    return _folder() / "files" / f"{digest}.bin"


def package_sources() -> dict[str, Path]:
    """Every ``.py`` file of ``tir_adreno`` and ``primfuncs`` (subpackages included), keyed by
    package and path inside it, in a fixed order."""
    import primfuncs
    import tir_adreno

    return {f"{p.__name__}/{name}": path for p in (tir_adreno, primfuncs) for name, path in cache.package_files(p).items()}


def sources_digest() -> str:
    """SHA-256 over the names and bytes of :func:`package_sources` (an edit anywhere: a new key)."""
    return cache.files_key("sources", package_sources())


def tvm_identity() -> str:
    """TVM as installed, without importing it: its version file's bytes and the size and
    modification time of its libraries (a rebuild from source keeps the version)."""
    # sys.path's own finder first: it locates without asking import hooks (a process that refuses
    # the import of TVM, in the tests); then any finder (an editable install's)
    spec = importlib.machinery.PathFinder.find_spec("tvm") or importlib.util.find_spec("tvm")
    if spec is None or not spec.submodule_search_locations:
        return "no tvm"
    folder = Path(next(iter(spec.submodule_search_locations)))
    parts = [str(folder)]
    for name in ("_version.py", "libinfo.py"):
        if (folder / name).is_file():
            parts += [name, (folder / name).read_bytes()]
    for lib in sorted([*folder.glob("*.so*"), *folder.glob("lib/*.so*"), *folder.glob("lib/*.dylib"), *folder.glob("*.dll")]):
        st = lib.stat()
        parts += [lib.name, st.st_size, st.st_mtime_ns]
    return cache.key("tvm", *parts)


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def request(args) -> dict:
    """The normalized request of parsed and checked ``compile`` arguments (what the key covers
    besides the code): every option but the output folder, input files by their content."""
    options = {k: v for k, v in vars(args).items() if k not in NOT_IN_KEY}
    options["input_shapes"] = sorted((name, list(shape)) for name, shape in (args.input_shapes or {}).items())
    options["model"] = cache.file_digest(args.model).hex() if args.model else f"builtin {args.builtin}"
    options["records"] = cache.file_digest(args.records).hex() if args.records else None
    env = {k: v for k, v in os.environ.items() if k.startswith("TIR_ADRENO_") and k not in RUNTIME_ENV}
    return {"options": options, "environment": env}


def request_key(args) -> str:
    """The cache key of a ``compile`` request (see the module's docstring)."""
    text = json.dumps(request(args), sort_keys=True, default=str)
    return cache.key("compile", FORMAT, sources_digest(), tvm_identity(), np.__version__, _version("onnx"), text)


def _copy(src: Path, dst: Path) -> None:
    """``src`` copied to ``dst`` atomically: a private temporary file in ``dst``'s folder, synced, renamed."""
    with cache.replacing(dst) as tmp:
        shutil.copyfile(src, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())


def _entry(key: str) -> dict | None:
    """The manifest stored under ``key`` whose every file checks out, else None."""
    data = cache.read(_manifest(key), key)
    if data is None:
        return None
    try:
        entry = json.loads(data)
        files, summary, warned = entry["files"], entry["summary"], entry["warnings"]
    except (ValueError, KeyError, TypeError):  # not an entry this code wrote
        return None
    if not (isinstance(files, dict) and files and isinstance(summary, str) and isinstance(warned, list)):
        return None
    for digest in files.values():
        found = cache.read_once_verified(_stored(digest))  # a saved model's file is a cache entry itself
        if found is None or found[1].hex() != digest:
            return None
    return entry


def lookup(key: str, output) -> dict | None:
    """On a hit, the entry's files written into the folder ``output`` and the entry returned
    (``summary``: the line ``compile`` printed, ``warnings``: those it gave); None on a miss."""
    entry = _entry(key)
    if entry is None:
        return None
    try:
        for name, digest in entry["files"].items():
            _copy(_stored(digest), Path(output) / name)
    except OSError:  # evicted meanwhile by another process: the compile that follows writes every file
        return None
    try:
        os.utime(_manifest(key))  # recently used: evicted last
    except OSError:
        pass
    return entry


def store(key: str, output, names, summary: str, warned=()) -> bool:
    """Store the files ``names`` that ``compile`` just wrote into ``output`` under ``key``, with
    its summary line and the warnings it gave (a hit repeats them), then evict. An unusable
    cache folder is one ``cache.CacheWarning`` (``cache.store``); False when nothing was stored."""
    files = {}
    try:
        for name in names:
            path = Path(output) / name
            with open(path, "rb") as f:
                digest = cache.digest(f.read(len(cache.MAGIC) + 64))  # the header of the file just written
            if digest is None:
                return False
            found = cache.read_once_verified(_stored(digest.hex()))
            if found is None or found[1] != digest:  # absent, or corrupt: (re)written
                _copy(path, _stored(digest.hex()))
            files[name] = digest.hex()
    except OSError as err:
        cache.warn_unusable(err)
        return False
    entry = {"files": files, "summary": summary, "warnings": list(warned)}
    if not cache.store(_manifest(key), json.dumps(entry).encode(), key):
        return False
    evict()
    return True


def evict(max_bytes: int | None = None, max_entries: int | None = None) -> list[str]:
    """Remove the least recently used entries beyond ``max_bytes`` of stored files or
    ``max_entries`` (defaults :data:`MAX_BYTES`, :data:`MAX_ENTRIES`; the newest entry stays),
    then the stored files no entry names; the keys removed."""
    max_bytes = MAX_BYTES if max_bytes is None else max_bytes
    max_entries = MAX_ENTRIES if max_entries is None else max_entries
    folder = _folder()
    entries = []
    for path in folder.glob("*.json"):
        try:
            entries.append((path.stat().st_mtime_ns, path))
        except OSError:  # removed meanwhile
            pass
    entries.sort(reverse=True)
    kept, dropped, total, removed = set(), set(), 0, []
    for i, (_, path) in enumerate(entries):
        data = cache.read(path, path.stem)
        try:
            files = set(json.loads(data)["files"].values()) if data is not None else set()
        except (ValueError, KeyError, TypeError, AttributeError):
            files = set()
        size = sum(_size(_stored(d)) for d in files - kept)
        if files and (i == 0 or (i < max_entries and total + size <= max_bytes)):
            kept |= files
            total += size
            continue
        removed.append(path.stem)
        dropped |= files
        _unlink(path)
    now = time.time()
    for path in (folder / "files").glob("*.bin"):
        try:
            # what a removed entry named goes now; other files no entry names (a store that failed
            # half way, or one under way: its manifest comes last) once they are old
            orphan = path.stem not in kept and (path.stem in dropped or now - path.stat().st_mtime > ORPHAN_GRACE_S)
        except OSError:
            continue
        if orphan:
            _unlink(path)
    return removed


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


class Recorder:
    """The warnings given while it is active, as one-line messages (a hit repeats them): wraps
    ``warnings.showwarning``, which the CLI sets to print one line."""

    def __enter__(self):
        self.messages, self._show = [], warnings.showwarning

        def show(message, *args, **kwargs):
            self.messages.append(str(message))
            self._show(message, *args, **kwargs)

        warnings.showwarning = show
        return self

    def __exit__(self, *exc):
        warnings.showwarning = self._show
