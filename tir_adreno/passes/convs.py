"""Which ``nn.conv2d`` nodes our conv kernels take, and their operands: the one definition the
Relax pass and ``tune`` (which layers to tune) share."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from tvm import relax

from primfuncs.conv import ConvGeometry, conv2d_geometry

from tir_adreno.passes.graph import Graph, Node, const, dtype, ints, same, static_shape

#: Activation layouts our convs read and write (the output in the input's layout).
DATA_LAYOUTS = ("NCHW", "NHWC")


class ConvOperands(NamedTuple):
    layout: str  # the data (and output) layout: one of DATA_LAYOUTS
    weights: np.ndarray  # OIHW, float64


def _oihw_weights(node: Node) -> tuple[str, np.ndarray] | None:
    """(data layout, constant float32 OIHW weights) of a conv2d our kernels take, else None."""
    attrs = node.attrs
    data_layout, kernel_layout = str(attrs.data_layout), str(attrs.kernel_layout)
    out_layout = str(attrs.out_layout) if attrs.out_layout else data_layout
    if data_layout not in DATA_LAYOUTS or out_layout != data_layout or sorted(kernel_layout) != sorted("OIHW"):
        return None
    w = const(node.args[1])
    if w is None or w.dtype != np.float32:
        return None
    return data_layout, np.transpose(w, [kernel_layout.index(c) for c in "OIHW"])


def conv_operands(node: Node) -> ConvOperands | None:
    """(data layout, OIHW float64 weights) of a conv2d we can run (constant float32 weights,
    NCHW/NHWC in and out), else None."""
    found = _oihw_weights(node)
    return None if found is None else ConvOperands(found[0], found[1].astype(np.float64))


def input_nchw(shape, layout: str) -> tuple[int, int, int, int]:
    """A 4-d activation's shape in ``layout`` as NCHW."""
    return (shape[0], shape[3], shape[1], shape[2]) if layout == "NHWC" else tuple(shape)


def conv_geometry(node: Node, nchw, weight_shape) -> ConvGeometry:
    """The geometry of conv2d ``node`` on an NCHW input of ``nchw`` with OIHW weights of ``weight_shape``."""
    attrs = node.attrs
    return conv2d_geometry(nchw, weight_shape, ints(attrs.strides), ints(attrs.padding), ints(attrs.dilation),
                                  int(attrs.groups))


def conv_layer(node: Node) -> ConvGeometry | None:
    """The geometry of ``node`` when it is a conv2d our kernels take (:func:`conv_operands`) on a
    static 4-d float32 activation, else None."""
    found = _oihw_weights(node) if node.op == "relax.nn.conv2d" else None
    data = node.args[0] if found is not None else None
    shape = static_shape(data) if isinstance(data, relax.Var) else None
    if shape is None or len(shape) != 4 or dtype(data) != "float32":
        return None
    return conv_geometry(node, input_nchw(shape, found[0]), found[1].shape)


def sole_conv_reader(g: Graph, var, nchw) -> tuple[Node, ConvGeometry] | None:
    """The NCHW conv our kernels take that is ``var``'s only user and reads it as its input (NCHW
    ``nchw``), with its geometry; None otherwise (another user, another layout, or a conv its own
    rule reports or leaves)."""
    conv = g.sole_user(var)
    operands = conv_operands(conv) if conv is not None and conv.op == "relax.nn.conv2d" and same(conv.args[0], var) else None
    if operands is None or operands.layout != "NCHW":
        return None
    try:
        return conv, conv_geometry(conv, nchw, operands.weights.shape)
    except ValueError:
        return None


def as_conv_node(node: Node, x_var, data_layout: str, weight: np.ndarray) -> Node:
    """Matmul ``node`` as the conv node that computes it: ``x_var`` (``data_layout``) convolved with
    OIHW ``weight`` (``rules.matmul``), writing ``node``'s value."""
    weight = relax.const(np.ascontiguousarray(weight))
    dummy = relax.Var("x", relax.TensorType(list(static_shape(x_var)), "float32"))
    attrs = relax.op.nn.conv2d(dummy, weight, data_layout=data_layout, kernel_layout="OIHW").attrs
    return Node(node.var, "relax.nn.conv2d", [x_var, weight], attrs, node.value)
