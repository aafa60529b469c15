"""The rewriter: the new ``main`` being built, what it holds for each activation (its plain
form and its NCHW4c forms per scope), kernel emission, layout transforms and where each
activation lives (placement: ``tir_adreno.strategy.placement``)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import tvm
from tvm import relax

from primfuncs import elementwise, layout
from primfuncs._common import BUFFER, blocked
from primfuncs.epilogue import Epilogue

from tir_adreno.passes.convs import conv_geometry, conv_operands
from tir_adreno.passes import kernel_index
from tir_adreno.passes.graph import Graph, Node, dtype, same, static_shape
from tir_adreno.passes.kernel_index import KernelCall, kernel
from tir_adreno.passes.layout_plan import LayoutPlan
from tir_adreno.passes.op_info import FLOAT32_ATTR, layout_info
from tir_adreno.strategy import conv as strategy
from tir_adreno.strategy.placement import activation_scope
from tir_adreno.strategy.precision import kernel_dtype
from tir_adreno.strategy.profile import DeviceProfile

#: Ops whose kernels read an activation in either scope (mixed-scope convs; a classifier's
#: matmul runs as one); every other op of ours reads the profile's placement.
ANY_SCOPE_READERS = ("relax.nn.conv2d", "relax.matmul")


#: Token layouts (transformers): ``[N, L, C]`` and ``[N, C, L]`` with ``L = H * W`` tokens, the
#: flattened NHWC and NCHW. Their NCHW4c tensor is the map's (docs/kernels.md, token layout).
TOKEN_LAYOUTS = {"NHWC": "NLC", "NCHW": "NCL"}
#: The 4-d layout a token layout flattens.
MAP_LAYOUTS = {tokens: map_ for map_, tokens in TOKEN_LAYOUTS.items()}


def blocked_shape(nchw) -> tuple[int, int, int, int, int]:
    """The NCHW4c shape of an NCHW activation."""
    n, c, h, w = nchw
    return (n, blocked(c), h, w, 4)


@dataclass
class Value:
    """What the rewriter holds for one original 4-d activation."""

    plain: relax.Expr | None = None  # original layout (NCHW, NHWC, NC: [N, C] as H = W = 1, or tokens NLC / NCL)
    blocked: dict = field(default_factory=dict)  # scope -> NCHW4c expr
    layout: str = "NCHW"
    channels: int = 0
    nchw: tuple = ()
    # a slice of whole channel blocks of another blocked map: (that Value, primfuncs.gather steps
    # from this one's NCHW4c shape to its). Its own slice kernel is emitted as for any value; a
    # reader that takes the view (blocked_view) reads the source, and the slice, unread, goes.
    window: tuple = ()

    @property
    def shape5(self) -> tuple[int, int, int, int, int]:
        return blocked_shape(self.nchw)


class Rewriter:
    """Rewrites ``main`` node by node: each node goes to the first of ``rules`` (op name ->
    ordered rules, each ``apply(rewriter, node)`` -> the node's new value, or None when it
    does not apply); a node no rule takes is left to upstream (:meth:`fallback`)."""

    def __init__(self, mod: tvm.IRModule, profile: DeviceProfile, rules: dict, allow_buffer: bool = True, records=None,
                 precision: str = "float32", lazy: bool = False):
        self.mod = mod
        self.lazy = lazy  # emit stubs for kernel calls (compile_plan; a caller who wants PrimFuncs does not)
        self.profile = profile
        self.rules = rules
        # float32 or float16_acc32: the kernels are float32 either way (half storage is the
        # executor's allocation); "float16": every kernel of ours in half (blocked tensors,
        # weights and biases half; the layout transforms at a boundary with an upstream op
        # convert). precision also keys the records and bounds the conv algorithms.
        self.precision = precision
        self.dtype = kernel_dtype(precision)
        self.records = records  # tir_adreno.strategy.records.Records: tuned conv choices, or None
        self.allow_buffer = allow_buffer
        others = {gv: f for gv, f in mod.functions.items() if gv.name_hint != "main"}
        self.bb = relax.BlockBuilder(tvm.IRModule(others, attrs=mod.attrs))
        self.values: dict[relax.Var, Value] = {}
        self.exprs: dict[relax.Var, relax.Expr] = {}
        self._funcs: dict[str, relax.GlobalVar] = {}
        self._conv_scopes: dict = {}  # ConvGeometry -> the scope its plan places it in
        self.graph: Graph | None = None
        self.plan: LayoutPlan | None = None  # built by run(), before the first rule

    # -- emission ------------------------------------------------------------------------
    def emit_kernel(self, func, args, out_shape, dtype=None, hint="k", op_info: dict | None = None) -> relax.Var:
        """``call_tir`` of ``func`` (a PrimFunc or a ``kernel_index.KernelCall``), each kernel added
        once; its output in ``dtype`` (default: the kernels' dtype, :attr:`dtype`). A factory call
        that names no dtype gets :attr:`dtype` (conv plans name theirs). With :attr:`lazy`, a
        call becomes a stub (``kernel_index``): no TVMScript parsed when the kernel is indexed already."""
        out = relax.TensorType(list(out_shape), dtype or self.dtype)
        return self.bb.emit(relax.call_tir(self._kernel_gv(func, hint, op_info), args, out))

    def emit_float32(self, func, args, out_shape, op_info: dict, nchw=None) -> relax.Var:
        """:meth:`emit_kernel` of a kernel whose output stays float32 under half storage: statistics
        one of our kernels passes to another (``FLOAT32_ATTR`` on its output; the readers of that
        tensor then read float32 too, ``storage.half_buffers``). ``op_info`` gets the output's
        shape: ``nchw`` for a blocked output (its logical NCHW shape), else ``out_shape``."""
        func = func.with_attr(FLOAT32_ATTR, (len(args),))
        return self.emit_kernel(func, args, out_shape, dtype="float32", op_info={**op_info, "output": list(nchw or out_shape)})

    def emit_kernel_outputs(self, func, args, out_shapes, dtype=None, hint="k", op_info: dict | None = None) -> list:
        """:meth:`emit_kernel` of a kernel with several outputs (``out_shapes``): one launch, each
        output a value of its own."""
        outs = [relax.TensorType(list(s), dtype or self.dtype) for s in out_shapes]
        call = self.bb.emit(relax.call_tir(self._kernel_gv(func, hint, op_info), args, outs))
        return [self.bb.emit(relax.TupleGetItem(call, i)) for i in range(len(outs))]

    def _kernel_gv(self, func, hint: str, op_info: dict | None) -> relax.GlobalVar:
        func = self.in_dtype(func)
        gv = self._stub(func, hint, op_info) if isinstance(func, KernelCall) and self.lazy else None
        if gv is None:
            gv = self._func(func.primfunc() if isinstance(func, KernelCall) else func, hint, op_info)
        return gv

    def in_dtype(self, func):
        """``func`` built for :attr:`dtype` when it is a factory call that names no dtype (float32
        calls stay as written: the same kernel keys as before precisions)."""
        if not isinstance(func, KernelCall) or self.dtype == "float32" or "dtype" in dict(func.kwargs):
            return func
        return replace(func, kwargs=tuple(sorted({**dict(func.kwargs), "dtype": self.dtype}.items())))

    def plain_dtype(self) -> dict:
        """Layout transform arguments for the plain (upstream, float32) side of a blocked tensor."""
        return {} if self.dtype == "float32" else {"plain_dtype": "float32"}

    def _func(self, func, hint: str, op_info: dict | None) -> relax.GlobalVar:
        key = func.script()
        if key not in self._funcs:
            self._funcs[key] = self.bb.add_func(kernel_index.emitted(func, op_info), kernel_index.symbol(func) or hint)
        return self._funcs[key]

    def _stub(self, call: KernelCall, hint: str, op_info: dict | None) -> relax.GlobalVar | None:
        """The stub of ``call``; None when its arguments have no stable key (then it is parsed)."""
        try:
            entry = kernel_index.lookup(call)
        except kernel_index.UnkeyedArgument:
            return None
        key = (entry["script"], entry["symbol"], call.attrs)  # what the PrimFunc's script says
        if key not in self._funcs:
            stub = kernel_index.stub(entry, call)
            for name, value in call.attrs:
                stub = stub.with_attr(name, value)
            self._funcs[key] = self.bb.add_func(kernel_index.emitted(stub, op_info), entry["symbol"] or hint)
        return self._funcs[key]

    # -- placement ------------------------------------------------------------------------
    def scope_for(self, *shapes5) -> str:
        """Where a kernel that reads one scope takes its NCHW4c tensors ``shapes5``: the
        profile's ``activation_placement`` where they fit (``strategy.placement``)."""
        return activation_scope(shapes5, self.profile, allow_buffer=self.allow_buffer)

    def input_scope(self, v: Value, prefer: str) -> str:
        """Where a kernel that reads either scope (a conv) takes ``v``: ``prefer`` when ``v`` is
        there or not blocked yet, else where it already is (no copy kernel)."""
        return prefer if prefer in v.blocked or not v.blocked else next(iter(v.blocked))

    def output_scope(self, var, own: str, shape5, nchw) -> str:
        """Where a kernel that writes either scope (a conv) writes ``var`` (NCHW shape ``nchw``):
        where its readers want it when they are dense convs that agree (:meth:`reader_scope`),
        else ``own`` (its placement) when only readers of either scope (:data:`ANY_SCOPE_READERS`)
        use it, else where the other ops want it (:meth:`scope_for`), so no copy kernel follows."""
        if self.output_view(var, nchw):
            return BUFFER
        users = self.graph.users(var)
        if all(u.op in ANY_SCOPE_READERS for u in users):
            wanted = {self.reader_scope(u, var, nchw) for u in users}
            return wanted.pop() if len(wanted) == 1 and None not in wanted else own
        return self.scope_for(shape5)

    def output_view(self, var, nchw) -> bool:
        """Whether ``var`` (NCHW ``nchw``) is read only as a model output that its NCHW4c buffer
        already holds element for element (one pixel, channels a multiple of 4: a classifier's
        logits ``[N, C/4, 1, 1, 4]`` are ``[N, C]``): written to a buffer, the output is a view
        of it (:meth:`plain`) and no layout kernel runs. Not for half kernels (the output is float32)."""
        n, c, h, w = nchw
        if not self.fuses or not self.allow_buffer or self.dtype != "float32" or h * w != 1 or c % 4:
            return False
        out = self.graph.output
        fields = out.fields if isinstance(out, relax.Tuple) else [out]
        return self.graph.uses.get(var, 0) == 1 and any(same(f, var) for f in fields)

    def reads_plain(self, v: Value, node: Node) -> bool:
        """Whether ``node`` (a conv) may read ``v`` as the plain NCHW buffer it is: ``v`` is not
        blocked, ``node`` is its only reader (others would pack it anyway) and buffers are allowed."""
        return (self.fuses and self.allow_buffer and not v.blocked and v.layout == "NCHW" and v.plain is not None
                and self.graph.sole_user(node.args[0]) is node)

    @property
    def fuses(self) -> bool:
        """Whether kernels take in their neighbours (``profile.launch_cost_macs`` > 0):
        ``compile_model(fuse=False)`` keeps every op its own kernel, the edge layout transforms too."""
        return self.profile.launch_cost_macs > 0

    def reader_scope(self, node: Node, var, nchw) -> str | None:
        """The scope dense conv ``node`` places its input ``var`` in (its strategy plan's: a
        strided conv reads a texture much faster than a buffer on the H200, a 1x1 conv the
        other way round), or None for any other reader."""
        operands = conv_operands(node) if node.op == "relax.nn.conv2d" and same(node.args[0], var) else None
        if operands is None or operands.layout != "NCHW":
            return None
        try:
            geom = conv_geometry(node, nchw, operands.weights.shape)
            if geom.is_depthwise:  # it may fuse with its 1x1 reader: that plan decides
                return None
            return self.conv_scope(geom)
        except ValueError:  # a conv our kernels do not take: its own rule reports or leaves it
            return None

    def conv_scope(self, geom) -> str:
        """The scope conv ``geom``'s plan places it in (its own placement: the records' or the
        default choice's). Planned once per geometry: a conv's readers and the conv itself ask."""
        if geom not in self._conv_scopes:
            self._conv_scopes[geom] = strategy.conv2d_plan(geom, Epilogue(), self.precision, self.profile, self.records,
                                                           allow_buffer=self.allow_buffer).scope
        return self._conv_scopes[geom]

    # -- values ---------------------------------------------------------------------------
    def expr(self, arg):
        """The rewritten expression of an original argument, in its original layout."""
        if isinstance(arg, relax.Var):
            if arg in self.values:
                return self.plain(arg)
            return self.exprs[arg]
        if isinstance(arg, relax.Tuple):
            return relax.Tuple([self.expr(f) for f in arg.fields])
        return arg

    def activation(self, arg, layout: str = "NCHW") -> Value | None:
        """The :class:`Value` of a 4-d float32 activation in ``layout``, created on first use;
        None when ``arg`` is no such tensor (the caller then leaves the op to upstream)."""
        if not isinstance(arg, relax.Var):
            return None
        if arg in self.values:
            v = self.values[arg]
            return v if v.layout == layout else None
        shape = static_shape(arg)
        if shape is None or len(shape) != 4 or dtype(arg) != "float32":
            return None
        nchw = (shape[0], shape[3], shape[1], shape[2]) if layout == "NHWC" else shape
        v = Value(plain=self.exprs[arg], layout=layout, channels=nchw[1], nchw=nchw)
        self.values[arg] = v
        return v

    def define(self, var, blocked_expr, scope, nchw, layout="NCHW"):
        rank = len(static_shape(var) or ())
        if rank == 2:
            layout = "NC"  # a classifier's [N, C] (a Linear layer ran as a conv on [N, C, 1, 1])
        elif rank == 3:
            layout = TOKEN_LAYOUTS.get(layout, layout)  # tokens [N, L, C] (a Linear on tokens ran as a 1x1 conv)
        self.values[var] = Value(blocked={scope: blocked_expr}, layout=layout, channels=nchw[1], nchw=tuple(nchw))

    def alias(self, var, v: Value, layout: str, nchw) -> relax.Expr | None:
        """Define ``var`` as the blocked tensor of ``v`` seen in ``layout`` (no kernel: NCHW4c
        is the same for NCHW, NHWC and NC); None when ``v`` is not blocked yet."""
        if not v.blocked:
            return None
        out = self.blocked(v, self.input_scope(v, self.scope_for(blocked_shape(nchw))))
        self.values[var] = Value(blocked=v.blocked, layout=layout, channels=nchw[1], nchw=tuple(nchw))
        return out

    def view(self, var, layout: str) -> Value | None:
        """The :class:`Value` of ``var`` when it is ``layout`` or that layout's tokens (the same
        NCHW4c tensor: what an elementwise reader of equal shapes may take), else None."""
        v = self.values.get(var) if isinstance(var, relax.Var) else None
        if v is not None and v.layout in (layout, TOKEN_LAYOUTS.get(layout), MAP_LAYOUTS.get(layout)):
            return v
        return self.activation(var, layout)

    def blocked(self, v: Value, scope: str) -> relax.Expr:
        """``v`` as NCHW4c in ``scope``: packed from its plain form, or copied across scopes, once."""
        if scope in v.blocked:
            return v.blocked[scope]
        shape5 = v.shape5
        if v.blocked:
            (src_scope, src), = list(v.blocked.items())[:1]
            out = self.emit_kernel(kernel(elementwise.copy, shape5, scope=src_scope, out_scope=scope), [src], shape5, op_info=layout_info("copy", v.nchw))
        else:
            n, c, h, w = v.nchw
            nhwc = v.layout in ("NHWC", "NLC")
            factory = layout.nhwc_to_nchw4c if nhwc else layout.nchw_to_nchw4c
            plain_shape = (n, h, w, c) if nhwc else (n, c, h, w)
            # a flat layout's plain buffer seen as the 4-d map it packs: a view, no kernel (rules.token_layout)
            flat = v.layout in ("NC", "NLC", "NCL")
            plain = self.bb.emit(relax.op.memory.view(v.plain, relax.ShapeExpr(list(plain_shape)))) if flat else v.plain
            out = self.emit_kernel(kernel(factory, plain_shape, scope=scope, **self.plain_dtype()), [plain], shape5,
                                   op_info=layout_info(factory.__name__, v.nchw))
            self._count_transform()
        v.blocked[scope] = out
        return out

    def blocked_view(self, v: Value, scope: str) -> tuple[relax.Expr, tuple]:
        """``v`` for a kernel that reads a blocked operand through ``primfuncs.gather`` steps: (the
        wider map ``v`` is a channel window of, the steps) where kernels fuse and that map is held
        in ``scope``, else (``v`` in ``scope``, ())."""
        if v.window and self.fuses:
            source, steps = v.window
            if scope in source.blocked:
                return source.blocked[scope], steps
        return self.blocked(v, scope), ()

    def plain(self, var) -> relax.Expr:
        v = self.values[var]
        if v.plain is None and BUFFER in v.blocked and self.output_view(var, v.nchw):
            v.plain = self.bb.emit(relax.op.memory.view(v.blocked[BUFFER], relax.ShapeExpr(list(static_shape(var)))))
        if v.plain is None:
            (scope, src), = list(v.blocked.items())[:1]
            n, c, h, w = v.nchw
            nhwc = v.layout in ("NHWC", "NLC")
            factory, shape = (layout.nchw4c_to_nhwc, (n, h, w, c)) if nhwc else (layout.nchw4c_to_nchw, (n, c, h, w))
            # A flat layout's plain form is written in its own shape: no reshape kernel after it.
            flat = {"NC": (n, c), "NLC": (n, h * w, c), "NCL": (n, c, h * w)}.get(v.layout)
            extra = {"out_shape": flat} if flat is not None else {}
            func = kernel(factory, shape, scope=scope, **self.plain_dtype(), **extra)
            v.plain = self.emit_kernel(func, [src], flat or shape, dtype="float32", op_info=layout_info(factory.__name__, v.nchw))
            self._count_transform()
        return v.plain

    def _count_transform(self):
        if self.plan is not None:
            self.plan.transforms += 1

    def runs_plain(self, node: Node) -> bool:
        """Whether the layout planner runs flexible ``node`` plain (``passes.layout_plan``): the
        blocked pixelwise rules then leave it to ``token_elementwise``."""
        return self.plan is not None and self.plan.runs_plain(self, node)

    # -- driver ---------------------------------------------------------------------------
    def run(self) -> tvm.IRModule:
        func = self.mod["main"]
        self.graph = g = Graph(func, self.mod)
        self.plan = LayoutPlan.build(g)
        params = list(func.params)
        attrs = {k: v for k, v in func.attrs.items() if k != "global_symbol"} if func.attrs else None
        with self.bb.function("main", params, attrs=attrs):
            with self.bb.dataflow():
                for p in params:
                    self.exprs[p] = p
                for node in g.nodes:
                    if not node.fused:
                        result = self.rewrite(node)
                        if result is not None:
                            self.exprs[node.var] = result
                out = self.bb.emit_output(self.expr(g.output))
            self.bb.emit_func_output(out)
        return self.bb.get()

    def rewrite(self, node: Node):
        """The first rule's result for ``node``, else :meth:`fallback`'s."""
        for rule in self.rules.get(node.op, ()):
            result = rule.apply(self, node)
            if result is not None:
                return result
        return self.fallback(node)

    def fallback(self, node: Node):
        """Leave the op to upstream TVM, fed with operands in their original layout."""
        value = node.value
        if node.op == "tuple_get_item":
            return self.bb.emit(relax.TupleGetItem(self.expr(node.args[0]), node.index))
        if node.op == "tuple":
            return self.bb.emit(relax.Tuple([self.expr(a) for a in node.args]))
        if node.op == "other" or not isinstance(value, relax.Call):
            return self.bb.emit(value)
        args = [self.expr(a) for a in node.args]
        return self.bb.emit(relax.Call(value.op, args, value.attrs, value.ty_args))
