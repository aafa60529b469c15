"""ONNX graphs made static before TVM imports them: concrete input shapes, folded shape arithmetic.

Exported models name their batch (``[N, 3, H, W]``) and compute reshape
targets and split points at run time (``Shape -> Gather -> Div -> Mul ->
Slice``, torch's channel split and shuffle). Our kernels need static shapes,
so :func:`make_static` sets the user's shapes on the graph inputs and folds
every integer computation that those shapes make constant into an
initializer, so TVM's importer only ever sees constant shapes.
"""

from __future__ import annotations

import numpy as np
from tir_adreno.runtime.errors import UserError

#: How ``input_shapes`` is spelled in messages (the CLI replaces it with its flag).
INPUT_SHAPES_HINT = "compile_model(..., input_shapes={{{name!r}: {example}}})"


class SymbolicShapeError(UserError, ValueError):
    """A graph input has a dimension without a value and no shape was given for it."""

    def __init__(self, name: str, dim: str, shape: list, hint: str = INPUT_SHAPES_HINT):
        self.name, self.dim, self.shape = name, dim, shape
        example = tuple(d if isinstance(d, int) else 1 for d in shape)
        shown = "[" + ", ".join(str(d) for d in shape) + "]"
        super().__init__(
            f"input {name!r} has symbolic dim {dim!r} (shape {shown}); give its shape: "
            + hint.format(name=name, example=example, dims=",".join(str(d) for d in example))
        )


def data_inputs(model) -> list:
    """The graph inputs that are not initializers (the model's real inputs)."""
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def _dims(value_info) -> list:
    """Input dims: ints where known, else the symbolic name (or '?' when unnamed)."""
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in value_info.type.tensor_type.shape.dim]


def input_shapes_of(model, input_shapes: dict | None = None, hint: str = INPUT_SHAPES_HINT) -> dict[str, tuple[int, ...]]:
    """Concrete shape of every data input: its static dims, with ``input_shapes`` for the symbolic ones.

    Raises :class:`SymbolicShapeError` for a symbolic dim without a given shape,
    ``ValueError`` for a given shape that names no input or contradicts the model.
    """
    input_shapes = dict(input_shapes or {})
    inputs = data_inputs(model)
    names = [i.name for i in inputs]
    unknown = sorted(set(input_shapes) - set(names))
    if unknown:
        raise ValueError(f"input_shapes names {unknown[0]!r}, which is not a model input; model inputs: {names}")
    shapes = {}
    for info in inputs:
        dims = _dims(info)
        given = input_shapes.get(info.name)
        if given is None:
            symbolic = [d for d in dims if not isinstance(d, int)]
            if symbolic:
                raise SymbolicShapeError(info.name, symbolic[0], dims, hint)
            shapes[info.name] = tuple(dims)
            continue
        given = tuple(int(d) for d in given)
        if len(given) != len(dims) or any(isinstance(d, int) and d != g for d, g in zip(dims, given)) or min(given, default=1) < 1:
            raise ValueError(f"input {info.name!r}: shape {given} does not fit the model's {dims}")
        shapes[info.name] = given
    return shapes


#: Ops whose integer results are folded when their inputs are constant (shape arithmetic).
_FOLDABLE = {
    "Gather", "Div", "Mul", "Add", "Sub", "Slice", "Concat", "Unsqueeze", "Squeeze", "Cast", "Reshape",
    "Floor", "Ceil", "Equal", "Where", "ConstantOfShape", "Range", "Min", "Max", "Neg", "Abs", "Mod",
    "ReduceProd", "Expand", "Identity", "Constant", "Transpose",
    # comparisons, clamps and roots of shape values (a Pad's amounts clamped with Clip, torch's
    # pad-same arithmetic): without them TVM's importer stops at "Dynamic pads are not supported yet"
    "Clip", "Relu", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Sqrt", "Pow",
    "Sign", "Round", "ReduceSum", "ReduceMax", "ReduceMin", "Tile",
}


#: Float constants up to this many elements count as shape arithmetic, larger ones as data (weights).
_SMALL = 64


def _is_data(value: np.ndarray) -> bool:
    return value.dtype.kind not in "iub" and value.size > _SMALL


def _static_shape(value_info):
    dims = _dims(value_info)
    return dims if all(isinstance(d, int) for d in dims) and value_info.type.tensor_type.HasField("shape") else None


def _fold_once(model) -> bool:
    """Replace constant shape nodes by initializers; True if anything was folded."""
    import onnx
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator

    graph = model.graph
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # onnx cannot infer this graph: fold what needs no shapes, let TVM judge the rest
        inferred = model
    shapes = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
        s = _static_shape(vi)
        if s is not None:
            shapes[vi.name] = s
    consts = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    opsets = {o.domain or "": o.version for o in model.opset_import}
    outputs = {o.name for o in graph.output}
    keep, folded = [], {}
    for node in graph.node:
        if node.domain not in ("", "ai.onnx") or any(o in outputs for o in node.output):
            keep.append(node)
            continue
        values = None
        if node.op_type in ("Shape", "Size") and node.input[0] in shapes:
            shape = np.array(shapes[node.input[0]], np.int64)
            if node.op_type == "Size":
                values = [np.array(shape.prod(), np.int64)]
            else:
                attrs = {a.name: a.i for a in node.attribute}  # opset 15 start/end: Python slice semantics
                values = [shape[attrs.get("start", 0) : attrs.get("end")]]
        elif node.op_type in _FOLDABLE and all(i == "" or i in consts for i in node.input):
            feeds = {i: consts[i] for i in node.input if i}
            # shape arithmetic: integers, or a few floats (torch's Cast -> Div -> Floor of a channel count)
            if all(a.dtype.kind in "iub" for a in feeds.values()) or sum(a.size for a in feeds.values()) <= _SMALL:
                try:
                    values = ReferenceEvaluator(node, opsets=opsets).run(None, feeds)
                except Exception:  # an op or version onnx's reference cannot run: TVM's importer gets it as is
                    values = None
                if values is not None and node.op_type != "Constant" and any(_is_data(np.asarray(v)) for v in values):
                    values = None  # e.g. ConstantOfShape of a float tensor: left to TVM's FoldConstant
        if values is None:
            keep.append(node)
            continue
        for name, value in zip(node.output, values):
            consts[name] = folded[name] = np.asarray(value)
    if not folded:
        return False
    del graph.node[:]
    graph.node.extend(keep)
    graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in folded.items())
    return True


def make_static(model, shapes: dict[str, tuple[int, ...]]):
    """A copy of ``model`` whose data inputs have ``shapes`` and whose constant shape arithmetic is folded."""
    import onnx

    model = onnx.ModelProto.FromString(model.SerializeToString())
    for info in data_inputs(model):
        dims = info.type.tensor_type.shape.dim
        for d, value in zip(dims, shapes[info.name]):
            d.Clear()
            d.dim_value = value
    if not any(n.op_type in ("Shape", "Size") for n in model.graph.node):
        return model  # shape arithmetic starts at Shape/Size: nothing to fold (and inference costs ~1 s on ResNet-50)
    if model.ir_version < 4:  # below IR 4 every initializer must also be a graph input
        model.ir_version = 4
    for _ in range(len(model.graph.node)):
        if not _fold_once(model):
            break
    return model
