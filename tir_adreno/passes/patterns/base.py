"""The fusion pattern contract: a pattern matches a subgraph around an anchor node, asks the
strategy whether its fused plan runs, and emits it, in three steps:

- ``match(graph, node) -> Match | None``: the subgraph's structure, from the graph alone (ops,
  attributes, static shapes, constants, who reads what); no rewriter state, nothing marked;
- ``plan(match, profile, records, precision) -> Plan | None``: the device's answer, asked of
  ``strategy/`` (``strategy.fusion.can_fuse`` for a fused conv, or the fused kernel's schedule);
- ``emit(rewriter, plan) -> relax.Expr | None``: the kernels, the nodes taken marked fused, with
  the plan's decisions (it asks the strategy nothing). It may still decline (None, nothing
  emitted and every fused mark as it was) where what it needs depends on the rewrite so far (a
  value in another layout, a folded tail with a residual).

Where a decision needs a part that ``match`` finds only by walking what ``emit`` will walk (a conv's
folded tail, a norm's per-channel chain), ``match`` walks it on the graph alone (:func:`graph_only`:
no values, so no residual, every fused mark restored) and ``emit`` checks that it met the same.

``before`` declares the pattern's precedence as data: the patterns (and single-op rules) it must
be tried before on a node both look at. The registry (``patterns.PATTERNS``) holds them in an
order that keeps every declaration, checked when it is built, and the rewriter tries them before
the single-op rules, as TFLite's special selectors run before its per-op switch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Match:
    """What ``match`` found: the anchor node and the pattern's parts by name."""

    anchor: object  # passes.graph.Node
    parts: dict = field(default_factory=dict)

    def __getattr__(self, name):
        try:
            return self.parts[name]
        except KeyError:
            raise AttributeError(name) from None


@dataclass(frozen=True)
class Plan:
    """What ``plan`` decided: the match and the strategy's answer (a schedule's keywords, a
    ``strategy.fusion.Fusion`` or ``FusedPlan``, a pattern's own frozen decision; True where the
    pattern asks nothing, :func:`no_question`). ``emit`` only emits: it asks the strategy nothing."""

    match: Match
    decision: object = True


@dataclass(frozen=True)
class Pattern:
    name: str
    ops: tuple[str, ...]  # the anchor ops it is tried on
    match: Callable  # (Graph, Node) -> Match | None
    plan: Callable  # (Match, DeviceProfile, Records | None, precision) -> Plan | None
    emit: Callable  # (Rewriter, Plan) -> relax.Expr | None
    before: tuple[str, ...] = ()  # patterns and rules it is tried before (precedence, checked by the registry)
    reads_plain: bool = False  # its kernels read the anchor's operands plain (not NCHW4c maps): ``map_boundary`` asks

    def apply(self, rw, node):
        """The rule contract (``rules.base.Rule.apply``): the node's new value, else None."""
        found = self.match(rw.graph, node)
        decided = self.plan(found, rw.profile, rw.records, rw.precision) if found is not None else None
        return self.emit(rw, decided) if decided is not None else None


def pattern(*ops: str, match: Callable, plan: Callable, before: tuple[str, ...] = (), name: str | None = None, reads_plain: bool = False):
    """Make ``emit`` the :class:`Pattern` on ``ops`` with ``match`` and ``plan`` (named after ``emit``)."""

    def make(emit) -> Pattern:
        return Pattern(name or emit.__name__, ops, match, plan, emit, before, reads_plain)

    return make


def no_question(match: Match, profile, records, precision) -> Plan:
    """The ``plan`` of a pattern that asks the strategy nothing: its kernel has no schedule, config
    or fusion decision of its own, so it runs on every device and in every precision."""
    return Plan(match)


@dataclass(frozen=True)
class GraphOnly:
    """What the rewriter's tail and chain walks (``conv_emit.conv_tail``, ``rules.common.affine_chain``)
    read of it, for ``match``: the graph, and no values, so no residual is taken. A tail with a
    residual makes ``emit`` decline; without one, the walk is the one ``emit`` makes (same steps,
    same fused marks), so ``plan`` asks the strategy about the sizes ``emit`` will find."""

    graph: object  # passes.graph.Graph
    values: dict = field(default_factory=dict)
    exprs: dict = field(default_factory=dict)


def graph_only(g, search, *args):
    """``search(GraphOnly(g), *args)``, every fused mark left as it was (``match`` marks nothing)."""
    marks = g.fused_marks()
    try:
        return search(GraphOnly(g), *args)
    finally:
        g.restore_fused(marks)


def ordered(patterns, rule_names) -> tuple[Pattern, ...]:
    """``patterns`` when their order keeps every ``before`` declaration (a pattern named there comes
    later; a rule named there is one of ``rule_names``: rules run after every pattern), else
    ValueError naming the broken one."""
    position = {p.name: i for i, p in enumerate(patterns)}
    if len(position) != len(patterns):
        raise ValueError("two patterns share a name")
    for i, p in enumerate(patterns):
        for later in p.before:
            if later in position and position[later] <= i:
                raise ValueError(f"pattern {p.name!r} must come before {later!r} in the registry")
            if later not in position and later not in rule_names:
                raise ValueError(f"pattern {p.name!r} declares a precedence over {later!r}, no pattern or rule")
    return tuple(patterns)
