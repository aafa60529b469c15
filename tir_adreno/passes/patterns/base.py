"""The fusion pattern contract: a pattern matches a subgraph around an anchor node, asks the
strategy whether its fused plan runs, and emits it, in three steps:

- ``match(graph, node) -> Match | None``: the subgraph's structure, from the graph alone (ops,
  attributes, static shapes, constants, who reads what); no rewriter state, nothing marked;
- ``plan(match, profile, records, precision) -> Plan | None``: the device's answer, asked of
  ``strategy/`` (``strategy.fusion.can_fuse`` for a fused conv, or the fused kernel's schedule);
- ``emit(rewriter, plan) -> relax.Expr | None``: the kernels, the nodes taken marked fused. It
  may still decline (None, nothing emitted and every fused mark as it was) where what it needs
  depends on the rewrite so far (a value in another layout, a folded tail with a residual).

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
    ``strategy.fusion.Fusion`` or ``FusedPlan``, or True where the strategy's question needs the
    emitted state and ``emit`` asks it)."""

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

    def apply(self, rw, node):
        """The rule contract (``rules.base.Rule.apply``): the node's new value, else None."""
        found = self.match(rw.graph, node)
        decided = self.plan(found, rw.profile, rw.records, rw.precision) if found is not None else None
        return self.emit(rw, decided) if decided is not None else None


def pattern(*ops: str, match: Callable, plan: Callable, before: tuple[str, ...] = (), name: str | None = None):
    """Make ``emit`` the :class:`Pattern` on ``ops`` with ``match`` and ``plan`` (named after ``emit``)."""

    def make(emit) -> Pattern:
        return Pattern(name or emit.__name__, ops, match, plan, emit, before)

    return make


def always(match: Match, profile, records, precision) -> Plan:
    """A ``plan`` for a pattern whose strategy question needs the emitted state (``emit`` asks it)."""
    return Plan(match)


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
