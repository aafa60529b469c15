"""TVM 0.27 defect 14: the Adreno Relax pipeline crashes on call_tir to an int32-shaped PrimFunc.

A Relax ``main`` that ``R.call_tir``s a static-shape PrimFunc written in
TVMScript (buffer shapes ``(4,)``, i.e. int32, while Relax shapes are int64)
does not compile for ``qcom/adreno-opencl-texture``:
``tvm.compile(mod, target=Target("qcom/adreno-opencl-texture", host="llvm"))``
stops in ``relax.transform.SpecializePrimFuncBasedOnCallSite`` with

    TypeError: Check failed: (maybe_var) is false: The signature of target
    buffer exprected an independent Var, but got 4.

(tirx/ir/specialize.cc, UpdateSpecializeVarMap): the pass compares the
call site's int64 shape with the buffer's int32 shape, sees them differ
structurally and insists the buffer dimension be a Var. The pass is only in
the Adreno pipeline; the same module compiles for the generic OpenCL target,
and the same PrimFunc with ``T.int64`` shapes compiles for Adreno (control
tests). Memory scope plays no part: plain ``global`` buffers trigger it, and
a ``global.texture`` parameter with int64 shapes gets through.
"""

import pytest
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T
from defect import KnownDefect, pinned


@I.ir_module
class Int32Shapes:
    @T.prim_func(private=True, s_tir=True)
    def add_one(a: T.handle, b: T.handle):
        A = T.match_buffer(a, (4,), "float32")
        B = T.match_buffer(b, (4,), "float32")
        for i in range(4):
            with T.sblock("b"):
                vi = T.axis.spatial(4, i)
                B[vi] = A[vi] + T.float32(1)

    @R.function
    def main(x: R.Tensor((4,), "float32")):
        cls = Int32Shapes
        with R.dataflow():
            y = R.call_tir(cls.add_one, (x,), out_ty=R.Tensor((4,), "float32"))
            R.output(y)
        return y


@I.ir_module
class Int64Shapes:
    @T.prim_func(private=True, s_tir=True)
    def add_one(a: T.handle, b: T.handle):
        A = T.match_buffer(a, (T.int64(4),), "float32")
        B = T.match_buffer(b, (T.int64(4),), "float32")
        for i in range(T.int64(4)):
            with T.sblock("b"):
                vi = T.axis.spatial(T.int64(4), i)
                B[vi] = A[vi] + T.float32(1)

    @R.function
    def main(x: R.Tensor((4,), "float32")):
        cls = Int64Shapes
        with R.dataflow():
            y = R.call_tir(cls.add_one, (x,), out_ty=R.Tensor((4,), "float32"))
            R.output(y)
        return y


def _adreno():
    return tvm.target.Target("qcom/adreno-opencl-texture", host="llvm")


def test_control_int64_shapes_compile_for_adreno():
    tvm.compile(Int64Shapes, target=_adreno())


def test_control_int32_shapes_compile_for_generic_opencl():
    tvm.compile(Int32Shapes, target=tvm.target.Target({"kind": "opencl"}, host="llvm"))


@pytest.mark.xfail(
    strict=True,
    raises=KnownDefect,
    reason="TVM 0.27: SpecializePrimFuncBasedOnCallSite 'expected an independent Var, "
    "but got 4' on call_tir to an int32-shaped static PrimFunc",
)
def test_specialize_prim_func_based_on_call_site_int32_shapes():
    with pinned(r"an independent Var, but got 4"):
        try:
            mod = relax.transform.SpecializePrimFuncBasedOnCallSite()(Int32Shapes)
        except TypeError as err:
            raise AssertionError(f"SpecializePrimFuncBasedOnCallSite: {err}") from err
        assert "add_one" in [gv.name_hint for gv in mod.functions]


@pytest.mark.xfail(
    strict=True,
    raises=KnownDefect,
    reason="TVM 0.27: tvm.compile for qcom/adreno-opencl-texture fails in "
    "SpecializePrimFuncBasedOnCallSite on call_tir to an int32-shaped static PrimFunc",
)
def test_compile_call_tir_int32_shapes_for_adreno():
    with pinned(r"an independent Var, but got 4"):
        try:
            tvm.compile(Int32Shapes, target=_adreno())
        except TypeError as err:
            raise AssertionError(f"tvm.compile for the Adreno texture target: {err}") from err


if __name__ == "__main__":
    import sys

    from standalone import run

    sys.exit(run(globals()))
