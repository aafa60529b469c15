"""TVM 0.27 defect 6: ConvertLayout fails on a conv2d already in NCHW4c.

A Relax conv2d that is already ``data_layout="NCHW4c",
kernel_layout="OIHW4o", out_layout="NCHW4c"`` should pass through
``relax.transform.ConvertLayout({"relax.nn.conv2d": ["NCHW4c", "OIHW4o",
"NCHW4c"]})`` unchanged (the desired layouts are the current ones). Instead
the pass raises

    InternalError: Check failed: (src.ndim() == dst.ndim() &&
    input.ndim() == src.ndim()) is false: Layouts must have the same size

from ``relax::TransposeLike`` (infer_layout_utils.cc). The upstream Adreno
Relax pipeline runs this pass first, so ``tvm.compile`` of a model already
in NCHW4c for ``qcom/adreno-opencl-texture`` fails with the same error:
neither NCHW (defect 1) nor NCHW4c models get through it.
"""

import pytest
import tvm
from tvm import relax
from tvm.script import relax as R
from defect import KnownDefect, pinned


@tvm.script.ir_module
class Nchw4cConv:
    @R.function
    def main(x: R.Tensor((1, 1, 8, 8, 4), "float32"), w: R.Tensor((4, 4, 3, 3, 4), "float32")):
        with R.dataflow():
            y = R.nn.conv2d(
                x, w, padding=1, data_layout="NCHW4c", kernel_layout="OIHW4o", out_layout="NCHW4c"
            )
            R.output(y)
        return y


@pytest.mark.xfail(
    strict=True,
    raises=KnownDefect,
    reason="TVM 0.27: ConvertLayout raises 'Layouts must have the same size' on an "
    "NCHW4c conv2d",
)
@pytest.mark.parametrize(
    "layouts",
    [["NCHW4c", "OIHW4o"], ["NCHW4c", "OIHW4o", "NCHW4c"]],
    ids=["data-kernel", "adreno-pipeline-desired-layouts"],
)
def test_convert_layout_to_current_blocked_layout_is_noop(layouts):
    with pinned(r"Layouts must have the same size"):
        try:
            out = relax.transform.ConvertLayout({"relax.nn.conv2d": layouts})(Nchw4cConv)
        except tvm.error.InternalError as err:
            raise AssertionError(f"ConvertLayout({layouts}) on an NCHW4c conv2d: {err}") from err
        text = out.script()
        assert "layout_transform" not in text, text
        assert 'data_layout="NCHW4c"' in text and 'kernel_layout="OIHW4o"' in text, text


@pytest.mark.xfail(
    strict=True,
    raises=KnownDefect,
    reason="TVM 0.27: tvm.compile of an NCHW4c conv2d for the Adreno texture target "
    "fails in ConvertLayout",
)
def test_compile_nchw4c_conv2d_for_adreno_texture():
    with pinned(r"Layouts must have the same size"):
        target = tvm.target.Target("qcom/adreno-opencl-texture").with_host(tvm.target.Target("llvm"))
        try:
            tvm.compile(Nchw4cConv, target)
        except tvm.error.InternalError as err:
            raise AssertionError(f"tvm.compile for {target.kind.name}/adreno: {err}") from err


if __name__ == "__main__":
    import sys

    from standalone import run

    sys.exit(run(globals()))
