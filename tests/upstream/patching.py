"""Apply a proposed upstream patch to the installed TVM wheel, in memory only.

A patch is a list of ``(old, new)`` text replacements in one function of TVM's Python.
:func:`patched_function` re-compiles that function's source with them applied (each
``old`` must occur exactly once) in a copy of its module's globals, and returns the new
function; tests install it with pytest's ``monkeypatch`` (undone after the test), so the
wheel on disk is never modified. The same replacements, applied to TVM main, are the
diffs under ``docs/upstream/patches/``.
"""

import inspect
import sys


def apply_replacements(text: str, replacements, where: str = "") -> str:
    for old, new in replacements:
        count = text.count(old)
        if count != 1:
            raise AssertionError(f"patch context found {count} times in {where}:\n{old}")
        text = text.replace(old, new)
    return text


def patched_function(func, replacements, extra_globals=None):
    """``func`` (a function or a method, undecorated) with the patch applied to its source.

    The replacement texts are written as in the file (at the function's indentation)."""
    raw = inspect.getsource(func)
    indent = len(raw) - len(raw.lstrip(" "))
    source = apply_replacements(
        _strip(raw, indent), [(_strip(o, indent), _strip(n, indent)) for o, n in replacements], func.__qualname__
    )
    namespace = dict(sys.modules[func.__module__].__dict__)
    namespace.update(extra_globals or {})
    filename = f"{inspect.getsourcefile(func)} (patched in memory)"
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102
    return namespace[func.__name__]


def _strip(text, indent):
    """Remove ``indent`` leading spaces from every line that has them."""
    return "\n".join(line[indent:] if line[:indent] == " " * indent else line for line in text.split("\n"))
