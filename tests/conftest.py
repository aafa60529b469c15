"""Shared test setup: hypothesis profiles, a per-run kernel cache, the OpenCL device, and the
fixtures several test folders use (helpers live in tests/helpers/, never in a test module)."""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings

# CI: few examples per property (the suite's time: docs/testing.md); compiled programs are
# cached for the whole run, so repeated shapes cost nothing.
settings.register_profile(
    "ci", max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=False
)
# mutants: ci without shrinking (benchmarks/mutants.py needs a failure, not the smallest one).
settings.register_profile("mutants", settings.get_profile("ci"), phases=[Phase.explicit, Phase.reuse, Phase.generate])
settings.register_profile("dev", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# deep: thousands of examples per property (hours on PoCL), for a nightly or a soak run.
settings.register_profile(
    "deep", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))

#: The run's temp folder, made by the process that starts the run and set as TMPDIR for it and
#: the xdist workers (they inherit the environment): whatever the run writes to the temp dir
#: (pytest's tmp_path folders, TVM's build folders, onnxruntime's telemetry session file ``.ses``,
#: written on import) is removed with it when the run ends. A failed run keeps pytest's folders
#: (its failed tests' tmp_path) there, to look at.
RUN_TMP = None
if "TIR_ADRENO_TEST_TMP" not in os.environ:
    RUN_TMP = Path(tempfile.mkdtemp(prefix="tir-adreno-test-run-"))
    os.environ["TIR_ADRENO_TEST_TMP"] = os.environ["TMPDIR"] = str(RUN_TMP)
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
#: The kernel cache this run made (TIR_ADRENO_CACHE_DIR not given): removed when the run ends.
RUN_CACHE = None
if "TIR_ADRENO_CACHE_DIR" not in os.environ:
    RUN_CACHE = os.environ["TIR_ADRENO_CACHE_DIR"] = tempfile.mkdtemp(prefix="tir-adreno-test-cache-")


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the option
def pytest_configure(config):
    # A crashed xdist worker (a native crash in a kernel or driver) ends the run, failed, instead of
    # being replaced: pytest-xdist 3.8 can hang forever after replacing one under ``--dist loadfile``
    # (pytest-dev/pytest-xdist#784; fixed on its main branch, not released). ``--max-worker-restart``
    # given on the command line wins.
    if getattr(config.option, "maxworkerrestart", "") is None:
        config.option.maxworkerrestart = "0"


def pytest_sessionfinish(session, exitstatus):
    session.config.stash[_EXIT_STATUS] = exitstatus


_EXIT_STATUS = pytest.StashKey[int]()


def pytest_unconfigure(config):
    if RUN_CACHE is not None:
        shutil.rmtree(RUN_CACHE, ignore_errors=True)
    if RUN_TMP is None:
        return
    passed = config.stash.get(_EXIT_STATUS, 1) == 0
    for entry in RUN_TMP.iterdir():
        if passed or not entry.name.startswith("pytest-of-"):
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    if passed or not any(RUN_TMP.iterdir()):
        RUN_TMP.rmdir()
    else:
        config.get_terminal_writer().line(f"the run did not pass: its tmp_path folders are kept in {RUN_TMP}")


@pytest.fixture(autouse=True)
def attribute_names_checked():
    """Every test that compiles with TVM already imported (all but a process's first) fails when
    tir_adreno's code reads an attribute name an op's attributes type lacks: a misspelled name read
    with a default would silently take the default (helpers.attributes)."""
    if "tvm.ir.attrs" not in sys.modules:  # never import TVM for a test that does not
        yield
        return
    from helpers.attributes import unknown_attribute_reads

    with unknown_attribute_reads() as misses:
        yield
    assert not misses, f"attribute names the op's attributes type does not have were read: {misses}"


@pytest.fixture(scope="session")
def device():
    from tir_adreno.runtime import opencl as runtime

    return runtime.get_device()


@pytest.fixture
def check_bounds(monkeypatch):
    """Kernels built in this test are instrumented by the texture bounds sanitizer
    (``TIR_ADRENO_CHECK_BOUNDS=1``): an out-of-range image access raises BoundsError."""
    from tir_adreno.runtime import bounds

    monkeypatch.setenv(bounds.ENV, "1")
    return True


@pytest.fixture
def run_cli(capsys, monkeypatch):
    """The command in this process (no TVM import per call): same exit code, stdout and stderr."""
    from tir_adreno.cli import main

    def run(*args, env=None):
        for k, v in (env or {}).items():
            monkeypatch.setenv(k, v)
        try:
            code = main(list(args))
        except SystemExit as exit:  # argparse: --help, usage errors
            code = exit.code
        finally:
            for k in env or {}:
                monkeypatch.delenv(k)
        out = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out.out, out.err)

    return run


@pytest.fixture(scope="session")
def tiny_saved(device, tmp_path_factory):
    """helpers.onnx_graphs.tiny_model compiled once per run and saved: the runtime tests each load
    their own copy (no TVM, no second compile)."""
    from helpers.onnx_graphs import tiny_model
    from tir_adreno import compile_model

    compiled = compile_model(tiny_model(), device, progress=lambda _: None)
    return compiled.save(tmp_path_factory.mktemp("tiny") / "model")


def _saved(tmp_path_factory, model, name):
    import onnx

    path = tmp_path_factory.mktemp("onnx") / name
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="session")
def tiny_onnx(tmp_path_factory):
    """conv -> relu -> global average pool, input "image" (1, 3, 8, 8), saved as an ONNX file."""
    from helpers.onnx_graphs import conv_relu_pool_model

    return _saved(tmp_path_factory, conv_relu_pool_model(), "tiny.onnx")


@pytest.fixture(scope="session")
def two_convs(tmp_path_factory):
    """A tiny ONNX file with two convs (1x1, 3x3 stride 2) and a max pool: what tune, measure and placement tune."""
    from helpers.onnx_graphs import two_convs_model

    return _saved(tmp_path_factory, two_convs_model(), "two.onnx")
