"""TVM 0.27 defect 17: every T.macro expansion inspects the whole Python stack.

``ScriptMacro.__call__`` finds the active parser with ``_find_parser_def``, which runs
``inspect.getouterframes(inspect.currentframe())`` only to read each frame's ``f_globals``.
``getouterframes`` builds an ``inspect.FrameInfo`` for *every* frame on the stack, with a line
of source context (``inspect.getframeinfo`` -> ``findsource``); for each frame of code the
parser ``eval``-ed (file ``<ast>``, one per nesting level of macros) ``inspect.getmodule``
scans all of ``sys.modules``, three times (~1950 modules: tvm_ffi imports torch). So one expansion
costs time proportional to the caller's stack depth, plus module scans per nesting level:
a kernel factory called deep in a compiler and expanding nested macros pays it on every
expansion (tir-adreno: most of a cold ResNet-50 compile, see docs/startup.md).

The repro counts ``inspect.getframeinfo`` calls made inside ``_find_parser_def`` for one
expansion parsed at the test's stack depth and 50 frames deeper: they grow by 50. Counts,
not times, so it is deterministic. The control: the macro expands correctly.
"""

import inspect

import pytest
import tvm
from tvm.script import tirx as T
from tvm.script.parser.core.parser import ScriptMacro

from defect import KnownDefect, pinned

EXTRA_DEPTH = 50
GROWS = r"AssertionError: inspect\.getframeinfo calls per T\.macro expansion grow with the caller's stack depth"


@T.macro
def add_one(B, i):
    B[i] = B[i] + T.float32(1)


def parse_with_macro():
    """One prim_func, one expansion of ``add_one``."""

    @T.prim_func
    def func(B: T.Buffer((4,), "float32")):
        for i in range(4):
            add_one(B, i)

    return func


def at_depth(extra, fn):
    """``fn()`` called ``extra`` Python frames deeper than the caller."""
    return fn() if extra == 0 else at_depth(extra - 1, fn)


def frame_infos_per_expansion(monkeypatch, extra):
    """The ``inspect.getframeinfo`` calls made inside ``ScriptMacro._find_parser_def`` while
    ``parse_with_macro`` runs ``extra`` frames deeper than the caller (it expands once)."""
    counts = []
    inside = [False]
    getframeinfo, find_parser_def = inspect.getframeinfo, ScriptMacro._find_parser_def

    def counting_getframeinfo(*args, **kwargs):
        if inside[0]:
            counts[-1] += 1
        return getframeinfo(*args, **kwargs)

    def counting_find_parser_def(self):
        counts.append(0)
        inside[0] = True
        try:
            return find_parser_def(self)
        finally:
            inside[0] = False

    with monkeypatch.context() as patch:
        patch.setattr(inspect, "getframeinfo", counting_getframeinfo)  # looked up by getouterframes
        patch.setattr(ScriptMacro, "_find_parser_def", counting_find_parser_def)
        at_depth(extra, parse_with_macro)
    assert len(counts) == 1, f"expected one macro expansion, got {len(counts)}"
    return counts[0]


def test_control_macro_expands():
    @T.prim_func
    def func(B: T.Buffer((4,), "float32")):  # add_one written out
        for i in range(4):
            B[i] = B[i] + T.float32(1)

    tvm.ir.assert_structural_equal(parse_with_macro(), func)
    with pytest.raises(RuntimeError, match="__current_script_parser__ not available"):
        add_one(None, 0)  # outside a parse there is no parser to find


@pytest.mark.xfail(
    strict=True,
    raises=KnownDefect,
    reason="TVM 0.27: ScriptMacro._find_parser_def builds an inspect.FrameInfo for every frame "
    "on the stack (inspect.getouterframes) on each T.macro expansion",
)
def test_macro_lookup_cost_does_not_grow_with_stack_depth():
    with pytest.MonkeyPatch.context() as monkeypatch:
        shallow = frame_infos_per_expansion(monkeypatch, 0)
        deep = frame_infos_per_expansion(monkeypatch, EXTRA_DEPTH)
    with pinned(GROWS):
        assert deep == shallow, (
            f"inspect.getframeinfo calls per T.macro expansion grow with the caller's stack depth: "
            f"{shallow} at the test's depth, {deep} at {EXTRA_DEPTH} frames deeper"
        )



if __name__ == "__main__":
    import sys

    from standalone import run

    sys.exit(run(globals()))
