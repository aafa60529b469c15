"""The layout planner: which layout (blocked NCHW4c or plain row-major) each op that has a kernel
in both runs in, so that layout transforms happen where the graph's fixed layouts meet, not
wherever a value's producer and reader happen to differ (docs/design.md, "The layout planner").

Built once per rewrite, before the first rule runs (:meth:`LayoutPlan.build`), from the graph
alone: for every value, the layouts its readers want (:meth:`LayoutPlan.wants`): a conv, a pool,
a norm over a map's channels, a channel concat or a resize wants it blocked; the model's output,
an op no rule of ours takes, a GEMM on plain tensors and the view ops of tokens want it plain;
a *flexible* reader (an op with both a blocked and a plain kernel: the pixelwise unary and binary
ops, :data:`FLEXIBLE`) wants what its own readers want (followed through chains of them).

A flexible op then runs in the layout that costs fewer transforms
(:meth:`LayoutPlan.runs_plain`): plain costs one transform per operand that is blocked now plus
one when a reader wants the result blocked; blocked costs one per operand that is plain now plus
one when a reader wants it plain. The operands' layouts are read when the op is rewritten (its
producers have run: no guess about which rule took them). A tie stays blocked, the layout these
ops ran in before the planner, so a plan changes only where a transform disappears.

The blocked pixelwise rules ask :meth:`runs_plain` first and leave an op planned plain to the
``token_elementwise`` rule. The rewriter counts the transforms it emits (:attr:`transforms`).
"""

from __future__ import annotations

from tvm import relax

from tir_adreno.passes.graph import Graph, const, same

#: The pixelwise ops with a blocked kernel (rules ``elementwise``, ``binary``, ``broadcast``) and
#: a plain one (``token_elementwise``).
FLEXIBLE = frozenset({"relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum",
                      "relax.nn.relu", "relax.clip", "relax.sigmoid"})
#: Readers that want their input blocked (their kernels read NCHW4c).
BLOCKED_READERS = frozenset({"relax.nn.conv2d", "relax.nn.max_pool2d", "relax.nn.avg_pool2d", "relax.nn.adaptive_avg_pool2d",
                             "relax.image.resize2d", "relax.nn.group_norm", "relax.nn.batch_norm", "relax.concat"})
BLOCKED, PLAIN = "blocked", "plain"


class LayoutPlan:
    """The readers' wants of every value of ``graph`` (module docstring), and the decision for a
    flexible op given its operands' layouts."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self._wants: dict = {}
        self._readers: dict = {}  # var -> the nodes reading it
        for node in graph.nodes:
            for a in node.args:
                for f in a.fields if isinstance(a, relax.Tuple) else [a]:
                    if isinstance(f, relax.Var):
                        self._readers.setdefault(f, []).append(node)
        self.transforms = 0  # layout transforms the rewrite emitted (counted by the rewriter)

    @classmethod
    def build(cls, graph: Graph) -> LayoutPlan:
        plan = cls(graph)
        for node in graph.nodes:  # every value's wants, once, before the rewrite
            plan.wants(node.var)
        return plan

    def readers(self, var) -> list:
        """The nodes that read ``var`` and are not fused yet (once per node), from the index built once."""
        unique = {id(node): node for node in self._readers.get(var, ())}
        return [node for node in unique.values() if not node.fused]

    def wants(self, var) -> frozenset:
        """The layouts ``var``'s readers want (empty: no reader wants either, e.g. none at all)."""
        key = var
        if key not in self._wants:
            self._wants[key] = frozenset()  # a DAG: no cycle, but be safe while computing
            found = set()
            out = self.graph.output
            fields = out.fields if isinstance(out, relax.Tuple) else [out]
            if any(same(f, var) for f in fields):
                found.add(PLAIN)
            for user in self._readers.get(var, ()):
                found |= self._reader_wants(user)
            self._wants[key] = frozenset(found)
        return self._wants[key]

    def _reader_wants(self, user) -> set:
        if user.op in FLEXIBLE:
            return set(self.wants(user.var))
        if user.op in BLOCKED_READERS:
            return {BLOCKED}
        return {PLAIN}

    def runs_plain(self, rw, node) -> bool:
        """Whether flexible ``node`` runs plain: fewer transforms than blocked (a tie: blocked).
        ``rw`` (the rewriter) says where each operand is now."""
        if node.op not in FLEXIBLE:
            return False
        blocked_now = plain_now = 0
        for arg in node.args:
            if not isinstance(arg, relax.Var) or const(arg) is not None:
                continue
            v = rw.values.get(arg)
            has_blocked = v is not None and bool(v.blocked)
            has_plain = v is None or v.plain is not None
            blocked_now += has_blocked and not has_plain
            plain_now += has_plain and not has_blocked
        wants = self.wants(node.var)
        cost_plain = blocked_now + (BLOCKED in wants)
        cost_blocked = plain_now + (PLAIN in wants)
        return cost_plain < cost_blocked
