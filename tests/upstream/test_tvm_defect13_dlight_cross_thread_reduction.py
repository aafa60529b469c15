"""TVM 0.27 defect 13: dlight's schedule for a grouped conv fails LowerCrossThreadReduction.

A grouped conv2d with 4 output channels per group (Relax ``nn.conv2d``, data
(1, 4, 3, 3), weight (8, 2, 2, 2), groups=2), legalized with
``relax.transform.LegalizeOps`` and scheduled with dlight's default GPU rules
under ``Target({"kind": "opencl"})``, is scheduled without complaint, but TVM's
own default TIR pipeline then rejects that schedule
(``tvm.tirx.build(func, Target({"kind": "opencl"}, host="llvm"))``):

    ValueError: Check failed: n_deepest_reduction_loops == reduction_loops.size()
    (0 vs. 1) : Cross-thread reduction requires all the reduction-related loops
    to be the deepest among all statements outside the desired block. However,
    block group_conv2d_nchw needs cross-thread reduction, while the
    reduction-related loops outside of it are not the deepest statements ...

(s_tir/transform/lower_cross_thread_reduction.cc). dlight's rules are
upstream's default GPU pipeline (relax/backend/gpu_generic), so ``tvm.compile``
of such a model for OpenCL fails the same way.
"""

import pytest
import tvm
from tvm import relax
from tvm.s_tir import dlight as dl
from defect import KnownDefect, pinned


def _legalized_grouped_conv(data_shape, weight_shape, groups):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(list(data_shape), "float32"))
    w = relax.Var("w", relax.TensorType(list(weight_shape), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.conv2d(x, w, groups=groups))
        bb.emit_func_output(y)
    return relax.transform.LegalizeOps()(bb.get())


@pytest.mark.xfail(
    strict=True,
    raises=KnownDefect,
    reason="TVM 0.27: dlight's schedule of a grouped conv with 4 outputs per group "
    "fails LowerCrossThreadReduction in the default TIR pipeline",
)
def test_dlight_scheduled_grouped_conv_builds_for_opencl():
    with pinned(r"Cross-thread reduction requires all the reduction-related loops to be the deepest"):
        mod = _legalized_grouped_conv((1, 4, 3, 3), (8, 2, 2, 2), groups=2)
        rules = dl.ApplyDefaultSchedule(
            dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()
        )
        with tvm.target.Target({"kind": "opencl"}):
            mod = rules(mod)  # succeeds: the failure is in lowering dlight's result
        (func,) = [f for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
        assert func.attrs["tirx.is_scheduled"]
        # LegalizeOps makes it private; tirx.build of a private PrimFunc fails later in
        # BF16StorageLegalize ("must be called after MakePackedAPI"), a separate wart.
        func = func.with_attr("global_symbol", "main")
        target = tvm.target.Target({"kind": "opencl"}, host={"kind": "llvm"})
        try:
            lib = tvm.tirx.build(func, target)
        except ValueError as err:
            # The message goes on with the whole module; keep its key line.
            key = next((line for line in str(err).splitlines() if "Check failed" in line), str(err))
            raise AssertionError(f"default OpenCL TIR pipeline on dlight's schedule: {key}") from err
        (dev,) = [m for m in lib.imports if m.kind == "opencl"]
        assert "__kernel" in dev.inspect_source()


if __name__ == "__main__":
    import sys

    from standalone import run

    sys.exit(run(globals()))
