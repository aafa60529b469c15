"""Calling a kernel factory (which parses its TVMScript) without the stack inspection that makes
TVM 0.27's parser slow (upstream defect 17, docs/upstream/defect17-macro-lookup-inspects-stack.md).

Each ``T.macro`` expansion finds the active parser with ``inspect.getouterframes``, which builds
a source-line record for *every* frame on the stack; for each frame of code the parser
``eval``-ed (no file) that means a scan of all of ``sys.modules`` (``inspect.getmodule``; TVM
imports torch, ~1950 modules). A conv factory expands its macros ~10 times in a stack ~100 frames
deep: ~80% of a cold ResNet-50 compile went there. The lookup only needs the frames' globals.
:func:`call_factory` therefore, while a factory runs:

- replaces ``ScriptMacro._find_parser_def`` by a walk over ``frame.f_back`` that checks the same
  frames in the same order for the same global (so the same parser, or the same RuntimeError);
  the original is restored afterwards (this module never leaves TVM changed);
- runs the factory in a fresh thread, so that ``T.prim_func``'s own ``inspect.stack()`` (once per
  parse; it needs the source of the decorating frame) walks a few frames, not the caller's stack.

The PrimFuncs are the same (tests/kernels/test_script_parser.py compares them structurally).
"""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager

from tvm.script.parser.core.parser import ScriptMacro

_slow_find_parser_def = ScriptMacro._find_parser_def
_active = [0]
_lock = threading.Lock()


def _find_parser_def(self):
    """The first ``parser_object_name`` global from the caller's frame outwards (what
    ``ScriptMacro._find_parser_def`` returns, without building ``inspect.FrameInfo`` records)."""
    frame = sys._getframe(1)
    while frame is not None:
        parser = frame.f_globals.get(ScriptMacro.parser_object_name)
        if parser is not None:
            return parser
        frame = frame.f_back
    raise RuntimeError(f"{ScriptMacro.parser_object_name} not available")


@contextmanager
def fast_macro_lookup():
    """``ScriptMacro._find_parser_def`` as a frame walk while the block runs (nestable, and
    across threads: restored when the last user leaves)."""
    with _lock:
        _active[0] += 1
        ScriptMacro._find_parser_def = _find_parser_def
    try:
        yield
    finally:
        with _lock:
            _active[0] -= 1
            if _active[0] == 0:
                ScriptMacro._find_parser_def = _slow_find_parser_def


def call_factory(factory, *args, **kwargs):
    """``factory(*args, **kwargs)`` in a fresh thread with :func:`fast_macro_lookup`; its
    exception, if any, is raised here."""
    result: dict = {}

    def run():
        try:
            with fast_macro_lookup():
                result["value"] = factory(*args, **kwargs)
        except BaseException as err:  # re-raised in the caller's thread
            result["error"] = err

    thread = threading.Thread(target=run, name=f"tir-adreno-parse-{getattr(factory, '__name__', 'factory')}")
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]
