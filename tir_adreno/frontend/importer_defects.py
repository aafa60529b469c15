"""ONNX nodes that TVM 0.27's importer converts into wrong numbers (docs/upstream, defects 18 and
19), met before it imports the graph: spelled so that it converts them right, or refused in one
line. Both happen for every kernel, ours and upstream's, since the module TVM hands over already
computes something else.

- MaxPool with ``auto_pad=SAME_LOWER`` (defect 18): the importer sizes the output
  ``floor(in / stride)`` instead of ONNX's ``ceil(in / stride)``, which gives negative padding
  (``[0, 0, -1, -1]`` for a 2x2 window, stride 2, on 7x7) and a smaller output. Here it becomes
  the explicit ``pads`` ONNX defines (the odd pixel of padding at the start), which TVM imports
  exactly: our pooling kernel then runs it.
- Resize with ``scales`` whose output is not ``input x scale`` exactly (defect 19), in a
  coordinate mode that divides by the scale (half_pixel, asymmetric, ...): the importer keeps the
  output size only, and Relax's ``resize2d`` maps output to input coordinates with ``in / out``
  instead of ``1 / scale``, so every output samples other pixels. Relax has no spelling of it:
  refused, naming the node and what to export instead.
"""

from __future__ import annotations

import numpy as np

from tir_adreno.runtime.errors import UserError

#: Resize's coordinate modes that read the scale (ONNX operator docs); the others
#: (align_corners, tf_crop_and_resize) use the sizes only, which TVM keeps.
SCALE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "asymmetric", "tf_half_pixel_for_nn")


class ImporterDefectError(UserError, ValueError):
    """An ONNX node TVM's importer would turn into wrong numbers, with no spelling that avoids it."""


def _attrs(node) -> dict:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _same_lower_pools(model) -> list:
    return [n for n in model.graph.node if n.op_type == "MaxPool" and _attrs(n).get("auto_pad") == b"SAME_LOWER"]


def _inexact_resizes(model) -> list:
    """Resize nodes with constant non-integer ``scales`` (and no ``sizes``) in a mode that reads them."""
    from onnx import numpy_helper

    consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    found = []
    for n in model.graph.node:
        scales = consts.get(n.input[2]) if n.op_type == "Resize" and len(n.input) > 2 else None
        sizes = n.input[3] if len(n.input) > 3 else ""
        mode = _attrs(n).get("coordinate_transformation_mode", b"half_pixel").decode()
        if scales is not None and scales.size and not sizes and mode in SCALE_MODES and np.any(scales != np.round(scales)):
            found.append((n, scales.astype(np.float64), mode))
    return found


def _shapes(model) -> dict:
    """Static shapes of the graph's values onnx can infer, by name."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # onnx cannot infer this graph: the nodes that need a shape are refused, naming it
        return {}
    shapes = {}
    for vi in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if vi.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            shapes[vi.name] = tuple(int(d.dim_value) for d in dims)
    return shapes


def _input_shape(shapes: dict, node) -> tuple:
    shape = shapes.get(node.input[0])
    if shape is None:
        raise ImporterDefectError(f"{node.op_type} node {node.name or node.output[0]!r}: its input shape is not static, and TVM's "
                                  "importer converts it wrongly without one (docs/upstream defects 18, 19); give the input shapes")
    return shape


def same_lower_pads(spatial, kernel, strides, dilations) -> list[int]:
    """ONNX's ``pads`` (all starts, then all ends) of ``auto_pad=SAME_LOWER``: ``ceil(in / stride)``
    outputs, the padding split with the odd pixel at the start."""
    begins, ends = [], []
    for size, k, s, d in zip(spatial, kernel, strides, dilations):
        total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
        begins.append(total - total // 2)
        ends.append(total // 2)
    return begins + ends


def _explicit_pads(node, shape) -> None:
    """MaxPool ``node`` (``auto_pad=SAME_LOWER``) on ``shape`` with its padding spelled out."""
    from onnx import helper

    a = _attrs(node)
    rank = len(shape) - 2
    pads = same_lower_pads(shape[2:], a["kernel_shape"], a.get("strides", [1] * rank), a.get("dilations", [1] * rank))
    kept = [x for x in node.attribute if x.name not in ("auto_pad", "pads")]
    del node.attribute[:]
    node.attribute.extend([*kept, helper.make_attribute("pads", pads)])


def _refuse_inexact(node, scales, mode, shape) -> None:
    exact = shape * scales
    if np.allclose(exact, np.round(exact), rtol=0, atol=1e-9 * np.max(exact)):  # 10 x 1.1: whole up to rounding
        return
    raise ImporterDefectError(
        f"Resize node {node.name or node.output[0]!r}: scales [{', '.join(str(np.float32(v)) for v in scales)}] on input "
        f"{[int(d) for d in shape]} give no whole output size, "
        f"and TVM's importer then samples {mode!r} coordinates with input/output instead of 1/scale (wrong numbers; docs/upstream "
        "defect 19): export it with 'sizes', or scales that divide the output exactly")


def avoid_importer_defects(model):
    """``model`` with its MaxPool ``auto_pad=SAME_LOWER`` spelled as pads (a copy when there is one);
    ImporterDefectError for a Resize whose scales TVM's importer would misread (module docstring)."""
    pools, resizes = _same_lower_pools(model), _inexact_resizes(model)
    if not pools and not resizes:
        return model
    shapes = _shapes(model)
    for node, scales, mode in resizes:
        _refuse_inexact(node, scales, mode, np.asarray(_input_shape(shapes, node), np.float64))
    if not pools:
        return model
    import onnx

    model = onnx.ModelProto.FromString(model.SerializeToString())
    for node in _same_lower_pools(model):
        _explicit_pads(node, _input_shape(shapes, node))
    return model
