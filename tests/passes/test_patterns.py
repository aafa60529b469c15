"""The fusion stage's registry (``tir_adreno.passes.patterns``): every pattern tried before the
single-op rules, every declared precedence kept by the registry's order, and the precedence of every
pair of patterns that share an anchor op named here, with why (a new overlap fails
:func:`test_every_overlap_is_named` until it is); ``strategy.fusion.can_fuse``, the one question the
patterns ask about a fused conv."""

import itertools

import pytest

from primfuncs.conv import conv2d_geometry
from primfuncs.conv.norm import GroupNormFold
from primfuncs.gemm import gemm_geometry
from tir_adreno.passes.patterns import PATTERNS
from tir_adreno.passes.patterns.base import Pattern, no_question, ordered
from tir_adreno.passes.rules import RULES, by_op
from tir_adreno.strategy import fusion
from tir_adreno.strategy.gemm import gemm_config
from tir_adreno.strategy.profile import get_profile, without_fusion

#: (earlier, later): the patterns that share an anchor op, and why the earlier one goes first.
OVERLAPS = {
    ("pooled_excitation", "head_gemv"): "a pool read by an SE block is the excitation's; a head's 1x1 conv has no gate after it",
    ("pooled_excitation", "pooled_pointwise"): "the pool with both SE convs is one launch; with one conv only where no SE follows",
    ("excitation", "head_gemv"): "a 1x1 conv on a vector followed by an SE gate is fc1, not a classifier",
    ("excitation", "depthwise_excitation"): "disjoint anchors (a dense 1x1 conv on a vector, a depthwise conv); the SE block first",
    ("excitation", "depthwise_pointwise"): "disjoint anchors (a dense 1x1 conv on a vector, a grouped conv); the SE block first",
    ("head_gemv", "pooled_pointwise"): "a wide GPU's head spreads its GEMV over work groups; pooled_pointwise is the narrow devices'",
    ("head_gemv", "depthwise_excitation"): "disjoint anchors (a dense 1x1 conv on a vector, a depthwise conv); the head first",
    ("head_gemv", "depthwise_pointwise"): "disjoint anchors (a dense 1x1 conv on a vector, a grouped conv); the head first",
    ("head_gemv", "layer_norm_conv"): "a classifier's norm of a vector folds into its head GEMV, not into a conv",
    ("head_gemv", "layer_norm_gemm"): "a classifier's norm of a vector folds into its head GEMV, not into a tiled GEMM",
    ("layer_norm_conv", "layer_norm_gemm"): "a norm of a blocked map read by a Linear folds into the conv it runs as; plain tokens: the GEMM",
    ("depthwise_excitation", "depthwise_pointwise"): "a depthwise conv pooled by an SE block has two readers: the SE block's",
    ("grn_gated_conv2d", "gated_conv2d"): "GRN's x * x starts the whole GRN; a plain gate multiply is its own pattern",
    ("group_norm_conv", "group_norm"): "a group norm a conv folds needs no kernel of its own",
    ("group_norm_conv", "cross_covariance_attention"): "group norm's reshape to [N, G, K] before attention's reshapes",
    ("group_norm_conv", "linear_attention"): "group norm's reshape to [N, G, K] before attention's reshapes",
    ("group_norm", "cross_covariance_attention"): "group norm's reshape to [N, G, K] before attention's reshapes",
    ("group_norm", "linear_attention"): "group norm's reshape to [N, G, K] before attention's reshapes",
    ("cross_covariance_attention", "linear_attention"): "XCA's reshape of tokens to 5-d, LiteMLA's of a map to 4-d: XCA first",
    ("head_gemv", "softmax_attention"): "disjoint anchors (a matmul by a constant, a product of two activations); the head first",
    ("grn_gated_conv2d", "producer_gemm"): "a multiply whose readers lead to a conv (GRN's) or to a Linear: disjoint; the conv's first",
    ("gated_conv2d", "producer_gemm"): "a gate multiply read by a conv, or a chain read by a Linear: disjoint; the conv's first",
    ("grn_scale", "producer_gemm"): "GRN's sqrt of its sums of squares is a reduction's tail, not a Linear's input chain",
}


def _index(name: str) -> int:
    return next(i for i, p in enumerate(PATTERNS) if p.name == name)


def test_every_overlap_is_named():
    """Each pair of patterns with a common anchor op is in :data:`OVERLAPS`, and each named pair overlaps."""
    overlapping = {frozenset((a.name, b.name)) for a, b in itertools.combinations(PATTERNS, 2) if set(a.ops) & set(b.ops)}
    assert overlapping == {frozenset(pair) for pair in OVERLAPS}


@pytest.mark.parametrize("earlier, later", sorted(OVERLAPS), ids=[f"{a}>{b}" for a, b in sorted(OVERLAPS)])
def test_overlapping_pair_precedence(earlier, later):
    """``earlier`` declares its precedence over ``later`` (data: ``before``) and is tried first on every op they share."""
    first, second = PATTERNS[_index(earlier)], PATTERNS[_index(later)]
    assert later in first.before and earlier not in second.before
    index = by_op((*PATTERNS, *RULES))
    for op in set(first.ops) & set(second.ops):
        names = [r.name for r in index[op]]
        assert names.index(earlier) < names.index(later), op


def test_patterns_run_before_the_rules():
    """On every op, the patterns that look at it come before its single-op rules."""
    patterns = {p.name for p in PATTERNS}
    for op, entries in by_op((*PATTERNS, *RULES)).items():
        kinds = [e.name in patterns for e in entries]
        assert kinds == sorted(kinds, reverse=True), op
    assert all(isinstance(p, Pattern) for p in PATTERNS) and not patterns & {r.name for r in RULES}


def test_every_declared_precedence_names_a_pattern_or_rule_after_it():
    rules = {r.name for r in RULES}
    for i, p in enumerate(PATTERNS):
        for later in p.before:
            assert later in rules or _index(later) > i, (p.name, later)


def _fake(name, before=()):
    return Pattern(name, ("relax.add",), lambda g, n: None, no_question, lambda rw, plan: None, before)


def test_the_registry_refuses_a_broken_order():
    assert [p.name for p in ordered([_fake("a", ("b",)), _fake("b")], set())] == ["a", "b"]
    with pytest.raises(ValueError, match="'b' must come before 'a'"):
        ordered([_fake("a"), _fake("b", ("a",))], set())
    with pytest.raises(ValueError, match="no pattern or rule"):
        ordered([_fake("a", ("nothing",))], {"binary"})
    with pytest.raises(ValueError, match="share a name"):
        ordered([_fake("a"), _fake("a")], set())


def test_can_fuse_is_the_one_question():
    """Each kind answers as its predicate does, a Fusion (or the FusedPlan) or None; fusion off: None."""
    h200, pocl = get_profile("nvidia-h200"), get_profile("pocl")
    pointwise = conv2d_geometry((1, 96, 14, 14), (40, 96, 1, 1))
    yes = fusion.can_fuse("gate", pointwise, pocl)
    assert yes == fusion.Fusion("gate", pointwise)
    assert fusion.can_fuse("gate", pointwise, without_fusion(pocl)) is None
    assert fusion.can_fuse("layer_norm", pointwise, h200) is not None and fusion.can_fuse("layer_norm", pointwise, pocl) is None
    qkv, fold = conv2d_geometry((1, 64, 4, 196), (129, 64, 1, 1)), GroupNormFold(1, 196, 1e-5)
    assert fusion.can_fuse("group_norm", qkv, h200, fold=fold) is not None
    assert fusion.can_fuse("group_norm", qkv, h200, "float16", fold=fold) is None
    assert (fusion.can_fuse("grn", qkv, h200) is None) == (not fusion.fold_grn(qkv, "float32", h200))
    dw = conv2d_geometry((1, 32, 28, 28), (32, 1, 3, 3), padding=1, groups=32)
    pw = conv2d_geometry((1, 32, 28, 28), (16, 32, 1, 1))
    assert fusion.can_fuse("depthwise_pointwise", dw, h200, pointwise=pw) == fusion.fuse_depthwise_pointwise(dw, pw, h200)
    assert fusion.can_fuse("depthwise_pointwise", dw, without_fusion(h200), pointwise=pw) is None
    assert fusion.can_fuse("split_depthwise", None, pocl) is not None
    assert fusion.can_fuse("split_depthwise", None, without_fusion(pocl)) is None
    with pytest.raises(ValueError, match="unknown fusion kind"):
        fusion.can_fuse("winograd", pointwise, pocl)
    tokens, stored_t = gemm_geometry((1, 196, 256), (256, 1536)), gemm_geometry((1, 256, 196), (256, 1536), trans_a=True)
    assert fusion.can_fuse("layer_norm_gemm", tokens, h200) == fusion.Fusion("layer_norm_gemm", tokens)
    assert gemm_config(tokens, pocl).tiled is False and fusion.can_fuse("layer_norm_gemm", tokens, pocl) is None  # register kernel
    assert fusion.can_fuse("layer_norm_gemm", tokens, without_fusion(h200)) is None
    assert fusion.can_fuse("layer_norm_gemm", tokens, h200, "float16") is None
    assert fusion.can_fuse("layer_norm_gemm", tokens, h200, "float16_acc32") is not None
    assert fusion.can_fuse("layer_norm_gemm", stored_t, h200) is None
    head = gemm_geometry((1, 1024), (1024, 1000))  # a long reduction for its outputs: the split kernel
    assert gemm_config(head, h200).split_k > 1 and fusion.can_fuse("layer_norm_gemm", head, h200) is None
    gated = gemm_geometry((1, 14, 14, 512), (512, 192))
    assert (fusion.can_fuse("producer_gemm", gated, h200, ops=6) is None) == (not fusion.fold_producer_gemm(gated, 6, h200))
    assert fusion.can_fuse("producer_gemm", tokens, without_fusion(h200), ops=1) is None
    assert set(fusion.FUSION_KINDS) == {"gate", "layer_norm", "layer_norm_gemm", "producer_gemm", "group_norm", "grn", "depthwise_pointwise",
                                        "split_depthwise"}


def _se_graph():
    """A squeeze-excitation block on a 7 x 7 map of 16 channels (timm's export) that a conv writes
    (blocked: on a map held plain only, such as the model's input, the head GEMV leaves the pool to
    the plain kernels, so its precedence would not show)."""
    import numpy as np

    from helpers.onnx_graphs import conv_node, pattern_graph, se_nodes

    rng, inits = np.random.default_rng(4), {}
    return pattern_graph([conv_node(rng, inits, "x", "c", 16, 16, k=1), *se_nodes("c", "y", inits, 16, 4, rng)], inits, channels=16)


def _group_norm_conv_graph():
    """GroupNorm1 over 8 channels as exported, read by a 1x1 conv to 16 channels on a 28 x 28 map
    (the H200 runs that conv tiled: the group norm folds into it)."""
    import numpy as np

    from helpers.onnx_graphs import conv_node, group_norm_nodes, int_pattern_graph

    rng, inits = np.random.default_rng(9), {}
    nodes = [conv_node(rng, inits, "x", "c", 8, 3), *group_norm_nodes("c", "n", inits, 8, 1, rng), conv_node(rng, inits, "n", "y", 16, 8, k=1)]
    return int_pattern_graph(nodes, inits, size=28)


def _profile(name):
    from helpers.onnx_graphs import wide_profile

    return wide_profile() if name == "wide" else get_profile(name)


#: (earlier, later, graph, profile, a kernel of the earlier's plan, a kernel only the later's plan has)
IN_A_PLAN = [
    ("pooled_excitation", "pooled_pointwise", _se_graph, "pocl", "excitation", "pooled_pointwise"),
    ("pooled_excitation", "head_gemv", _se_graph, "wide", "excitation", "pooled_pointwise"),
    ("group_norm_conv", "group_norm", _group_norm_conv_graph, "nvidia-h200", "conv2d_tiled_nchw4c", "group_norm_apply"),
]


@pytest.mark.parametrize("earlier, later, graph, profile, first_kernel, second_kernel", IN_A_PLAN,
                         ids=[f"{a}>{b}" for a, b, *_ in IN_A_PLAN])
def test_precedence_decides_the_plan(monkeypatch, earlier, later, graph, profile, first_kernel, second_kernel):
    """A graph both patterns match: the registry's order gives the earlier one's kernels; with the
    two swapped, the later one's (so the declared order is what decides)."""
    from helpers.onnx_graphs import plan_kernels
    from tir_adreno.passes import dispatch

    model, target = graph(), _profile(profile)
    names = plan_kernels(model, target)
    assert first_kernel in names and second_kernel not in names, names
    order = list(dispatch.PATTERNS)
    i, j = (next(k for k, p in enumerate(order) if p.name == n) for n in (earlier, later))
    order[i], order[j] = order[j], order[i]
    monkeypatch.setattr(dispatch, "PATTERNS", tuple(order))
    swapped = plan_kernels(model, target)
    assert second_kernel in swapped and swapped != names, swapped


#: Patterns whose kernel has no schedule, config or fusion decision of its own (``base.no_question``).
ASKS_NOTHING = {"grn_scale", "separable_attention"}


def _reached(func, seen) -> list:
    """The global objects ``func`` names, and those of the pattern-stage functions it names, transitively."""
    import inspect

    found = []
    for value in inspect.getclosurevars(func).globals.values():
        found.append(value)
        inner = getattr(value, "__wrapped__", value)
        if inspect.isfunction(inner) and inner.__module__.startswith("tir_adreno.passes.patterns") and inner not in seen:
            seen.add(inner)
            found += _reached(inner, seen)
    return found


@pytest.mark.parametrize("pattern", PATTERNS, ids=[p.name for p in PATTERNS])
def test_plan_decides_and_emit_only_emits(pattern):
    """Every device question is the pattern's ``plan``'s: its ``emit``, and the helpers of the fusion
    stage it calls, name nothing of ``tir_adreno.strategy`` but the host packing functions
    (``strategy.packing``: NumPy layouts, no device in them); and only the patterns of
    :data:`ASKS_NOTHING` plan without asking."""
    import types

    names = []
    for value in _reached(pattern.emit, set()):
        module = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", "") or ""
        if module.startswith("tir_adreno.strategy") and module != "tir_adreno.strategy.packing":
            names.append(f"{module}.{getattr(value, '__name__', value)}")
    assert names == [], f"{pattern.name}'s emit asks the strategy: {names}"
    assert (pattern.plan is no_question) == (pattern.name in ASKS_NOTHING)
