"""TVM 0.27 defect 2: the default build path emits ``vload4`` on an image.

``tvm.compile`` / ``tvm.tirx.build`` with the default ``pipeline="default"``
(also what ``relax.build`` passes down) always picks the generic ``s_tir``
TIR pipeline, even for ``qcom/adreno-opencl-texture``:
``tirx.compilation_pipeline.get_tir_pipeline("default")`` maps "default" to
"s_tir", and the target-dependent ``get_default_tir_pipeline`` is only used
for ``pipeline=None`` (which is broken too, see defect 7). The generic
pipeline has no ``TextureFlatten``, so a ``global.texture*`` buffer stays a
flat pointer access while codegen still declares the parameter
``image2d_array_t``. Observed symptom: the kernel reads the image with
``vload4(0, A_ptr + ...)``, and the OpenCL compiler rejects it (PoCL:
"invalid operands to binary expression ('__read_only image2d_array_t' and
'int')").

The second test is the form the bug takes for a model: a conv2d already in
NCHW4c through the upstream Adreno Relax pipeline emits
``vload4(0, x_ptr + ...)`` on ``image2d_array_t x_ptr``. ``ConvertLayout``
is left out of that pipeline here because it fails on its own on this
model (defect 6).
"""

import re

import pytest
import tvm
from tvm.script import tirx as T
from defect import KnownDefect, pinned


def _target():
    return tvm.target.Target("qcom/adreno-opencl-texture").with_host(tvm.target.Target("llvm"))


def _opencl_source(rt_mod):
    """OpenCL C source of the first opencl module under a build result."""
    if isinstance(rt_mod, tvm.runtime.Executable):
        rt_mod = rt_mod.mod
    stack = [rt_mod]
    while stack:
        m = stack.pop()
        if m.kind == "opencl":
            return m.inspect_source()
        stack.extend(m.imports)
    raise AssertionError("no opencl module in the build result")


def _vload_on_image_lines(src):
    """Source lines that apply vloadN to an image2d_array_t parameter."""
    images = set(re.findall(r"image2d_array_t\s+(\w+)", src))
    assert images, "expected an image2d_array_t parameter:\n" + src
    pat = re.compile(r"vload\d*\s*\(\s*[^,]+,\s*(" + "|".join(images) + r")\b")
    return [line.strip() for line in src.splitlines() if pat.search(line)]


def _build_on_opencl(src):
    cl = pytest.importorskip("pyopencl")
    try:
        devices = [d for p in cl.get_platforms() for d in p.get_devices() if d.image_support]
    except cl.Error:
        devices = []
    if not devices:
        pytest.skip("no OpenCL device with image support")
    ctx = cl.Context([devices[0]])
    try:
        cl.Program(ctx, src).build()
    except cl.Error as err:
        raise AssertionError(f"OpenCL rejects the generated kernel:\n{err}") from err


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
    reason="TVM 0.27: tvm.compile uses the generic s_tir pipeline for the Adreno "
    "texture target and emits vload4 on an image2d_array_t argument",
)
def test_compile_texture_primfunc_reads_image_with_read_imagef():
    with pinned(r"vload applied to an image2d_array_t argument"):
        src = _opencl_source(tvm.compile(texture_to_buffer, _target()))
        bad = _vload_on_image_lines(src)
        assert not bad, "vload applied to an image2d_array_t argument:\n" + "\n".join(bad)
        assert re.search(r"read_imagef\s*\(\s*A_ptr\b", src, re.IGNORECASE), src
        _build_on_opencl(src)


@pytest.mark.xfail(
    strict=True,
    raises=KnownDefect,
    reason="TVM 0.27: the Adreno Relax pipeline on an NCHW4c conv2d emits "
    "vload4 on an image2d_array_t argument",
)
def test_adreno_relax_pipeline_nchw4c_conv2d_reads_image_with_read_imagef():
    with pinned(r"vload applied to an image2d_array_t argument"):
        from tvm.relax.backend.adreno import pipeline as adreno
        from tvm.script import relax as R

        @tvm.script.ir_module
        class Model:
            @R.function
            def main(
                x: R.Tensor((1, 1, 8, 8, 4), "float32"), w: R.Tensor((4, 4, 3, 3, 4), "float32")
            ):
                with R.dataflow():
                    y = R.nn.conv2d(
                        x, w, padding=1, data_layout="NCHW4c", kernel_layout="OIHW4o",
                        out_layout="NCHW4c",
                    )
                    R.output(y)
                return y

        target = _target()
        with target:
            # Upstream legalize passes minus ConvertLayout (that one fails on this
            # model by itself: defect 6).
            passes = [p for p in adreno.legalize_passes(target) if p.info.name != "ConvertLayout"]
            mod = tvm.transform.Sequential(passes)(Model)
        rest = tvm.transform.Sequential(
            adreno.dataflow_lower_passes(target) + adreno.finalize_passes(target)
        )
        src = _opencl_source(tvm.compile(mod, target, relax_pipeline=rest))
        bad = _vload_on_image_lines(src)
        assert not bad, "vload applied to an image2d_array_t argument:\n" + "\n".join(bad)
        _build_on_opencl(src)



if __name__ == "__main__":
    import sys

    from standalone import run

    sys.exit(run(globals()))
