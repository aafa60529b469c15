"""ONNX graphs made static before TVM imports them: concrete input shapes, folded shape arithmetic.

Exported models name their batch (``[N, 3, H, W]``) and compute reshape
targets and split points at run time (``Shape -> Gather -> Div -> Mul ->
Slice``, torch's channel split and shuffle). Our kernels need static shapes,
so :func:`make_static` sets the user's shapes on the graph inputs and folds
every computation that those shapes make constant (shape arithmetic, a
``Pad``'s amounts built from ``Constant``/``ConstantOfShape``/``Slice``, weights
behind ``Identity``) into an initializer with onnxslim's constant folding, so
TVM's importer only ever sees constant shapes. onnxslim's other passes
(pattern fusion, subexpression merging, weight tying) are skipped.
"""

from __future__ import annotations

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


#: onnxslim's passes that rewrite a graph beyond folding (fusing patterns into other ops, merging
#: equal subexpressions and tied weights, dropping nodes it judges dead): skipped, so TVM's importer
#: meets the graph as exported less its constant subgraphs, and our rules keep the patterns they match.
_SLIM_SKIPPED = ["graph_fusion", "dead_node_elimination", "subexpression_elimination", "weight_tying"]


#: The largest constant folded here, in bytes (64 float32 values: shape arithmetic, a Pad's amounts).
#: Larger constant subgraphs are data (EdgeNeXt's positional encoding, weights behind Identity):
#: TVM's FoldConstant and ``passes.host_fold`` compute those after import, as they did before
#: onnxslim, so a model's weights are bitwise what they were.
FOLDED_BYTES = 256


def fold_constants(model):
    """``model`` with every constant subgraph of up to :data:`FOLDED_BYTES` folded into initializers
    (shape arithmetic from ``Shape``/``Size`` of static tensors included), by onnxslim's constant
    folding (it evaluates the subgraphs with onnxruntime, offline). Shapes come from onnx's own
    inference (with its propagation of shape values) between rounds, not onnxslim's symbolic one:
    that one stores the values of shape arithmetic it computed itself, and computes a float ``Div``
    as a floor division (``Cast -> Div(2.0) -> Ceil`` of 5 gives 2, not 3: wrong ``Pad`` amounts;
    tests/upstream/test_onnxslim_defect1_float_div_in_shape_data.py)."""
    import onnx
    import onnxslim

    exported = model
    for _ in range(len(model.graph.node) + 1):  # each round folds what the last one's shapes made constant
        before = len(model.graph.node)
        try:
            model = onnx.shape_inference.infer_shapes(model, data_prop=True)
        except Exception:  # onnx cannot infer this graph: fold what needs no shapes, let TVM judge the rest
            pass
        model = onnxslim.slim(model, no_shape_infer=True, skip_optimizations=list(_SLIM_SKIPPED), size_threshold=FOLDED_BYTES)
        if len(model.graph.node) == before:
            break
    return _in_exported_order(model, exported)


def _in_exported_order(model, exported):
    """``model`` with its nodes in ``exported``'s order (onnxslim sorts them topologically its own
    way, which would reorder independent branches: TVM's importer would write another but equal
    module, and our plans would list their kernels in another order)."""
    position = {out: i for i, node in enumerate(exported.graph.node) for out in node.output}
    nodes = sorted(model.graph.node, key=lambda n: min((position.get(o, len(position)) for o in n.output), default=len(position)))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def make_static(model, shapes: dict[str, tuple[int, ...]]):
    """A copy of ``model`` whose data inputs have ``shapes`` and whose constant shape arithmetic is folded."""
    import onnx

    model = onnx.ModelProto.FromString(model.SerializeToString())
    for info in data_inputs(model):
        dims = info.type.tensor_type.shape.dim
        for d, value in zip(dims, shapes[info.name]):
            d.Clear()
            d.dim_value = value
    if model.ir_version < 4:  # below IR 4 every initializer must also be a graph input
        model.ir_version = 4
    return fold_constants(model)
