"""Channel groups on plain maps (issue 35, the layout planner): a map held plain, split along its
channels into groups, each group through its own conv, the groups concatenated again, and the
result read plain (CoaT's conv-relative position encoding: the value heads' channels split three
ways, a depthwise conv of another kernel size on each, concatenated and multiplied with the query
heads). Every op of the group has a kernel on the plain tensor: the split and the concat are
gathers (``rules.token_layout``), a dense or depthwise conv reads and writes a plain NCHW buffer
in place (``strategy.conv.plain_io_plan``). So the group stays plain end to end and no layout kernel
runs, where packing it for the blocked split, convs and concat costs one transform on the way in
and one on the way out.

- :func:`concat_plain`: a channel concat runs as the gather on plain inputs when its value's
  readers want it plain only (:func:`value_wants`), no input is held blocked only and no
  elementwise chain fuses into the blocked concat (that one launch stays); a conv writing
  one of its inputs then writes it plain (``map_boundary.reads_plain``).
- :func:`split_plain`: a channel split runs plain when the planner's cost says so
  (``LayoutPlan.split_plain``) with each part's wants read through the convs that read it plain in
  place and write into such a concat (:func:`value_wants`).

Both decide from the graph, the operands' current forms and the conv plans only; the two agree
(the split asks what the concat will answer), so a group is plain in whole or as before.
"""

from __future__ import annotations

from tvm import relax

from primfuncs import gather
from primfuncs.epilogue import Epilogue

from tir_adreno.passes.convs import conv_geometry, conv_operands
from tir_adreno.passes.epilogue_chain import chain_fuses
from tir_adreno.passes.graph import const, dtype, same, static_shape
from tir_adreno.passes.layout_plan import BLOCKED, FLEXIBLE, PLAIN, VIEWS, LayoutPlan, on_channels
from tir_adreno.strategy import conv as strategy

#: Readers that only a gather on the plain tensor takes (ONNX ``Pad`` as the importer's ``call_tir``).
PLAIN_ONLY = frozenset({"relax.call_tir", "relax.nn.pad"})


def conv_plain_plan(rw, conv, var, data_layout: str, out_layout: str | None = None) -> bool:
    """Whether ``conv`` (NCHW) has ``var`` as its input and its strategy plan can read it as a plain
    buffer in ``data_layout`` ("NHWC", "NCHW") and, with ``out_layout``, write its output plain in
    that layout (``strategy.conv.plain_io_plan``): a dense or depthwise direct conv in float32."""
    operands = conv_operands(conv) if conv.op == "relax.nn.conv2d" and same(conv.args[0], var) else None
    nchw = static_shape(var)
    if operands is None or operands.layout != "NCHW" or nchw is None:
        return False
    try:
        geom = conv_geometry(conv, nchw, operands.weights.shape)
    except ValueError:
        return False
    plan = strategy.conv2d_plan(geom, Epilogue(), rw.precision, rw.profile, rw.records, allow_buffer=rw.allow_buffer)
    return strategy.plain_io_plan(plan, data_layout, out_layout) is not None


def _by_constants(node, var) -> bool:
    """``node`` is a pixelwise op whose operands other than ``var`` are constants (a conv's bias)."""
    return node.op in FLEXIBLE and all(same(a, var) or const(a) is not None or not isinstance(a, relax.Var) for a in node.args)


def _concat_readers(plan: LayoutPlan, var) -> list | None:
    """The channel concats ``var`` (a conv's value) reaches through pixelwise ops by constants, or
    None when some path ends elsewhere (or ``var`` is a model output)."""
    if plan.is_output(var):
        return None
    found = []
    for user in plan.all_readers(var):
        if user.op == "relax.concat" and on_channels(user):
            found.append(user)
            continue
        more = _concat_readers(plan, user.var) if _by_constants(user, var) else None
        if more is None:
            return None
        found += more
    return found or None


def value_wants(rw, var, seen: dict | None = None) -> frozenset:
    """The forms ``var``'s readers want, followed through views and pixelwise ops
    (``LayoutPlan.view_wants``' walk), through a channel concat (its value's wants: it runs in
    either form) and through a conv that reads ``var`` plain in place and writes plain into channel
    concats only; an op only a plain gather takes wants PLAIN, any other reader of a 4-d tensor
    BLOCKED, of another rank what ``LayoutPlan.wants`` says. ``seen``: the values answered so far
    in this walk (each is walked once)."""
    seen = {} if seen is None else seen
    if var in seen:
        return seen[var]
    plan = rw.plan
    seen[var] = frozenset()
    found = {PLAIN} if plan.is_output(var) else set()
    for user in plan.all_readers(var):
        if user.op in VIEWS or user.op in FLEXIBLE or (user.op == "relax.concat" and on_channels(user)):
            found |= value_wants(rw, user.var, seen)
        elif user.op in PLAIN_ONLY or user.op == "relax.matmul":
            found.add(PLAIN)
        elif _writes_plain_group(rw, user, var):
            for concat in _concat_readers(plan, user.var):
                found |= value_wants(rw, concat.var, seen)
        elif len(static_shape(var) or ()) == 4:
            found.add(BLOCKED)
        else:
            found |= plan.wants(var)
    seen[var] = frozenset(found)
    return seen[var]


def _writes_plain_group(rw, conv, var) -> bool:
    """``conv`` reads ``var`` (its only reader) plain NCHW in place and writes plain NCHW, and its
    value goes only into channel concats."""
    return (conv.op == "relax.nn.conv2d" and rw.graph.sole_user(var) is conv and _concat_readers(rw.plan, conv.var) is not None
            and conv_plain_plan(rw, conv, var, "NCHW", "NCHW"))


def _plain_capable(rw) -> bool:
    return rw.plan is not None and rw.fuses and rw.allow_buffer and rw.dtype == "float32"


def concat_plain(rw, node) -> bool:
    """Whether channel concat ``node`` of float32 maps runs as the gather on its plain inputs (module
    docstring): up to ``gather.MAX_INPUTS`` inputs, none held blocked only now, its value's readers
    want it plain only (:func:`value_wants`) and no chain fuses into it (``epilogue_chain.chain_fuses``)."""
    fields = node.args[0].fields if isinstance(node.args[0], relax.Tuple) else None
    if not _plain_capable(rw) or not on_channels(node) or not fields or len(fields) > gather.MAX_INPUTS:
        return False
    if any(not isinstance(f, relax.Var) or dtype(f) != "float32" or LayoutPlan.held(rw, f)[0] for f in fields):
        return False
    shape = static_shape(node.var)  # a chain that fuses into the blocked concat keeps it (one launch)
    return value_wants(rw, node.var) == {PLAIN} and not chain_fuses(rw, node, shape[1])


def split_plain(rw, node) -> bool:
    """Whether channel split ``node`` runs on its plain tensor: the planner's answer
    (``LayoutPlan.split_plain``), or, where every part is the input of a conv of a channel group
    (one that reads it plain in place and writes plain into channel concats only), the planner's
    cost with each part's wants read through that conv (:func:`value_wants`)."""
    if rw.plan is None:
        return False
    if rw.plan.split_plain(rw, node):
        return True
    parts = rw.plan.all_readers(node.var)
    if not _plain_capable(rw) or not parts or any(p.op != "tuple_get_item" for p in parts):
        return False
    if not all((conv := rw.graph.sole_user(p.var)) is not None and _writes_plain_group(rw, conv, p.var) for p in parts):
        return False
    return rw.plan.split_plain(rw, node, part_wants=lambda var: value_wants(rw, var))
