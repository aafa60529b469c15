"""The ``tir-adreno`` argument parser: commands, flags, help texts (parses without TVM).

Every argument that names a file or folder is declared with :func:`add_path`, which notes on
its command what the path must be (a :class:`PathArg`), so that
:func:`tir_adreno.cli.checks.check_arguments` checks all of them, in one place, before any work.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from tir_adreno.strategy.precision import PRECISIONS  # numpy only: the CLI still parses without TVM
from tir_adreno.strategy.profile import PLACEMENTS, PROFILES

#: Built-in models (``tir_adreno.frontend.models.MODELS``; spelled out here so the CLI parses without TVM).
BUILTIN_MODELS = ("resnet18", "resnet50", "mobilenet_v2")
DEVICE_HELP = "substring of the OpenCL platform or device name"

#: ``--target`` choices: the named device profiles (``strategy.profile.PROFILES``).
PROFILE_NAMES = tuple(sorted(PROFILES))
PROFILE_HELP = f"device profile: {', '.join(PROFILE_NAMES)}"
#: ``--precision`` choices, ``strategy.precision.PRECISIONS`` ("float16", half math: refused
#: with exit 2 where the probe fails, natively or with the half prelude: docs/precision.md).
PRECISION_HELP = "float32, float16_acc32 (half storage, float math) or float16 (half math, where the device runs it)"

EXIT_CODES = """exit codes:
  0    ok
  1    --check failed (outputs differ from the CPU reference)
  2    user error: one line on stderr naming the culprit, no traceback
       (reported before compiling whenever it can be known)
  3    internal error: a bug; the traceback and a line asking to report it
  130  interrupted (Ctrl-C): one line"""

#: ``serve``'s trust model (also in the README and docs/tuning-and-deployment.md).
SERVE_TRUST = """Register a measurement runner for `tune --rpc-tracker` with a TVM RPC tracker.

Trust model: TVM RPC has no authentication. Whoever reaches a runner's port (the
tracker lists them) can upload a shared library and run it as the runner's user.
So the runner listens on 127.0.0.1 unless --host says otherwise. To span machines,
use a private network you trust or an SSH tunnel (docs/tuning-and-deployment.md,
"Trust model"), never a port open to others."""

# What a path argument must be (checked by tir_adreno.cli.checks before any work).
MODEL = "model"  # an ONNX file, or the folder of a saved model
INPUT_FILE = "input file"  # an existing, readable file
INPUT_FOLDER = "input folder"  # an existing folder
UPDATED_FOLDER = "updated folder"  # an existing folder that the command also writes into
OUTPUT_FILE = "output file"  # a file that can be created (or overwritten) in an existing folder
OUTPUT_FOLDER = "output folder"  # a folder that exists or can be made, and can be written into


@dataclass(frozen=True)
class PathArg:
    """A file or folder argument of a command and what it must be."""

    dest: str  #: attribute on the parsed arguments
    flag: str  #: how messages name it ("--json"; "" for a positional argument)
    role: str  #: MODEL, INPUT_FILE, ... (above)
    what: str = "file"  #: what a missing one is called: "no such {what}"
    hint: str = ""  #: appended to the message of a missing one (how to make it)


def add_path(parser, *flags, role: str, what: str = "file", hint: str = "", **kwargs) -> None:
    """``parser.add_argument(*flags, **kwargs)`` for a path, noted in the command's ``paths`` default."""
    action = parser.add_argument(*flags, **kwargs)
    label = max(flags, key=len) if flags[0].startswith("-") else ""
    paths = parser.get_default("paths") or ()
    parser.set_defaults(paths=(*paths, PathArg(action.dest, label, role, what, hint)))


RECORDS_HINT = " (write one with `tir-adreno tune`)"
DUMP_HINT = " (write one with `tir-adreno dump MODEL -o DIR`)"


def _add_model(p, builtin_default="resnet18"):
    """MODEL (ONNX file or saved model dir) or ``--builtin NAME``."""
    default = f"default: built-in {builtin_default}" if builtin_default else "or --builtin"
    add_path(p, "model", role=MODEL, nargs="?", help=f"ONNX model file ({default})")
    p.add_argument("--builtin", default=builtin_default, choices=BUILTIN_MODELS, help="a built-in model (seeded random weights)")


def _add_records(p, help: str) -> None:
    add_path(p, "--records", role=INPUT_FILE, what="records file", hint=RECORDS_HINT, metavar="FILE", help=help)


def _add_placement(parser) -> None:
    parser.add_argument("--placement", choices=PLACEMENTS,
                        help="default scope of activations (default: the device profile's; nvidia-h200: buffer, others: texture)")


def _add_no_fuse(parser) -> None:
    parser.add_argument("--no-fuse", action="store_true",
                        help="keep each depthwise conv apart from the 1x1 conv after it and a squeeze-excitation's pool apart from its two 1x1 convs (fused where the device profile says so)")


def _add_input_shape(parser) -> None:
    parser.add_argument(
        "--input-shape", action="append", metavar="NAME=D0,D1,...",
        help="shape of an ONNX input with symbolic dims, e.g. input=4,3,224,224 (repeatable)",
    )


def _add_quiet(parser) -> None:
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no progress lines (what is being built, how long a long step takes); results only")


def _add_devices(sub) -> None:
    p = sub.add_parser("devices", help="list OpenCL devices, image support and texture limits")
    p.add_argument("--json", action="store_true", help="print JSON")


def _add_run(sub) -> None:
    p = sub.add_parser(
        "run", help="compile a model onto texture kernels, run it, print a per-op profile",
        epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_model(p)
    p.add_argument("--device", help=DEVICE_HELP)
    add_path(p, "--inputs", role=INPUT_FILE, metavar="NPZ", help="inputs keyed by model input name (default: seeded random)")
    add_path(p, "--outputs", role=OUTPUT_FILE, metavar="NPZ", help="write the outputs, keyed output0, output1, ...")
    add_path(p, "--json", role=OUTPUT_FILE, metavar="PATH", help="write the report (profile, times, memory, check) as JSON")
    _add_input_shape(p)
    p.add_argument("--check", action="store_true", help="compare with a CPU reference; exit 1 beyond 1e-3 relative error "
                   "(1e-2 in float16_acc32, 2e-2 in float16); a saved model compares with the reference "
                   "`compile --check` saved in it")
    _add_records(p, "tuning records from `tir-adreno tune` (conv algorithm, config, placement)")
    p.add_argument("--target", choices=PROFILE_NAMES, metavar="PROFILE", help=f"plan the kernels for this {PROFILE_HELP}")
    p.add_argument("--precision", choices=PRECISIONS, help=PRECISION_HELP + " (default float32)")
    add_path(p, "--kernels", role=INPUT_FOLDER, what="folder", hint=DUMP_HINT, metavar="DIR",
             help="use the kernel files of `tir-adreno dump` that were edited")
    _add_placement(p)
    _add_no_fuse(p)
    _add_quiet(p)


def _add_dump(sub) -> None:
    p = sub.add_parser("dump", help="write every kernel of a model as an editable TVMScript file + manifest.json")
    _add_model(p)
    add_path(p, "-o", "--output", role=OUTPUT_FOLDER, required=True, metavar="DIR", help="directory to write")
    p.add_argument("--device", help=DEVICE_HELP)
    _add_records(p, "tuning records from `tir-adreno tune`: dump the kernels the tuned model runs")
    p.add_argument("--precision", default="float32", choices=PRECISIONS,
                   help=PRECISION_HELP + "; run the edited files with the same --precision")
    _add_input_shape(p)
    _add_placement(p)
    _add_quiet(p)


def _add_kernel(sub) -> None:
    p = sub.add_parser("kernel", help="build one dumped kernel file; show, check against NumPy, time")
    add_path(p, "file", role=INPUT_FILE, what="kernel file", hint=DUMP_HINT, help="a kernel file written by `tir-adreno dump`")
    p.add_argument("--device", help=DEVICE_HELP)
    p.add_argument("--check", action="store_true", help="compare with the float64 NumPy reference of its op; exit 1 beyond tolerance")
    p.add_argument("--time", action="store_true", help="median kernel time (OpenCL events)")
    p.add_argument("--show", metavar="WHAT", help="print tir, lowered (after the Adreno TIR pipeline) or opencl")


def _add_compile(sub) -> None:
    p = sub.add_parser("compile", help="compile a model for a device profile into a saved model (no device needed)")
    _add_model(p)
    add_path(p, "-o", "--output", role=OUTPUT_FOLDER, required=True, metavar="DIR", help="where to write the saved model")
    p.add_argument("--target", default="adreno", choices=PROFILE_NAMES, metavar="PROFILE", help=f"{PROFILE_HELP} (default adreno)")
    _add_records(p, "tuning records for that device")
    _add_input_shape(p)
    p.add_argument("--precision", default="float32", choices=PRECISIONS, help=PRECISION_HELP)
    p.add_argument("--check", action="store_true", help="also save the CPU reference's outputs for seeded inputs "
                   "(reference.npz), so `tir-adreno run DIR --check` reports the error on a machine without TVM")
    _add_placement(p)
    _add_no_fuse(p)
    p.add_argument("--no-cache", action="store_true",
                   help="compile even when the compile cache holds this request (same code, TVM, model, options), "
                   "and store nothing there")
    p.add_argument("--force", action="store_true",
                   help="write the model's files into a folder that holds files tir-adreno did not write (its other files are kept)")
    _add_quiet(p)


def _add_tune(sub) -> None:
    p = sub.add_parser("tune", help="measure conv candidates per layer on a device and write tuning records")
    _add_model(p, builtin_default=None)
    p.add_argument("--device", help=DEVICE_HELP)
    # Written after every layer and resumed: a file to create, read back when it exists.
    add_path(p, "--records", role=OUTPUT_FILE, metavar="FILE", help="records file to write / resume (default records-<profile>.json)")
    p.add_argument("--budget-s", type=float, default=None, help="start no new layer after this many seconds")
    p.add_argument("--target", choices=PROFILE_NAMES, metavar="PROFILE",
                   help=f"{PROFILE_HELP}: the remote device's (--export, --rpc-tracker)")
    way = p.add_mutually_exclusive_group()
    add_path(way, "--export", role=OUTPUT_FOLDER, metavar="DIR", help="build the candidates into DIR for `tune --measure DIR` "
             "elsewhere; run again once DIR holds the results to write the records")
    add_path(way, "--measure", role=UPDATED_FOLDER, what="folder", hint=" (write one with `tir-adreno tune MODEL --export DIR`)",
             metavar="DIR", help="time the candidates in DIR on this machine (no TVM needed)")
    way.add_argument("--rpc-tracker", metavar="HOST:PORT", help="measure on the runners registered with this TVM RPC tracker")
    p.add_argument("--rpc-key", default="tir-adreno", help="runner key at the tracker (default tir-adreno)")
    p.add_argument("--precision", default="float32", choices=PRECISIONS, help=PRECISION_HELP + "; records are per precision")
    _add_placement(p)
    _add_quiet(p)


def _add_kernels(sub) -> None:
    p = sub.add_parser(
        "kernels",
        help="every kernel family (conv direct/grouped/depthwise, Winograd 2x2/4x4, pools in both strategies, "
        "reductions, softmax, concat, layout, elementwise) on a small shape, checked against float64 NumPy, timed",
    )
    p.add_argument("--device", help=DEVICE_HELP)
    add_path(p, "--json", role=OUTPUT_FILE, metavar="PATH", help="write the per-kernel report as JSON")


def _add_serve(sub) -> None:
    p = sub.add_parser("serve", help="register a measurement runner for `tune --rpc-tracker` with a TVM RPC tracker",
                       description=SERVE_TRUST, epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tracker", required=True, metavar="HOST:PORT", help="tracker started by `python -m tvm.exec.rpc_tracker`")
    p.add_argument("--key", required=True, help="device key clients request (e.g. adreno-740)")
    p.add_argument("--device", help=DEVICE_HELP)
    p.add_argument("--host", default="127.0.0.1", help="address the runner listens on (default 127.0.0.1: this machine only; "
                   "see the trust model above before widening it)")
    p.add_argument("--port", type=int, default=9090, help="first port to try (default 9090)")
    p.add_argument("--port-end", type=int, help="end of the port range (default max(9199, port + 100))")
    p.add_argument("--custom-addr", help="address reported to the tracker (default: as the tracker sees this host)")


class Parser(argparse.ArgumentParser):
    """An ``argparse`` parser whose mistakes keep the CLI contract: one line on stderr naming the
    culprit (the command, the flag, the value), exit code 2, no usage dump."""

    def error(self, message: str):
        command = self.prog.removeprefix("tir-adreno").strip()
        if message.endswith("arguments are required: COMMAND"):
            message = f"no command given; one of: {', '.join(_commands(self))} (tir-adreno --help)"
        elif message.startswith("argument COMMAND: invalid choice"):
            message = f"unknown command {message.split(': ')[2].split()[0]}; one of: {', '.join(_commands(self))}"
        elif command:
            message = f"{command}: {message} (tir-adreno {command} --help)"
        self.exit(2, f"tir-adreno: error: {message}\n")


def _commands(parser: argparse.ArgumentParser) -> list[str]:
    """The subcommands of ``parser``, in the order they were added."""
    return [name for action in parser._actions if isinstance(action, argparse._SubParsersAction) for name in action.choices]


#: Each command's parser, in the order ``tir-adreno --help`` lists them.
_ADDERS = (_add_devices, _add_run, _add_dump, _add_kernel, _add_compile, _add_tune, _add_kernels, _add_serve)


def build_parser(description: str = "") -> argparse.ArgumentParser:
    """The parser of every command; ``args.command`` names the one given, ``args.paths`` its
    file and folder arguments (:class:`PathArg`). ``--help`` lists every command with its help line."""
    parser = Parser(prog="tir-adreno", description=description, epilog=EXIT_CODES,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(paths=())
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in _ADDERS:
        add(sub)
    return parser
