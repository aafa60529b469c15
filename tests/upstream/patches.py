"""Proposed fixes for the Python-side TVM defects, as text replacements.

Each ``PATCH_N`` maps a TVM source file (path in apache/tvm) to ``(function, [(old, new),
...])``: the function the hunk lives in and the replacements, written at the file's
indentation. ``install_N(monkeypatch)`` applies the patch to the installed wheel in memory
(see ``patching.py``); ``docs/upstream/make_patches.py`` turns the same replacements into
the unified diffs against TVM main under ``docs/upstream/patches/``.
"""

import ast
import sys

import tvm

from patching import patched_function

# Defects 2 and 7: the Adreno TIR pipeline cannot be reached through tvm.tirx.build.
PATCH_7 = {
    "python/tvm/s_tir/backend/adreno/pipeline.py": (
        "tvm.s_tir.backend.adreno.pipeline:default_tir_pipeline",
        [
            (
                "    return _pipeline\n",
                "    return _pipeline, tir_pipeline.finalize_host_passes, tir_pipeline.finalize_device_passes\n",
            )
        ],
    ),
    "python/tvm/tirx/build.py": (
        "tvm.tirx.build:build",
        [
            (
                """    if pipeline is not None:
        # custom pipeline
        assert isinstance(pipeline, str)
        pipeline, finalize_host_passes, finalize_device_passes = tvm.tirx.get_tir_pipeline(pipeline)
    else:
        # default pipeline depends on the target
""",
                """    if isinstance(pipeline, tvm.transform.Pass):
        # a custom pipeline Pass: finalize with the default passes
        finalize_host_passes = tvm.tirx.compilation_pipeline.finalize_host_passes
        finalize_device_passes = tvm.tirx.compilation_pipeline.finalize_device_passes
    elif pipeline is not None and (pipeline != "default" or target is None):
        # a pipeline by name
        pipeline, finalize_host_passes, finalize_device_passes = tvm.tirx.get_tir_pipeline(pipeline)
    else:
        # "default" and None: the default pipeline depends on the target
""",
            )
        ],
    ),
}

# Defect 12: dlight's GEMV analysis asserts instead of declining a unit reduction.
PATCH_12 = {
    "python/tvm/s_tir/dlight/analysis/gemv.py": (
        "tvm.s_tir.dlight.analysis.gemv:normalize",
        [
            (
                "    assert s_loops\n    assert r_loops\n",
                "    if not s_loops or not r_loops:\n"
                "        # e.g. a reduction whose extent is 1: not a GEMV, leave it to the other rules\n"
                "        return None\n",
            )
        ],
    ),
}


# Defect 11: a scalar assigned once inside an sblock becomes a mutable local buffer.
PATCH_11 = {
    "python/tvm/tirx/script/parser/parser.py": (
        "tvm.tirx.script.parser.parser:bind_assign_value",
        [
            (
                """        else:
            # x = expr -> scalar (auto-typed from value)
            scalar = T.local_scalar(dtype=str(value.ty.dtype))
""",
                """        elif _assigned_once(self, var_name):
            # assigned once: an immutable binding (printed `x: T.let[...] = expr`), which
            # block read/write region inference sees through
            ann_var = T.Bind(value)
            IRBuilder.name(var_name, ann_var)
            return ann_var
        else:
            # x = expr -> scalar (auto-typed from value)
            scalar = T.local_scalar(dtype=str(value.ty.dtype))
""",
            )
        ],
    ),
}


def _assigned_once(self, name):
    """Whether ``name`` is stored to exactly once in the parsed source (by assignment,
    augmented assignment, loop or with target, tuple element): such a scalar can be an
    immutable binding."""
    tree = ast.parse(self.diag.source.source)
    stores = sum(
        isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id == name
        for node in ast.walk(tree)
    )
    return stores == 1


# Defect 13: dlight's Reduction rule puts a spatial loop under the reduction thread loop.
PATCH_13 = {
    "python/tvm/s_tir/dlight/gpu/reduction.py": (
        "tvm.s_tir.dlight.gpu.reduction:Reduction.apply",
        [
            (
                """        if is_inner_reduction:
            self._sch_inner_reduction(
""",
                """        if is_inner_reduction:
            if c_factor:
                # The write-back would put the spatial loop `c` under the reduction thread
                # loop, which LowerCrossThreadReduction rejects: leave it to other rules.
                return None
            self._sch_inner_reduction(
""",
            )
        ],
    ),
}

# Defect 15 (Python half): dlight's GEMV store loop covers only the output extent under a
# TS-thread launch. The C++ half (LowerCrossThreadReduction drops a one-clause predicate)
# is in docs/upstream/patches/defect15-lower-cross-thread-reduction.diff.
PATCH_15 = {
    "python/tvm/s_tir/dlight/gpu/gemv.py": (
        "tvm.s_tir.dlight.gpu.gemv:GEMV.sch_outer_reduction",
        [
            (
                """            tr, ts = sch.get_loops(block=gemv)[1:]
            sch.reorder(ts, tr)
            sch.bind(ts, TAG_S)
""",
                """            tr, ts = sch.get_loops(block=gemv)[1:]
            sch.reorder(ts, tr)
            # The store loop covers only the output extent: split it by TS so that it binds
            # the same thread extent as the loops above, with a `ts < extent` guard.
            _, ts = sch.split(ts, factors=[None, TS], preserve_unit_iters=True)
            sch.bind(ts, TAG_S)
""",
            )
        ],
    ),
}

# Defect 17: every T.macro expansion builds an inspect.FrameInfo for each frame on the stack
# (one line of source context each; a sys.modules scan for eval-ed code) to read f_globals.
PATCH_17 = {
    "python/tvm/script/parser/core/parser.py": (
        "tvm.script.parser.core.parser:ScriptMacro._find_parser_def",
        [
            (
                """        outer_frame_infos = inspect.getouterframes(inspect.currentframe())
        for finfo in outer_frame_infos:
            parser = finfo.frame.f_globals.get(ScriptMacro.parser_object_name)
            if parser is not None:
                return parser
""",
                """        # Walk the frames themselves: only their globals are needed, and
        # inspect.getouterframes would build a FrameInfo with source context for every frame
        # on the stack (a sys.modules scan for each frame of eval-ed code), on every expansion.
        frame = inspect.currentframe()
        while frame is not None:
            parser = frame.f_globals.get(ScriptMacro.parser_object_name)
            if parser is not None:
                return parser
            frame = frame.f_back
""",
            )
        ],
    ),
}


def _function(ref):
    module_name, qualname = ref.split(":")
    obj = sys.modules.get(module_name) or __import__(module_name, fromlist=["_"])
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def patched(patch):
    """{function reference: patched function} for a PATCH_N."""
    return {ref: patched_function(_function(ref), repl) for ref, repl in patch.values()}


def install_7(monkeypatch):
    """Defects 2 and 7: the Adreno pipeline returns the triple; tirx.build resolves
    "default" per target and accepts a Pass."""
    new = patched(PATCH_7)
    from tvm.tirx import compilation_pipeline

    monkeypatch.setitem(
        compilation_pipeline.PIPELINE_MAP, "adreno", new["tvm.s_tir.backend.adreno.pipeline:default_tir_pipeline"]
    )
    # tvm.tirx.build (the function) is looked up at call time by tvm.compile and relax.build
    monkeypatch.setattr(tvm.tirx, "build", new["tvm.tirx.build:build"])


def install_12(monkeypatch):
    """Defect 12: GEMV's normalize declines (None) a block without spatial or reduction loops."""
    import tvm.s_tir.dlight.gpu.gemv as gpu_gemv

    monkeypatch.setattr(gpu_gemv, "normalize", patched(PATCH_12)["tvm.s_tir.dlight.analysis.gemv:normalize"])


def install_11(monkeypatch):
    """Defect 11: a once-assigned scalar is bound immutably (T.Bind)."""
    parser = sys.modules["tvm.tirx.script.parser.parser"]
    (ref, repl), = PATCH_11.values()
    new = patched_function(_function(ref), repl, {"_assigned_once": _assigned_once})
    monkeypatch.setattr(parser, "bind_assign_value", new)  # looked up at call time


def install_13(monkeypatch):
    """Defect 13: Reduction declines an inner reduction with an unrolled spatial factor."""
    from tvm.s_tir.dlight.gpu.reduction import Reduction

    monkeypatch.setattr(Reduction, "apply", patched(PATCH_13)["tvm.s_tir.dlight.gpu.reduction:Reduction.apply"])


def install_15(monkeypatch):
    """Defect 15, Python half: GEMV's store loop is split by TS (guarded)."""
    from tvm.s_tir.dlight.gpu.gemv import GEMV

    monkeypatch.setattr(GEMV, "sch_outer_reduction", patched(PATCH_15)["tvm.s_tir.dlight.gpu.gemv:GEMV.sch_outer_reduction"])


def install_17(monkeypatch):
    """Defect 17: the macro's parser lookup walks frame.f_back instead of inspect.getouterframes."""
    from tvm.script.parser.core.parser import ScriptMacro

    new = patched(PATCH_17)["tvm.script.parser.core.parser:ScriptMacro._find_parser_def"]
    monkeypatch.setattr(ScriptMacro, "_find_parser_def", new)  # TIRMacro and TIRInline inherit it
