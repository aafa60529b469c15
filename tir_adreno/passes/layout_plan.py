"""The layout planner: which layout (blocked NCHW4c or plain row-major) each op that has a kernel
in both runs in, so that layout transforms happen where the graph's fixed layouts meet, not
wherever a value's producer and reader happen to differ (docs/design.md, "The layout planner").

Built once per rewrite, before the first rule runs (:meth:`LayoutPlan.build`), from the graph
alone: for every value, the layouts its readers want (:meth:`LayoutPlan.wants`): a conv, a pool,
a norm over a map's channels or a resize wants it blocked; a channel concat either (its kernel
reads a plain input in place), any other concat blocked too; the model's output, an op no rule of
ours takes, a GEMM on plain tensors and the view ops of tokens want it plain;
a *flexible* reader (an op with both a blocked and a plain kernel: the pixelwise unary and binary
ops, :data:`FLEXIBLE`) wants what its own readers want (followed through chains of them).

A flexible op then runs in the layout that costs fewer transforms
(:meth:`LayoutPlan.runs_plain`): plain costs one transform per operand that is blocked now plus
one when a reader wants the result blocked; blocked costs one per operand that is plain now plus
one when a reader wants it plain. The operands' layouts are read when the op is rewritten (its
producers have run: no guess about which rule took them). A tie stays blocked, the layout these
ops ran in before the planner, so a plan changes only where a transform disappears.

A binary op of two maps whose other operand is held only blocked reads a plain operand in place
(``rules.common.read_in_place``): as a reader of a flexible op's value it wants neither form
(:meth:`_result_wants`), and a plain chain stops before it (:meth:`ends_plain_chain`). A value not
computed yet that is no map and comes from plain values only will be plain (:meth:`plain_to_come`,
``map_boundary._form_now`` asks it for a token region's pixelwise readers).

The blocked pixelwise rules ask :meth:`runs_plain` first and leave an op planned plain to the
``token_elementwise`` rule. The rewriter counts the transforms it emits (:attr:`transforms`).

A channel split of a map is flexible too (``rules.layout.split`` on NCHW4c, ``rules.token_layout``'s
gathers on the plain tensor): :meth:`split_plain` weighs it the same way, its parts' wants read
through views (:meth:`view_wants`: a part flattened to the tokens a GEMM reads wants plain, one a
conv or another op on a 4-d map reads wants blocked: MobileViT-v2's split stays blocked). Asked
before the split's input exists (by the conv writing it, ``map_boundary.reads_plain``), the input
costs nothing either way: the conv then writes it plain.
"""

from __future__ import annotations

from tvm import relax

from tir_adreno.passes.graph import Graph, const, same, split_parts, static_shape

#: The pixelwise ops with a blocked kernel (rules ``elementwise``, ``binary``, ``broadcast``) and
#: a plain one (``token_elementwise``).
FLEXIBLE = frozenset({"relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum",
                      "relax.nn.relu", "relax.clip", "relax.sigmoid"})
#: Readers that want their input blocked (their kernels read NCHW4c).
BLOCKED_READERS = frozenset({"relax.nn.conv2d", "relax.nn.max_pool2d", "relax.nn.avg_pool2d", "relax.nn.adaptive_avg_pool2d",
                             "relax.image.resize2d", "relax.nn.group_norm", "relax.nn.batch_norm",
                             # any other concat (tokens, a class token) is a gather on plain tensors, but
                             # wanting it plain runs XCiT's whole token path plain: fewer transforms (6 -> 5)
                             # for far more launches (219 -> 350), which this cost does not count
                             "relax.concat"})
BLOCKED, PLAIN = "blocked", "plain"
#: Ops that show a value in another shape in either layout (a blocked map's token view is an alias
#: of its NCHW4c tensor, a plain tensor's a ``memory.view``): :meth:`LayoutPlan.view_wants` reads
#: through them to their readers.
VIEWS = frozenset({"relax.reshape", "relax.permute_dims"})
#: Binary ops whose blocked kernel (``rules.elementwise.binary``) reads an operand held only plain
#: in place; :data:`COMMUTATIVE` ones read it as either operand (and take a broadcast operand first too).
IN_PLACE_BINARY = frozenset({"relax.add", "relax.subtract", "relax.multiply", "relax.divide"})
COMMUTATIVE = frozenset({"relax.add", "relax.multiply"})
#: How many producers back :meth:`LayoutPlan.plain_to_come` looks (an attention's other side is
#: under a dozen ops).
MAX_AHEAD = 16


def on_channels(concat) -> bool:
    """Whether ``concat`` joins 4-d maps on their channels (axis 1): ``rules.concat``'s kernel, which
    reads each input in the form it is held (NCHW4c, or a float32 plain NCHW buffer) and writes
    NCHW4c."""
    axis = concat.attrs.axis
    return len(static_shape(concat.var) or ()) == 4 and axis is not None and int(axis) % 4 == 1


class LayoutPlan:
    """The readers' wants of every value of ``graph`` (module docstring), and the decision for a
    flexible op given its operands' layouts."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self._wants: dict = {}
        self._view_wants: dict = {}
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

    def all_readers(self, var) -> list:
        """The nodes that read ``var``, fused ones too (once per node): what the graph has."""
        return list({id(node): node for node in self._readers.get(var, ())}.values())

    def wants(self, var) -> frozenset:
        """The layouts ``var``'s readers want (empty: no reader wants either, e.g. none at all)."""
        key = var
        if key not in self._wants:
            self._wants[key] = frozenset()  # a DAG: no cycle, but be safe while computing
            found = {PLAIN} if self.is_output(var) else set()
            for user in self._readers.get(var, ()):
                found |= self._reader_wants(user)
            self._wants[key] = frozenset(found)
        return self._wants[key]

    def is_output(self, var) -> bool:
        """Whether ``var`` is (a field of) the graph's output."""
        out = self.graph.output
        return any(same(f, var) for f in (out.fields if isinstance(out, relax.Tuple) else [out]))

    def view_wants(self, var) -> frozenset:
        """:meth:`wants` with views (:data:`VIEWS`) and flexible ops followed to their readers, and
        a map's other readers taken as blocked (:meth:`_map_reader_wants`)."""
        if var not in self._view_wants:
            self._view_wants[var] = frozenset()
            found = {PLAIN} if self.is_output(var) else set()
            for user in self._readers.get(var, ()):
                follow = user.op in VIEWS or user.op in FLEXIBLE
                found |= set(self.view_wants(user.var)) if follow else self._map_reader_wants(var, user)
            self._view_wants[var] = frozenset(found)
        return self._view_wants[var]

    def _map_reader_wants(self, var, user) -> set:
        """What ``user`` (no view, no flexible op) wants ``var`` in, for :meth:`view_wants`: a GEMM
        plain; any other reader of a 4-d map blocked (softmax, reductions and norms over a map
        have blocked kernels: MobileViT-v2's attention without its relu); else :meth:`_reader_wants`."""
        if user.op == "relax.matmul":
            return {PLAIN}
        return {BLOCKED} if len(static_shape(var) or ()) == 4 else self._reader_wants(user)

    def _reader_wants(self, user) -> set:
        if user.op in FLEXIBLE:
            return set(self.wants(user.var))
        if user.op == "relax.concat" and on_channels(user):  # reads either form (rules.concat)
            return set()
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
            only_blocked, only_plain = self._held_value(rw.values.get(arg))
            blocked_now += only_blocked
            plain_now += only_plain
        wants = self._result_wants(rw, node)
        cost_plain = blocked_now + (BLOCKED in wants)
        cost_blocked = plain_now + (PLAIN in wants)
        return cost_plain < cost_blocked

    def _result_wants(self, rw, node) -> set:
        """:meth:`wants` of flexible ``node``'s value, but a binary op of two maps whose other
        operand is held only blocked now wants neither (``rules.common.read_in_place``: its blocked
        kernel reads an operand held only plain from the float32 NCHW buffer, so running ``node``
        plain costs that reader no transform; it reads it as B, or as A where the op commutes)."""
        found = {PLAIN} if self.is_output(node.var) else set()
        for user in self.readers(node.var):
            if not self._reads_in_place(rw, user, node.var):
                found |= self._reader_wants(user)
        return found

    @staticmethod
    def _reads_in_place(rw, user, var) -> bool:
        shape = static_shape(var)
        if user.op not in IN_PLACE_BINARY or len(user.args) != 2 or shape is None or len(shape) != 4:
            return False
        if not (rw.fuses and rw.allow_buffer and rw.dtype == "float32"):
            return False
        a, b = user.args
        other = a if same(b, var) else b
        as_b = same(b, var) or user.op in COMMUTATIVE
        return (as_b and not same(a, b) and isinstance(other, relax.Var) and const(other) is None
                and static_shape(other) == shape == static_shape(user.var) and LayoutPlan.held(rw, other) == (True, False))

    def ends_plain_chain(self, rw, node) -> bool:
        """Whether flexible ``node`` runs blocked (:meth:`runs_plain`) beside a plain chain that
        computes one of its operands: the other is held only blocked and its kernel reads the
        chain's value in place (:meth:`_reads_in_place`), so the chain (``rules.token_elementwise``)
        stops before it instead of taking it and unpacking the blocked operand."""
        if node.op not in IN_PLACE_BINARY or len(node.args) != 2 or self.runs_plain(rw, node):
            return False
        return any(isinstance(a, relax.Var) and a not in rw.values and a not in rw.exprs
                   and self._reads_in_place(rw, node, a) for a in node.args)

    def plain_to_come(self, rw, var, memo: dict | None = None, depth: int = 0) -> bool:
        """Whether ``var``, not computed yet, will exist only plain: it is no map (rank other than
        4: tokens, heads, rows, which only the plain kernels take when their input is plain) and
        every activation it is computed from is held only plain now or is such a value itself,
        followed up to :data:`MAX_AHEAD` producers back (a row sum of the plain query side of an
        additive attention, read by a pixelwise op of the key side). A flexible op on the way
        must have no reader wanting it blocked (it could tie and run blocked)."""
        memo = {} if memo is None else memo
        if var in memo:
            return memo[var]
        memo[var] = False  # a DAG, but be safe while computing
        node = self.graph.by_var.get(var)
        rank = len(static_shape(var) or (0,) * 4)
        if node is None or rank == 4 or depth > MAX_AHEAD or (node.op in FLEXIBLE and BLOCKED in self.wants(var)):
            return False
        operands = [f for a in node.args for f in (a.fields if isinstance(a, relax.Tuple) else [a])
                    if isinstance(f, relax.Var) and const(f) is None]
        memo[var] = bool(operands) and all(self._plain_now_or_to_come(rw, a, memo, depth) for a in operands)
        return memo[var]

    def _plain_now_or_to_come(self, rw, var, memo, depth) -> bool:
        if var in rw.values or var in rw.exprs:
            return self.held(rw, var) == (False, True)
        return self.plain_to_come(rw, var, memo, depth + 1)

    def split_plain(self, rw, node, part_wants=None) -> bool:
        """Whether channel split ``node`` of a float32 map runs on its plain tensor: fewer transforms
        than blocked (a tie: blocked; module docstring). Plain costs one per part a reader wants
        blocked plus one when the input is only blocked now; blocked one per part a reader wants
        plain plus one when the input is only plain now; an input not rewritten yet costs nothing.
        ``part_wants(var)``: a part's wants (default :meth:`view_wants`; ``passes.channel_groups``
        reads them through the convs of a channel group)."""
        parts = self.graph.users(node.var) if node.op == "relax.split" else []
        shape = static_shape(node.args[0])
        if not parts or any(p.op != "tuple_get_item" for p in parts) or not (rw.fuses and rw.allow_buffer):
            return False
        if rw.dtype != "float32" or shape is None or len(shape) != 4 or split_parts(node, shape) is None:
            return False
        wants = [(part_wants or self.view_wants)(p.var) for p in parts]
        blocked_now, plain_now = self.held(rw, node.args[0])
        cost_plain = sum(BLOCKED in w for w in wants) + blocked_now
        cost_blocked = sum(PLAIN in w for w in wants) + plain_now
        return cost_plain < cost_blocked

    @staticmethod
    def held(rw, var) -> tuple[bool, bool]:
        """(only blocked, only plain): how the rewriter holds ``var`` now; (False, False) before it
        is rewritten or when it has both forms."""
        if var not in rw.values and var not in rw.exprs:
            return False, False
        return LayoutPlan._held_value(rw.values.get(var))

    @staticmethod
    def _held_value(v) -> tuple[bool, bool]:
        """(only blocked, only plain) of the rewriter's value ``v`` (None: a plain expression)."""
        has_blocked = v is not None and bool(v.blocked)
        has_plain = v is None or v.plain is not None
        return has_blocked and not has_plain, has_plain and not has_blocked

    def flexible_plain(self, node) -> bool:
        """Whether flexible ``node`` (its other operands constants) is a plain reader for the
        writer of its operand: only plain readers want its value, views followed
        (:meth:`view_wants`), so it runs plain once that operand is (:meth:`runs_plain`)."""
        consts = sum(const(a) is not None for a in node.args)
        return node.op in FLEXIBLE and consts == len(node.args) - 1 and self.view_wants(node.var) == {PLAIN}
