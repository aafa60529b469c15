"""tir-adreno: compile CNNs onto OpenCL texture kernels (Adreno-style GPUs; PoCL on any CPU), run,
check, time, tune and edit them. run is the main job; tir-adreno COMMAND --help shows a command's options."""

from __future__ import annotations

import errno
import os
import sys
import traceback
import warnings

from tir_adreno.cli import commands
from tir_adreno.cli.args import BUILTIN_MODELS, build_parser  # noqa: F401 (BUILTIN_MODELS: the CLI's list, tested against the models')
from tir_adreno.cli.checks import UserError, check_arguments, show_notices, warn
from tir_adreno.cli.run import run
from tir_adreno.cli.tune import tune

#: The function of each command (it takes the checked arguments and returns the exit code).
COMMANDS = {
    "devices": commands.devices,
    "run": run,
    "dump": commands.dump,
    "kernel": commands.kernel,
    "compile": commands.compile,
    "tune": tune,
    "kernels": commands.kernels,
    "serve": commands.serve,
}


#: Exit codes (README "Exit codes", ``--help``): 1 is only ever a failed ``--check``.
EXIT_OK, EXIT_CHECK_FAILED, EXIT_USER_ERROR, EXIT_INTERNAL_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
#: A full disk or quota is the user's to free, not a bug: one line, exit 2.
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def console() -> int:
    """The ``tir-adreno`` command (and ``python -m tir_adreno.cli``): :func:`main` ending the process at
    once on Ctrl-C."""
    return main(exit_on_interrupt=True)


def main(argv=None, exit_on_interrupt: bool = False) -> int:
    """Run one command; its exit code. ``exit_on_interrupt``: on Ctrl-C print the one line and end the
    process there (``os._exit``): a compile cut short leaves TVM objects half built and its threads
    running, whose destruction then prints TVM warnings or aborts the process (SIGABRT, seen in CI)."""
    args = build_parser(__doc__).parse_args(argv)
    show_notices(args)  # long steps (a program built from source) on stderr, unless --quiet
    with warnings.catch_warnings():
        # A warning (records of another device, an unusable cache folder) is one line, not a source excerpt.
        warnings.showwarning = lambda message, *_args, **_kw: warn(str(message))
        try:
            check_arguments(args)  # every path and flag, before the command does anything
            return COMMANDS[args.command](args)
        except UserError as err:  # every layer's user errors derive from it (tir_adreno.runtime.errors)
            return _error(str(err))
        except OSError as err:
            if err.errno not in _DISK_FULL:
                return _internal_error()
            where = f" writing {err.filename}" if err.filename else ""
            return _error(f"{err.strerror or 'no space left on device'}{where}; free some space and run it again")
        except MemoryError:
            return _error("out of memory: the model, its inputs or its weights need more than this machine holds")
        except KeyboardInterrupt:
            print("\ntir-adreno: interrupted", file=sys.stderr, flush=True)
            if exit_on_interrupt:
                sys.stdout.flush()
                _remove_tvm_tempdirs()
                os._exit(EXIT_INTERRUPTED)
            return EXIT_INTERRUPTED
        except Exception:
            return _internal_error()


def _remove_tvm_tempdirs() -> None:
    """TVM's temporary folders (``tvm.support.utils.TempDirectory``), removed at exit by an atexit
    hook that ``os._exit`` skips: a compile interrupted while one exists would leave it in /tmp."""
    utils = sys.modules.get("tvm.support.utils")  # never imports TVM: the runtime commands have none
    if utils is not None:
        try:
            utils.TempDirectory.remove_tempdirs()
        except Exception:  # noqa: BLE001 (exiting on Ctrl-C: a folder left is no reason to fail)
            pass


def _error(message: str) -> int:
    """A user error: one line on stderr (the first line of ``message``), exit code 2."""
    line = message.strip().splitlines()[0] if message.strip() else "error"
    print(f"tir-adreno: error: {line}", file=sys.stderr, flush=True)
    return EXIT_USER_ERROR


def _internal_error() -> int:
    """A bug of ours: the traceback, a line asking to report it, exit code 3 (not 1: that is --check's)."""
    traceback.print_exc()
    print("tir-adreno: internal error: this is a bug in tir-adreno; please report it with the traceback above "
          "and the command that gave it", file=sys.stderr, flush=True)
    return EXIT_INTERNAL_ERROR
