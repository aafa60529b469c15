"""The docs name files and modules that exist: a refactor that moves code must move its docs too.

Every repository path in backticks or a link (``tir_adreno/passes/rules/conv.py``,
``[x](../tests/upstream)``) in README.md and docs/**/*.md must exist, and every dotted
``tir_adreno.*`` / ``primfuncs.*`` name must be an importable module or an attribute of one.
"""

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
TOP = ("tir_adreno", "primfuncs", "tests", "benchmarks", "docs", ".ci")
PATH = re.compile(r"`((?:%s)/[\w./-]*\w)(?::\d+(?:-\d+)?)?`" % "|".join(re.escape(t) for t in TOP))
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
DOTTED = re.compile(r"`((?:tir_adreno|primfuncs)(?:\.\w+)+)")


def _registered_names() -> set[str]:
    """Dotted strings the code registers with TVM (PrimFunc attributes, global functions,
    pipeline names): names, not modules."""
    import pkgutil

    from tir_adreno import compiler, passes
    from tir_adreno.tuning import measure

    modules = [importlib.import_module(m.name) for m in pkgutil.walk_packages(passes.__path__, "tir_adreno.passes.")]
    values = [v for m in (passes, *modules) for v in vars(m).values()] + [measure.REMOTE_FUNCTION, compiler.TIR_PIPELINE]
    return {v for v in values if isinstance(v, str) and v.startswith("tir_adreno.")}


def _names_tvm_tree(doc: Path, path: str) -> bool:
    """The upstream write-ups name files of TVM's own tree (``tests/python/...``), which this
    repository does not have: ``docs/upstream/check_patches.py --tvm`` checks those."""
    return doc.is_relative_to(ROOT / "docs" / "upstream") and (path + "/").startswith("tests/python/")


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_paths_and_modules_named_in_docs_exist(doc):
    text = doc.read_text()
    missing = [p for p in PATH.findall(text) if not (ROOT / p).exists() and not _names_tvm_tree(doc, p)]
    missing += [link for link in LINK.findall(text)
                if "://" not in link and not link.startswith("mailto:") and not (doc.parent / link).exists()]
    missing += [d for d in set(DOTTED.findall(text)) - _registered_names() if not _resolves(d)]
    assert not missing, f"{doc.relative_to(ROOT)} names what does not exist: {sorted(set(missing))}"
