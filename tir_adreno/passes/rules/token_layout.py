"""Data movement on plain tensors (the token layout of docs/design.md: tokens, heads,
channels-last maps, anything that is no blocked map) as views or ONE gather kernel
(``primfuncs.gather``); ops on blocked maps keep the rules of ``rules.layout``, registered first.

- A view: ``reshape``/``squeeze``/``expand_dims``/``flatten`` keep a row-major buffer's elements in
  order, so the output is the input's storage seen in another shape (``relax.memory.view``, no
  kernel; the planner binds the view to the same tensor, ``storage.bind_alias``).
- A gather: ``permute_dims``, ``strided_slice``, ``split``, ``take`` (constant indices in an
  arithmetic run), ``tile``, ``broadcast_to``, constant ``nn.pad`` (also ONNX's ``Pad`` and
  ``Tile``, which the importer writes as ``call_tir`` of topi's kernels) and ``concat`` (up to
  ``gather.MAX_INPUTS`` tensors, any axis). Each reads back through the movement ops before it
  that nothing else reads (views included: ``transpose -> reshape -> transpose -> split`` part is
  one launch reading the first transpose's input); those ops' own kernels are then unused and
  dead-code elimination drops them.

Everything here is float32 with static shapes (upstream's plain side under every precision; under
float16_acc32 the buffers between two of our kernels are half, ``storage.half_buffers``).
"""

from __future__ import annotations

from tvm import relax

from primfuncs import gather

from tir_adreno.passes.graph import Node, same, static_shape
from tir_adreno.passes.kernel_index import kernel
from tir_adreno.passes.movement import GATHER_OPS, VIEW_OPS, chain, concat_sources, link, plain_shape
from tir_adreno.passes.op_info import node_info
from tir_adreno.passes.rewriter import Rewriter
from tir_adreno.passes.rules.base import rule

def _emit_gather(rw: Rewriter, node: Node, roots: list, sources: list, pad) -> relax.Expr:
    out_shape = static_shape(node.var)
    in_shapes = [static_shape(r) for r in roots]
    func = kernel(gather.gather, tuple(in_shapes), out_shape, tuple(sources), pad_value=0.0 if pad is None else pad, dtype="float32")
    info = node_info(node, reads=[list(s) for s in in_shapes])
    info["op"] = "gather"
    info["attrs"]["from"] = node.op.removeprefix("relax.")
    return rw.emit_kernel(func, [rw.expr(r) for r in roots], out_shape, dtype="float32", hint="gather", op_info=info)


def _reads_input_as_output(rw: Rewriter, node: Node, root) -> bool:
    """A model output that would be a view of a model input (the executor needs its own buffer)."""
    outs = rw.graph.output.fields if isinstance(rw.graph.output, relax.Tuple) else [rw.graph.output]
    return any(same(f, node.var) for f in outs) and any(same(p, root) for p in rw.graph.func.params)


@rule(*VIEW_OPS)
def view(rw: Rewriter, node: Node):
    """A reshape-like op of a plain float32 tensor: a view of its buffer, no kernel."""
    found = link(rw, node)
    if found is None:
        return None
    src = found[2]
    if _reads_input_as_output(rw, node, src):
        return _emit_gather(rw, node, [src], [gather.Source(0, tuple(found[0]))], None)
    if static_shape(src) == static_shape(node.var):  # a reshape to the same shape: the tensor itself
        return rw.expr(src)
    return rw.bb.emit(relax.op.memory.view(rw.expr(src), relax.ShapeExpr(list(static_shape(node.var)))))


@rule(*GATHER_OPS, "relax.call_tir")
def move(rw: Rewriter, node: Node):
    """A movement op of a plain float32 tensor, with the movement ops before it: one gather."""
    found = link(rw, node)
    if found is None:
        return None
    root, steps, pad = chain(rw, found[2], list(found[0]), found[1])
    return _emit_gather(rw, node, [root], [gather.Source(0, tuple(steps))], pad)


@rule("relax.split")
def split_plain(rw: Rewriter, node: Node):
    """A split of a plain float32 tensor: one gather per part (each its ``TupleGetItem``'s value;
    a part read only by more movement ops is read through by theirs, and its own kernel dropped)."""
    if plain_shape(node.args[0]) is None or not all(u.op == "tuple_get_item" for u in rw.graph.users(node.var)):
        return None
    parts = []
    for index, ty in enumerate(node.var.ty.fields):
        part = Node(relax.Var(f"{node.var.name}_{index}", ty), "tuple_get_item", [node.var], None, None, index=index)
        found = link(rw, part)
        if found is None or static_shape(part.var) is None:
            return None
        root, steps, pad = chain(rw, found[2], list(found[0]), found[1])
        parts.append(_emit_gather(rw, part, [root], [gather.Source(0, tuple(steps))], pad))
    return rw.bb.emit(relax.Tuple(parts))


@rule("relax.concat")
def concat_plain(rw: Rewriter, node: Node):
    """A concat of up to ``gather.MAX_INPUTS`` distinct plain float32 tensors along any axis: one
    gather, each input read through the movement ops before it."""
    found = concat_sources(rw, node)
    if found is None or len(found[0]) > gather.MAX_INPUTS:
        return None
    roots, sources, pad = found
    return _emit_gather(rw, node, roots, sources, pad)
