"""Which attribute names our code reads on TVM op attributes (``node.attrs``), and the ones it
reads that the op's attributes type does not have.

A misspelled name read with a default (``getattr(a, "count_include_padd", False)``) never fails:
the rule silently takes the default for every model. Two checks catch it:

- :func:`unknown_attribute_reads` (dynamic): while it is active, every read of a name a TVM
  ``Attrs`` object does not have, made from ``tir_adreno/`` code, is recorded (tests/conftest.py
  runs every test of the suite under it once TVM is imported);
- :func:`attribute_names_read` (static): every name read on an ``.attrs`` expression (or a local
  bound to one) anywhere in ``tir_adreno/``, for the check that each is a field of some TVM
  attributes type and is exercised with a non-default value.
"""

from __future__ import annotations

import ast
import contextlib
import sys
from pathlib import Path

from helpers import ROOT

#: Where the reads that count are made (TVM's own code probes names with hasattr freely).
PACKAGE = ROOT / "tir_adreno"


@contextlib.contextmanager
def unknown_attribute_reads():
    """Yields a list that collects ``"Type.name at file:line"`` for every read of a missing
    attribute name on a ``tvm.ir.Attrs`` made from ``tir_adreno/`` while the context is active.

    TVM's attrs fields are class descriptors, so a present field never reaches ``__getattr__``;
    a missing one does, then raises AttributeError as before (``getattr(..., default)`` still
    returns its default: the read is only recorded)."""
    from tvm.ir.attrs import Attrs

    misses: list[str] = []
    package = str(PACKAGE)

    def missing(self, name):
        caller = sys._getframe(1)  # getattr() is a builtin: frame 1 is the code that asked
        if not name.startswith("__") and caller.f_code.co_filename.startswith(package):
            where = f"{Path(caller.f_code.co_filename).relative_to(ROOT)}:{caller.f_lineno}"
            misses.append(f"{type(self).__name__}.{name} at {where}")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    previous = Attrs.__dict__.get("__getattr__")
    Attrs.__getattr__ = missing
    try:
        yield misses
    finally:
        if previous is None:
            del Attrs.__getattr__
        else:
            Attrs.__getattr__ = previous


def _is_attrs(expr: ast.expr, aliases: set[str]) -> bool:
    return (isinstance(expr, ast.Attribute) and expr.attr == "attrs") or (isinstance(expr, ast.Name) and expr.id in aliases)


def _aliases(func: ast.AST) -> set[str]:
    """Local names bound to an ``.attrs`` expression (``a = node.attrs``)."""
    return {t.id for n in ast.walk(func) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Attribute)
            and n.value.attr == "attrs" for t in n.targets if isinstance(t, ast.Name)}


def attribute_names_read(package: Path = PACKAGE) -> dict[str, list[str]]:
    """{attribute name: ["file:line", ...]} of every ``X.attrs.NAME``, ``a.NAME`` (``a = X.attrs``)
    and ``getattr(X.attrs, "NAME", ...)`` under ``package``."""
    reads: dict[str, list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for func in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]:
            aliases = _aliases(func)
            for n in ast.walk(func):
                name = None
                if isinstance(n, ast.Attribute) and _is_attrs(n.value, aliases):
                    name = n.attr
                elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("getattr", "hasattr")
                      and len(n.args) >= 2 and _is_attrs(n.args[0], aliases) and isinstance(n.args[1], ast.Constant)):
                    name = n.args[1].value
                if name is not None:
                    where = f"{path.relative_to(ROOT)}:{n.lineno}"
                    if where not in reads.setdefault(name, []):
                        reads[name].append(where)
    return reads


def attrs_fields() -> dict[str, set[str]]:
    """{attribute name: {TVM attrs type keys having it}} over every registered ``Attrs`` type,
    plus the methods every ``Attrs`` has (``DictAttrs.get``/``items`` of a function's attrs)."""
    import tvm.relax  # noqa: F401  (registers the Relax attrs types)
    from tvm.ir.attrs import Attrs, DictAttrs

    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    fields: dict[str, set[str]] = {}
    for cls in subclasses(Attrs):
        info = getattr(cls, "__tvm_ffi_type_info__", None)
        for field in info.fields if info is not None else ():
            fields.setdefault(field.name, set()).add(info.type_key)
    for method in (m for m in dir(DictAttrs) if not m.startswith("_")):
        fields.setdefault(method, set()).add("ir.DictAttrs")
    return fields
