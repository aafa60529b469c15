"""The model a command names: an ONNX file or a built-in, and its inputs, known before compiling."""

from __future__ import annotations

import math

import numpy as np

from tir_adreno.cli.checks import UserError

#: How a missing input shape is asked for on the command line.
INPUT_SHAPE_HINT = "--input-shape {name}={dims}"


def seeded_inputs(specs) -> dict:
    """The inputs ``run`` uses without ``--inputs`` (and ``compile --check`` saves): standard normal, seed 0."""
    import numpy as np

    rng = np.random.default_rng(0)
    return {n: rng.standard_normal(shape).astype(dtype) for n, shape, dtype in specs}


def model_inputs(model, input_shapes) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, shape, dtype) of each model input, known right after import (before lowering)."""
    import tvm

    if isinstance(model, tvm.IRModule):
        return [(p.name, tuple(int(d) for d in p.ty.shape.values), str(p.ty.dtype)) for p in model["main"].params]
    from onnx.helper import tensor_dtype_to_np_dtype

    from tir_adreno.frontend.onnx_import import data_inputs, input_shapes_of

    try:
        shapes = input_shapes_of(model, input_shapes, INPUT_SHAPE_HINT)
    except ValueError as err:
        raise UserError(str(err).replace("input_shapes names", "--input-shape names")) from None
    dtypes = {i.name: np.dtype(tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)).name for i in data_inputs(model)}
    specs = [(name, shape, dtypes[name]) for name, shape in shapes.items()]
    check_compilable(model, specs)
    return specs


#: ONNX ops whose output shape depends on the input values: no static plan can hold them.
DATA_DEPENDENT_OPS = ("Unique", "NonZero", "NonMaxSuppression", "Compress", "StringSplit")
#: Most elements of one tensor: kernels index with 32-bit integers (TVM's int32 extents).
MAX_ELEMENTS = 2**31 - 1


def check_compilable(model, specs) -> None:
    """What makes an ONNX model impossible to compile, said in one line before any work (a
    :class:`UserError`): no inputs, a zero-size or too large declared shape, an op whose output
    shape depends on the data."""
    if not specs:
        raise UserError("the model has no inputs (a graph of constants only): there is nothing to run")
    declared = [(f"input {name!r}", shape) for name, shape, _ in specs]
    for value in [*model.graph.output, *model.graph.value_info]:
        dims = value.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            declared.append((f"tensor {value.name!r}", tuple(d.dim_value for d in dims)))
    for what, shape in declared:
        if 0 in shape:
            raise UserError(f"{what} has a zero-size dim in shape {shape}: the kernels need at least one element per axis")
        if math.prod(shape) > MAX_ELEMENTS:
            raise UserError(f"{what} has shape {shape} ({math.prod(shape):,} elements), more than the kernels' 32-bit "
                            f"indices reach ({MAX_ELEMENTS:,})")
    for node in model.graph.node:
        if node.op_type in DATA_DEPENDENT_OPS and node.domain in ("", "ai.onnx"):
            raise UserError(f"op {node.op_type} ({node.name or node.output[0]}): its output shape depends on the input "
                            "values, which a compiled plan cannot hold")


def reference_for(model):
    """The CPU reference of ``model`` (``reference.reference_runner``) for ``--check``. The one
    place a library error becomes a UserError here: ``tir_adreno.reference`` sits beside the
    runtime, below the error's module, so its ReferenceUnavailable cannot derive from it."""
    from tir_adreno.reference import ReferenceUnavailable, reference_runner

    def unavailable(err):
        return UserError(f"--check: the CPU reference: {err}")

    try:
        run = reference_runner(model)
    except ReferenceUnavailable as err:
        raise unavailable(err) from None

    def reference(inputs):
        try:
            return run(inputs)
        except ReferenceUnavailable as err:
            raise unavailable(err) from None

    return reference


def model_and_inputs(args):
    """The model (the ONNX file loaded, or the built-in) and its inputs' (name, shape, dtype), before any compile."""
    from tir_adreno.compiler import load_onnx
    from tir_adreno.frontend import models

    model = load_onnx(args.model) if args.model else models.get_model(args.builtin)
    return model, model_inputs(model, args.input_shapes)
