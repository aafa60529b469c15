"""TVM 0.27 defect 19: the ONNX importer drops Resize's scales, sampling with in/out instead.

ONNX Resize given ``scales`` makes an output of ``floor(in * scale)`` and maps an output
coordinate back with the scale itself: ``asymmetric`` ``x / scale``, ``half_pixel``
``(x + 0.5) / scale - 0.5``, and so on. TVM's importer (``relax/frontend/onnx/onnx_frontend.py``,
``Resize._impl_v18``) keeps only the output size it computes from the scales, and Relax's
``image.resize2d`` (topi ``resize2d``) maps coordinates with ``in / out``. The two agree when
``in * scale`` is whole; otherwise every output samples other pixels: nearest ``asymmetric``
with scale 1.75 on 6 rows (10 out) reads row ``floor(y * 6 / 10)`` where ONNX reads
``floor(y / 1.75)``: output row 5 reads input row 3 instead of 2.
Relax's ``resize2d`` has no scale to keep, so the fix is in the op, not only the importer.

The repro imports the one-node graph, builds it for LLVM and compares with ONNX's reference
evaluator. The control: scales that divide the output exactly agree.
"""

import numpy as np
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx

from defect import KnownDefect, pinned

DIFFERS = r"AssertionError: Resize with scales \[1, 1, 1.75, 2.6\] differs from ONNX"


def resize_model(scales, shape=(1, 2, 6, 4)):
    inits = [numpy_helper.from_array(np.array([], np.float32), "roi"), numpy_helper.from_array(np.array(scales, np.float32), "scales")]
    node = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], mode="nearest", coordinate_transformation_mode="asymmetric",
                            nearest_mode="floor")
    graph = helper.make_graph([node], "resize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def tvm_and_onnx(scales):
    """(TVM's output on LLVM, ONNX's reference output) of the Resize on a random input."""
    model = resize_model(scales)
    x = np.random.default_rng(19).standard_normal((1, 2, 6, 4)).astype("float32")
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    vm = relax.VirtualMachine(tvm.compile(from_onnx(model), target="llvm"), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy(), expected


def test_control_whole_output_sizes_agree():
    got, expected = tvm_and_onnx([1, 1, 1.5, 2.5])
    assert got.shape == expected.shape == (1, 2, 9, 10)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.xfail(strict=True, raises=KnownDefect,
                   reason="TVM 0.27: Resize's scales are dropped on import; resize2d maps coordinates with in/out, not 1/scale")
def test_resize_samples_with_the_scale():
    got, expected = tvm_and_onnx([1, 1, 1.75, 2.6])
    assert got.shape == expected.shape == (1, 2, 10, 10)
    with pinned(DIFFERS):
        wrong = int(np.sum(got != expected))
        assert wrong == 0, f"Resize with scales [1, 1, 1.75, 2.6] differs from ONNX in {wrong} of {got.size} outputs"


if __name__ == "__main__":
    import sys

    from standalone import run

    sys.exit(run(globals()))
