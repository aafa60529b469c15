"""ONNX model helpers: the light test models that ship with the ``onnx`` package.

Those models carry no trained weights: each weight is a ``ConstantOfShape``
node (one repeated value). :func:`randomize_weights` replaces every such node
and every initializer with seeded random values of a sensible scale (He init
for conv/gemm weights; batch-norm variances down to 1e-4, so the epsilon matters, with
scales that keep each channel's gain near 1), so numerical
comparisons exercise real arithmetic rather than constant maps.
"""

from __future__ import annotations

import os

import numpy as np


def light_model_path(name: str) -> str:
    """Path of ``light_<name>.onnx`` inside the installed ``onnx`` package."""
    import onnx

    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", f"light_{name}.onnx")
    if not os.path.exists(path):
        raise FileNotFoundError(f"no light ONNX model {name!r} at {path}")
    return path


def _random_weight(rng, shape, role: str) -> np.ndarray:
    shape = tuple(int(d) for d in shape)
    if role == "variance":
        return batch_norm_variance(rng, shape)
    if role == "scale":
        return rng.uniform(0.5, 1.5, shape).astype("float32")
    if len(shape) >= 2:
        fan_in = int(np.prod(shape[1:]))
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype("float32")
    return (rng.standard_normal(shape) * 0.1).astype("float32")


def batch_norm_variance(rng, shape) -> np.ndarray:
    """Running variances log-uniform over [1e-4, 1.5]: near 1e-4 the epsilon (1e-5) moves
    1/sqrt(var + eps) by ~5%, so a model whose epsilon is dropped or misread gives other numbers."""
    return (10.0 ** rng.uniform(-4.0, np.log10(1.5), shape)).astype("float32")


def batch_norm_scale(rng, variance, epsilon: float = 1e-5) -> np.ndarray:
    """Scales in [0.5, 1.5] * sqrt(variance + epsilon): each channel's gain scale / sqrt(var + eps)
    stays in [0.5, 1.5], so small variances do not grow the activations layer after layer."""
    variance = np.asarray(variance, np.float64)
    return (rng.uniform(0.5, 1.5, variance.shape) * np.sqrt(variance + epsilon)).astype("float32")


def _batch_norm_gains(graph, rng, new_inits):
    """Redraw each batch norm's scale from its variance (see :func:`batch_norm_scale`)."""
    for node in graph.node:
        if node.op_type != "BatchNormalization" or len(node.input) < 5:
            continue
        scale, variance = node.input[1], node.input[4]
        if scale in new_inits and variance in new_inits and new_inits[scale].dtype == np.float32:
            epsilon = next((a.f for a in node.attribute if a.name == "epsilon"), 1e-5)
            new_inits[scale] = batch_norm_scale(rng, new_inits[variance], epsilon).reshape(new_inits[scale].shape)


def randomize_weights(model, seed: int = 0):
    """A copy of ``model`` whose constant weights are seeded random values.

    ``ConstantOfShape`` weight generators become initializers; graph inputs
    that are weights are dropped, leaving only the real data inputs.
    """
    import onnx
    from onnx import numpy_helper

    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    rng = np.random.default_rng(seed)
    inits = {i.name: i for i in graph.initializer}
    roles = {}
    for node in graph.node:
        if node.op_type == "BatchNormalization":
            roles[node.input[1]] = "scale"
            if len(node.input) > 4:
                roles[node.input[4]] = "variance"
    keep_nodes, new_inits = [], {}
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits:
            shape = numpy_helper.to_array(inits[node.input[0]])
            name = node.output[0]
            new_inits[name] = _random_weight(rng, shape, roles.get(name, ""))
        else:
            keep_nodes.append(node)
    used = {i for n in keep_nodes for i in n.input}
    for name, init in inits.items():
        arr = numpy_helper.to_array(init)
        if name in used and arr.dtype == np.float32:
            new_inits[name] = _random_weight(rng, arr.shape, roles.get(name, ""))
        elif name in used:
            new_inits[name] = arr
    _batch_norm_gains(graph, rng, new_inits)
    del graph.node[:]
    graph.node.extend(keep_nodes)
    del graph.initializer[:]
    graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in new_inits.items())
    data_inputs = [i for i in graph.input if i.name not in new_inits and i.name in used]
    del graph.input[:]
    graph.input.extend(data_inputs)
    model.ir_version = max(model.ir_version, 4)  # IR >= 4 lets initializers be non-inputs
    onnx.checker.check_model(model)
    return model


def strip_final_softmax(model):
    """A copy of ``model`` whose outputs are the logits feeding a final Softmax.

    A softmax of random-weight logits is close to one-hot, which would hide
    errors in everything before it; comparing logits does not.
    """
    import onnx

    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    outputs = {o.name: o for o in graph.output}
    for node in list(graph.node):
        if node.op_type == "Softmax" and node.output[0] in outputs:
            out = outputs[node.output[0]]
            graph.node.remove(node)
            out.name = node.input[0]
    return model
