"""pytest plugin (``-p first_failure``, with benchmarks/ on the path): the first failed test report
(a test's call, setup or teardown, in any xdist worker) writes the test's node id and the first
line of its error to the file named by $TIR_ADRENO_FIRST_FAILURE, atomically, once.

``benchmarks/mutants.py`` stops the run when that file appears: xdist's ``-x`` lets every worker
finish the test files it was handed first, which can be many minutes after the kill (a mutant
killed in 3 s by its own file ran on for 14 minutes while the other worker finished its file),
so the time to the first failure and the cost of a run are the file's, not the drain's.
"""

import os

FIRST_FAILURE = "TIR_ADRENO_FIRST_FAILURE"


def first_error_line(text: str) -> str:
    """The first ``E ...`` line of a failure's report (pytest's exception lines), else its last line."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return next((line for line in lines if line.startswith("E ")), lines[-1] if lines else "")


def pytest_runtest_logreport(report) -> None:
    path = os.environ.get(FIRST_FAILURE)
    if not path or not report.failed or os.path.exists(path):
        return
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(f"{report.nodeid}\n{first_error_line(report.longreprtext)}\n")
    os.replace(tmp, path)  # a worker and the controller may both write it: either's is the same test's
