"""Values that only token ops read (issue 35, the layout planner: transforms only where the graph's
fixed layouts meet): a map reshaped into heads or tokens and then moved around (``permute_dims``,
``expand_dims``, ``squeeze``, ``split``, more reshapes) and scaled by constants before every path
ends in an op that reads plain tensors (a matmul, an op no rule of ours takes), or in a pixelwise
op with a second activation that no reader wants blocked (a residual add of tokens). MobileNetV4's
mobile MQA (a conv's ``[N, C, H, W]`` reshaped to ``[N, heads, d, H * W]``, transposed, scaled,
into Q·Kᵀ), Visformer's attention (reshape to ``[N, 3, heads, d, L]``, permute, split, squeeze)
and EfficientFormerV2's attention read their q/k/v convs this way.

Every op on such a path runs on the plain tensor anyway (none of them has a blocked kernel for
these shapes), so the conv that writes the value writes the plain NCHW buffer itself
(``map_boundary.token_output``) and no ``nchw4c_to_nchw`` kernel runs. Decided from the graph only.
"""

from __future__ import annotations

from tvm import relax

from tir_adreno.passes.graph import const, same
from tir_adreno.passes.layout_plan import BLOCKED, FLEXIBLE

#: Ops that only move a plain tensor's elements (views, or one gather kernel of ours on tokens).
MOVEMENT = frozenset({"relax.reshape", "relax.permute_dims", "relax.expand_dims", "relax.squeeze", "relax.split",
                      "tuple_get_item"})
#: How far a path is followed before giving up (a transformer's q/k/v path is under ten ops).
MAX_DEPTH = 16


def _scales_by_constants(node, var) -> bool:
    """``node`` is a pixelwise op (``layout_plan.FLEXIBLE``) whose operands other than ``var`` are
    constants: it runs plain when ``var`` is plain (the planner's cost is then zero)."""
    return node.op in FLEXIBLE and all(same(a, var) or const(a) is not None or not isinstance(a, relax.Var)
                                       for a in node.args)


def _runs_plain_anyway(rw, node, var) -> bool:
    """``node`` is a pixelwise op with a second activation operand that no reader wants blocked
    (``LayoutPlan.wants``: a residual add of tokens read by norms and GEMMs). With ``var`` plain the
    planner runs it plain at the cost of at most the other operand's unpacking; with ``var`` blocked
    it costs that one transform or more (``var``'s unpacking, or the result's for its plain readers).
    So ``var`` plain never costs a transform more, and saves one when the other operand is plain."""
    plan = rw.plan
    return (plan is not None and node.op in FLEXIBLE and not _scales_by_constants(node, var)
            and BLOCKED not in plan.wants(node.var))


def ends_plain(rw, var, reads_plain, depth: int = 0) -> bool:
    """Whether ``var`` has readers and every one, followed through :data:`MOVEMENT` ops and constant
    scalings (:func:`_scales_by_constants`), ends in a reader ``reads_plain(rw, node)`` accepts; no
    value on the way is a model output (that one is decided where it is written). ``reads_plain``:
    ``map_boundary.reads_plain`` (passed in: that module calls this one)."""
    graph = rw.graph
    users = graph.users(var)
    if depth > MAX_DEPTH or not users or len(users) != graph.uses.get(var, 0) or same(graph.output, var):
        return False
    for user in users:
        if reads_plain(rw, user) or _runs_plain_anyway(rw, user, var):
            continue
        if user.op not in MOVEMENT and not _scales_by_constants(user, var):
            return False
        if not ends_plain(rw, user.var, reads_plain, depth + 1):
            return False
    return True
