"""onnxslim 0.1.98 defect 1: its symbolic shape inference computes a float ``Div`` of shape values
as a floor division and stores the result as a constant.

``SymbolicShapeInference`` tracks the values of shape arithmetic (``sympy_data``) and, since 0.1.9x,
materializes every concrete one as an initializer. Its ``Div`` of a ``Cast``-to-float dimension by
``2.0`` is sympy's floor division, so torch's same-padding chain ``Shape -> Gather -> Cast(float)
-> Div(2.0) -> Ceil`` on a 5-pixel map reads 2.0 where onnxruntime computes 2.5 (the Ceil then
gives 2, not 3, and the Pad amounts come out 0 instead of 1). tir_adreno's import therefore runs
onnxslim's constant folding with ``no_shape_infer=True`` and onnx's own shape inference
(frontend/onnx_import.py); this repro calls onnxslim's shape inference directly.
"""

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from defect import KnownDefect, pinned


def halved_height_model(height: int):
    """``y = ceil(x.shape[2] / 2.0)`` behind a Relu (so ``x`` has a static shape the chain reads)."""
    const = lambda name, v, dt=TensorProto.INT64: helper.make_tensor(name, dt, [], [v])  # noqa: E731
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Shape", ["r"], ["s"]),
        helper.make_node("Gather", ["s", "two"], ["h"], axis=0),
        helper.make_node("Cast", ["h"], ["hf"], to=TensorProto.FLOAT),
        helper.make_node("Div", ["hf", "two_f"], ["q"]),
        helper.make_node("Ceil", ["q"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "halved", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, height, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
                              [const("two", 2), const("two_f", 2.0, TensorProto.FLOAT)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def materialized_quotient(model) -> float:
    from onnxslim.core import shape_infer

    inferred = shape_infer(onnx.ModelProto.FromString(model.SerializeToString()))
    values = {i.name: numpy_helper.to_array(i) for i in inferred.graph.initializer}
    return float(values["q"]) if "q" in values else float("nan")


def test_control_onnxruntime_and_an_even_height():
    x = np.ones((1, 2, 5, 3), np.float32)
    (y,) = onnxruntime.InferenceSession(halved_height_model(5).SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert float(y) == 3.0
    assert materialized_quotient(halved_height_model(6)) == 3.0  # an exact quotient: floor or not, the same


@pytest.mark.xfail(strict=True, raises=KnownDefect, reason="onnxslim 0.1.98: symbolic shape inference floors a float Div of shape values")
def test_float_div_of_a_dimension_is_not_floored():
    with pinned(r"AssertionError: quotient 2\.0"):
        q = materialized_quotient(halved_height_model(5))
        assert q == 2.5, f"quotient {q}"
