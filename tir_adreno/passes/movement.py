"""Data movement on plain tensors as ``primfuncs.gather`` steps: what a movement op (a view, a
transpose, a slice, a split part, ``take``, ``tile``, ``broadcast_to``, a constant pad) is as a
map from its output's index to its input's, and the chain of such ops before a tensor that only
it reads. Shared by ``rules.token_layout`` (one gather launch for a chain) and ``rules.gemm`` (a
GEMM operand read through its chain: no launch)."""

from __future__ import annotations

import tvm
from tvm import relax, tirx

from primfuncs import gather

from tir_adreno.passes.graph import Node, const, dtype, ints, ints_of, same, static_shape
from tir_adreno.passes.rewriter import Rewriter


#: Ops whose output is the input's buffer in another shape.
VIEW_OPS = ("relax.reshape", "relax.squeeze", "relax.expand_dims", "relax.flatten")
#: Ops that are one gather step (:func:`_link`).
GATHER_OPS = ("relax.permute_dims", "relax.strided_slice", "relax.take", "relax.tile", "relax.broadcast_to", "relax.nn.pad")


def plain_shape(var) -> tuple | None:
    """The static shape of float32 tensor ``var`` (rank >= 1; a constant too: the class token a
    ViT concatenates before its patch tokens), else None."""
    shape = static_shape(var) if isinstance(var, (relax.Var, tvm.ir.expr.GenericConst)) else None
    return shape if shape and dtype(var) == "float32" else None


def affine(before, axis: int, begin: int, step: int = 1) -> gather.Affine:
    """The map of one axis ``before = begin + step * after``, the others as they are."""
    rank = len(before)
    return gather.Affine(before, tuple(begin if a == axis else 0 for a in range(rank)), tuple(step if a == axis else 1 for a in range(rank)))


def _slice_steps(node: Node, before, after):
    """A ``strided_slice``'s map (Python slice semantics per axis), else None."""
    axes, begin, end = (ints_of(a) for a in node.args[1:4])
    strides = ints_of(node.args[4]) if len(node.args) > 4 else tuple(1 for _ in axes or ())
    if None in (axes, begin, end, strides) or len(before) != len(after):
        return None
    begins, steps = [0] * len(before), [1] * len(before)
    for a, b, e, s in zip(axes, begin, end, strides):
        a %= len(before)
        start, _, step = slice(b, e, s).indices(before[a])
        if len(range(*slice(b, e, s).indices(before[a]))) != after[a]:
            return None
        begins[a], steps[a] = start, step
    return [gather.Affine(before, tuple(begins), tuple(steps))]


def _take_steps(node: Node, before, after):
    """``take`` by constant indices: one index (the axis dropped) or an arithmetic run, else None."""
    idx = const(node.args[1])
    axis = int(node.attrs.axis) % len(before) if node.attrs.axis is not None else None
    if idx is None or axis is None or idx.ndim > 1 or idx.size == 0:
        return None
    flat = [int(i) % before[axis] for i in idx.reshape(-1)]
    step = flat[1] - flat[0] if len(flat) > 1 else 1
    if any(b - a != step for a, b in zip(flat, flat[1:])):
        return None
    kept = (*before[:axis], len(flat), *before[axis + 1:])
    lift = [gather.Reshape(kept)] if idx.ndim == 0 else []  # a scalar index drops the axis
    return [*lift, affine(before, axis, flat[0], step)]


def _broadcast_steps(before, after):
    """``broadcast_to``: dims of 1 read index 0 (missing leading dims added first), else None."""
    lifted = (1,) * (len(after) - len(before)) + tuple(before)
    if len(lifted) != len(after) or any(b not in (1, a) for b, a in zip(lifted, after)):
        return None
    steps = [gather.Affine(lifted, (0,) * len(after), tuple(0 if b == 1 else 1 for b in lifted))]
    return steps + ([gather.Reshape(tuple(before))] if lifted != tuple(before) else [])


def _store_of(prim):
    """The one ``BufferStore`` of an importer-made elementwise PrimFunc (a loop nest around one
    block), else None."""
    stmt = prim.body
    while not isinstance(stmt, tirx.BufferStore):
        inner = getattr(stmt, "block", None) or getattr(stmt, "body", None)
        if inner is None or isinstance(stmt, tirx.SeqStmt):
            return None
        stmt = inner
    return stmt


def _tiles(index, size: int, out_size: int) -> bool:
    """Whether topi's ``tile`` reads input axis ``size`` at ``index``: ``v % size``, or ``0`` where it
    repeats an axis of 1 (the modulo simplified away: gcvit's ``Unsqueeze -> Tile`` of its global
    query over the windows), or anything on an axis it does not repeat."""
    if size == out_size:
        return True
    if isinstance(index, tirx.FloorMod):
        return int(index.b) == size
    return size == 1 and isinstance(index, tirx.IntImm) and int(index.value) == 0


def _te_steps(rw: Rewriter, node: Node, before, after):
    """ONNX ``Pad`` (constant) and ``Tile``, which TVM's importer writes as ``call_tir`` of topi's
    ``pad``/``tile``: (steps, pad value or None) read off the PrimFunc's one store (pad: ``x[v -
    b]`` or the pad value, or ``x[v]`` when every amount is 0: EfficientViT's window padding of a
    map the windows divide; tile: ``x[v % d]``), else None."""
    name = node.args[0].name_hint.rstrip("0123456789_") if isinstance(node.args[0], relax.GlobalVar) else ""
    prim = rw.graph.mod[node.args[0]] if name in ("pad", "tile") and rw.graph.mod is not None else None
    store = _store_of(prim) if isinstance(prim, tirx.PrimFunc) else None
    if store is None or len(before) != len(after):
        return None
    value = store.value
    if name == "tile":
        ok = isinstance(value, tvm.ir.expr.TensorLoad) and all(_tiles(i, d, a) for i, d, a in zip(value.indices, before, after))
        return ([gather.Tile(before)], None) if ok else None
    if isinstance(value, tvm.ir.expr.TensorLoad) and all(isinstance(i, tirx.Var) for i in value.indices) and before == after:
        return [gather.Affine(before, (0,) * len(before), (1,) * len(before))], None  # a pad by zero amounts: a copy
    if not (isinstance(value, tvm.ir.expr.Call) and str(value.op.name).endswith("if_then_else") and isinstance(value.args[1], tvm.ir.expr.TensorLoad)
            and isinstance(value.args[2], tirx.FloatImm)):
        return None
    begins = []
    for i in value.args[1].indices:  # v - b, or v (nothing padded before)
        begins.append(-int(i.b) if isinstance(i, tirx.Sub) and isinstance(i.b, tirx.IntImm) else 0 if isinstance(i, tirx.Var) else None)
    if None in begins:
        return None
    return [gather.Affine(before, tuple(begins), (1,) * len(before))], float(value.args[2].value)


def _op_steps(node: Node, before, after):
    """(steps from ``node``'s output index to its input's, pad value or None), else None."""
    op = node.op
    if op in VIEW_OPS:
        return [gather.Reshape(before)], None
    if op == "relax.permute_dims":
        axes = ints(node.attrs.axes) if node.attrs.axes is not None else tuple(reversed(range(len(before))))
        return [gather.Permute(axes)], None
    if op == "relax.tile":
        reps = ints(node.attrs.repeats)
        return ([gather.Tile(before)], None) if len(reps) == len(before) else None
    if op == "relax.nn.pad":
        if str(node.attrs.pad_mode) != "constant":
            return None
        widths = ints(node.attrs.pad_width)
        return [gather.Affine(before, tuple(-w for w in widths[::2]), (1,) * len(before))], float(node.attrs.pad_value)
    found = {"relax.strided_slice": lambda: _slice_steps(node, before, after), "relax.take": lambda: _take_steps(node, before, after),
             "relax.broadcast_to": lambda: _broadcast_steps(before, after)}.get(op, lambda: None)()
    return (found, None) if found is not None else None


def link(rw: Rewriter, node: Node):
    """(steps, pad value or None, the tensor read) of one movement op ``node`` on a plain float32
    tensor: an op of :data:`VIEW_OPS` or :data:`GATHER_OPS`, or a part of a ``split``; else None."""
    if node.op == "tuple_get_item":
        split = rw.graph.by_var.get(node.args[0])
        if split is None or split.op != "relax.split" or split.fused:
            return None
        src, axis = split.args[0], int(split.attrs.axis)
        fields = [static_shape(relax.Var("part", ty)) for ty in split.var.ty.fields]
        before, after = plain_shape(src), static_shape(node.var)
        if before is None or after is None or None in fields:
            return None
        axis %= len(before)
        return [affine(before, axis, sum(f[axis] for f in fields[: node.index]))], None, src
    te = node.op == "relax.call_tir" and isinstance(node.args[1], relax.Tuple) and len(node.args[1].fields) == 1
    if node.op not in VIEW_OPS + GATHER_OPS and not te:
        return None
    src = node.args[1].fields[0] if te else node.args[0]
    before, after = plain_shape(src), plain_shape(node.var)
    if before is None or after is None:
        return None
    found = _te_steps(rw, node, before, after) if te else _op_steps(node, before, after)
    return None if found is None else (*found, src)


def chain(rw: Rewriter, var, steps: list, pad):
    """(root tensor, steps, pad) reading ``var`` through ``steps`` and back through the movement ops
    before it that only this reads, not fused into anything, and not blocked maps."""
    while True:
        node = rw.graph.by_var.get(var)
        # a value a rule defined blocked (no plain form) is no longer what its op computes here
        redefined = var in rw.values and rw.values[var].plain is None
        if node is None or node.fused or redefined or rw.graph.uses.get(var, 0) != 1 or same(rw.graph.output, var):
            return var, steps, pad
        found = link(rw, node)
        if found is None or (found[1] is not None and pad is not None and found[1] != pad):
            return var, steps, pad
        more, more_pad, src = found
        steps, pad, var = [*steps, *more], pad if more_pad is None else more_pad, src


def read_through(rw: Rewriter, var, shape) -> tuple:
    """(root, steps): ``var`` (of ``shape``) read through the movement ops before it that only it
    reads (:func:`chain`) when they read an element of the root for every index (no pad:
    ``gather.covers_all``), so the kernel reading ``var`` reads ``root`` in place and no gather
    kernel runs; else ``(var, ())``. Nothing is emitted here (the caller may still back out)."""
    root, steps, pad = chain(rw, var, [], None)
    if same(root, var) or pad is not None or not gather.covers_all(gather.Source(0, tuple(steps)), shape):
        return var, ()
    return root, tuple(steps)


def concat_sources(rw: Rewriter, node: Node):
    """(roots, sources, pad) of a ``concat`` of plain float32 tensors along any axis, each input read
    through the movement ops before it (``gather.Source.input`` indexes ``roots``, each root once),
    else None."""
    fields = node.args[0].fields if isinstance(node.args[0], relax.Tuple) else None
    out_shape = plain_shape(node.var)
    if not fields or out_shape is None or any(plain_shape(f) is None for f in fields):
        return None
    axis, roots, sources, pad, offset = int(node.attrs.axis) % len(out_shape), [], [], None, 0
    for f in fields:
        shape = static_shape(f)
        root, steps, part_pad = chain(rw, f, [affine(shape, axis, -offset)], pad)
        pad = part_pad if part_pad is not None else pad
        at = next((i for i, r in enumerate(roots) if same(r, root)), None)
        if at is None:
            roots.append(root)
            at = len(roots) - 1
        sources.append(gather.Source(at, tuple(steps)))
        offset += shape[axis]
    return (roots, sources, pad) if offset == out_shape[axis] else None


def view_sources(rw: Rewriter, var):
    """(roots, sources, pad) reading plain ``var`` from the tensors before the movement op (a
    concat too) that makes it, and the movement ops before that which only it reads; else None
    (``var`` is read as it is). ``var`` may have other readers: its own gather then stays."""
    node = rw.graph.by_var.get(var)
    if node is None or node.fused or (var in rw.values and rw.values[var].plain is None):
        return None
    if node.op == "relax.concat":
        return concat_sources(rw, node)
    found = link(rw, node)
    if found is None:
        return None
    root, steps, pad = chain(rw, found[2], list(found[0]), found[1])
    return [root], [gather.Source(0, tuple(steps))], pad
