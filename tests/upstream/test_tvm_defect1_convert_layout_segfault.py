"""TVM 0.27 defect 1: ConvertLayout to blocked layouts kills the process.

``relax.transform.ConvertLayout({"relax.nn.conv2d": ["NCHW4c", "OIHW4o"]})``
on a one-op NCHW conv2d Relax module segfaults (exit status -11, SIGSEGV,
backtrace ends in native code) instead of returning a module with
layout_transform ops around an NCHW4c/OIHW4o conv2d. The upstream Adreno
Relax pipeline (relax/backend/adreno/pipeline.py) runs exactly this pass
with ``["NCHW4c", "OIHW4o", "NCHW4c"]`` first, so no NCHW model compiles for
the ``qcom/adreno-opencl-texture`` target. Plain layouts (NHWC/OHWI) work.

A segfault would kill pytest, so the repro runs in a child interpreter (from
a file: TVMScript needs the source, which ``python -c`` does not keep).
Observed on apache-tvm 0.27.0.post1: the child dies with SIGSEGV.
"""

import signal
import subprocess
import sys

import pytest
from defect import KnownDefect, pinned

_REPRO = """
import tvm
from tvm import relax
from tvm.script import relax as R

@tvm.script.ir_module
class Mod:
    @R.function
    def main(x: R.Tensor((1, 4, 8, 8), "float32"), w: R.Tensor((4, 4, 3, 3), "float32")):
        with R.dataflow():
            y = R.nn.conv2d(x, w, padding=1)
            R.output(y)
        return y

out = relax.transform.ConvertLayout({"relax.nn.conv2d": %r})(Mod)
text = out.script()
assert 'data_layout="NCHW4c"' in text, text
assert 'kernel_layout="OIHW4o"' in text, text
print("CONVERTED")
"""


@pytest.mark.xfail(
    strict=True,
    raises=KnownDefect,
    reason="TVM 0.27: relax.transform.ConvertLayout to NCHW4c/OIHW4o segfaults",
)
@pytest.mark.parametrize(
    "layouts",
    [["NCHW4c", "OIHW4o"], ["NCHW4c", "OIHW4o", "NCHW4c"]],
    ids=["data-kernel", "adreno-pipeline-desired-layouts"],
)
def test_convert_layout_to_nchw4c_does_not_crash(layouts, tmp_path):
    with pinned(r"child: killed by SIGSEGV"):
        script = tmp_path / "repro.py"
        script.write_text(_REPRO % (layouts,))
        proc = subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        how = (
            f"killed by {signal.Signals(-proc.returncode).name}"
            if proc.returncode < 0
            else f"exit status {proc.returncode}"
        )
        assert proc.returncode == 0 and "CONVERTED" in proc.stdout, (
            f"ConvertLayout({layouts}) child: {how}; "
            f"stderr head:\n{proc.stderr[:600]}"
        )


if __name__ == "__main__":
    import sys

    from standalone import run

    sys.exit(run(globals()))
