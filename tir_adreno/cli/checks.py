"""Every check of what the user typed, in one place, before any work (the CLI contract).

:func:`check_arguments` runs before a command does anything: the environment settings, every
file and folder argument (:class:`~tir_adreno.cli.args.PathArg`: inputs exist and can be read,
outputs can be written), then the flags each command cannot take together. A mistake is a
:class:`UserError`: one line on stderr, exit code 2. Nothing here imports TVM, so a mistake
costs no model import and no compile.
"""

from __future__ import annotations

import logging
import os
import stat
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from tir_adreno.cli.args import INPUT_FILE, INPUT_FOLDER, MODEL, OUTPUT_FILE, OUTPUT_FOLDER, UPDATED_FOLDER, PathArg
from tir_adreno.runtime.errors import UserError  # the one base class of user errors (exit 2); re-exported


def warn(message: str) -> None:
    print(f"tir-adreno: warning: {message}", file=sys.stderr, flush=True)


def progress_printer(args, indent: str = "  "):
    """How a command shows its progress lines (stdout): printed, or dropped under ``--quiet``."""
    if getattr(args, "quiet", False):
        return lambda _message: None
    return lambda message: print(f"{indent}{message}", flush=True)


class _Notices(logging.Handler):
    """The library's notices of long steps (``logging`` at INFO under ``tir_adreno``, e.g. a
    program built from source) as ``tir-adreno: ...`` lines on the stderr of the moment."""

    def emit(self, record) -> None:
        print(f"tir-adreno: {record.getMessage()}", file=sys.stderr, flush=True)


_NOTICES = _Notices()


def show_notices(args) -> None:
    """Long steps say what they do and about how long on stderr, unless ``--quiet``."""
    logger = logging.getLogger("tir_adreno")
    if _NOTICES not in logger.handlers:
        logger.addHandler(_NOTICES)
    logger.setLevel(logging.WARNING if getattr(args, "quiet", False) else logging.INFO)


def check_environment() -> None:
    """Settings read from the environment, validated before any work."""
    from tir_adreno.runtime import bounds, launcher, opencl as runtime

    bounds.enabled()  # each raises a SettingError (a UserError) for a value it cannot take
    launcher.requested()
    runtime.pinned_requested()


# ---------------------------------------------------------------------------------------------
# files and folders


def _cannot_write(folder) -> str | None:
    """Why no file can be created in the existing ``folder`` (None: one can). Tried, not asked
    with ``os.access``: root passes that check where nothing can be written (/proc, read-only mounts)."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            return None
    except OSError as err:
        return err.strerror or str(err)


def _cannot_make_folder_in(parent) -> str | None:
    """Why no folder can be made in the existing ``parent`` (None: one can); tried and removed."""
    try:
        os.rmdir(tempfile.mkdtemp(dir=parent))
        return None
    except OSError as err:
        return err.strerror or str(err)


def check_writable(path: str, flag: str) -> None:
    """``flag``'s file can be created: its folder exists and is writable, the path is no folder."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise UserError(f"{flag} {path}: is a folder, expected a file name")
    if not os.path.isdir(folder):
        raise UserError(f"{flag} {path}: folder {folder} does not exist")
    reason = _cannot_write(folder)  # also where an existing file is replaced (atomic writes go through the folder)
    if reason is not None:
        raise UserError(f"{flag} {path}: folder {folder} is not writable ({reason})")
    if os.path.exists(path):
        _check_regular(path, f"{flag} {path}")
        try:
            open(path, "ab").close()  # appends nothing: the file stays as it is
        except OSError as err:
            raise UserError(f"{flag} {path}: cannot be written ({err.strerror or err})") from None


def check_creatable_folder(path: str, flag: str) -> None:
    """``flag``'s folder exists or can be made: no file in the way, the nearest existing parent writable."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise UserError(f"{flag} {path}: is a file, expected a folder")
    parent = os.path.abspath(path)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise UserError(f"{flag} {path}: {parent} is a file, so the folder cannot be made")
    if parent == os.path.abspath(path):
        reason = _cannot_write(parent)
        if reason is not None:
            raise UserError(f"{flag} {path}: folder is not writable ({reason})")
        return
    reason = _cannot_make_folder_in(parent)
    if reason is not None:
        raise UserError(f"{flag} {path}: the folder cannot be made in {parent} ({reason})")


def _check_regular(path: str, name: str) -> None:
    """A file argument is a regular file: a FIFO would block the command (a device, a socket: not a file to read or replace)."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise UserError(f"{name}: not a regular file (a FIFO, a device or a socket)")


def _check_input(path: str, arg: PathArg) -> None:
    """An input exists and can be read; a folder where the role takes one."""
    name = f"{arg.flag} {path}" if arg.flag else path
    if not os.path.exists(path):
        raise UserError(f"{name}: no such {arg.what}{arg.hint}")
    folder = os.path.isdir(path)
    if arg.role in (INPUT_FOLDER, UPDATED_FOLDER) and not folder:
        raise UserError(f"{name}: is a file, expected a folder{arg.hint}")
    if arg.role == INPUT_FILE and folder:
        raise UserError(f"{name}: is a folder, expected a {arg.what}")
    if arg.role == UPDATED_FOLDER:
        reason = _cannot_write(path)
        if reason is not None:
            raise UserError(f"{name}: folder is not writable ({reason})")
    if not folder:
        _check_regular(path, name)
        try:
            open(path, "rb").close()
        except OSError as err:
            raise UserError(f"{name}: cannot read ({err.strerror or err})") from None
        if os.path.getsize(path) == 0:
            expected = ", not an ONNX model" if arg.role == MODEL else f", expected a {arg.what}" if arg.what != "file" else " (0 bytes)"
            raise UserError(f"{name}: empty file{expected}")


def check_path(path: str, arg: PathArg) -> None:
    """``path``, given for ``arg``, is what the argument's role needs."""
    if arg.role == OUTPUT_FILE:
        check_writable(path, arg.flag)
    elif arg.role == OUTPUT_FOLDER:
        check_creatable_folder(path, arg.flag)
    elif arg.role in (MODEL, INPUT_FILE, INPUT_FOLDER, UPDATED_FOLDER):
        _check_input(path, arg)
    else:
        raise AssertionError(f"unknown path role {arg.role!r}")


# ---------------------------------------------------------------------------------------------
# values of flags


def parse_input_shapes(specs: list[str] | None) -> dict[str, tuple[int, ...]]:
    """``["NAME=D0,D1,..."]`` -> {NAME: (D0, D1, ...)}."""
    shapes = {}
    for spec in specs or []:
        name, _, dims = spec.rpartition("=")
        try:
            shape = tuple(int(d) for d in dims.split(","))
        except ValueError:
            shape = ()
        if not name or not shape or min(shape) < 1:
            raise UserError(f"--input-shape {spec!r}: expected NAME=D0,D1,... with positive integer dims")
        if name in shapes:
            raise UserError(f"--input-shape: {name!r} given twice")
        shapes[name] = shape
    return shapes


def read_inputs(path: str | None) -> dict[str, np.ndarray] | None:
    """The arrays of an ``--inputs`` .npz file (read before compiling), or None without one."""
    if path is None:
        return None
    hint = "write one with numpy.savez(path, name=array)"
    try:
        with np.load(path, allow_pickle=False) as loaded:
            if not isinstance(loaded, np.lib.npyio.NpzFile):
                raise UserError(f"--inputs {path}: not a NumPy .npz archive ({hint})")
            return {k: _input_array(loaded, k, path) for k in loaded.files}
    except OSError as err:
        raise UserError(f"--inputs {path}: cannot read inputs ({err.strerror or err})") from None
    except (ValueError, EOFError, zipfile.BadZipFile) as err:  # not an archive, truncated, damaged
        raise UserError(f"--inputs {path}: not a NumPy .npz archive, or a damaged one ({_first_line(err)}; {hint})") from None


def _input_array(npz, name: str, path: str) -> np.ndarray:
    """One array of an ``--inputs`` archive: numbers (an object array would need pickle: refused)."""
    try:
        array = npz[name]
    except ValueError as err:  # numpy refuses pickled (object) arrays without allow_pickle
        if "allow_pickle" not in str(err):
            raise  # damaged: read_inputs says so
        raise UserError(f"--inputs {path}: {name!r} is an object array; inputs are arrays of numbers") from None
    if array.dtype.kind not in "biuf":
        raise UserError(f"--inputs {path}: {name!r} has dtype {array.dtype}; inputs are arrays of numbers")
    return array


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def is_saved_model(path) -> bool:
    """Whether the MODEL argument is a saved model (a folder) rather than an ONNX file."""
    return path is not None and Path(path).is_dir()


# ---------------------------------------------------------------------------------------------
# flags each command cannot take together


#: Flags of `run` that only a model to compile takes (a saved model is compiled already).
COMPILE_FLAGS = ("records", "target", "input_shape", "kernels", "precision", "placement")


def _protected_files(args) -> list[str]:
    """The files a command reads (the model, its saved files, --inputs, --records, the kernel
    files): none of them may be an output of the same command."""
    from tir_adreno.runtime.saved import OWN_FILES

    files = [getattr(args, arg.dest) for arg in args.paths if arg.role in (MODEL, INPUT_FILE) and getattr(args, arg.dest)]
    for arg in args.paths:
        folder = getattr(args, arg.dest)
        if arg.role in (MODEL, INPUT_FOLDER) and folder and os.path.isdir(folder):
            files += [os.path.join(folder, name) for name in (OWN_FILES if arg.role == MODEL else os.listdir(folder))]
    return files


def _same_file(a: str, b: str) -> bool:
    """Whether the paths name one file (a link, a hard link, ``./x`` and ``x``), existing or not."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def check_outputs_spare_inputs(args) -> None:
    """No output file of the command would overwrite a file it reads, nor another output."""
    outputs = [(arg.flag, getattr(args, arg.dest)) for arg in args.paths if arg.role == OUTPUT_FILE and getattr(args, arg.dest)]
    protected = _protected_files(args)
    for i, (flag, path) in enumerate(outputs):
        for other in protected:
            if _same_file(path, other):
                raise UserError(f"{flag} {path}: would overwrite {other}, which this command reads; write it elsewhere")
        for other_flag, other in outputs[:i]:
            if _same_file(path, other):
                raise UserError(f"{flag} {path}: is also {other_flag}; give each output its own file")


def _check_run(args) -> None:
    if is_saved_model(args.model):
        for flag in COMPILE_FLAGS:
            if getattr(args, flag):
                raise UserError(f"--{flag.replace('_', '-')} needs a model file; {args.model} is compiled already")
        if args.check and args.inputs:
            raise UserError(f"--check on a saved model runs the inputs saved with its reference; leave out --inputs {args.inputs}")
    args.given_inputs = read_inputs(args.inputs)


def _check_dump(args) -> None:
    if is_saved_model(args.model):
        raise UserError(f"{args.model}: a saved model holds OpenCL C, not TVMScript; dump the ONNX file or --builtin model it was compiled from")


def _check_compile(args) -> None:
    from tir_adreno.runtime.saved import check_replaceable

    check_replaceable(args.output, args.force)  # a folder of the user's own files is not overwritten


def _check_tune(args) -> None:
    if args.measure:
        if args.model:
            raise UserError("--measure DIR takes no model (the candidates are in DIR)")
        return
    if args.model is None and args.builtin is None:
        raise UserError("tune needs a model (a file or --builtin NAME)")
    if args.rpc_tracker and not args.target:
        raise UserError("--rpc-tracker needs --target PROFILE (the runners' device)")
    if args.target and not (args.export or args.rpc_tracker):
        raise UserError("--target is for --export / --rpc-tracker; a local tune uses --device")
    if args.records is None:  # records-<profile>.json (and its plot) in the working folder
        check_writable(os.path.join(os.getcwd(), "records.json"), "--records (default records-<profile>.json)")


# --target and --precision are choices of the parser (the library's names): argparse refuses others.
_COMMAND_CHECKS = {"run": _check_run, "dump": _check_dump, "compile": _check_compile, "tune": _check_tune}


def check_arguments(args) -> None:
    """Everything about ``args`` that can be known before any work; a :class:`UserError` at the
    first mistake. Sets ``args.input_shapes`` (``--input-shape`` parsed) and, for ``run``,
    ``args.given_inputs`` (the ``--inputs`` arrays, None without)."""
    check_environment()
    for arg in args.paths:
        path = getattr(args, arg.dest)
        if path is not None:
            check_path(path, arg)
    check_outputs_spare_inputs(args)
    if hasattr(args, "input_shape"):
        args.input_shapes = parse_input_shapes(args.input_shape)
        if args.input_shapes and not args.model:
            raise UserError("--input-shape applies to ONNX models; the built-in models have fixed shapes")
    command_check = _COMMAND_CHECKS.get(args.command)
    if command_check is not None:
        command_check(args)
