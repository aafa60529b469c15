"""An elementwise chain on plain tensors that only a Linear reads, computed by the GEMM as it reads
A: no ``elementwise_plain`` launch, and A never stored (a gated MLP's ``act(g) * x`` before its
second Linear: MambaOut's ``gelu(g) * cat(i, c)``, gMLP's ``u * v``, a GLU's ``silu(a) * b``).

The chain is the one the ``token_elementwise`` rule would make one kernel of (walked the same way,
``rules.token_elementwise.plain_chain``: its inputs read through their movement ops); here its body
becomes the GEMM's ``a_producer`` (``primfuncs.plain_elementwise.Producer``, evaluated by
``primfuncs.gemm`` at each element of A it loads) where ``strategy.fusion.can_fuse("producer_gemm",
...)`` says the kernel's repeated evaluations cost less than the launch. The Linear's tail (bias,
linear steps, residual, activation, chain after it) is the GEMM rule's (``rules.gemm.gemm_tail``).
"""

from __future__ import annotations

import numpy as np

from tir_adreno.passes.elementwise_chain import OPS
from tir_adreno.passes.graph import Node, dtype, same, static_shape
from tir_adreno.passes.layout_plan import LayoutPlan
from tir_adreno.passes.patterns.base import Match, Plan, pattern
from tir_adreno.passes.rewriter import Rewriter
from tir_adreno.passes.rules.gemm import Operand, _weight, emit_linear, linear_geometry
from tir_adreno.passes.rules.token_elementwise import chain_args, plain_chain
from tir_adreno.strategy.fusion import can_fuse
from tir_adreno.strategy.gemm import producer_gemm_config


def _reader(g, node: Node):
    """(the ``matmul`` at the end of the elementwise ops from ``node``, each the sole reader of the
    last, and how many ops that is), else None: the chain's extent on the graph alone (``emit``
    walks it with the rule's leaf policy and declines where it ends elsewhere)."""
    ops, last = 1, node
    while True:
        user = g.sole_user(last.var)
        if user is None:
            return None
        if user.op == "relax.matmul":
            return (user, ops) if same(user.args[0], last.var) else None
        if user.op not in OPS:
            return None
        ops, last = ops + 1, user


def _match(g, node: Node) -> Match | None:
    """An elementwise op on a plain float32 tensor (rank >= 2) from which sole readers lead to a
    ``matmul`` by a constant ``[K, N]`` float32 reading them as A, with that product's geometry."""
    shape = static_shape(node.var)
    if shape is None or len(shape) < 2 or dtype(node.var) != "float32":
        return None
    found = _reader(g, node)
    if found is None:
        return None
    user, ops = found
    geom = linear_geometry(user, static_shape(user.args[0]))
    return None if geom is None else Match(node, {"reader": user, "geometry": geom, "ops": ops})


def _plan(match: Match, profile, records, precision) -> Plan | None:
    """The fold where ``strategy.fusion.can_fuse("producer_gemm", ...)`` says yes, its decision the
    GEMM's config that folds the chain (``strategy.gemm.producer_gemm_config``), else None."""
    if can_fuse("producer_gemm", match.geometry, profile, precision, records, ops=match.ops) is None:
        return None
    return Plan(match, producer_gemm_config(match.geometry, match.ops, profile))


@pattern(*OPS, match=_match, plan=_plan, before=("token_elementwise",), reads_plain=True)
def producer_gemm(rw: Rewriter, plan: Plan):
    """The Linear computing the chain from ``plan``'s anchor as it reads A (the chain's nodes, the
    product and its tail marked fused), else None: the chain the rule walks ends elsewhere, or
    reads a value held only blocked (the layout planner's pixelwise rules take it, as before this
    pattern: no layout transform is added for the GEMM's sake); its kernel runs, and the GEMM
    rule takes the Linear."""
    node, user, geom = plan.match.anchor, plan.match.reader, plan.match.geometry
    found = plain_chain(rw, node)
    if found is None or not same(found[2].var, user.args[0]) or user.fused:
        return None
    producer, inputs, last, nodes = found
    if any(not isinstance(x, np.ndarray) and LayoutPlan.held(rw, x)[0] for x in inputs):
        return None  # an input held only blocked: the pixelwise rules' layout plan, not a transform for the GEMM
    a = Operand(last.var, geom.a_shape, producer=producer, producer_args=tuple(chain_args(rw, inputs)),
                producer_config=plan.decision)
    for m in nodes:
        m.fused = True
    return emit_linear(rw, user, a, geom, _weight(user.args[1], geom.k))
