"""A saved model's folder (``tir-adreno compile -o DIR``): written whole or not at all, its files
bound to each other, and read back only when they belong together.

Writing (:func:`replacing_folder`): every file goes to a temporary sibling folder
(``.DIR.XXXX.tmp``), which then takes DIR's place in one rename (an atomic exchange with the old
folder on Linux), so a reader, a kill or a full disk at any step leaves either the previous model
or the new one, never a mix and never a previous ``reference.npz`` next to a new model; two
concurrent writers each swap in a whole model. A folder that holds files we did not write is
refused (:class:`SavedModelError`) unless the caller forces it; then the files are replaced one by
one (``model.json`` last) and the folder's other files stay.

Binding: ``model.json`` names the SHA-256 of every other file (``files``: the digest each file's
integrity frame claims, see :mod:`tir_adreno.runtime.cache`); a file it does not name, or names
with another digest, was written with another model and the folder is refused in one line.

The files take the permissions of the user's umask, as any file they write (the temporary files
behind them are private, 0600): a saved model is meant to be copied and shared; caches stay private.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import io
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

import numpy as np

from tir_adreno.runtime import cache
from tir_adreno.runtime.errors import UserError

MODEL_FILE = "model.json"
WEIGHTS_FILE = "weights.npz"
#: A saved model's reference (``compile --check``): seeded inputs and the CPU reference's outputs.
REFERENCE_FILE = "reference.npz"
#: The files a saved model folder may hold (all written by :func:`write_file`).
OWN_FILES = (MODEL_FILE, WEIGHTS_FILE, REFERENCE_FILE)
#: The key of ``model.json`` naming the other files' digests.
FILES_KEY = "files"


#: A full disk or quota: the user's to free (one line naming the folder), not a bug.
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class SavedModelError(UserError, ValueError):
    """A folder that is not a whole saved model, or that we will not overwrite."""


# ---------------------------------------------------------------------------------------------
# writing


def write_file(directory, name: str, fill) -> str:
    """``fill(file)`` written as ``directory/name`` with an integrity frame; its digest (hex)."""
    path = Path(directory) / name
    cache.write_with(path, fill)
    return frame_digest(path)


def frame_digest(path) -> str:
    """The SHA-256 (hex) the integrity frame of the file at ``path`` claims for its body."""
    with open(path, "rb") as f:
        digest = cache.digest(f.read(len(cache.MAGIC) + 64))
    if digest is None:
        raise SavedModelError(f"{path}: not a file tir-adreno wrote")
    return digest.hex()


def foreign_files(directory) -> list[str]:
    """The entries of the existing folder ``directory`` that no saved model of ours holds
    (other names, folders, links, files without our integrity frame), sorted."""
    foreign = []
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        if entry.name not in OWN_FILES or not entry.is_file(follow_symlinks=False) or not _framed(entry.path):
            foreign.append(entry.name)
    return foreign


def _framed(path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(cache.MAGIC)) == cache.MAGIC
    except OSError:
        return False


def check_replaceable(directory, force: bool, flag: str = "-o") -> None:
    """SavedModelError when ``directory`` holds files we did not write and ``force`` is false."""
    directory = Path(os.path.realpath(directory))
    _check_parent_writable(directory, flag)
    if not directory.is_dir():
        return
    foreign = foreign_files(directory)
    if foreign and not force:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise SavedModelError(f"{flag} {directory}: holds files tir-adreno did not write ({shown}); give a new or empty "
                              "folder, or --force to write the model's files there anyway (its other files are kept)")


def _check_parent_writable(directory: Path, flag: str) -> None:
    """The folder beside which the temporary folder is made can take one (tried and removed)."""
    parent = directory.parent
    while not parent.exists():
        parent = parent.parent
    try:
        os.rmdir(tempfile.mkdtemp(dir=parent, prefix=f".{directory.name}.", suffix=".tmp"))
    except OSError as err:
        raise SavedModelError(f"{flag} {directory}: a saved model is written beside its folder and renamed into place, "
                              f"and {parent} is not writable ({err.strerror or err})") from None


@contextlib.contextmanager
def replacing_folder(directory, force: bool = False, flag: str = "-o"):
    """A temporary sibling folder for the block to write a whole saved model into; when the block
    ends it takes ``directory``'s place (see the module's docstring). Raises SavedModelError before
    anything is written when ``directory`` holds files we did not write, unless ``force``."""
    directory = Path(os.path.realpath(directory))  # a link to a folder: the folder it names is replaced
    check_replaceable(directory, force, flag)
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}.", suffix=".tmp"))
    try:
        yield staging
        _share(staging)
        if directory.is_dir() and foreign_files(directory):  # forced (checked above): keep the other files
            _replace_files(staging, directory)
        else:
            _swap_in(staging, directory)
    except OSError as err:
        if err.errno not in _DISK_FULL:
            raise
        raise SavedModelError(f"{flag} {directory}: {err.strerror} while writing the saved model; free some space and "
                              "write it again") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # now the old model, or what a failed write left


def write_whole(path, fill) -> None:
    """``fill(binary file)`` written to ``path`` (exactly that name) whole or not at all: a
    temporary file in its folder, renamed, with the modes a plain ``open`` would give it."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            fill(f)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    """The process's umask, read without changing it where Linux says it (threads may be writing files)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _share(folder: Path) -> None:
    """The folder and its files get the modes a plain ``mkdir``/``open`` would give them."""
    mask = _umask()
    for entry in folder.iterdir():
        entry.chmod(0o666 & ~mask)
    folder.chmod(0o777 & ~mask)


def _replace_files(staging: Path, directory: Path) -> None:
    """Each file of ``staging`` renamed over its name in ``directory``, ``model.json`` last (it
    binds the others, so until then the folder is refused as a mix, never silently wrong); our
    files that ``staging`` lacks (a previous reference) are removed first."""
    for name in OWN_FILES:
        if not (staging / name).exists():
            with contextlib.suppress(FileNotFoundError):
                (directory / name).unlink()
    for name in sorted(os.listdir(staging), key=lambda n: n == MODEL_FILE):
        os.replace(staging / name, directory / name)


def _swap_in(staging: Path, directory: Path) -> None:
    """``staging`` renamed to ``directory``; an existing ``directory`` is exchanged with it in one
    step (its old content ends up in ``staging``)."""
    try:
        os.rename(staging, directory)  # no folder there yet (an empty one is replaced too)
        staging.mkdir()  # for the caller's cleanup, as after an exchange
        return
    except OSError as err:
        if err.errno not in (errno.EEXIST, errno.ENOTEMPTY):
            raise
    if not _exchange(staging, directory):
        _swap_by_two_renames(staging, directory)


_RENAME_EXCHANGE = 2  # linux/fs.h


def _exchange(a: Path, b: Path) -> bool:
    """Atomically exchange the paths ``a`` and ``b`` (Linux ``renameat2``); False where the system
    or the file system cannot."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2  # the C library the interpreter runs on
    except (OSError, AttributeError, TypeError):
        return False
    at_fdcwd = -100
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def _swap_by_two_renames(staging: Path, directory: Path) -> None:
    """Where no atomic exchange exists: the old folder moved aside, the new one moved in (a kill
    between the two leaves the old model whole in ``.DIR.XXXX.old``)."""
    aside = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}.", suffix=".old"))
    os.rmdir(aside)
    os.rename(directory, aside)
    os.rename(staging, directory)
    os.rename(aside, staging)


# ---------------------------------------------------------------------------------------------
# reading


def check_regular(path: Path) -> None:
    """SavedModelError when ``path`` exists but is no regular file (a FIFO would block the reader)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # missing: the reader says so
    if not stat.S_ISREG(mode):
        raise SavedModelError(f"{path}: not a regular file (a FIFO, a device or a folder)")


def parse_doc(directory: Path, payload) -> dict:
    """``model.json``'s document with the keys a loader needs, or SavedModelError naming the file."""
    path = directory / MODEL_FILE
    try:
        doc = json.loads(bytes(payload))
    except (ValueError, UnicodeDecodeError) as err:
        raise SavedModelError(f"{path}: not JSON ({err})") from None
    if not isinstance(doc, dict):
        raise SavedModelError(f"{path}: not a saved model document")
    for key, kind in (("format", int), ("plan", dict), ("kernels", dict), (FILES_KEY, dict)):
        if not isinstance(doc.get(key), kind):
            raise SavedModelError(f"{path}: no {key!r} of the right kind (written by an older tir-adreno, or edited); "
                                  "compile the model again")
    return doc


def check_bound(directory: Path, doc: dict, name: str, digest: bytes | None) -> None:
    """SavedModelError unless the file ``name`` with frame digest ``digest`` (None: absent) is
    the one ``model.json`` was saved with."""
    expected = doc[FILES_KEY].get(name)
    if digest is None and expected is None:
        return
    if digest is None:
        raise SavedModelError(f"{directory}: {name} is missing (model.json was saved with one); compile the model again")
    if expected != digest.hex():
        raise SavedModelError(f"{directory}: {name} belongs to another model than model.json (a folder mixing two saved "
                              "models); compile the model again")


# ---------------------------------------------------------------------------------------------
# the files


def write_model_files(directory, doc: dict, weights: dict | None, reference=None) -> list[str]:
    """The files of a saved model written into the (new, private) folder ``directory``: the
    ``weights`` ({tensor index: array}; none: None), the ``reference`` ((inputs, outputs) or
    None), then ``model.json``, ``doc`` with their digests; their names. ``executor.save_model``
    swaps such a folder into place."""
    files = {}
    if weights is not None:
        files[WEIGHTS_FILE] = _write_npz(directory, WEIGHTS_FILE, {str(i): w for i, w in weights.items()})
    if reference is not None:
        files[REFERENCE_FILE] = write_reference(directory, *reference)
    doc = {**doc, FILES_KEY: files}
    write_file(directory, MODEL_FILE, lambda f: f.write(json.dumps(doc).encode()))
    return [*files, MODEL_FILE]


def replace_weights(directory, weights: dict) -> None:
    """The saved model in ``directory`` with its weights replaced by ``weights`` ({tensor index:
    array}), whole or not at all: its plan and kernels kept, the new weights bound by digest, its
    reference dropped (it was the old weights'). For a benchmark way that runs another build's
    weights; a user compiles instead."""
    directory = Path(directory)
    doc = {k: v for k, v in read_doc(directory).items() if k != FILES_KEY}
    with replacing_folder(directory) as staging:
        write_model_files(staging, doc, weights)


def _write_npz(directory, name: str, arrays: dict[str, np.ndarray]) -> str:
    """``arrays`` as an uncompressed ``.npz``, written atomically with a checksum (``cache.write_with``:
    streamed to the file, not built in memory first); its digest."""
    return write_file(directory, name, lambda f: np.savez(f, **arrays))


def write_reference(directory, inputs: dict[str, np.ndarray], outputs) -> str:
    """Write ``reference.npz`` (``input:NAME`` and ``output0``, ``output1``, ...) into ``directory``
    with a checksum, so ``run DIR --check`` compares with float32 CPU outputs on a machine without
    TVM; its digest (``model.json`` names it)."""
    arrays = {f"input:{n}": np.asarray(v) for n, v in inputs.items()}
    arrays.update({f"output{i}": np.asarray(o) for i, o in enumerate(outputs)})
    return _write_npz(directory, REFERENCE_FILE, arrays)


def save_reference(directory, inputs: dict[str, np.ndarray], outputs) -> Path:
    """Replace the reference of the saved model in ``directory`` (:func:`write_reference`, then
    ``model.json`` rebound to it), as a whole new folder swapped into place."""
    directory = Path(directory)
    doc = read_doc(directory)
    with replacing_folder(directory, force=False) as staging:
        for name in doc[FILES_KEY]:
            if name != REFERENCE_FILE:
                shutil.copyfile(directory / name, staging / name)
        doc[FILES_KEY][REFERENCE_FILE] = write_reference(staging, inputs, outputs)
        write_file(staging, MODEL_FILE, lambda f: f.write(json.dumps(doc).encode()))
    return directory / REFERENCE_FILE


def load_reference(directory) -> tuple[dict[str, np.ndarray], list[np.ndarray]] | None:
    """(inputs, outputs) of ``reference.npz``; None when absent; SavedModelError when corrupt or
    not the one ``model.json`` was saved with."""
    directory = Path(directory)
    path = directory / REFERENCE_FILE
    check_regular(path)
    if not path.exists():
        return None
    found = cache.read_once_verified(path)
    if found is None:
        raise SavedModelError(f"{path}: truncated or corrupt (checksum mismatch)")
    check_bound(directory, read_doc(directory), REFERENCE_FILE, found[1])
    try:
        with np.load(io.BytesIO(bytes(found[0])), allow_pickle=False) as npz:
            inputs = {k.split(":", 1)[1]: npz[k] for k in npz.files if k.startswith("input:")}
            outputs = [npz[f"output{i}"] for i in range(sum(k.startswith("output") for k in npz.files))]
    except (ValueError, KeyError, OSError) as err:
        raise SavedModelError(f"{path}: not a reference this version wrote ({err})") from None
    return inputs, outputs


def read_doc(directory: Path, read=cache.read_once_verified, with_digest: bool = False):
    """The checked ``model.json`` document of ``directory``, read by ``read`` (``cache.read_once_verified``
    or one like it: (payload, digest), None when missing or corrupt); with ``with_digest``,
    (the document, its frame's SHA-256). SavedModelError otherwise."""
    check_regular(directory / MODEL_FILE)  # before opening it: a FIFO would block
    found = read(directory / MODEL_FILE)
    if found is None:
        raise SavedModelError(f"{directory}: not a saved tir-adreno model (missing, truncated or corrupt {MODEL_FILE})")
    doc = parse_doc(directory, found[0])
    return (doc, found[1]) if with_digest else doc
