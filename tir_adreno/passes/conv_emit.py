"""Conv emission, shared by the conv and matmul rules and the fusion patterns (not a rule): a conv
with its epilogue fused (bias, batch norm and constant scale/shift folded into the weights, then a
residual add and an activation in the kernel: :func:`conv_tail`), its input read through a gate or
a folded norm (:func:`emit_conv2d`), a depthwise conv fused with the 1x1 conv that reads it
(:func:`emit_depthwise_pointwise`), the placement boundary crossed in the kernel, and a matmul with
constant weights seen as a conv (:func:`as_conv_operands`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from tvm import relax

from primfuncs.conv import ConvGeometry
from primfuncs.epilogue import EXTRA_BUFFERS, Epilogue

from tir_adreno.passes.activations import fuse_activation
from tir_adreno.passes.affine import batch_norm_affine, batch_norm_output, linear_step, other_operand
from tir_adreno.passes.convs import conv_geometry, conv_operands
from tir_adreno.passes.epilogue_chain import OPERAND_KINDS, Anchor, Chain, chain_epilogue, chain_with_operands, pack_rows
from tir_adreno.passes.graph import TO_NCHW, Node, dtype, same, static_shape
from tir_adreno.passes.kernel_index import KernelCall
from tir_adreno.passes.layout_plan import LayoutPlan
from tir_adreno.passes.map_boundary import define_plain_output, plain_input, plain_input_expr, token_output
from tir_adreno.passes.patch_gemm import emit_patch_gemm, patch_gemm_operands
from tir_adreno.passes.op_info import CONFIG_ATTR, CONV_STAGES, SOURCE_ATTR, conv_info, fused_info
from tir_adreno.passes.rewriter import Rewriter, Value, blocked_shape
from tir_adreno.strategy import conv as strategy
from tir_adreno.strategy.fusion import can_fuse
from tir_adreno.strategy.packing import pack_bias


@dataclass
class Tail:
    """A conv's epilogue as found in the graph: weights and bias with the linear steps folded in,
    the residual, the activation, and the node whose value the kernel writes."""

    w: np.ndarray
    bias: np.ndarray
    residual: Value | None = None
    activation: str | None = None
    clip_bounds: tuple | None = None
    last: Node | None = None
    weight_sum: np.ndarray | None = None  # a folded layer norm's sum_c W[o, c] (:meth:`fold_norm`)
    layout: str = "NCHW"  # the layout of ``last``'s value (NHWC -> NCHW after :func:`_permuted_residual`)
    tokens_of: tuple = ()  # after :func:`_to_tokens`: the conv's map ``(N, C, H, W)`` whose tokens ``last`` is
    chain: Chain | None = None  # the elementwise chain after all that (:func:`chain_tail`)
    operands: tuple = ()  # the chain's operands (Values; one at most after a residual)

    @property
    def has_bias(self) -> bool:
        return bool(np.any(self.bias != 0))

    @property
    def epilogue(self) -> Epilogue:
        return chain_epilogue(self.has_bias, self.activation, self.clip_bounds, self.residual is not None, self.chain)

    @property
    def extra_inputs(self) -> list:
        """The activations the kernel reads beside its input (``Epilogue.extra_kinds``' order): the
        residual, then the chain's operands."""
        return ([] if self.residual is None else [self.residual]) + list(self.operands)

    def constants(self, pack_weights, dtype: str = "float32") -> list:
        """The kernel arguments of the weights, a folded layer norm's weight sums and the bias (when
        it has one) with the chain's per-channel constants beside it, in ``dtype``."""
        rows = pack_rows(self.bias if self.has_bias else None, self.chain, lambda r: pack_bias(r.astype(dtype)))
        bias = [relax.const(rows)] if rows is not None else []
        sums = [relax.const(pack_bias(self.weight_sum.astype(dtype)))] if self.weight_sum is not None else []
        return [relax.const(pack_weights(self.w)), *sums, *bias]

    def fold(self, scale, shift):
        """Fold ``y * scale + shift`` (per output channel) into the weights and the bias."""
        self.w = self.w * scale[:, None, None, None]
        self.bias = self.bias * scale + shift

    def shift_input(self, shift):
        """The conv reads ``x + shift`` (per input channel) of an unpadded ``x``: every tap reads a
        real pixel, so the shift adds ``W . shift`` to each output (the folded weights: the steps
        after the conv scale it as they scale the conv), into the bias. Dense convs only."""
        self.bias = self.bias + self.w.sum(axis=(2, 3)) @ shift

    def fold_norm(self, gamma, beta, weight_sum: bool = True):
        """The conv reads ``LN(x) * gamma + beta`` (per input channel; a dense 1x1 conv): ``W beta``
        into the bias, then ``W' = W diag(gamma)`` and its sums over the input channels ``s``, the
        kernel's correction ``- mu s`` (``primfuncs.conv.norm``; not for a group norm, whose
        kernel normalizes its inputs: ``weight_sum`` False); all in float64, on the weights
        with the steps after the conv already folded."""
        self.shift_input(beta)
        self.w = self.w * np.asarray(gamma, np.float64)[None, :, None, None]
        self.weight_sum = self.w.sum(axis=(1, 2, 3)) if weight_sum else None


def _fold_batch_norm(rw: Rewriter, tail: Tail, user: Node, data_layout: str) -> Node | None:
    """Fold inference batch norm ``user`` of the tail's value into it: its output getter (the
    node the tail goes on from), else None (nothing folded)."""
    if (user.op != "relax.nn.batch_norm" or not same(user.args[0], tail.last.var) or data_layout != "NCHW"
            or int(user.attrs.axis) != 1 or bool(user.attrs.training)):  # inference: the moving statistics fold
        return None
    getter = batch_norm_output(rw.graph, user)
    folded = batch_norm_affine(user)
    if getter is None or folded is None:
        return None
    tail.fold(*folded)
    user.fused = True
    return getter


def _residual(rw: Rewriter, tail: Tail, user: Node, data_layout: str) -> Value | None:
    """The other operand of ``add`` node ``user`` as the conv's residual, when it exists already and
    has the output's shape (when it comes later, a downsample branch emitted after this one, that
    branch's conv takes this one as its residual), else None."""
    other = _added(rw, user, tail.last.var)
    if other is None:
        return None
    v = rw.view(other, data_layout)  # a Linear on tokens: the residual is tokens too
    if v is None and tail.tokens_of and other in rw.exprs and tail.w.shape[0] % 4 == 0:
        # plain tokens of the map's size (an upstream op's, a gather's, a conv's plain output): read
        # in place as the channels-last map they are (the residual's plain form, Epilogue.residual_layout)
        n, c, h, w = tail.tokens_of
        plain = rw.bb.emit(relax.op.memory.view(rw.exprs[other], relax.ShapeExpr([n, h, w, c])))
        v = Value(plain=plain, layout="NHWC", channels=c, nchw=tail.tokens_of)
    return v


def _added(rw: Rewriter, user: Node, var) -> relax.Var | None:
    """The other operand of ``add`` node ``user`` of ``var`` when it exists already with ``var``'s shape."""
    other = other_operand(user, var) if user.op == "relax.add" else None
    if not isinstance(other, relax.Var) or (other not in rw.values and other not in rw.exprs):
        return None
    return other if static_shape(other) == static_shape(var) else None


def _permuted_residual(rw: Rewriter, tail: Tail, user: Node) -> Node | None:
    """``user`` as the NHWC -> NCHW permute of the tail's NHWC value (a view of the same NCHW4c
    tensor) read only by a residual add: ConvNeXt's and EdgeNeXt's block tail ``shortcut +
    permute(gamma * fc2(...))``, fc2 a Linear on NHWC run as a 1x1 conv. The add is the conv's
    residual in NCHW (the permute fused, the tail's layout NCHW from there): the add, else None."""
    if tail.layout != "NHWC" or user.op != "relax.permute_dims" or tuple(int(a) for a in user.attrs.axes or ()) != TO_NCHW:
        return None
    add = rw.graph.sole_user(user.var)
    if add is None or same(rw.graph.output, user.var):
        return None
    last = tail.last
    tail.last = user
    tail.residual = _residual(rw, tail, add, "NCHW")
    if tail.residual is None:
        tail.last = last
        return None
    user.fused = True
    tail.layout = "NCHW"
    return add


def _tail_step(rw: Rewriter, tail: Tail, user: Node) -> Node | None:
    """Take ``user`` into the tail (a linear step or batch norm before the residual, or the
    residual add, also after a permute back to NCHW): the node the tail now ends at, else None."""
    if tail.residual is not None:  # bias and batch norm fold only before the residual
        return None
    step = linear_step(user, tail.last.var, tail.w.shape[0], tail.layout)
    if step is not None:
        tail.fold(*step)
        return user
    getter = _fold_batch_norm(rw, tail, user, tail.layout)
    if getter is not None:
        return getter
    permuted = _permuted_residual(rw, tail, user) or _to_tokens(rw, tail, user)
    if permuted is not None:
        return permuted
    tail.residual = _residual(rw, tail, user, tail.layout)
    return user if tail.residual is not None else None


def _to_tokens(rw: Rewriter, tail: Tail, user: Node) -> Node | None:
    """``user`` as the reshape of the tail's NCHW map to ``[N, C, H * W]`` read only by the permute
    to tokens ``[N, H * W, C]`` (both views of the same NCHW4c tensor), the tokens read by a
    per-channel step or an add: XCiT's local patch interaction, ``x + gamma * tokens(conv(...))``.
    The permute (the tail in NHWC from there, so the step and the residual fold as after a Linear
    on tokens), else None: where nothing would fold after the views, the tail ends before them."""
    shape = static_shape(tail.last.var)
    if tail.layout != "NCHW" or user.op != "relax.reshape" or shape is None or len(shape) != 4:
        return None
    n, c, h, w = shape
    perm = rw.graph.sole_user(user.var) if static_shape(user.var) == (n, c, h * w) else None
    if perm is None or perm.op != "relax.permute_dims" or tuple(int(a) for a in perm.attrs.axes or ()) != (0, 2, 1):
        return None
    after = rw.graph.sole_user(perm.var)
    if after is None or (_added(rw, after, perm.var) is None and linear_step(after, perm.var, c, "NHWC") is None):
        return None
    user.fused = True
    tail.layout, tail.tokens_of = "NHWC", (n, c, h, w)
    return perm


def conv_tail(rw: Rewriter, node: Node, w: np.ndarray, data_layout: str) -> Tail:
    """Fold the linear tail after conv ``node`` into weights and bias, then take the residual (also
    through a permute back to NCHW: :func:`_permuted_residual`), then the activation (each found
    node is marked fused)."""
    tail = Tail(w, np.zeros(w.shape[0]), last=node, layout=data_layout)
    while True:
        fused = fuse_activation(rw.graph, tail.last.var)
        if fused is not None:  # the activation ends the epilogue
            tail.activation, tail.clip_bounds, tail.last = fused
            return tail
        user = rw.graph.sole_user(tail.last.var)
        last = _tail_step(rw, tail, user) if user is not None else None
        if last is None:
            return tail
        last.fused = True
        tail.last = last


def chain_tail(rw: Rewriter, tail: Tail, activations: int = 2) -> Tail:
    """The elementwise chain after the tail into it (``passes.epilogue_chain``), where kernels fuse:
    its expression, per-channel constants and operands (in full or broadcast), the kernel reading
    ``activations`` beside its input at most, the residual among them (2: the direct kernel, which
    the strategy then runs; 1: a conv only the tiled kernel runs, a folded group norm or GRN)."""
    if not rw.fuses:
        return tail
    nchw = tail.layout == "NCHW"
    anchor = Anchor(tail.w.shape[0], tail.layout, OPERAND_KINDS if nchw else ("full",),
                    operands=activations - (tail.residual is not None))
    found = chain_with_operands(rw, tail.last, anchor, tail.layout)
    if found is not None:
        tail.chain, tail.operands = found
        tail.last = tail.chain.last
    return tail


def emit_conv2d(rw: Rewriter, node: Node, x: Value, gate: Value | None = None, input_shift=None, norm=None, stats=None, grn=None):
    """Conv ``node`` on ``x`` with its tail (a depthwise conv's 1x1 reader is the
    ``depthwise_pointwise`` pattern's); with ``gate`` (``[N, C, 1, 1]``, the caller asked
    ``can_fuse("gate", ...)``) it reads ``x * gate`` (the ``gated_conv`` pattern's), with
    ``input_shift`` (per input channel; the caller checked the conv is unpadded) ``x * gate + shift``
    (GRN's ``beta``: :meth:`Tail.shift_input`); with ``norm`` ``(epsilon, gamma, beta)`` (the caller
    asked ``can_fuse("layer_norm", ...)``) ``LN(x) * gamma + beta``, the layer norm over x's channels
    (:meth:`Tail.fold_norm`); with ``norm`` ``(GroupNormFold, gamma, beta)`` and ``stats`` (the
    ``group_norm_partials`` output; the caller asked ``can_fuse("group_norm", ...)``) the group norm of x;
    with ``grn`` ``(epsilon, gamma)`` (the caller asked ``can_fuse("grn", ...)``) ``gate`` is GRN's sums of
    squares and the conv reads ``x * (1 + gamma * Nx)`` computing ``Nx`` itself."""
    data_layout, w = conv_operands(node)
    tail = chain_tail(rw, conv_tail(rw, node, w, data_layout), 1 if stats is not None or grn is not None else 2)
    del w  # the tail holds the weights; a fold replaces them, and the old ones go now, not at return
    if input_shift is not None:
        tail.shift_input(input_shift)
    grouped = norm is not None and stats is not None
    if norm is not None:
        tail.fold_norm(norm[1], norm[2], weight_sum=not grouped)
    geom = conv_geometry(node, x.nchw, tail.w.shape)
    epilogue = tail.epilogue
    # At the boundary with plain tensors (a model's input, tokens) the conv reads and writes them in
    # place: no layout kernel (passes.map_boundary decides from the graph, the strategy whether it can).
    plain_in = plain_input(rw, node, views=True) if x.layout == "NCHW" else None
    plain_out = token_output(rw, tail.last.var, geom.out_shape, tail.layout)
    patch = None if gate is not None or input_shift is not None or norm is not None or grn is not None else \
        patch_gemm_operands(rw, geom, tail, plain_in, plain_out)
    if patch is not None:  # a patchify conv between plain tensors: one GEMM (passes.patch_gemm)
        out = emit_patch_gemm(rw, node, geom, tail, plain_in, patch)
        define_plain_output(rw, tail.last.var, out, geom.out_shape, plain_out)
        return out
    # At a placement boundary the conv reads X (and the residual, the gate) where they are and
    # writes Y where its users want it: mixed-scope kernels instead of copy kernels.
    own = rw.conv_scope(geom)
    scope = rw.input_scope(x, own)
    out_scope = rw.output_scope(tail.last.var, own, (geom.n, geom.o4, geom.oh, geom.ow, 4), geom.out_shape)
    residual_scope = rw.input_scope(tail.extra_inputs[0], out_scope) if tail.extra_inputs else None
    gate_scope = rw.input_scope(gate, scope) if gate is not None else None
    plan = strategy.conv2d_plan(geom, epilogue, rw.precision, rw.profile, rw.records, allow_buffer=rw.allow_buffer,
                                in_scope=scope, out_scope=out_scope, residual_scope=residual_scope, gate_scope=gate_scope,
                                **({} if norm is None else {"group_norm" if grouped else "norm_eps": norm[0]}),
                                **({} if grn is None else {"grn_eps": grn[0]}))
    plain, plain_in, plain_out = _plain_plan(plan, plain_in, plain_out)
    if plain is not None:
        plan = plain
    plan = _plain_residual_plan(rw, plan, tail)
    if plain is not None and plain_in is not None:
        inputs = [plain_input_expr(rw, plain_in)]
    else:
        # a channel window of a wider map (a slice of whole blocks) is read in place: its slice kernel goes
        source, x_view = rw.blocked_view(x, scope)
        viewed = strategy.blocked_view_plan(plan, x_view) if x_view else None
        plan = viewed or plan
        inputs = [source if viewed else rw.blocked(x, scope)]
        inputs += ([rw.blocked(gate, gate_scope)] if gate is not None else []) + ([stats] if grouped else [])
        inputs += [relax.const(pack_bias(np.asarray(grn[1]).astype(rw.dtype)))] if grn is not None else []
    out = _emit_plan(rw, node, plan, inputs, tail)
    if plain is not None and plain_out is not None:
        define_plain_output(rw, tail.last.var, out, geom.out_shape, plain_out)
    else:
        rw.define(tail.last.var, out, plan.tensor("Y").scope, geom.out_shape, tail.layout)
    return out


def _plain_plan(plan, plain_in, plain_out):
    """(plan, plain_in, plain_out): ``plan`` reading ``plain_in`` (a ``map_boundary.plain_input``) and
    writing ``plain_out`` (a ``map_boundary.token_output``) plain where its kernel can, both sides
    or else one (``strategy.conv.plain_io_plan``); (None, None, None) where neither."""
    for data, out in ((plain_in, plain_out), (plain_in, None), (None, plain_out)):
        if data is not None or out is not None:
            found = strategy.plain_io_plan(plan, data and data[0], out and out.layout, x_view=data[3] if data else ())
            if found is not None:
                return found, data, out
    return None, None, None


def _plain_residual_plan(rw: Rewriter, plan, tail: Tail):
    """``plan`` reading its residual in place from the plain buffer it is held in, when it is held
    plain only (a map seen from tokens, a conv's plain output: CoaT's ``x + dwconv(x)`` position
    encoding on its own input) and the kernel can (``strategy.conv.plain_io_plan``); else ``plan``
    (the residual is packed as before)."""
    v = tail.residual
    if v is None or v.blocked or v.plain is None or not (rw.fuses and rw.allow_buffer) or dtype(v.plain) != "float32":
        return plan
    n, c, h, w = v.nchw
    layout = {(n, c, h, w): "NCHW", (n, h, w, c): "NHWC"}.get(static_shape(v.plain)) if v.layout in ("NCHW", "NHWC") else None
    if layout is None or layout != v.layout:
        return plan
    return strategy.plain_io_plan(plan, residual_layout=layout) or plan


def _stage_calls(plan) -> tuple:
    """The plan's kernels as factory calls (``passes.kernel_index``), in launch order: a direct
    conv's one, Winograd's three stages of one factory (``plan.primfuncs()`` without parsing)."""
    (factory, kwargs), = plan.stages
    if plan.algorithm == "direct":
        return (KernelCall.of(factory, **kwargs),)
    return tuple(KernelCall.of(factory, stage=i, **kwargs) for i in range(len(CONV_STAGES)))


def _emit_plan(rw: Rewriter, node: Node, plan, inputs: list, tail: Tail):
    """The kernels of conv ``plan`` on its blocked ``inputs`` (X, and a direct conv's Gate): its output."""
    # The choice travels to the executor's profile rows as PrimFunc attributes.
    stages = [c.with_attr(CONFIG_ATTR, plan.config_string).with_attr(SOURCE_ATTR, plan.source) for c in _stage_calls(plan)]
    # Every stage but the last produces one intermediate (Winograd's V, then M) from the previous.
    args = list(inputs)
    for func, name in zip(stages[:-1], ("V", "M")):
        args = [rw.emit_kernel(func, args, plan.tensor(name).shape, op_info=conv_info(node, plan, name))]
        if name == "V":
            args.append(relax.const(plan.pack_weights(tail.w)))
    args += tail.constants(plan.pack_weights, plan.dtype)[len(stages) > 1:]  # Winograd's U went in with V
    for value, name in zip(tail.extra_inputs, EXTRA_BUFFERS):  # the second read in the first's scope
        plain = name == EXTRA_BUFFERS[0] and plan.epilogue.residual_layout != "NCHW4c"  # _plain_residual_plan's
        args.append(value.plain if plain else rw.blocked(value, plan.tensor(name).scope))
    return rw.emit_kernel(stages[-1], args, plan.tensor("Y").shape, hint="conv2d", op_info=conv_info(node, plan, "Y"))


def emit_depthwise_pointwise(rw: Rewriter, x: Value, dw: ConvGeometry, dw_tail: Tail, dw_epilogue: Epilogue,
                             data_layout: str):
    """Depthwise conv ``dw`` (its tail folded) and the 1x1 conv that is its value's only user as
    one kernel, when the strategy says so (``strategy.fusion.can_fuse("depthwise_pointwise", ...)``: its ``FusedPlan``); else None."""
    pw_node = rw.graph.sole_user(dw_tail.last.var)
    if pw_node is None or pw_node.op != "relax.nn.conv2d" or not same(pw_node.args[0], dw_tail.last.var):
        return None
    operands = conv_operands(pw_node)
    if operands is None or operands.layout != data_layout:
        return None
    pw = conv_geometry(pw_node, dw.out_shape, operands.weights.shape)
    if _writes_plain_alone(rw, pw_node, pw, data_layout):
        return None
    plan = can_fuse("depthwise_pointwise", dw, rw.profile, rw.precision, rw.records, pointwise=pw, allow_buffer=rw.allow_buffer)
    if plan is None:
        return None
    pw_node.fused = True
    tail = conv_tail(rw, pw_node, operands.weights, data_layout)
    epilogue = tail.epilogue
    out_scope = rw.output_scope(tail.last.var, plan.scope, plan.out_shape, pw.out_shape)  # no copy at a boundary, as for a conv
    residual_scope = rw.input_scope(tail.residual, out_scope) if tail.residual is not None else None
    plan = replace(plan, in_scope=rw.input_scope(x, plan.scope), out_scope=out_scope, residual_scope=residual_scope)
    factory, kwargs = plan.stage(dw_epilogue, epilogue)
    func = KernelCall.of(factory, **kwargs).with_attr(CONFIG_ATTR, plan.config_string).with_attr(SOURCE_ATTR, plan.source)
    args = [rw.blocked(x, plan.in_scope), *dw_tail.constants(plan.pack_weights, rw.dtype), *tail.constants(plan.pack_weights, rw.dtype)]
    if tail.residual is not None:
        args.append(rw.blocked(tail.residual, residual_scope))
    info = fused_info(pw_node, plan, dw_epilogue, epilogue)
    out = rw.emit_kernel(func, args, plan.out_shape, hint="conv2d", op_info=info)
    rw.define(tail.last.var, out, out_scope, pw.out_shape, tail.layout)
    return out


def _writes_plain_alone(rw: Rewriter, pw_node: Node, pw: ConvGeometry, data_layout: str) -> bool:
    """Whether 1x1 conv ``pw_node`` alone writes its value as the plain buffer its token readers
    take (``map_boundary.token_output``, and its strategy plan can: ``plain_io_plan``). The fused
    depthwise + pointwise kernel writes NCHW4c only, so fusing would cost a layout kernel after it:
    the pair stays two kernels (as many launches, no layout transform). Its value is asked after the
    linear steps its tail folds (its bias add: TinyViT's patch merging ``conv3 -> + bias -> tokens``)."""
    plain_out = token_output(rw, _after_linear_steps(rw, pw_node.var, pw.o, data_layout), pw.out_shape, data_layout)
    if plain_out is None:
        return False
    plan = strategy.conv2d_plan(pw, Epilogue(), rw.precision, rw.profile, rw.records, allow_buffer=rw.allow_buffer)
    return strategy.plain_io_plan(plan, None, plain_out.layout) is not None


def _after_linear_steps(rw: Rewriter, var, channels: int, layout: str):
    """The value after the chain of linear steps (``affine.linear_step``: a bias add, a per-channel
    scale) that alone read conv value ``var`` one after another, as :func:`conv_tail` folds them
    (nothing marked fused here)."""
    user = rw.graph.sole_user(var)
    while user is not None and linear_step(user, var, channels, layout) is not None:
        var, user = user.var, rw.graph.sole_user(user.var)
    return var


def lower_conv2d(rw: Rewriter, node: Node):
    """Conv ``node`` on its input as the conv rule lowers it (:func:`emit_conv2d`), else None."""
    operands = conv_operands(node)
    layout = operands.layout if operands is not None else None
    del operands  # its float64 weights: emit_conv2d reads its own (VGG-19's first classifier layer: 800 MB)
    x = rw.activation(node.args[0], layout) if layout is not None else None
    if x is None:
        return None
    return emit_conv2d(rw, node, x)


# -- a matmul with constant weights as a conv (the matmul rule, the head GEMV, a folded layer norm)

def nc_value(rw: Rewriter, var) -> Value | None:
    """The :class:`Value` of a 2-d float32 ``[N, C]`` activation (a classifier's), else None."""
    if not isinstance(var, relax.Var):
        return None
    if var in rw.values:
        return rw.values[var] if rw.values[var].layout == "NC" else None
    shape = static_shape(var)
    if shape is None or len(shape) != 2 or dtype(var) != "float32":
        return None
    rw.values[var] = Value(plain=rw.exprs[var], layout="NC", channels=shape[1], nchw=(*shape, 1, 1))
    return rw.values[var]


def nc_as_nchw(rw: Rewriter, v: Value, a_shape) -> relax.Var:
    """A stand-in variable for ``[N, K]`` value ``v`` seen as ``[N, K, 1, 1]`` (blocked first)."""
    x_var = relax.Var("flat_nchw", relax.TensorType([*a_shape, 1, 1], "float32"))
    if rw.alias(x_var, v, "NCHW", v.nchw) is None:
        rw.blocked(v, rw.scope_for(blocked_shape(v.nchw)))
        rw.alias(x_var, v, "NCHW", v.nchw)
    return x_var


def tokens_as_nhwc(rw: Rewriter, v: Value) -> relax.Var:
    """A stand-in variable for tokens ``[N, L, C]`` ``v`` seen as their map ``[N, H, W, C]``."""
    n, c, h, w = v.nchw
    x_var = relax.Var("tokens_nhwc", relax.TensorType([n, h, w, c], "float32"))
    rw.alias(x_var, v, "NHWC", v.nchw)
    return x_var


def as_conv_operands(rw: Rewriter, node: Node, w: np.ndarray, a_shape):
    """(input var, data layout, OIHW weights) of the conv that computes matmul ``node``, else None."""
    a = node.args[0]
    k, m = w.shape
    src = rw.graph.by_var.get(a)
    flat = rw.activation(src.args[0]) if src is not None and src.op == "relax.reshape" and len(a_shape) == 2 else None
    if len(a_shape) == 4 and a_shape[3] == k and a in rw.values and rw.activation(a, "NHWC") is not None:
        return a, "NHWC", w.T[:, :, None, None]
    tokens = rw.values.get(a) if len(a_shape) == 3 and a_shape[2] == k else None
    if tokens is not None and tokens.layout == "NLC" and tokens.blocked:
        return tokens_as_nhwc(rw, tokens), "NHWC", w.T[:, :, None, None]
    if flat is not None and flat.layout == "NCHW" and a_shape == (flat.nchw[0], k) and int(np.prod(flat.nchw[1:])) == k and flat.nchw[2:] != (1, 1):
        return src.args[0], "NCHW", w.T.reshape(m, *flat.nchw[1:])
    # [N, K] held only plain (a class token gathered from plain tokens) is the GEMM's (rules.gemm):
    # as a 1x1 conv it is packed first, one transform and one launch more
    if len(a_shape) == 2 and a_shape[1] == k and not LayoutPlan.held(rw, a)[1] and nc_value(rw, a) is not None:
        return nc_as_nchw(rw, nc_value(rw, a), a_shape), "NCHW", w.T[:, :, None, None]
    return None

