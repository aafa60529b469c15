"""The model a command names: an ONNX file or a built-in, and its inputs, known before compiling."""

from __future__ import annotations

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
    return [(name, shape, dtypes[name]) for name, shape in shapes.items()]


def model_and_inputs(args):
    """The model (the ONNX file loaded, or the built-in) and its inputs' (name, shape, dtype), before any compile."""
    from tir_adreno.compiler import load_onnx
    from tir_adreno.frontend import models

    model = load_onnx(args.model) if args.model else models.get_model(args.builtin)
    return model, model_inputs(model, args.input_shapes)
