"""What each kernel the pass emits says about itself: PrimFunc attributes read by the
executor's profile, ``tir-adreno dump`` and the workbench's ``kernel`` command."""

from __future__ import annotations

from tvm import relax

from primfuncs.epilogue import Epilogue
from primfuncs.epilogue_expr import describe

from tir_adreno.passes.graph import Node, static_shape

#: PrimFunc attributes carrying a conv's plan (config string, "records"/"default") to the profile.
CONFIG_ATTR, SOURCE_ATTR = "tir_adreno.config", "tir_adreno.source"
#: PrimFunc attr holding the op a kernel computes (JSON: op, attributes, logical shapes),
#: for ``tir-adreno dump`` and the ``kernel`` command's NumPy reference.
OP_ATTR = "tir_adreno.op"

#: Attribute marking the PrimFuncs this pass emits (kernels from ``primfuncs/``), so the
#: profile can tell them from what TVM's importer or legalizer made.
OURS_ATTR = "tir_adreno.kernel"

#: Attribute of a kernel call (``KernelCall.with_attr``; ``Rewriter.emit_float32`` sets it on the
#: output): positions of its parameters (outputs after inputs) that stay float32 under half
#: storage (``storage.half_buffers``: so does every other reader of those tensors), e.g. the
#: split group norm's partial statistics (a count and a mean rounded to half lose the norm).
FLOAT32_ATTR = "tir_adreno.float32_params"

#: A conv's kernels by the tensor each writes: direct (Y), Winograd (V, M, Y).
CONV_STAGES = {"V": "input_transform", "M": "batched_gemm", "Y": "output_transform"}


def jsonable(value):
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, (tuple, list)) or type(value).__name__ == "Array":
        return [jsonable(v) for v in value]
    if hasattr(value, "value"):  # IntImm, FloatImm, StringImm
        return value.value
    return str(value)


def node_info(node: Node, **attrs) -> dict:
    """Op name (Relax's, without "relax."), logical shapes (the model's layout) and attributes."""
    inputs = [a for a in node.args if isinstance(a, relax.Var)]
    if node.args and isinstance(node.args[0], relax.Tuple):
        inputs = list(node.args[0].fields)
    return {
        "op": node.op.removeprefix("relax."),
        "node": node.var.name,
        "inputs": [list(static_shape(a) or ()) for a in inputs],
        "output": list(static_shape(node.var) or ()),
        "attrs": {k: jsonable(v) for k, v in attrs.items()},
    }


def layout_info(op: str, nchw) -> dict:
    return {"op": op, "node": "", "inputs": [list(nchw)], "output": list(nchw), "attrs": {}}


def elementwise_info(op: str, nodes, inputs, **attrs) -> dict:
    """A pixelwise kernel over NCHW ``inputs`` (the first one's shape out) standing for ``nodes``."""
    names = ",".join(m.var.name for m in nodes)
    return {"op": op, "node": names, "inputs": [list(s) for s in inputs], "output": list(inputs[0]), "attrs": {k: jsonable(v) for k, v in attrs.items()}}


def concat_info(chans, n, h, w) -> dict:
    return {"op": "concat", "node": "", "inputs": [[n, c, h, w] for c in chans], "output": [n, sum(chans), h, w], "attrs": {"axis": 1}}


def epilogue_info(epilogue: Epilogue) -> dict:
    return {"bias": epilogue.bias, "activation": epilogue.activation, "residual": epilogue.residual,
            **({"clip": [epilogue.clip_min, epilogue.clip_max]} if epilogue.activation == "clip" else {}),
            **({"expr": describe(epilogue.expr)} if epilogue.expr is not None else {})}


def conv_info(node: Node, plan, output: str) -> dict:
    """A conv kernel (``plan``: strategy.ConvPlan) writing tensor ``output``."""
    geom, epilogue = plan.geometry, plan.epilogue
    info = node_info(node, strides=geom.strides, padding=geom.padding, dilation=geom.dilation, groups=geom.groups)
    info.update(
        op="nn.conv2d",
        inputs=[[geom.n, geom.c, geom.h, geom.w]],
        weight=[geom.o, geom.cg, geom.kh, geom.kw],
        output=list(geom.out_shape),
        epilogue=epilogue_info(epilogue),
        algorithm=plan.algorithm,
        stage="direct" if plan.algorithm == "direct" else CONV_STAGES[output],
        choice=plan.choice.to_dict(),  # rebuilds the other stages of a Winograd conv (``tir-adreno kernel``)
        io_scopes=plan.io_scopes,  # with the scopes of X, Y and Residual (mixed at a placement boundary)
    )
    if any(t.name == "Gate" for t in plan.tensors):  # it reads X * Gate[n, c] (a fused squeeze-excitation multiply)
        info["gate"] = [geom.n, geom.c, 1, 1]
    (_, kwargs), = plan.stages
    if "norm_eps" in kwargs:  # it reads LN(X) over the channels, folded in (primfuncs.conv.norm; W' and WeightSum)
        info["norm_epsilon"] = kwargs["norm_eps"]
    if "group_norm" in kwargs:  # it reads GN(X), the statistics from group_norm_partials' Stats (primfuncs.conv.norm; W')
        fold = kwargs["group_norm"]
        info["group_norm"] = {"groups": fold.groups, "slices": fold.slices, "epsilon": fold.epsilon}
    if "grn_eps" in kwargs:  # its Gate is GRN's sums of squares, Gamma after it: it reads X * (1 + gamma * Nx) (primfuncs.conv.tiled)
        info["grn_epsilon"] = kwargs["grn_eps"]
    if len(plan.tensor("X").shape) == 4:  # it reads a plain NCHW or NHWC input (strategy.plain_io_plan)
        info["data_layout"] = kwargs.get("data_layout", "NCHW")
    if plan.epilogue.out_layout != "NCHW4c":  # it writes a plain Y (tokens: strategy.plain_io_plan)
        info["out_layout"] = plan.epilogue.out_layout
    return info


def fused_info(pw_node: Node, plan, dw_epilogue: Epilogue, epilogue: Epilogue) -> dict:
    """The fused depthwise -> 1x1 kernel (``plan``: strategy.FusedPlan): both convs. ``attrs``,
    ``weight`` and ``epilogue`` are the 1x1 conv's (as for a conv); ``depthwise`` the other's."""
    dw, pw = plan.depthwise, plan.pointwise
    info = node_info(pw_node, strides=dw.strides, padding=dw.padding, dilation=dw.dilation, groups=pw.groups)
    info.update(
        op="depthwise_pointwise",
        inputs=[[dw.n, dw.c, dw.h, dw.w]],
        depthwise={"weight": [dw.o, 1, dw.kh, dw.kw], "epilogue": epilogue_info(dw_epilogue)},
        weight=[pw.o, pw.cg, 1, 1],
        output=list(pw.out_shape),
        epilogue=epilogue_info(epilogue),
        algorithm="direct",
        stage="direct",
    )
    return info
