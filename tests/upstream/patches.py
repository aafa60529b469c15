"""Proposed fixes for the Python-side TVM defects, as text replacements.

Each ``PATCH_N`` maps a TVM source file (path in apache/tvm) to ``(function, [(old, new),
...])``: the function the hunk lives in and the replacements, written at the file's
indentation. ``install_N(monkeypatch)`` applies the patch to the installed wheel in memory
(see ``patching.py``); ``docs/upstream/make_patches.py`` turns the same replacements into
the unified diffs against TVM main under ``docs/upstream/patches/``.
"""

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
