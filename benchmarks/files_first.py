"""pytest plugin (``-p files_first``, with benchmarks/ on the path): runs the test files named in
$TIR_ADRENO_FILES_FIRST (os.pathsep-separated) first, in that order, and the rest as collected.

``benchmarks/mutants.py --own-first`` loads it so that each mutant's own tests run first in the
whole suite: every xdist worker sorts alike, and with xdist's biggest-file-first reordering
switched off ``--dist loadfile`` hands those files out first.
"""

import os

FILES_FIRST = "TIR_ADRENO_FILES_FIRST"


def pytest_configure(config) -> None:
    # pytest-xdist >= 3.6 hands out --dist loadfile's files biggest first (--loadscope-reorder, on by
    # default), which would run a mutant's own small file late: keep the collected order
    if os.environ.get(FILES_FIRST) and hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items) -> None:
    first = [f for f in os.environ.get(FILES_FIRST, "").split(os.pathsep) if f]
    rank = {f: i for i, f in enumerate(first)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: the rest keep their order
