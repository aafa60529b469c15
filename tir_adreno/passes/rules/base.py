"""A rewrite rule and the registry's contract, as TVM's dlight schedule rules are written:
``apply(rewriter, node)`` returns the node's new value, or None when the rule does not apply
(the next rule for the op is tried, then the op is left to upstream)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    name: str
    ops: tuple[str, ...]  # the Relax op names it looks at
    apply: Callable  # (Rewriter, Node) -> relax.Expr | None


def rule(*ops: str):
    """Make a function ``fn(rewriter, node) -> expr | None`` the :class:`Rule` for ``ops``."""

    def make(fn) -> Rule:
        return Rule(fn.__name__, ops, fn)

    return make


def by_op(rules) -> dict[str, tuple[Rule, ...]]:
    """Op name -> the rules that look at it, in registry order."""
    index: dict[str, tuple[Rule, ...]] = {}
    for r in rules:
        for op in r.ops:
            index[op] = (*index.get(op, ()), r)
    return index
