"""tir-adreno: compile CNNs onto OpenCL texture kernels (Adreno-style GPUs; PoCL on any CPU), run,
check, time, tune and edit them. run is the main job; tir-adreno COMMAND --help shows a command's options."""

from __future__ import annotations

import sys
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


def main(argv=None) -> int:
    args = build_parser(__doc__).parse_args(argv)
    show_notices(args)  # long steps (a program built from source) on stderr, unless --quiet
    from tir_adreno.runtime.opencl import DeviceNotFoundError
    from tir_adreno.tools.workbench import WorkbenchError
    from tir_adreno.tuning.measure import TrackerError

    with warnings.catch_warnings():
        # A warning (records of another device, an unusable cache folder) is one line, not a source excerpt.
        warnings.showwarning = lambda message, *_args, **_kw: warn(str(message))
        try:
            check_arguments(args)  # every path and flag, before the command does anything
            return COMMANDS[args.command](args)
        except (DeviceNotFoundError, TrackerError, UserError, WorkbenchError) as err:
            print(f"tir-adreno: error: {err}", file=sys.stderr)
            return 2
