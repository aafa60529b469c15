"""One OpenCL program per model: its kernels' sources linked into one source.

A driver builds, caches and loads one program faster than many small ones (TVM's own module
does the same): one ``clBuildProgram``, one cached binary to read and verify, one driver
load (PoCL parses one LLVM module instead of one per kernel). TVM names each PrimFunc's
kernels after the function (``main_kernel``, ``main_kernel_1``), so the sources of a model's
kernels all define the same names: :func:`link` renames every kernel of the ``i``-th source
to ``tir_adreno_k<i>_<name>`` and undefines the macros each source defines after it, so each
source preprocesses as it would alone. Text only: no TVM, no OpenCL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Bumped when the linked text changes for the same sources (it is part of the binary's key).
VERSION = 1
_PREFIX = "tir_adreno_k"
_KERNEL = re.compile(r"__kernel\s+void\s+(\w+)\s*\(")
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)", re.M)


@dataclass(frozen=True)
class LinkedSource:
    """The linked source and, per input source, its kernels' names in it (old -> new)."""

    source: str
    kernel_names: tuple[dict[str, str], ...]


def linkable(sources: list[str]) -> bool:
    """Whether :func:`link` can join ``sources``: each defines a kernel, none uses the names
    it would give them, and none defines anything but kernels and macros at the top level
    (the bounds sanitizer's helper function would be defined twice: its modules stay apart)."""
    return all(_KERNEL.search(s) and _PREFIX not in s and "tir_adreno_check(" not in s for s in sources)


def kernel_names(sources: list[str]) -> tuple[dict[str, str], ...]:
    """Per source of ``sources``, its kernels' names in the linked source (old -> new)."""
    return tuple({k: f"{_PREFIX}{i}_{k}" for k in dict.fromkeys(_KERNEL.findall(s))} for i, s in enumerate(sources))


def link(sources: list[str]) -> LinkedSource:
    """``sources`` (distinct) as one source; see the module's docstring."""
    parts, names = [], kernel_names(sources)
    for i, (source, kernels) in enumerate(zip(sources, names)):
        pattern = re.compile(r"\b(" + "|".join(map(re.escape, kernels)) + r")\b")
        undefs = "".join(f"#undef {m}\n" for m in dict.fromkeys(_DEFINE.findall(source)))
        parts.append(f"// tir-adreno: source {i} of {len(sources)}\n"
                     f"{pattern.sub(lambda m: kernels[m.group(1)], source)}\n{undefs}")
    return LinkedSource("".join(parts), names)
