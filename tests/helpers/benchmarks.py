"""The benchmark scripts (benchmarks/*.py) as modules, imported one way.

The scripts import their siblings by plain name (``from common import ...``), as they do when
run as ``python benchmarks/x.py``; so their folder goes on sys.path here, once, and nowhere else.
"""

import importlib
import sys

from helpers import ROOT

BENCHMARKS = ROOT / "benchmarks"


def benchmark(name: str):
    """The module of benchmarks/``name``.py."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(name)
