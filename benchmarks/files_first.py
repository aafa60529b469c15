"""pytest plugin (``-p files_first``, with benchmarks/ on the path): runs the test files named in
$TIR_ADRENO_FILES_FIRST (os.pathsep-separated) first, in that order, and the rest as collected.

``benchmarks/mutants.py --own-first`` loads it so that each mutant's own tests run first in the
whole suite: every xdist worker sorts alike, so ``--dist loadfile`` schedules those files first.
"""

import os

FILES_FIRST = "TIR_ADRENO_FILES_FIRST"


def pytest_collection_modifyitems(items) -> None:
    first = [f for f in os.environ.get(FILES_FIRST, "").split(os.pathsep) if f]
    rank = {f: i for i, f in enumerate(first)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: the rest keep their order
