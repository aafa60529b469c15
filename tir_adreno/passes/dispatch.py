"""The Relax pass: a CNN's ops -> ``call_tir`` of our texture PrimFuncs.

:func:`DispatchToTextures` rewrites ``main`` of a static-shape Relax module:

- ``nn.conv2d`` becomes one conv kernel with its epilogue fused: a following
  per-channel bias ``add``, per-channel or scalar constant multiply/add/subtract/
  divide and ``nn.batch_norm`` are folded into the weights and bias at compile
  time, then a residual ``add`` and an activation run in the kernel's epilogue.
  Activations are recognized however the importer writes them (ReLU6 as
  ``maximum``/``minimum`` by scalars, HardSwish as ``x * relu6(x + 3) / 6``, SiLU
  as ``x * sigmoid(x)``, ...: :func:`_match_activation`). Weights are packed to
  OIHW4o here, once ("static textures").
- pooling, reductions over C/H/W, channel softmax, elementwise ops (activations,
  per-channel affine = batch norm after no conv, the squeeze-excitation gate
  multiply) and channel concat of any number of inputs map to their kernels when
  their operands are 4-d activations.
- Every PrimFunc emitted here carries :data:`OURS_ATTR`, so the profile tells our
  kernels from what TVM's importer or legalizer made.
- Activations stay NCHW4c between our kernels. A layout transform is emitted
  only where a value crosses to an op we do not cover (or comes from one), and
  each transform is emitted once per value, so back-to-back transforms cancel.
- Each blocked tensor is placed in the profile's ``activation_placement``: a
  buffer, or a texture when it fits the device's image limits (else a buffer); a
  kernel runs on textures when all its activations do, and a value in the other
  scope is copied over once. Convs read and write either scope (mixed-scope
  kernels): a conv reads its input where it is and writes its output where the
  dense convs that read it read (their plans' scope), else in its own placement
  (tuning records may set it) when only convs read it, else where the other ops
  want it, so a placement boundary costs no copy kernel.

Ops we do not cover are left as they are, for ``LegalizeOps`` and dlight.
Op families plug in through :data:`HANDLERS` (op name -> handler).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace

import numpy as np
import tvm
from tvm import relax

from primfuncs import concat, elementwise, layernorm, layout, pool2d, reduce, resize, shuffle
from primfuncs._common import BUFFER, TEXTURE, TEXTURE_WEIGHT, blocked
from primfuncs.conv import ConvGeometry, conv2d_geometry
from primfuncs.epilogue import Epilogue

from tir_adreno.strategy import conv as strategy
from tir_adreno.strategy import pool as pool_strategy
from tir_adreno.strategy.precision import PrecisionError, kernel_dtype
from tir_adreno.runtime import texture
from tir_adreno.strategy.packing import pack_bias
from tir_adreno.strategy.records import pool_key
from tir_adreno.strategy.profile import DeviceProfile

#: PrimFunc attributes carrying a conv's plan (config string, "records"/"default") to the profile.
CONFIG_ATTR, SOURCE_ATTR = "tir_adreno.config", "tir_adreno.source"
#: PrimFunc attr holding the op a kernel computes (JSON: op, attributes, logical shapes),
#: for ``tir-adreno dump`` and the ``kernel`` command's NumPy reference.
OP_ATTR = "tir_adreno.op"

#: Attribute marking the PrimFuncs this pass emits (kernels from ``primfuncs/``), so the
#: profile can tell them from what TVM's importer or legalizer made.
OURS_ATTR = "tir_adreno.kernel"

#: Ops whose kernels read an activation in either scope (mixed-scope convs; a classifier's
#: matmul runs as one); every other op of ours reads the profile's placement.
ANY_SCOPE_READERS = ("relax.nn.conv2d", "relax.matmul")

#: Relax op name -> handler(rewriter, node) -> new Relax expr of the node's value, or None to leave it.
HANDLERS = {}


def handles(*names):
    def register(fn):
        for name in names:
            HANDLERS[name] = fn
        return fn

    return register


# --------------------------------------------------------------------------------------------
# The binding graph of ``main``


@dataclass
class Node:
    """One binding of ``main``: ``var = op(args)`` with aliases resolved."""

    var: relax.Var
    op: str  # Relax op name, or "tuple_get_item" / "tuple" / "other"
    args: list
    attrs: object = None
    value: relax.Expr = None
    index: int = 0  # for tuple_get_item
    fused: bool = False


def _static_shape(expr):
    ty = expr.struct_info if hasattr(expr, "struct_info") else None
    ty = ty if ty is not None else getattr(expr, "ty", None)
    shape = getattr(ty, "shape", None)
    if shape is None or not isinstance(shape, relax.ShapeExpr):
        return None
    try:
        return tuple(int(d) for d in shape.values)
    except TypeError:
        return None


def _dtype(expr) -> str:
    ty = getattr(expr, "struct_info", None) or expr.ty
    return str(ty.dtype)


def _same(a, b) -> bool:
    """Identity of IR nodes (Python wrappers of one node are distinct objects)."""
    return a is not None and b is not None and a.same_as(b)


def _is_op(call, name):
    return isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op) and call.op.name == name


class Graph:
    """The bindings of ``main`` as nodes, with use counts. ``mod`` (the module holding
    ``main``) lets importer-made PrimFuncs be recognized as the ops they compute."""

    def __init__(self, func: relax.Function, mod: tvm.IRModule | None = None):
        self.func = func
        self.mod = mod
        self.nodes: list[Node] = []
        self.by_var: dict[relax.Var, Node] = {}
        self.alias: dict[relax.Var, relax.Expr] = {}
        body = func.body
        for block in body.blocks:
            for binding in block.bindings:
                if not isinstance(binding, relax.VarBinding):
                    raise NotImplementedError(f"unsupported binding {type(binding).__name__} in main")
                self._add(binding.var, binding.value)
        self.output = self.resolve(body.body)
        self.uses: dict[relax.Var, int] = {}
        for node in self.nodes:
            for arg in node.args:
                self._count(arg)
        self._count(self.output)

    def resolve(self, expr):
        while isinstance(expr, relax.Var) and expr in self.alias:
            expr = self.alias[expr]
        return expr

    def _count(self, expr):
        if isinstance(expr, relax.Var):
            self.uses[expr] = self.uses.get(expr, 0) + 1
        elif isinstance(expr, relax.Tuple):
            for f in expr.fields:
                self._count(f)

    def _add(self, var, value):
        if isinstance(value, relax.Var):
            self.alias[var] = self.resolve(value)
            return
        if _is_op(value, "relax.broadcast_to") and _static_shape(value.args[0]) == _static_shape(value):
            self.alias[var] = self.resolve(value.args[0])  # a no-op broadcast
            return
        value = self._as_relax_op(value)
        if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
            args = [self._arg(a) for a in value.args]
            op = value.op.name
            # ONNX Sum of two tensors imports as sum(stack([a, b]), axis=0): an add.
            if op == "relax.sum" and isinstance(args[0], relax.Var) and args[0] in self.by_var:
                stacked = self.by_var[args[0]]
                axis = [int(a) for a in value.attrs.axis] if value.attrs.axis is not None else None
                if stacked.op == "relax.stack" and int(stacked.attrs.axis) == 0 and axis == [0] and not value.attrs.keepdims:
                    parts = stacked.args[0]
                    if isinstance(parts, relax.Tuple) and len(parts.fields) == 2:
                        node = Node(var, "relax.add", list(parts.fields), None, value)
                        self.nodes.append(node)
                        self.by_var[var] = node
                        return
            node = Node(var, op, args, value.attrs, value)
        elif isinstance(value, relax.TupleGetItem):
            node = Node(var, "tuple_get_item", [self._arg(value.tuple_value)], None, value, index=int(value.index))
        elif isinstance(value, relax.Tuple):
            node = Node(var, "tuple", [self._arg(f) for f in value.fields], None, value)
        else:
            node = Node(var, "other", [], None, value)
        self.nodes.append(node)
        self.by_var[var] = node

    def _as_relax_op(self, value):
        """TVM's ONNX importer writes ``Clip`` as ``emit_te(topi.maximum/minimum, x, bound)``:
        a ``call_tir`` of a PrimFunc named ``maximum``/``minimum`` with a scalar constant.
        Read it as ``relax.maximum``/``relax.minimum`` (what upstream would also run for it)."""
        if self.mod is None or not _is_op(value, "relax.call_tir") or not isinstance(value.args[1], relax.Tuple):
            return value
        gv, args = value.args[0], value.args[1].fields
        name = gv.name_hint.rstrip("0123456789_")
        if name not in ("maximum", "minimum") or len(args) != 2 or not isinstance(args[0], relax.Var):
            return value
        bound = _const(args[1])
        if bound is None or bound.size != 1 or _static_shape(args[0]) != _static_shape(value):
            return value
        prim = self.mod[gv]  # topi's elementwise max/min, not just a PrimFunc of that name
        if not isinstance(prim, tvm.tirx.PrimFunc) or len(prim.params) != 3 or f"T.{name[:3]}(" not in prim.script():
            return value
        return (relax.op.maximum if name == "maximum" else relax.op.minimum)(args[0], args[1])

    def users(self, var) -> list[Node]:
        """The not yet fused nodes that read ``var`` (once per use)."""
        found = []
        for node in self.nodes:
            if node.fused:
                continue
            for a in node.args:
                fields = a.fields if isinstance(a, relax.Tuple) else [a]
                found += [node for f in fields if _same(f, var)]
        return found

    def _arg(self, expr):
        if isinstance(expr, relax.Var):
            return self.resolve(expr)
        if isinstance(expr, relax.Tuple):
            return relax.Tuple([self._arg(f) for f in expr.fields])
        return expr

    def sole_user(self, var) -> Node | None:
        """The node that is ``var``'s only use (not the function output), if any."""
        if self.uses.get(var, 0) != 1 or _same(self.output, var):
            return None
        for node in self.nodes:
            if not node.fused and any(_same(a, var) or (isinstance(a, relax.Tuple) and any(_same(f, var) for f in a.fields)) for a in node.args):
                return node
        return None


# --------------------------------------------------------------------------------------------
# Values in the rewritten function


@dataclass
class Value:
    """What the rewriter holds for one original 4-d activation."""

    plain: relax.Expr | None = None  # original layout (NCHW, NHWC, or NC: [N, C] as H = W = 1)
    blocked: dict = field(default_factory=dict)  # scope -> NCHW4c expr
    layout: str = "NCHW"
    channels: int = 0
    nchw: tuple = ()


class Rewriter:
    def __init__(self, mod: tvm.IRModule, profile: DeviceProfile, allow_buffer: bool = True, records=None,
                 precision: str = "float32"):
        self.mod = mod
        self.profile = profile
        # float32 or float16_acc32: the kernels are float32 either way (half storage is the
        # executor's allocation); precision keys the records and bounds the conv algorithms.
        self.precision = precision
        self.records = records  # tir_adreno.strategy.records.Records: tuned conv choices, or None
        self.limits = profile.limits
        self.allow_buffer = allow_buffer
        others = {gv: f for gv, f in mod.functions.items() if gv.name_hint != "main"}
        self.bb = relax.BlockBuilder(tvm.IRModule(others, attrs=mod.attrs))
        self.values: dict[relax.Var, Value] = {}
        self.exprs: dict[relax.Var, relax.Expr] = {}
        self._funcs: dict[str, relax.GlobalVar] = {}
        self.graph: Graph | None = None

    # -- emission ------------------------------------------------------------------------
    def emit_kernel(self, func, args, out_shape, dtype="float32", hint="k", op_info: dict | None = None) -> relax.Var:
        key = func.script()
        if key not in self._funcs:
            func = func.with_attr("tirx.is_scheduled", True).with_attr(OURS_ATTR, True)
            if op_info is not None:
                func = func.with_attr(OP_ATTR, json.dumps(op_info, sort_keys=True))
            name = str(func.attrs["global_symbol"]) if "global_symbol" in func.attrs else hint
            self._funcs[key] = self.bb.add_func(func.without_attr("global_symbol"), name)
        out = relax.TensorType(list(out_shape), dtype)
        return self.bb.emit(relax.call_tir(self._funcs[key], args, out))

    def scope_for(self, *shapes5) -> str:
        """The profile's ``activation_placement``: a buffer, or a texture when every NCHW4c
        tensor of a kernel fits the device's images (else a buffer)."""
        if self.profile.activation_placement == "buffer":
            return BUFFER
        ok = all(self.limits.fits(s, TEXTURE) for s in shapes5)
        if not ok and not self.allow_buffer:
            for s in shapes5:
                texture.place(s, TEXTURE, self.limits, allow_buffer=False)  # raises, naming the limit
        return TEXTURE if ok else BUFFER

    def input_scope(self, v: Value, prefer: str) -> str:
        """Where a kernel that reads either scope (a conv) takes ``v``: ``prefer`` when ``v`` is
        there or not blocked yet, else where it already is (no copy kernel)."""
        return prefer if prefer in v.blocked or not v.blocked else next(iter(v.blocked))

    def output_scope(self, var, own: str, shape5, nchw) -> str:
        """Where a kernel that writes either scope (a conv) writes ``var`` (NCHW shape ``nchw``):
        where its readers want it when they are dense convs that agree (:meth:`reader_scope`),
        else ``own`` (its placement) when only readers of either scope (:data:`ANY_SCOPE_READERS`)
        use it, else where the other ops want it (:meth:`scope_for`), so no copy kernel follows."""
        users = self.graph.users(var)
        if all(u.op in ANY_SCOPE_READERS for u in users):
            wanted = {self.reader_scope(u, var, nchw) for u in users}
            return wanted.pop() if len(wanted) == 1 and None not in wanted else own
        return self.scope_for(shape5)

    def reader_scope(self, node: Node, var, nchw) -> str | None:
        """The scope dense conv ``node`` places its input ``var`` in (its strategy plan's: a
        strided conv reads a texture much faster than a buffer on the H200, a 1x1 conv the
        other way round), or None for any other reader."""
        operands = _conv_operands(node) if node.op == "relax.nn.conv2d" and _same(node.args[0], var) else None
        if operands is None or operands[0] != "NCHW":
            return None
        try:
            geom = _conv_geometry(node, nchw, operands[1])
            if geom.is_depthwise:  # it may fuse with its 1x1 reader: that plan decides
                return None
            return strategy.conv2d_plan(geom, Epilogue(), self.precision, self.profile, self.records,
                                        allow_buffer=self.allow_buffer).scope
        except ValueError:  # a conv our kernels do not take: its own handler reports or leaves it
            return None

    def weight_scope(self, shape5) -> str:
        return texture.place(shape5, TEXTURE_WEIGHT, self.limits, self.allow_buffer)

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
        shape = _static_shape(arg)
        if shape is None or len(shape) != 4 or _dtype(arg) != "float32":
            return None
        nchw = (shape[0], shape[3], shape[1], shape[2]) if layout == "NHWC" else shape
        v = Value(plain=self.exprs[arg], layout=layout, channels=nchw[1], nchw=nchw)
        self.values[arg] = v
        return v

    def define(self, var, blocked_expr, scope, nchw, layout="NCHW"):
        if len(_static_shape(var) or ()) == 2:
            layout = "NC"  # a classifier's [N, C] (a Linear layer ran as a conv on [N, C, 1, 1])
        self.values[var] = Value(blocked={scope: blocked_expr}, layout=layout, channels=nchw[1], nchw=tuple(nchw))

    def blocked(self, v: Value, scope: str) -> relax.Expr:
        """``v`` as NCHW4c in ``scope``: packed from its plain form, or copied across scopes, once."""
        if scope in v.blocked:
            return v.blocked[scope]
        shape5 = (v.nchw[0], blocked(v.channels), v.nchw[2], v.nchw[3], 4)
        if v.blocked:
            (src_scope, src), = list(v.blocked.items())[:1]
            out = self.emit_kernel(elementwise.copy(shape5, scope=src_scope, out_scope=scope), [src], shape5, op_info=_layout_info("copy", v.nchw))
        else:
            n, c, h, w = v.nchw
            factory = layout.nhwc_to_nchw4c if v.layout == "NHWC" else layout.nchw_to_nchw4c
            plain_shape = (n, h, w, c) if v.layout == "NHWC" else (n, c, h, w)
            plain = self.bb.emit(relax.op.reshape(v.plain, plain_shape)) if v.layout == "NC" else v.plain
            out = self.emit_kernel(factory(plain_shape, scope=scope), [plain], shape5, op_info=_layout_info(factory.__name__, v.nchw))
        v.blocked[scope] = out
        return out

    def plain(self, var) -> relax.Expr:
        v = self.values[var]
        if v.plain is None:
            (scope, src), = list(v.blocked.items())[:1]
            n, c, h, w = v.nchw
            if v.layout == "NHWC":
                v.plain = self.emit_kernel(layout.nchw4c_to_nhwc((n, h, w, c), scope=scope), [src], (n, h, w, c), op_info=_layout_info("nchw4c_to_nhwc", v.nchw))
            else:
                v.plain = self.emit_kernel(layout.nchw4c_to_nchw((n, c, h, w), scope=scope), [src], (n, c, h, w), op_info=_layout_info("nchw4c_to_nchw", v.nchw))
                if v.layout == "NC":
                    v.plain = self.bb.emit(relax.op.reshape(v.plain, (n, c)))
        return v.plain

    # -- driver ---------------------------------------------------------------------------
    def run(self) -> tvm.IRModule:
        func = self.mod["main"]
        self.graph = g = Graph(func, self.mod)
        params = list(func.params)
        attrs = {k: v for k, v in func.attrs.items() if k != "global_symbol"} if func.attrs else None
        with self.bb.function("main", params, attrs=attrs):
            with self.bb.dataflow():
                for p in params:
                    self.exprs[p] = p
                for node in g.nodes:
                    if node.fused:
                        continue
                    handler = HANDLERS.get(node.op)
                    result = handler(self, node) if handler else None
                    if result is None:
                        result = self.fallback(node)
                    if result is not None:
                        self.exprs[node.var] = result
                out = self.bb.emit_output(self.expr(g.output))
            self.bb.emit_func_output(out)
        return self.bb.get()

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


# --------------------------------------------------------------------------------------------
# Handlers


def _const(expr):
    return expr.value.numpy() if isinstance(expr, tvm.ir.expr.GenericConst) else None


def _channel_vector(expr, channels: int, layout: str = "NCHW"):
    """A float32 constant broadcasting along the channels of an activation in ``layout``
    (a scalar, or shape (1,C,1,1) / (C,1,1) in NCHW) as a flat float64 vector, else None."""
    data = _const(expr)
    if data is None or data.dtype != np.float32:
        return None
    if data.size == 1 and data.ndim <= 4:
        return np.full(channels, float(data.reshape(())), np.float64)
    if layout == "NCHW" and data.shape in ((1, channels, 1, 1), (channels, 1, 1)):
        return data.reshape(channels).astype(np.float64)
    if layout in ("NHWC", "NC") and data.shape in ((channels,), (1, channels), (1, 1, 1, channels), (1, 1, channels)):
        return data.reshape(channels).astype(np.float64)
    return None


def _other_operand(node: Node, var):
    a, b = node.args
    return b if _same(a, var) else a if _same(b, var) else None


def _linear_step(node: Node, var, channels: int, layout: str = "NCHW"):
    """``node`` as ``y = var * scale + shift`` with per-channel (or scalar) constants:
    (scale, shift) float64 vectors, else None. Batch norm as Caffe/TF exporters write
    it (Mul then Add by [1,C,1,1]) and HardSigmoid's ``alpha * x + beta`` are such steps."""
    if node.op not in ("relax.add", "relax.subtract", "relax.multiply", "relax.divide") or len(node.args) != 2:
        return None
    if _static_shape(node.var) != _static_shape(var):
        return None  # the constant must not broadcast the activation itself
    if len(_static_shape(var) or ()) == 2:
        layout = "NC"
    other = _other_operand(node, var)
    if node.op in ("relax.subtract", "relax.divide") and not _same(node.args[0], var):
        return None  # c - x and c / x are not linear in x with a per-channel scale
    c = _channel_vector(other, channels, layout) if other is not None else None
    if c is None:
        return None
    ones, zeros = np.ones(channels), np.zeros(channels)
    if node.op == "relax.divide":  # only here: 1 / c of a multiply's zero constant would warn for nothing
        with np.errstate(divide="ignore"):  # x / 0 is inf, as in NumPy
            return 1.0 / c, zeros
    return {"relax.add": (ones, c), "relax.subtract": (ones, -c), "relax.multiply": (c, zeros)}[node.op]


def _scalar_step(node: Node, var):
    """``node`` as one step of an elementwise chain on ``var`` with scalar constants:
    a NumPy float64 function (for :func:`_name_activation`), else None."""
    if node.op == "relax.nn.relu" and _same(node.args[0], var):
        return lambda x: np.maximum(x, 0.0)
    if node.op == "relax.sigmoid" and _same(node.args[0], var):
        return lambda x: 1.0 / (1.0 + np.exp(-x))
    if node.op in ("relax.erf", "relax.tanh") and _same(node.args[0], var):  # GELU's gate
        return _erf if node.op == "relax.erf" else np.tanh
    if node.op == "relax.clip" and _same(node.args[0], var):
        bounds = _clip_range(node)
        return None if bounds is None else (lambda x: np.clip(x, *bounds))
    if node.op in ("relax.maximum", "relax.minimum") and len(node.args) == 2 and _static_shape(node.var) == _static_shape(var):
        c = _const(_other_operand(node, var)) if _other_operand(node, var) is not None else None
        if c is None or c.size != 1:
            return None
        fn, bound = (np.maximum if node.op == "relax.maximum" else np.minimum), float(c.reshape(()))
        return lambda x: fn(x, bound)
    step = _linear_step(node, var, 1)
    if step is None:
        return None
    scale, shift = float(step[0][0]), float(step[1][0])
    return lambda x: x * scale + shift


#: The named activations as float64 NumPy functions, to recognize the importer's forms of them.
_ACTIVATION_FUNCTIONS = {
    "relu": lambda x: np.maximum(x, 0.0),
    "relu6": lambda x: np.clip(x, 0.0, 6.0),
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "hardsigmoid": lambda x: np.clip(x + 3.0, 0.0, 6.0) / 6.0,
}
_erf = np.vectorize(math.erf, otypes=[np.float64])


def _gelu_gate_scale(steps, mul: Node, g: "Graph"):
    """GELU as torch exports it, ``x * (1 + erf(x / sqrt 2)) * 0.5``: when the gate chain
    ``steps`` computes ``r * Phi(x)`` (Phi the normal CDF), the nodes after ``mul`` that
    scale its result by ``1 / r`` (none when r = 1), else None."""
    y = _SAMPLES
    for fn in steps:
        y = fn(y)
    phi = 0.5 * (1.0 + _erf(_SAMPLES / math.sqrt(2.0)))
    at = int(np.argmin(np.abs(_SAMPLES - 1.0)))  # Phi(1) is well away from 0
    r = float(y[at] / phi[at])
    if not np.allclose(y, r * phi, rtol=1e-6, atol=1e-6):
        return None
    if abs(r - 1.0) < 1e-6:
        return []
    user = g.sole_user(mul.var)
    step = _scalar_step(user, mul.var) if user is not None else None
    if step is None or abs(float(step(np.float64(0.0)))) > 1e-12 or abs(float(step(np.float64(r))) - 1.0) > 1e-6:
        return None
    return [user]


# Dense over the breakpoints of the piecewise-linear forms, plus far values (saturation, slope).
_SAMPLES = np.concatenate([np.linspace(-10.0, 10.0, 4001), [-1e4, -100.0, 100.0, 1e4]])


def _name_activation(steps):
    """The activation (name, clip bounds) that the chain ``steps`` computes, else None.

    The importer writes one activation in several forms (ReLU6 as ``clip(0, 6)`` or as
    ``maximum(x, 0)`` then ``minimum(x, 6)``; HardSigmoid as ``clip(x/6 + 0.5, 0, 1)``
    or ``relu6(x + 3) / 6``); comparing the chain's values with each activation's on
    samples dense around their breakpoints names them all with one rule."""
    with np.errstate(over="ignore"):  # exp(-x) for x = -1e4 is inf: sigmoid 0, as it should
        y = _SAMPLES
        for fn in steps:
            y = fn(y)
        for name, fn in _ACTIVATION_FUNCTIONS.items():
            if np.allclose(y, fn(_SAMPLES), rtol=1e-6, atol=1e-6):
                return name, None
    lo, hi = float(y.min()), float(y.max())
    saturates = np.count_nonzero(y == lo) > 1 and np.count_nonzero(y == hi) > 1
    if saturates and np.allclose(y, np.clip(_SAMPLES, lo, hi), rtol=1e-6, atol=1e-6):
        return "clip", (lo, hi)  # a clamp whose both bounds lie inside the samples
    return None


def _match_activation(g: Graph, var, first: Node | None = None):
    """The longest chain of scalar elementwise nodes from ``var`` (starting with its sole
    user, or with ``first``) that computes a named activation, or the gated form
    ``var * gate(var)`` (SiLU: sigmoid gate, HardSwish: hardsigmoid gate):
    (name, clip bounds, nodes), else None. Nothing is marked fused."""
    users = g.users(var)
    for start, mul in (users, users[::-1]) if len(users) == 2 and g.uses.get(var, 0) == 2 else ():
        if mul.op != "relax.multiply" or start is mul or (first is not None and first is not start and first is not mul):
            continue
        gate = _other_operand(mul, var)
        step = _scalar_step(start, var)
        if gate is None or step is None:
            continue
        # The gate chain: start ... -> gate, whose only user is the multiply.
        chain, steps, cur = [start], [step], start.var
        while not _same(cur, gate):
            nxt = g.sole_user(cur)
            step = _scalar_step(nxt, cur) if nxt is not None else None
            if step is None:
                break
            chain.append(nxt)
            steps.append(step)
            cur = nxt.var
        if not _same(cur, gate) or g.sole_user(gate) is not mul:
            continue
        named = _name_activation(steps)
        gated_name = {"sigmoid": "silu", "hardsigmoid": "hardswish"}.get(named[0]) if named else None
        if gated_name is not None and _static_shape(mul.var) == _static_shape(var):
            return gated_name, None, [*chain, mul]
        gelu_tail = _gelu_gate_scale(steps, mul, g) if named is None else None
        if gelu_tail is not None and _static_shape(mul.var) == _static_shape(var):
            return "gelu", None, [*chain, mul, *gelu_tail]
    found = None  # the longest named prefix
    chain, steps, cur = [], [], var
    user = first if first is not None else g.sole_user(var)
    while user is not None:
        step = _scalar_step(user, cur)
        if step is None:
            break
        chain.append(user)
        steps.append(step)
        named = _name_activation(steps)
        if named is not None:
            found = (named[0], named[1], list(chain))
        cur = user.var
        user = g.sole_user(cur)
    return found


def _conv_weight_oihw(w: np.ndarray, kernel_layout: str) -> np.ndarray | None:
    if kernel_layout == "OIHW":
        return w
    if sorted(kernel_layout) == sorted("OIHW"):
        return np.transpose(w, [kernel_layout.index(c) for c in "OIHW"])
    return None


# --------------------------------------------------------------------------------------------
# Op metadata recorded on each kernel (OP_ATTR)


def _jsonable(value):
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, (tuple, list)) or type(value).__name__ == "Array":
        return [_jsonable(v) for v in value]
    if hasattr(value, "value"):  # IntImm, FloatImm, StringImm
        return value.value
    return str(value)


def _attrs(attrs) -> dict:
    """The public fields of a Relax attrs node as JSON values."""
    names = [k for k in dir(attrs) if not k.startswith("_") and k != "id_" and not callable(getattr(attrs, k, None))]
    return {k: getattr(attrs, k) for k in names}


def _info(node: Node, **attrs) -> dict:
    """Op name (Relax's, without "relax."), logical shapes (the model's layout) and attributes."""
    inputs = [a for a in node.args if isinstance(a, relax.Var)]
    if node.args and isinstance(node.args[0], relax.Tuple):
        inputs = list(node.args[0].fields)
    return {
        "op": node.op.removeprefix("relax."),
        "node": node.var.name,
        "inputs": [list(_static_shape(a) or ()) for a in inputs],
        "output": list(_static_shape(node.var) or ()),
        "attrs": {k: _jsonable(v) for k, v in attrs.items()},
    }


def _layout_info(op: str, nchw) -> dict:
    return {"op": op, "node": "", "inputs": [list(nchw)], "output": list(nchw), "attrs": {}}


def _elementwise_info(op: str, nodes, inputs, **attrs) -> dict:
    """A pixelwise kernel over NCHW ``inputs`` (the first one's shape out) standing for ``nodes``."""
    names = ",".join(m.var.name for m in nodes)
    return {"op": op, "node": names, "inputs": [list(s) for s in inputs], "output": list(inputs[0]), "attrs": {k: _jsonable(v) for k, v in attrs.items()}}


#: A conv's kernels by the tensor each writes: direct (Y), Winograd (V, M, Y).
CONV_STAGES = {"V": "input_transform", "M": "batched_gemm", "Y": "output_transform"}


def _conv_info(node: Node, plan, output: str) -> dict:
    """A conv kernel (``plan``: strategy.ConvPlan) writing tensor ``output``."""
    geom, epilogue = plan.geometry, plan.epilogue
    info = _info(node, strides=geom.strides, padding=geom.padding, dilation=geom.dilation, groups=geom.groups)
    info.update(
        op="nn.conv2d",
        inputs=[[geom.n, geom.c, geom.h, geom.w]],
        weight=[geom.o, geom.cg, geom.kh, geom.kw],
        output=list(geom.out_shape),
        epilogue=_epilogue_info(epilogue),
        algorithm=plan.algorithm,
        stage="direct" if plan.algorithm == "direct" else CONV_STAGES[output],
        choice=plan.choice.to_dict(),  # rebuilds the other stages of a Winograd conv (``tir-adreno kernel``)
        io_scopes=plan.io_scopes,  # with the scopes of X, Y and Residual (mixed at a placement boundary)
    )
    return info


def _conv_operands(node: Node):
    """(data layout, OIHW float64 weights) of a conv2d we can run (constant float32 weights,
    NCHW/NHWC in and out), else None."""
    attrs = node.attrs
    data_layout, kernel_layout = str(attrs.data_layout), str(attrs.kernel_layout)
    out_layout = str(attrs.out_layout) if attrs.out_layout else data_layout
    if data_layout not in ("NCHW", "NHWC") or out_layout != data_layout:
        return None
    w = _const(node.args[1])
    if w is None or w.dtype != np.float32:
        return None
    w = _conv_weight_oihw(w, kernel_layout)
    return None if w is None else (data_layout, w.astype(np.float64))


def _conv_geometry(node: Node, nchw, w) -> ConvGeometry:
    attrs = node.attrs
    return conv2d_geometry(nchw, w.shape, _ints(attrs.strides), _ints(attrs.padding), _ints(attrs.dilation), int(attrs.groups))


@dataclass
class _Tail:
    """A conv's epilogue as found in the graph: weights and bias with the linear steps folded in,
    the residual, the activation, and the node whose value the kernel writes."""

    w: np.ndarray
    bias: np.ndarray
    residual: Value | None
    activation: str | None
    clip_bounds: tuple | None
    last: Node

    @property
    def has_bias(self) -> bool:
        return bool(np.any(self.bias != 0))

    @property
    def epilogue(self) -> Epilogue:
        return Epilogue(bias=self.has_bias, activation=self.activation, residual=self.residual is not None,
                        **_clip_fields(self.clip_bounds))

    def constants(self, pack_weights) -> list:
        """The kernel arguments of the weights and the bias (when it has one)."""
        bias = [relax.const(pack_bias(self.bias.astype(np.float32)))] if self.has_bias else []
        return [relax.const(pack_weights(self.w)), *bias]


def _conv_tail(rw: Rewriter, node: Node, w: np.ndarray, data_layout: str) -> _Tail:
    """Fold the linear tail after conv ``node`` into weights and bias, then take the residual, then the
    activation (each found node is marked fused)."""
    o = w.shape[0]
    bias = np.zeros(o)
    residual, activation, last = None, None, node

    def next_user():
        return rw.graph.sole_user(last.var)

    clip_bounds = None
    user = next_user()
    while True:
        matched = _match_activation(rw.graph, last.var)
        if matched is not None:  # the activation ends the epilogue
            activation, clip_bounds, nodes = matched
            for m in nodes:
                m.fused = True
            last = nodes[-1]
            break
        if user is None:
            break
        linear = residual is None  # bias and batch norm fold only before the residual
        step = _linear_step(user, last.var, o, data_layout) if linear else None
        if step is not None:
            scale, shift = step
            w = w * scale[:, None, None, None]
            bias = bias * scale + shift
        elif (
            linear
            and user.op == "relax.nn.batch_norm"
            and _same(user.args[0], last.var)
            and data_layout == "NCHW"
            and int(user.attrs.axis) == 1
            and not bool(user.attrs.training)  # inference: the moving statistics fold into W and b
        ):
            getter = rw.graph.sole_user(user.var)
            folded = _batch_norm_affine(user)
            if getter is None or getter.op != "tuple_get_item" or getter.index != 0 or folded is None:
                break
            scale, shift = folded
            w = w * scale[:, None, None, None]
            bias = bias * scale + shift
            user.fused = True
            user = getter
        elif linear and user.op == "relax.add" and isinstance(_other_operand(user, last.var), relax.Var):
            other = _other_operand(user, last.var)
            # The residual must exist already; when it comes later (a downsample branch
            # emitted after this one), that branch's conv takes this one as its residual.
            ready = other in rw.values or other in rw.exprs
            if not ready or _static_shape(other) != _static_shape(last.var) or rw.activation(other, data_layout) is None:
                break
            residual = rw.values[other]
        else:
            break
        user.fused = True
        last = user
        user = next_user()
    return _Tail(w, bias, residual, activation, clip_bounds, last)


def _epilogue_info(epilogue: Epilogue) -> dict:
    return {"bias": epilogue.bias, "activation": epilogue.activation, "residual": epilogue.residual,
            **({"clip": [epilogue.clip_min, epilogue.clip_max]} if epilogue.activation == "clip" else {})}


def _fused_info(pw_node: Node, plan, dw_epilogue: Epilogue, epilogue: Epilogue) -> dict:
    """The fused depthwise -> 1x1 kernel (``plan``: strategy.FusedPlan): both convs. ``attrs``,
    ``weight`` and ``epilogue`` are the 1x1 conv's (as for a conv); ``depthwise`` the other's."""
    dw, pw = plan.depthwise, plan.pointwise
    info = _info(pw_node, strides=dw.strides, padding=dw.padding, dilation=dw.dilation)
    info.update(
        op="depthwise_pointwise",
        inputs=[[dw.n, dw.c, dw.h, dw.w]],
        depthwise={"weight": [dw.o, 1, dw.kh, dw.kw], "epilogue": _epilogue_info(dw_epilogue)},
        weight=[pw.o, pw.c, 1, 1],
        output=list(pw.out_shape),
        epilogue=_epilogue_info(epilogue),
        algorithm="direct",
        stage="direct",
    )
    return info


@handles("relax.nn.conv2d")
def conv2d_handler(rw: Rewriter, node: Node):
    operands = _conv_operands(node)
    x = rw.activation(node.args[0], operands[0]) if operands is not None else None
    if x is None:
        return None
    data_layout, w = operands
    tail = _conv_tail(rw, node, w, data_layout)
    geom = _conv_geometry(node, x.nchw, tail.w)
    epilogue = tail.epilogue
    if geom.is_depthwise and tail.residual is None:
        fused = _fuse_pointwise(rw, x, geom, tail, epilogue, data_layout)
        if fused is not None:
            return fused
    plan = strategy.conv2d_plan(geom, epilogue, rw.precision, rw.profile, rw.records, allow_buffer=rw.allow_buffer)
    # At a placement boundary the conv reads X (and the residual) where they are and writes Y
    # where its users want it: mixed-scope kernels instead of copy kernels.
    scope = rw.input_scope(x, plan.scope)
    out_scope = rw.output_scope(tail.last.var, plan.scope, plan.tensor("Y").shape, geom.out_shape)
    residual_scope = rw.input_scope(tail.residual, out_scope) if tail.residual is not None else None
    if (scope, out_scope, residual_scope or out_scope) != (plan.scope,) * 3:
        plan = strategy.conv2d_plan(geom, epilogue, rw.precision, rw.profile, rw.records, allow_buffer=rw.allow_buffer,
                                    in_scope=scope, out_scope=out_scope, residual_scope=residual_scope)
    # The choice travels to the executor's profile rows as PrimFunc attributes.
    stages = [f.with_attr(CONFIG_ATTR, plan.config_string).with_attr(SOURCE_ATTR, plan.source) for f in plan.primfuncs()]
    # Every stage but the last produces one intermediate (Winograd's V, then M) from the previous.
    args = [rw.blocked(x, scope)]
    for func, name in zip(stages[:-1], ("V", "M")):
        args = [rw.emit_kernel(func, args, plan.tensor(name).shape, op_info=_conv_info(node, plan, name))]
        if name == "V":
            args.append(relax.const(plan.pack_weights(tail.w)))
    args += tail.constants(plan.pack_weights)[len(stages) > 1:]  # Winograd's U went in with V
    if tail.residual is not None:
        args.append(rw.blocked(tail.residual, plan.tensor("Residual").scope))
    out = rw.emit_kernel(stages[-1], args, plan.tensor("Y").shape, hint="conv2d", op_info=_conv_info(node, plan, "Y"))
    rw.define(tail.last.var, out, plan.tensor("Y").scope, geom.out_shape, data_layout)
    return out


def _fuse_pointwise(rw: Rewriter, x: Value, dw: ConvGeometry, dw_tail: _Tail, dw_epilogue: Epilogue, data_layout: str):
    """Depthwise conv ``dw`` (its tail folded) and the 1x1 conv that is its value's only user as
    one kernel, when the strategy says so (``strategy.fuse_depthwise_pointwise``); else None."""
    pw_node = rw.graph.sole_user(dw_tail.last.var)
    if pw_node is None or pw_node.op != "relax.nn.conv2d" or not _same(pw_node.args[0], dw_tail.last.var):
        return None
    operands = _conv_operands(pw_node)
    if operands is None or operands[0] != data_layout:
        return None
    pw = _conv_geometry(pw_node, dw.out_shape, operands[1])
    plan = strategy.fuse_depthwise_pointwise(dw, pw, rw.profile, rw.records, rw.precision, rw.allow_buffer)
    if plan is None:
        return None
    pw_node.fused = True
    tail = _conv_tail(rw, pw_node, operands[1], data_layout)
    epilogue = tail.epilogue
    out_scope = rw.output_scope(tail.last.var, plan.scope, plan.out_shape, pw.out_shape)  # no copy at a boundary, as for a conv
    residual_scope = rw.input_scope(tail.residual, out_scope) if tail.residual is not None else None
    plan = replace(plan, in_scope=rw.input_scope(x, plan.scope), out_scope=out_scope, residual_scope=residual_scope)
    func = plan.primfunc(dw_epilogue, epilogue)
    func = func.with_attr(CONFIG_ATTR, plan.config_string).with_attr(SOURCE_ATTR, plan.source)
    args = [rw.blocked(x, plan.in_scope), *dw_tail.constants(plan.pack_weights), *tail.constants(plan.pack_weights)]
    if tail.residual is not None:
        args.append(rw.blocked(tail.residual, residual_scope))
    info = _fused_info(pw_node, plan, dw_epilogue, epilogue)
    out = rw.emit_kernel(func, args, plan.out_shape, hint="conv2d", op_info=info)
    rw.define(tail.last.var, out, out_scope, pw.out_shape, data_layout)
    return out


def _clip_fields(bounds):
    return {} if bounds is None else {"clip_min": bounds[0], "clip_max": bounds[1]}


def _batch_norm_affine(node: Node):
    """Inference ``nn.batch_norm`` as per-channel (scale, shift) float64 vectors, else None."""
    gamma, beta, mean, var = (_const(a) for a in node.args[1:5])
    if any(p is None for p in (gamma, beta, mean, var)):
        return None
    inv_std = 1.0 / np.sqrt(var.astype(np.float64) + float(node.attrs.epsilon))
    scale = gamma.astype(np.float64) * inv_std if bool(node.attrs.scale) else inv_std
    shift = (beta.astype(np.float64) if bool(node.attrs.center) else 0.0) - mean.astype(np.float64) * scale
    return scale, shift


def _ints(values):
    return tuple(int(v) for v in values)


def _clip_range(node: Node):
    lo, hi = node.args[1], node.args[2]
    try:
        return float(lo.value), float(hi.value)
    except AttributeError:
        return None


def _emit_activation(rw: Rewriter, x: Value, matched):
    """The standalone kernel of a matched activation chain on ``x``; defines its last node."""
    name, bounds, nodes = matched
    shape5 = (x.nchw[0], blocked(x.channels), x.nchw[2], x.nchw[3], 4)
    scope = rw.scope_for(shape5)
    if name in ("relu", "relu6"):
        func = getattr(elementwise, name)(shape5, scope=scope)
    elif name == "clip":
        func = elementwise.clip(shape5, *bounds, scope=scope)
    else:
        func = elementwise.activation(shape5, name, scope=scope)
    out = rw.emit_kernel(func, [rw.blocked(x, scope)], shape5, op_info=_elementwise_info("activation", nodes, [x.nchw], activation=name, bounds=bounds))
    for m in nodes:
        m.fused = True
    rw.define(nodes[-1].var, out, scope, x.nchw)
    return out


def _emit_affine(rw: Rewriter, x: Value, var, scale, shift, nodes):
    """``act(x * scale + shift)`` per channel, extending ``nodes`` (already folded into
    ``scale``/``shift``, ending at ``var``) by further per-channel steps and an activation."""
    g = rw.graph
    activation, bounds = None, None
    while True:
        user = g.sole_user(var)
        step = _linear_step(user, var, x.channels) if user is not None else None
        if step is None:
            matched = _match_activation(g, var)
            if matched is not None:
                activation, bounds, tail = matched
                nodes, var = nodes + tail, tail[-1].var
            break
        scale, shift = scale * step[0], shift * step[0] + step[1]
        nodes, var = nodes + [user], user.var
    shape5 = (x.nchw[0], blocked(x.channels), x.nchw[2], x.nchw[3], 4)
    scope = rw.scope_for(shape5)
    func = elementwise.affine(shape5, activation, scope=scope, **_clip_fields(bounds))
    out = rw.emit_kernel(func, [rw.blocked(x, scope), relax.const(pack_bias(scale.astype(np.float32))), relax.const(pack_bias(shift.astype(np.float32)))], shape5, op_info=_elementwise_info("affine", nodes, [x.nchw], activation=activation, bounds=bounds))
    for m in nodes:
        m.fused = True
    rw.define(var, out, scope, x.nchw)
    return out


@handles("relax.nn.relu", "relax.clip", "relax.maximum", "relax.minimum", "relax.sigmoid", "relax.subtract", "relax.divide")
def elementwise_handler(rw, node):
    """An activation however the importer writes it (a chain of scalar ops, or the gated
    ``x * gate(x)``), else a per-channel affine chain (``x * scale + shift``, then an
    activation), on an activation that no conv epilogue took."""
    for var in node.args[:2]:
        x = rw.activation(var) if isinstance(var, relax.Var) else None
        if x is None or x.layout != "NCHW":
            continue
        matched = _match_activation(rw.graph, var, first=node)
        if matched is not None:
            return _emit_activation(rw, x, matched)
        step = _linear_step(node, var, x.channels)
        if step is not None:
            return _emit_affine(rw, x, node.var, *step, [node])
    return None


@handles("relax.nn.batch_norm")
def batch_norm_handler(rw, node):
    """Batch norm that follows no conv: one per-channel affine kernel (with what follows)."""
    x = rw.activation(node.args[0])
    getter = rw.graph.sole_user(node.var)
    if x is None or x.layout != "NCHW" or int(node.attrs.axis) % 4 != 1 or bool(node.attrs.training):
        return None
    if getter is None or getter.op != "tuple_get_item" or getter.index != 0:
        return None
    folded = _batch_norm_affine(node)
    if folded is None:
        return None
    return _emit_affine(rw, x, getter.var, *folded, [node, getter])


@handles("relax.add", "relax.multiply")
def binary_handler(rw, node):
    """Two activations of one shape; or a multiply by a per-channel gate ``[N, C, 1, 1]``
    (squeeze-excitation), either operand order; else scalar/per-channel constant forms."""
    out_shape = _static_shape(node.var)
    full = [arg for arg in node.args if _static_shape(arg) == out_shape]
    gate = [arg for arg in node.args if _static_shape(arg) != out_shape]
    a = rw.activation(full[0]) if full else None
    if len(full) == 2:
        b = rw.activation(full[1])
        broadcast = False
    elif len(full) == 1 and node.op == "relax.multiply" and out_shape is not None and _static_shape(gate[0]) == (*out_shape[:2], 1, 1):
        b = rw.activation(gate[0])
        broadcast = True
    else:
        b = None
    if a is None or b is None or a.layout != "NCHW" or b.layout != "NCHW":
        return elementwise_handler(rw, node)
    shape5 = (a.nchw[0], blocked(a.channels), a.nchw[2], a.nchw[3], 4)
    gate5 = (b.nchw[0], blocked(b.channels), b.nchw[2], b.nchw[3], 4)
    scope = rw.scope_for(shape5, gate5)
    op = node.op.split(".")[-1]
    func = elementwise.binary(shape5, op, scope=scope, broadcast_channels=broadcast)
    out = rw.emit_kernel(func, [rw.blocked(a, scope), rw.blocked(b, scope)], shape5, op_info=_elementwise_info(op, [node], [a.nchw, b.nchw]))
    rw.define(node.var, out, scope, a.nchw)
    return out


def pool_spec(node: Node):
    """(op, factory, attributes, output (OH, OW)) of a pooling node, or None when it is not one
    of ours; ``factory(in5, scope=, strategy=, group_threshold=, **attributes)``. ``tune`` uses it too."""
    out_shape = _static_shape(node.var)
    a = node.attrs
    if out_shape is None or str(a.layout) != "NCHW" or (a.out_layout and str(a.out_layout) != "NCHW"):
        return None
    if node.op == "relax.nn.adaptive_avg_pool2d":
        return "adaptive_avg", pool2d.adaptive_avg_pool2d, dict(output_size=tuple(out_shape[2:])), out_shape[2:]
    kind = "max" if node.op.endswith("max_pool2d") else "avg"
    attrs = dict(pool_type=kind, pool_size=_ints(a.pool_size), strides=_ints(a.strides), padding=_ints(a.padding),
                 dilation=_ints(a.dilation), ceil_mode=bool(a.ceil_mode),
                 count_include_pad=bool(getattr(a, "count_include_pad", False)))
    return f"{kind}", pool2d.pool2d, attrs, out_shape[2:]


@handles("relax.nn.max_pool2d", "relax.nn.avg_pool2d", "relax.nn.adaptive_avg_pool2d")
def pool_handler(rw, node):
    spec = pool_spec(node)
    x = rw.activation(node.args[0])
    if spec is None or x is None or x.layout != "NCHW":
        return None
    op, factory, attrs, (oh, ow) = spec
    n, c, h, w = x.nchw
    in5, out5 = (n, blocked(c), h, w, 4), (n, blocked(c), oh, ow, 4)
    scope = rw.scope_for(in5, out5)
    schedule = pool_strategy.pool_schedule(pool_key(op, x.nchw, attrs), rw.profile, rw.records)
    out = rw.emit_kernel(factory(in5, scope=scope, **schedule, **attrs), [rw.blocked(x, scope)], out5, op_info=_info(node, **attrs))
    rw.define(node.var, out, scope, (n, c, oh, ow))
    return out


@handles("relax.mean", "relax.sum", "relax.max", "relax.min")
def reduce_handler(rw, node):
    x = rw.activation(node.args[0])
    out_shape = _static_shape(node.var)
    if x is None or x.layout != "NCHW" or node.attrs.axis is None or out_shape is None:
        return None
    axes = tuple(sorted(int(a) % 4 for a in node.attrs.axis))
    keepdims = bool(node.attrs.keepdims)
    if 0 in axes or (not keepdims and axes != (2, 3)):
        return None  # plain-layout results are left to upstream; [N, C] (a global pool) is "NC"
    n, c, h, w = x.nchw
    in5 = (n, blocked(c), h, w, 4)
    shape5, _ = reduce.reduce_output(in5, c, axes, keepdims=True)
    scope = rw.scope_for(in5, shape5)
    op = node.op.split(".")[-1]
    out = rw.emit_kernel(reduce.reduce(in5, c, op, axes, True, scope=scope, group_threshold=pool_strategy.group_threshold(rw.profile)), [rw.blocked(x, scope)], shape5, op_info=_info(node, axis=axes, keepdims=True))
    rw.define(node.var, out, scope, out_shape if keepdims else (*out_shape, 1, 1))
    return out


@handles("relax.nn.softmax")
def softmax_handler(rw, node):
    x = rw.activation(node.args[0])
    if x is None or x.layout != "NCHW" or int(node.attrs.axis) % 4 != 1:
        return None
    n, c, h, w = x.nchw
    shape5 = (n, blocked(c), h, w, 4)
    scope = rw.scope_for(shape5)
    out = rw.emit_kernel(reduce.softmax(shape5, c, scope=scope), [rw.blocked(x, scope)], shape5, op_info=_info(node, axis=1))
    rw.define(node.var, out, scope, x.nchw)
    return out


@handles("relax.concat")
def concat_handler(rw, node):
    parts = node.args[0]
    if not isinstance(parts, relax.Tuple) or node.attrs.axis is None or int(node.attrs.axis) % 4 != 1:
        return None
    values = [rw.activation(f) for f in parts.fields]
    if any(v is None or v.layout != "NCHW" for v in values):
        return None
    if len(values) == 1:  # torch.cat([x]) (DenseNet's first layer of a block): x itself
        return _alias(rw, node.var, values[0], "NCHW", values[0].nchw)
    n, _, h, w = values[0].nchw
    chans = [v.channels for v in values]
    scope = rw.scope_for(*[(n, blocked(ch), h, w, 4) for ch in chans], (n, blocked(sum(chans)), h, w, 4))
    parts = [(rw.blocked(v, scope), v.channels) for v in values]
    # More inputs than one kernel takes (DenseNet concatenates up to ~50): a tree of
    # concats of up to MAX_INPUTS each, so every channel is copied log4(inputs) times.
    while len(parts) > 1:
        groups = [parts[i : i + concat.MAX_INPUTS] for i in range(0, len(parts), concat.MAX_INPUTS)]
        parts = [_emit_concat(rw, group, n, h, w, scope) if len(group) > 1 else group[0] for group in groups]
    (out, channels), = parts
    rw.define(node.var, out, scope, (n, channels, h, w))
    return out


def _emit_concat(rw, parts, n, h, w, scope):
    chans = [c for _, c in parts]
    out5 = (n, blocked(sum(chans)), h, w, 4)
    info = {"op": "concat", "node": "", "inputs": [[n, c, h, w] for c in chans], "output": [n, sum(chans), h, w], "attrs": {"axis": 1}}
    return rw.emit_kernel(concat.concat_channels(n, chans, h, w, scope=scope), [e for e, _ in parts], out5, op_info=info), sum(chans)


@handles("relax.image.resize2d")
def resize2d_handler(rw, node):
    """ONNX ``Resize``/``Upsample``, nearest (ONNX's nearest modes) or bilinear, in the
    coordinate modes of :mod:`primfuncs.resize`; other attributes stay upstream."""
    a = node.attrs
    method = {"nearest_neighbor": "nearest", "linear": "linear"}.get(str(a.method))
    mode, rounding = str(a.coordinate_transformation_mode), str(a.rounding_method)
    if method is None or mode not in resize.COORDINATE_MODES or (method == "nearest" and rounding not in resize.ROUNDING_METHODS):
        return None
    x = rw.activation(node.args[0])
    out_shape = _static_shape(node.var)
    if x is None or x.layout != "NCHW" or str(a.layout) != "NCHW" or out_shape is None or _dtype(node.var) != "float32":
        return None
    n, c, h, w = x.nchw
    in5, out5 = (n, blocked(c), h, w, 4), (n, blocked(c), *out_shape[2:], 4)
    scope = rw.scope_for(in5, out5)
    func = resize.resize2d(in5, out_shape[2:], method, mode, rounding, scope=scope)
    out = rw.emit_kernel(func, [rw.blocked(x, scope)], out5, op_info=_info(node, method=method, coordinate_transformation_mode=mode, rounding_method=rounding))
    rw.define(node.var, out, scope, out_shape)
    return out


#: ``permute_dims`` axes between NCHW and NHWC (ConvNeXt's Permute around LayerNorm and Linear).
_TO_NHWC, _TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)


def _alias(rw, var, v: Value, layout: str, nchw) -> relax.Expr | None:
    """Define ``var`` as the blocked tensor of ``v`` seen in ``layout`` (no kernel: NCHW4c
    is the same for NCHW, NHWC and NC); None when ``v`` is not blocked yet."""
    if not v.blocked:
        return None
    out = rw.blocked(v, rw.input_scope(v, rw.scope_for((nchw[0], blocked(nchw[1]), nchw[2], nchw[3], 4))))
    rw.values[var] = Value(blocked=v.blocked, layout=layout, channels=nchw[1], nchw=tuple(nchw))
    return out


@handles("relax.permute_dims")
def permute_handler(rw, node):
    """NCHW <-> NHWC of a blocked activation: a change of view, no kernel."""
    axes = tuple(int(a) for a in node.attrs.axes) if node.attrs.axes is not None else None
    if axes not in (_TO_NHWC, _TO_NCHW):
        return None
    x = rw.values.get(node.args[0])  # only blocked values: a plain one stays what it is
    if x is None or x.layout != ("NCHW" if axes == _TO_NHWC else "NHWC") or not x.blocked:
        return None
    return _alias(rw, node.var, x, "NHWC" if axes == _TO_NHWC else "NCHW", x.nchw)


def _channel_shuffle(rw, node, x: Value):
    """``reshape(N, g, C/g, H, W) -> permute(0, 2, 1, 3, 4) -> reshape(N, C, H, W)`` from ``node``
    (ShuffleNet): one ``channel_shuffle`` kernel, else None."""
    g = rw.graph
    n, c, h, w = x.nchw
    split, perm = _static_shape(node.var), g.sole_user(node.var)
    back = g.sole_user(perm.var) if perm is not None else None
    if split is None or len(split) != 5 or split[0] != n or split[1] * split[2] != c or split[3:] != (h, w):
        return None
    if perm is None or perm.op != "relax.permute_dims" or tuple(int(a) for a in perm.attrs.axes or ()) != (0, 2, 1, 3, 4):
        return None
    if back is None or back.op != "relax.reshape" or _static_shape(back.var) != x.nchw:
        return None
    shape5 = (n, blocked(c), h, w, 4)
    scope = rw.scope_for(shape5)
    out = rw.emit_kernel(shuffle.channel_shuffle(shape5, c, split[1], scope=scope), [rw.blocked(x, scope)], shape5, op_info=_elementwise_info("channel_shuffle", [node, perm, back], [x.nchw], groups=split[1]))
    perm.fused = back.fused = True
    rw.define(back.var, out, scope, x.nchw)
    return out


def _ints_of(expr):
    """A tuple of integers from a Relax tuple of PrimValues or a ShapeExpr, else None."""
    fields = expr.fields if isinstance(expr, relax.Tuple) else expr.values if isinstance(expr, relax.ShapeExpr) else None
    try:
        return tuple(int(getattr(f, "value", f)) for f in fields)
    except (TypeError, ValueError):
        return None


@handles("relax.strided_slice")
def strided_slice_handler(rw, node):
    """A slice of channels (ShuffleNet's split): one ``slice_channels`` kernel."""
    x = rw.activation(node.args[0])
    if x is None or x.layout != "NCHW" or len(node.args) < 4:
        return None
    axes, begin, end = (_ints_of(a) for a in node.args[1:4])
    strides = _ints_of(node.args[4]) if len(node.args) > 4 else (1,)
    out_shape = _static_shape(node.var)
    if axes != (1,) or strides != (1,) or out_shape is None or begin is None or end is None:
        return None
    c = x.channels
    b = begin[0] + c if begin[0] < 0 else begin[0]
    e = min(end[0] + c if end[0] < 0 else end[0], c)
    if not 0 <= b < e or out_shape != (x.nchw[0], e - b, *x.nchw[2:]):
        return None
    n, _, h, w = x.nchw
    in5, out5 = (n, blocked(c), h, w, 4), (n, blocked(e - b), h, w, 4)
    scope = rw.scope_for(in5, out5)
    out = rw.emit_kernel(shuffle.slice_channels(in5, c, b, e, scope=scope), [rw.blocked(x, scope)], out5, op_info=_info(node, axis=1, begin=b, end=e))
    rw.define(node.var, out, scope, out_shape)
    return out


@handles("relax.reshape")
def reshape_handler(rw, node):
    """Flatten of ``[N, C, 1, 1]`` (after a global pool) to ``[N, C]``: a change of view;
    a channel shuffle (reshape -> permute -> reshape): one kernel."""
    x = rw.activation(node.args[0])
    if x is not None and x.layout == "NCHW" and len(_static_shape(node.var) or ()) == 5:
        return _channel_shuffle(rw, node, x)
    out_shape = _static_shape(node.var)
    if x is None or x.layout != "NCHW" or not x.blocked or x.nchw[2:] != (1, 1) or out_shape != x.nchw[:2]:
        return None
    return _alias(rw, node.var, x, "NC", x.nchw)


@handles("relax.nn.layer_norm")
def layer_norm_handler(rw, node):
    """Layer norm over the channels: the last axis of an NHWC activation (ConvNeXt, between
    permutes) or axis 1 of an NCHW one, with constant gamma and beta."""
    x_var, gamma, beta = node.args
    shape = _static_shape(x_var)
    axes = [int(a) % len(shape) for a in node.attrs.axes] if shape is not None else None
    layout_ = {(3,): "NHWC", (1,): "NCHW"}.get(tuple(axes or ()))
    x = rw.activation(x_var, layout_) if layout_ and len(shape) == 4 else None
    if x is None:
        return None
    c = x.channels
    ones, zeros = np.ones(c, np.float32), np.zeros(c, np.float32)
    g = _const(gamma) if bool(node.attrs.scale) else ones
    b = _const(beta) if bool(node.attrs.center) else zeros
    if g is None or b is None or g.size != c or b.size != c:
        return None
    n, _, h, w = x.nchw
    shape5 = (n, blocked(c), h, w, 4)
    scope = rw.scope_for(shape5)
    func = layernorm.layer_norm_channels(shape5, c, float(node.attrs.epsilon), scope=scope)
    params = [relax.const(pack_bias(v.reshape(c).astype(np.float32))) for v in (g, b)]
    out = rw.emit_kernel(func, [rw.blocked(x, scope), *params], shape5, op_info=_info(node, epsilon=float(node.attrs.epsilon)))
    rw.define(node.var, out, scope, x.nchw, x.layout)
    return out


def _nc_value(rw, var) -> Value | None:
    """The :class:`Value` of a 2-d float32 ``[N, C]`` activation (a classifier's), else None."""
    if not isinstance(var, relax.Var):
        return None
    if var in rw.values:
        return rw.values[var] if rw.values[var].layout == "NC" else None
    shape = _static_shape(var)
    if shape is None or len(shape) != 2 or _dtype(var) != "float32":
        return None
    rw.values[var] = Value(plain=rw.exprs[var], layout="NC", channels=shape[1], nchw=(*shape, 1, 1))
    return rw.values[var]


@handles("relax.matmul")
def matmul_handler(rw, node):
    """``x @ W`` with a constant ``W [K, M]`` as a conv, through :func:`conv2d_handler` (the
    conv strategy and epilogue: bias, activation): over the channels of an NHWC activation
    (ConvNeXt's Linear between permutes) or of ``[N, K]`` (a classifier), or, when ``x`` is
    the flatten of ``[N, C, H, W]`` (VGG), as an HxW conv over that activation."""
    a, w_expr = node.args
    w = _const(w_expr)
    a_shape = _static_shape(a)
    if w is None or w.dtype != np.float32 or w.ndim != 2 or a_shape is None or _dtype(a) != "float32":
        return None
    k, m = w.shape
    src = rw.graph.by_var.get(a)
    flat = rw.activation(src.args[0]) if src is not None and src.op == "relax.reshape" and len(a_shape) == 2 else None
    if len(a_shape) == 4 and a_shape[3] == k and a in rw.values and rw.activation(a, "NHWC") is not None:
        x_var, data_layout, weight = a, "NHWC", w.T[:, :, None, None]
    elif flat is not None and flat.layout == "NCHW" and a_shape == (flat.nchw[0], k) and int(np.prod(flat.nchw[1:])) == k and flat.nchw[2:] != (1, 1):
        x_var, data_layout, weight = src.args[0], "NCHW", w.T.reshape(m, *flat.nchw[1:])
    elif len(a_shape) == 2 and a_shape[1] == k and _nc_value(rw, a) is not None:
        v = _nc_value(rw, a)
        x_var = relax.Var("flat_nchw", relax.TensorType([*a_shape, 1, 1], "float32"))
        if _alias(rw, x_var, v, "NCHW", v.nchw) is None:
            rw.blocked(v, rw.scope_for((a_shape[0], blocked(k), 1, 1, 4)))
            _alias(rw, x_var, v, "NCHW", v.nchw)
        data_layout, weight = "NCHW", w.T[:, :, None, None]
    else:
        return None
    dummy = relax.Var("x", relax.TensorType(list(_static_shape(x_var)), "float32"))
    conv = relax.op.nn.conv2d(dummy, relax.const(np.ascontiguousarray(weight)), data_layout=data_layout, kernel_layout="OIHW")
    return conv2d_handler(rw, Node(node.var, "relax.nn.conv2d", [x_var, relax.const(np.ascontiguousarray(weight))], conv.attrs, node.value))


def dispatch_to_textures(mod: tvm.IRModule, profile: DeviceProfile, allow_buffer: bool = True, records=None,
                         precision: str = "float32") -> tvm.IRModule:
    """Rewrite ``mod["main"]`` onto our kernels for ``profile`` (see the module docstring);
    ``records`` (``tir_adreno.strategy.records.Records``) gives tuned conv choices for ``precision``
    ("float32" or "float16_acc32", whose kernels are the float32 ones)."""
    if kernel_dtype(precision) != "float32":
        raise PrecisionError(f"whole models compile in 'float32' or 'float16_acc32', not {precision!r}: "
                                      "'float16' kernels run through tir_adreno.ops")
    return Rewriter(mod, profile, allow_buffer, records, precision).run()


def DispatchToTextures(profile: DeviceProfile | str = "adreno", allow_buffer: bool = True, records=None) -> tvm.transform.Pass:  # noqa: N802 (TVM pass naming)
    """The pass form of :func:`dispatch_to_textures` (default: the ``adreno`` profile)."""
    from tir_adreno.strategy.profile import resolve

    profile = resolve(profile=profile)

    @tvm.transform.module_pass(opt_level=0, name="DispatchToTextures")
    def _pass(mod, _ctx):
        return dispatch_to_textures(mod, profile, allow_buffer, records)

    return _pass
