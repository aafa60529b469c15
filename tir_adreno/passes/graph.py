"""The binding graph of a Relax ``main``: nodes with aliases resolved, use counts, and the
small expression helpers every rule needs (static shapes, dtypes, constants)."""

from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import relax


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


def static_shape(expr) -> tuple[int, ...] | None:
    """The shape of ``expr`` when every dim is a number, else None."""
    ty = expr.struct_info if hasattr(expr, "struct_info") else None
    ty = ty if ty is not None else getattr(expr, "ty", None)
    shape = getattr(ty, "shape", None)
    if shape is None or not isinstance(shape, relax.ShapeExpr):
        return None
    try:
        return tuple(int(d) for d in shape.values)
    except TypeError:
        return None


def dtype(expr) -> str:
    ty = getattr(expr, "struct_info", None) or expr.ty
    return str(ty.dtype)


def same(a, b) -> bool:
    """Identity of IR nodes (Python wrappers of one node are distinct objects)."""
    return a is not None and b is not None and a.same_as(b)


def is_op(call, name) -> bool:
    return isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op) and call.op.name == name


def const(expr):
    """The NumPy value of a Relax constant, else None."""
    return expr.value.numpy() if isinstance(expr, tvm.ir.expr.GenericConst) else None


def scalar(expr) -> float | None:
    """The value of a one-element constant ``expr`` (an epsilon, a scale) as a float, else None."""
    value = const(expr)
    return float(value.reshape(())) if value is not None and value.size == 1 else None


def permute_axes(node: Node | None, op: str = "relax.permute_dims") -> tuple[int, ...] | None:
    """The axes of ``node`` when it is ``op`` (a ``permute_dims``) with explicit axes, else None."""
    if node is None or node.op != op or node.attrs.axes is None:
        return None
    return tuple(int(a) for a in node.attrs.axes)


def reduce_axes(node: Node) -> tuple[int, ...] | None:
    """The non-negative axes of a reduction or squeeze ``node`` (``attrs.axis``), else None."""
    rank = len(static_shape(node.args[0]) or ())
    return tuple(int(a) % rank for a in node.attrs.axis) if node.attrs.axis is not None and rank else None


def ints(values) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


def ints_of(expr) -> tuple[int, ...] | None:
    """A tuple of integers from a Relax tuple of PrimValues or a ShapeExpr, else None."""
    fields = expr.fields if isinstance(expr, relax.Tuple) else expr.values if isinstance(expr, relax.ShapeExpr) else None
    try:
        return tuple(int(getattr(f, "value", f)) for f in fields)
    except (TypeError, ValueError):
        return None


def split_parts(node: Node, nchw) -> list[int] | None:
    """The channel counts of ``split`` ``node`` of an NCHW activation of shape ``nchw`` when it
    splits along channels into NCHW parts, else None."""
    if node.attrs.axis is None or int(node.attrs.axis) % 4 != 1:
        return None
    fields = getattr(node.var.ty, "fields", None) or []
    shapes = [static_shape(relax.Var("part", ty)) for ty in fields]  # each part's type, read as a value's
    n, _, h, w = nchw
    if len(shapes) < 2 or any(s is None or len(s) != 4 or (s[0], *s[2:]) != (n, h, w) for s in shapes):
        return None
    sizes = [s[1] for s in shapes]
    return sizes if sum(sizes) == nchw[1] and min(sizes) > 0 else None


def channel_range(node: Node, channels: int) -> tuple[int, int] | None:
    """[begin, end) of a ``strided_slice`` over axis 1 with stride 1, clamped to ``channels``, else None."""
    if len(node.args) < 4:
        return None
    axes, begin, end = (ints_of(a) for a in node.args[1:4])
    strides = ints_of(node.args[4]) if len(node.args) > 4 else (1,)
    if axes != (1,) or strides != (1,) or begin is None or end is None:
        return None
    b = begin[0] + channels if begin[0] < 0 else begin[0]
    e = min(end[0] + channels if end[0] < 0 else end[0], channels)
    return (b, e) if 0 <= b < e else None


def is_identity_slice(value) -> bool:
    """A ``strided_slice`` call (stride 1) whose output is its input, element for element
    (GhostNet's ``cat([a, b])[:, :C]`` when the halves fill C): the value itself. (A reshape to its
    own shape is the reshape rules': a view of a graph input written as the output is a copy.)"""
    if not is_op(value, "relax.strided_slice") or not value.args:
        return False
    shape = static_shape(value)
    if shape is None or shape != static_shape(value.args[0]):
        return False
    strides = ints_of(value.args[4]) if len(value.args) > 4 else ()
    return strides is not None and all(s == 1 for s in strides)


#: ``permute_dims`` axes between NCHW and NHWC (ConvNeXt's Permute around LayerNorm and Linear).
TO_NHWC, TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)
#: ``permute_dims`` axes between the token layouts ``[N, C, L]`` and ``[N, L, C]``.
SWAP_TOKENS = (0, 2, 1)


def reads(node: Node, var) -> bool:
    """Does ``node`` take ``var`` as an argument (directly or in a tuple)?"""
    return any(same(a, var) or (isinstance(a, relax.Tuple) and any(same(f, var) for f in a.fields)) for a in node.args)


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
        self._drop_stacks()

    def _drop_stacks(self):
        """Drop each ``stack`` that only a stacked binary op read (:meth:`_stacked_add` reads its
        parts directly): nothing runs it, and its parts' use counts no longer count it."""
        for node in [n for n in self.nodes if n.op == "relax.stack" and self.uses.get(n.var, 0) == 0]:
            self.nodes.remove(node)
            del self.by_var[node.var]
            for part in node.args[0].fields if isinstance(node.args[0], relax.Tuple) else []:
                if isinstance(part, relax.Var):
                    self.uses[part] -= 1

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
        if is_op(value, "relax.broadcast_to") and static_shape(value.args[0]) == static_shape(value):
            self.alias[var] = self.resolve(value.args[0])  # a no-op broadcast
            return
        if is_identity_slice(value) and self.resolve(value.args[0]) not in self.func.params:
            self.alias[var] = self.resolve(value.args[0])  # (of an input: a kernel, the output may be it)
            return
        node = self._node(var, self._as_relax_op(value))
        self.nodes.append(node)
        self.by_var[var] = node

    def _node(self, var, value) -> Node:
        if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
            args = [self._arg(a) for a in value.args]
            return self._stacked_add(var, value, args) or Node(var, value.op.name, args, value.attrs, value)
        if isinstance(value, relax.TupleGetItem):
            return Node(var, "tuple_get_item", [self._arg(value.tuple_value)], None, value, index=int(value.index))
        if isinstance(value, relax.Tuple):
            return Node(var, "tuple", [self._arg(f) for f in value.fields], None, value)
        return Node(var, "other", [], None, value)

    def _stacked_add(self, var, value, args) -> Node | None:
        """ONNX Sum (Max, Min) of two tensors imports as sum(stack([a, b]), axis=0) (max, min): an
        add (maximum, minimum)."""
        op = {"relax.sum": "relax.add", "relax.max": "relax.maximum", "relax.min": "relax.minimum"}.get(value.op.name)
        if op is None or not isinstance(args[0], relax.Var) or args[0] not in self.by_var:
            return None
        stacked = self.by_var[args[0]]
        axis = [int(a) for a in value.attrs.axis] if value.attrs.axis is not None else None
        if stacked.op != "relax.stack" or int(stacked.attrs.axis) != 0 or axis != [0] or value.attrs.keepdims:
            return None
        parts = stacked.args[0]
        if not isinstance(parts, relax.Tuple) or len(parts.fields) != 2:
            return None
        # the value as the binary op itself, so an op no rule takes goes upstream as that op
        binary = {"relax.add": relax.op.add, "relax.maximum": relax.op.maximum, "relax.minimum": relax.op.minimum}[op]
        return Node(var, op, list(parts.fields), None, binary(*parts.fields))

    def _as_relax_op(self, value):
        """TVM's ONNX importer writes ``Clip`` as ``emit_te(topi.maximum/minimum, x, bound)``:
        a ``call_tir`` of a PrimFunc named ``maximum``/``minimum`` with a scalar constant.
        Read it as ``relax.maximum``/``relax.minimum`` (what upstream would also run for it)."""
        if self.mod is None or not is_op(value, "relax.call_tir") or not isinstance(value.args[1], relax.Tuple):
            return value
        gv, args = value.args[0], value.args[1].fields
        name = gv.name_hint.rstrip("0123456789_")
        if name not in ("maximum", "minimum") or len(args) != 2 or not isinstance(args[0], relax.Var):
            return value
        bound = const(args[1])
        if bound is None or bound.size != 1 or static_shape(args[0]) != static_shape(value):
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
                found += [node for f in fields if same(f, var)]
        return found

    def _arg(self, expr):
        if isinstance(expr, relax.Var):
            return self.resolve(expr)
        if isinstance(expr, relax.Tuple):
            return relax.Tuple([self._arg(f) for f in expr.fields])
        return expr

    def fused_marks(self) -> frozenset[int]:
        """Which nodes are marked fused now: a rule that searches a pattern (marking what it takes)
        and then backs out gives these to :meth:`restore_fused`."""
        return frozenset(id(node) for node in self.nodes if node.fused)

    def restore_fused(self, marks: frozenset[int]) -> None:
        """Every node's fused mark as :meth:`fused_marks` took it."""
        for node in self.nodes:
            node.fused = id(node) in marks

    def sole_user(self, var) -> Node | None:
        """The node that is ``var``'s only use (not the function output), if any."""
        if self.uses.get(var, 0) != 1 or same(self.output, var):
            return None
        return next((node for node in self.nodes if not node.fused and reads(node, var)), None)
