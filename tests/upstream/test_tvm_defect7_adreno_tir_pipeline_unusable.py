"""TVM 0.27 defect 7: the Adreno TIR pipeline cannot be selected by name.

``tvm.tirx.build`` (and ``tvm.compile(..., tir_pipeline=...)``) unpacks its
pipeline as ``pipeline, finalize_host_passes, finalize_device_passes =
get_tir_pipeline(name)``. Every registered factory returns that triple
except ``tvm.s_tir.backend.adreno.pipeline.default_tir_pipeline``, which
returns a single ModulePass. So ``pipeline="adreno"`` and ``pipeline=None``
(which resolves to "adreno" for the ``qcom/adreno-opencl-texture`` target)
both fail with

    TypeError: cannot unpack non-iterable ModulePass object

and passing the Pass object itself (documented as accepted) hits a bare
``assert isinstance(pipeline, str)`` in tirx/build.py (AssertionError). So
the only pipeline the public build API can apply to this target is the
generic one, which produces the invalid image code of defect 2.
"""

import re
import traceback

import pytest
import tvm
from tvm.s_tir.backend.adreno.pipeline import default_tir_pipeline
from tvm.script import tirx as T
from defect import KnownDefect, pinned


@T.prim_func(s_tir=True)
def texture_to_buffer(a: T.handle, b: T.handle):
    A = T.match_buffer(a, (1, 2, 2, 3, 4), "float32", scope="global.texture")
    B = T.match_buffer(b, (1, 2, 2, 3, 4), "float32")
    for c in T.thread_binding(2, thread="blockIdx.y"):
        for h in T.thread_binding(2, thread="blockIdx.x"):
            for w in T.thread_binding(3, thread="threadIdx.x"):
                for k in T.vectorized(4):
                    with T.sblock("copy"):
                        vc, vh, vw, vk = T.axis.remap("SSSS", [c, h, w, k])
                        B[0, vc, vh, vw, vk] = A[0, vc, vh, vw, vk]


@pytest.mark.xfail(
    strict=True,
    raises=KnownDefect,
    reason="TVM 0.27: adreno default_tir_pipeline returns one Pass, tirx.build "
    "expects (pipeline, finalize_host, finalize_device): TypeError",
)
@pytest.mark.parametrize(
    "pipeline", ["adreno", None, "pass-object"], ids=["adreno", "target-default", "pass-object"]
)
def test_tirx_build_with_adreno_pipeline(pipeline):
    with pinned(r"cannot unpack non-iterable ModulePass object|assert isinstance\(pipeline, str\)"):
        target = tvm.target.Target("qcom/adreno-opencl-texture").with_host(tvm.target.Target("llvm"))
        if pipeline == "pass-object":
            pipeline = default_tir_pipeline()
        try:
            lib = tvm.tirx.build(texture_to_buffer, target, pipeline=pipeline)
        except (TypeError, AssertionError) as err:
            where = traceback.extract_tb(err.__traceback__)[-1].line  # a bare assert has no message
            raise AssertionError(
                f"tvm.tirx.build(pipeline={pipeline!r}): {type(err).__name__}: {str(err) or where}"
            ) from err
        (dev,) = [m for m in lib.imports if m.kind == "opencl"]
        src = dev.inspect_source()
        assert re.search(r"read_imagef\s*\(\s*A_ptr\b", src, re.IGNORECASE), src
        assert not re.search(r"vload\d*\s*\([^,]+,\s*A_ptr\b", src), src


if __name__ == "__main__":
    import sys

    from standalone import run

    sys.exit(run(globals()))
