"""TVM 0.27 defect 12: dlight's GEMV rule asserts on a reduction of extent 1.

A grouped conv2d with one input channel per group and a 1x1 kernel (Relax
``nn.conv2d``, data (1, 2, 1, 2), weight (2, 1, 1, 1), groups=2), legalized
with ``relax.transform.LegalizeOps`` and scheduled with dlight's default GPU
rules under ``Target({"kind": "opencl"})``, crashes the pass:

    s_tir/dlight/gpu/gemv.py, line 73, in apply
    s_tir/dlight/analysis/gemv.py, line 158, in normalize
        assert r_loops
    AssertionError

The reduction (rc, ry, rx) has extent 1, so after normalization no reduction
loop is left; ``GEMV.apply`` accepts the block as a GEMV anyway and
``normalize`` asserts instead of declining (returning None) so that the next
rule (Reduction / GeneralReduction / Fallback) can take it. This is
upstream's default GPU pipeline (relax/backend/gpu_generic), so ``tvm.compile``
of such a model for OpenCL/CUDA fails the same way.
"""

import traceback
from pathlib import PurePath

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


def _raised_in_dlight_gemv(err):
    frames = traceback.extract_tb(err.__traceback__)
    return bool(frames) and PurePath(frames[-1].filename).match("dlight/*/gemv.py")


@pytest.mark.xfail(
    strict=True,
    raises=KnownDefect,
    reason="TVM 0.27: dlight GEMV rule 'assert r_loops' on a grouped conv whose "
    "reduction has extent 1",
)
def test_dlight_default_gpu_rules_schedule_unit_reduction_grouped_conv():
    with pinned(r"dlight GEMV rule: `assert r_loops`"):
        mod = _legalized_grouped_conv((1, 2, 1, 2), (2, 1, 1, 1), groups=2)
        rules = dl.ApplyDefaultSchedule(
            dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()
        )
        try:
            with tvm.target.Target({"kind": "opencl"}):
                mod = rules(mod)
        except AssertionError as err:
            if not _raised_in_dlight_gemv(err):
                raise RuntimeError("unexpected AssertionError outside dlight's GEMV rule") from err
            where = traceback.extract_tb(err.__traceback__)[-1]
            path = "/".join(PurePath(where.filename).parts[-3:])
            raise AssertionError(
                f"dlight GEMV rule: `{where.line}` failed at {path}:{where.lineno}"
            ) from err
        (func,) = [f for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
        assert func.attrs["tirx.is_scheduled"]



if __name__ == "__main__":
    import sys

    from standalone import run

    sys.exit(run(globals()))
