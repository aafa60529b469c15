"""The README and docs run as written: every fenced block is run, parsed or compared with what the
code prints now, as its info string says (``helpers.docs``: ``python``, ``pycon``, ``sh``,
``text output:NAME``; ``text`` and ``python sketch`` are shown only).

A block that stops running, a command line whose command, flag or choice went away, and shown
output that drifted from what the tools print all fail here, named ``FILE:LINE``."""

from __future__ import annotations

import contextlib
import doctest
import io
import os
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from helpers import ROOT
from helpers.docs import KINDS, all_blocks, command_lines, matches, scripts

BLOCKS = all_blocks()
RUN = [b for b in BLOCKS if b.lang in ("python", "pycon") and b.role != "sketch"]
SH = [b for b in BLOCKS if b.lang == "sh"]
OUTPUT = [b for b in BLOCKS if b.role == "output"]


def test_every_block_says_what_it_is():
    """No block is left to guess: each has a known info string (a new block must choose)."""
    unknown = [f"{b.name}: {' '.join(filter(None, (b.lang, b.role)))!r}" for b in BLOCKS if (b.lang, b.role) not in KINDS]
    assert not unknown, "blocks without a known info string (see tests/helpers/docs.py):\n" + "\n".join(unknown)
    assert RUN and SH and OUTPUT


def _model(path: Path, batch) -> Path:
    """conv 3 -> 8 (bias) -> relu -> global average pool, input "input" [batch, 3, 224, 224]."""
    import onnx

    rng = np.random.default_rng(0)
    inits = [helper.make_tensor("w", TensorProto.FLOAT, (8, 3, 3, 3), rng.standard_normal(216).astype("float32")),
             helper.make_tensor("b", TensorProto.FLOAT, (8,), rng.standard_normal(8).astype("float32"))]
    nodes = [helper.make_node("Conv", ["input", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["output"])]
    graph = helper.make_graph(nodes, "docs", [helper.make_tensor_value_info("input", TensorProto.FLOAT, (batch, 3, 224, 224))],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, (batch, 8, 1, 1))], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Where the blocks run: the files they name (``model.onnx``: fixed shapes; ``batch.onnx``: a symbolic batch)."""
    root = tmp_path_factory.mktemp("docs")
    _model(root / "model.onnx", 1)
    _model(root / "batch.onnx", "N")
    return root


@pytest.fixture(scope="module")
def namespaces():
    """The namespace each file's last run block left (for ``continued`` blocks)."""
    return {}


def _run_python(block, namespace: dict) -> None:
    code = compile(block.text, str(block.doc), "exec")
    with contextlib.redirect_stdout(io.StringIO()):
        exec(code, namespace)


def _run_pycon(block, namespace: dict) -> None:
    test = doctest.DocTestParser().get_doctest(block.text, namespace, block.name, str(block.doc), block.line)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report = io.StringIO()
    runner.run(test, out=report.write, clear_globs=False)
    assert runner.failures == 0, f"{block.name}: the session's output drifted:\n{report.getvalue()}"


# Run in document order so that a "continued" block finds its namespace.
@pytest.mark.parametrize("block", RUN, ids=lambda b: b.name)
def test_block_runs(block, folder, namespaces, monkeypatch):
    monkeypatch.chdir(folder)
    namespace = dict(namespaces[block.doc]) if block.role == "continued" else {"__name__": "__docs__"}
    if block.role == "continued":
        assert block.doc in namespaces, f"{block.name}: 'continued', but no block before it ran"
    (_run_pycon if block.lang == "pycon" else _run_python)(block, namespace)
    namespaces[block.doc] = namespace


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.role == "sketch"], ids=lambda b: b.name)
def test_sketches_name_what_exists(block):
    """A ``python sketch`` cannot run here (a tracker, a built module), but it compiles, its
    imports import and every ``module.name`` it uses of an imported module exists."""
    import ast

    tree = ast.parse(block.text, str(block.doc))
    namespace: dict = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            exec(compile(ast.Module([node], []), str(block.doc), "exec"), namespace)
    missing = [f"{n.value.id}.{n.attr}" for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
               and type(namespace.get(n.value.id)).__name__ == "module" and not hasattr(namespace[n.value.id], n.attr)]
    assert not missing, f"{block.name} uses what does not exist: {missing}"


@pytest.mark.parametrize("block", SH, ids=lambda b: b.name)
def test_command_lines_parse(block):
    """Each ``tir-adreno`` line names a command, flags and choices the CLI has."""
    from tir_adreno.cli.args import build_parser

    parser = build_parser()
    for argv in command_lines(block):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                parser.parse_args(argv)
            except SystemExit:
                pytest.fail(f"{block.name}: `tir-adreno {' '.join(argv)}`: {err.getvalue().strip()}")


@pytest.mark.parametrize("block", [b for b in SH if scripts(b)], ids=lambda b: b.name)
def test_scripts_run_by_the_docs_exist(block):
    missing = [s for s in scripts(block) if not (ROOT / s).is_file()]
    assert not missing, f"{block.name} runs scripts that do not exist: {missing}"


def test_readme_shows_every_command():
    """The README's command-line block uses every command the CLI has."""
    from tir_adreno.cli import COMMANDS

    readme = next(b for b in SH if b.doc.name == "README.md" and "tir-adreno devices" in b.text)
    used = {argv[0] for argv in command_lines(readme)}
    assert used == set(COMMANDS), f"README's command block misses {sorted(set(COMMANDS) - used)}"


# -- shown output, compared with what the code prints now ------------------------------------


@pytest.fixture(scope="module")
def resnet18_dump(tmp_path_factory):
    """``tir-adreno dump --builtin resnet18 -o r18`` as docs/workbench.md runs it, planned for
    PoCL at 32 x 32 (the same kernels and header as 224, numbers aside) without loading it."""
    from types import SimpleNamespace

    from tir_adreno.compiler import compile_plan
    from tir_adreno.frontend import models
    from tir_adreno.strategy.profile import get_profile
    from tir_adreno.tools import workbench

    root = tmp_path_factory.mktemp("workbench")
    prims: dict = {}
    plan, _, _ = compile_plan(models.resnet18(image_size=32), get_profile("pocl"), progress=lambda _: None, prims=prims)
    cwd = os.getcwd()
    os.chdir(root)  # `-o r18`: the headers name the folder as it was given
    try:
        workbench.dump(SimpleNamespace(plan=plan), prims, "r18", "--builtin resnet18")
    finally:
        os.chdir(cwd)
    return root


def _dump_header(dump: Path) -> str:
    text = (dump / "r18" / "03_conv2d_nchw4c.py").read_text()
    lines = text.splitlines()
    return "\n".join(lines[: next(i for i, line in enumerate(lines) if line.startswith("# op:")) + 1]) + "\n"


def _kernel_check(dump: Path) -> str:
    from tir_adreno.tools import workbench

    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(dump)
    try:
        with contextlib.redirect_stdout(out):
            assert workbench.kernel_command("r18/03_conv2d_nchw4c.py", None, True, True, None) == 0
    finally:
        os.chdir(cwd)
    return "$ tir-adreno kernel r18/03_conv2d_nchw4c.py --check --time\n" + out.getvalue()


def _startup(tiny_saved) -> str:
    from tir_adreno import load_model

    return load_model(tiny_saved).startup.line() + "\n"


#: What each ``text output:NAME`` block shows, produced now.
PRODUCERS = {
    "dump-header": lambda request: _dump_header(request.getfixturevalue("resnet18_dump")),
    "kernel-check": lambda request: _kernel_check(request.getfixturevalue("resnet18_dump")),
    "startup": lambda request: _startup(request.getfixturevalue("tiny_saved")),
}


#: Shown output a slow run elsewhere in the suite produces and compares (name -> that test file).
CHECKED_ELSEWHERE = {"tune-context": "tests/cli/test_tune.py"}


@pytest.mark.parametrize("block", OUTPUT, ids=lambda b: f"{b.name} ({b.arg})")
def test_shown_output_is_what_the_code_prints(block, request):
    if block.arg in CHECKED_ELSEWHERE:
        test_file = ROOT / CHECKED_ELSEWHERE[block.arg]
        assert f'output_block("{block.arg}")' in test_file.read_text(), f"{test_file} does not compare {block.name}"
        return
    assert block.arg in PRODUCERS, f"{block.name}: no producer {block.arg!r} (one of {sorted(PRODUCERS)})"
    produced = PRODUCERS[block.arg](request)
    assert matches(block.text, produced), f"{block.name} shows:\n{block.text}\nthe code prints now:\n{produced}"


def test_shown_output_comparison_sees_drift():
    """Numbers and ``...`` aside, every character of shown output counts."""
    shown = "#   epilogue: activation=relu bias=True residual=False\ntime 233.53 ms (median of 10 runs)\n...\nend\n"
    assert matches(shown, "#   epilogue: activation=relu bias=True residual=False\ntime 1.5 ms (median of 3 runs)\na\nb\nend\n")
    assert not matches(shown, "#   epilogue: activation=relu bias=True residual=True\ntime 1.5 ms (median of 3 runs)\nend\n")
    # a time's unit follows the device's speed (ms on a loaded CPU, us on a GPU), as its number does
    assert matches(shown, "#   epilogue: activation=relu bias=True residual=False\ntime 755.6 us (median of 3 runs)\nend\n")
    assert not matches(shown, "#   epilogue: activation=relu bias=True residual=False\ntime 1.5 MiB (median of 3 runs)\nend\n")
    assert not matches("a\nb\n", "a\nb\nc\n") and matches("x on ...\n", "x on PoCL: pthread\n")
