"""The elementwise chain after a row kernel on tokens (``rules.rows``: layer norm, RMS norm,
softmax, batch norm; ``passes.epilogue_chain``) in the kernel's epilogue, and its precedence, by
name, against what else could take the norm or the chain's nodes: the ``layer_norm_conv`` pattern
(a norm its 1x1 conv folds: no norm kernel at all), the GEMM's scalar operand fold (``q * scale``),
and the rule that a row kernel reads no broadcast activation (a gate ``[N, 1, C]`` stays a kernel
of its own). onnx.helper graphs against onnxruntime (random inputs; outputs poisoned by ``run``)."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from helpers.onnx_graphs import PATTERN_RTOL, conv_node, plan_kernels
from tir_adreno.strategy.profile import get_profile

node = helper.make_node
#: float16_acc32: the buffers between our kernels are half (the CLI's tolerance for it, as test_rows_rule)
HALF_RTOL = 1e-2


def _model(nodes, inits, inputs, opset=17, outputs=("y",)):
    tensors = [helper.make_tensor(k, TensorProto.INT64 if a.dtype == np.int64 else TensorProto.FLOAT, a.shape, a.ravel().tolist())
               for k, a in inits.items()]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(s)) for k, s in inputs.items()],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], tensors)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run(model, inputs, precision="float32", profile="pocl"):
    """The model's kernels (profile rows, layout transforms included) after a checked run."""
    from tir_adreno import compile_model
    from tir_adreno.reference import reference_outputs, relative_error

    rng = np.random.default_rng(7)
    feeds = {k: rng.standard_normal(s).astype(np.float32) for k, s in inputs.items()}
    compiled = compile_model(model, profile=profile, precision=precision, progress=lambda _: None)
    (out,) = compiled.run(feeds, profile=True)
    (ref,) = reference_outputs(model, feeds)
    assert relative_error(out, ref) <= (PATTERN_RTOL if precision == "float32" else HALF_RTOL), relative_error(out, ref)
    return [r["op"] for r in compiled.profile()]


def _token_block(rng, tokens=10, c=12, chain=()):
    """x [1, L, C] -> Linear -> LayerNorm -> ``chain`` (ONNX nodes from "l" to "c") -> Linear -> y."""
    inits = {"w0": rng.standard_normal((c, c)) / np.sqrt(c), "g": 1 + 0.3 * rng.standard_normal(c), "b": 0.3 * rng.standard_normal(c),
             "w1": rng.standard_normal((c, 8)) / np.sqrt(c), "s2": rng.standard_normal(c), "t2": rng.standard_normal(c),
             "half": np.array(0.5), "gate": rng.standard_normal((1, 1, c))}
    nodes = [node("MatMul", ["x", "w0"], ["m0"]), node("LayerNormalization", ["m0", "g", "b"], ["l"], axis=-1, epsilon=1e-5),
             *chain, node("MatMul", ["c" if chain else "l", "w1"], ["y"])]
    return _model(nodes, {k: np.asarray(v, np.float32) for k, v in inits.items()}, {"x": (1, tokens, 12)})


#: a per-channel affine then an activation after the norm (Erf: ONNX Gelu is opset 20)
AFFINE_ERF = (node("Mul", ["l", "s2"], ["m"]), node("Add", ["t2", "m"], ["a"]), node("Erf", ["a"], ["c"]))


@pytest.mark.parametrize("precision", ["float32", "float16_acc32"])
def test_an_affine_and_erf_after_a_token_norm_are_its_epilogue(precision):
    """LayerNorm -> ``* s2 + t2`` (per-channel) -> Erf on tokens: one ``layer_norm_rows`` launch
    between the two GEMMs, no elementwise kernel; float16_acc32 within half's error."""
    ops = _run(_token_block(np.random.default_rng(1), chain=AFFINE_ERF), {"x": (1, 10, 12)}, precision)
    assert ops == ["gemm", "layer_norm_rows", "gemm1"], ops


def test_per_channel_constants_after_an_activation_are_the_norms_epilogue():
    """LayerNorm -> Erf -> ``* s2 + t2`` as the model's output: two per-channel constants along the
    tokens' last axis, after a nonlinearity (no affine to fold into the norm, no Linear after it to
    take them): both are the norm kernel's epilogue, one launch after the GEMM."""
    rng, c = np.random.default_rng(4), 12
    inits = {"w0": rng.standard_normal((c, c)) / np.sqrt(c), "g": 1 + 0.3 * rng.standard_normal(c), "b": 0.3 * rng.standard_normal(c),
             "s2": rng.standard_normal(c), "t2": rng.standard_normal(c)}
    nodes = [node("MatMul", ["x", "w0"], ["m0"]), node("LayerNormalization", ["m0", "g", "b"], ["l"], axis=-1, epsilon=1e-5),
             node("Erf", ["l"], ["e"]), node("Mul", ["e", "s2"], ["m"]), node("Add", ["t2", "m"], ["y"])]
    model = _model(nodes, {k: np.asarray(v, np.float32) for k, v in inits.items()}, {"x": (1, 10, c)})
    assert _run(model, {"x": (1, 10, c)}) == ["gemm", "layer_norm_rows"]


def test_without_a_chain_the_norm_is_unchanged():
    """No elementwise op after the norm: the kernel the rule emitted before (no epilogue keyword,
    the same key: plans byte-identical, benchmarks/plan_snapshot.py)."""
    assert plan_kernels(_token_block(np.random.default_rng(2)), get_profile("pocl")) == ["gemm", "layer_norm_rows", "gemm"]


@pytest.mark.parametrize("anchor", ["LayerNormalization", "MatMul"])
def test_precedence_gemm_operand_scale_after_a_norm_is_the_chains(anchor):
    """``anchor`` -> ``* 0.5`` -> MatMul: the GEMM's scalar operand fold (``rules.gemm._scalar_factor``,
    attention's ``q * scale``) and the anchor's chain both could take the multiply; the anchor is
    lowered first, so its epilogue has it, and the GEMM reads the product as it is (alpha 1): before
    this check a GEMM anchor's chain and the fold both applied it (the output off by 2x)."""
    model = _token_block(np.random.default_rng(3), chain=(node("Mul", ["l", "half"], ["c"]),))
    if anchor == "MatMul":  # the norm replaced by a second Linear
        nodes = [n if n.op_type != "LayerNormalization" else node("MatMul", ["m0", "w0"], ["l"]) for n in model.graph.node]
        model.graph.ClearField("node")
        model.graph.node.extend(nodes)
    families = [op.rstrip("0123456789") for op in _run(model, {"x": (1, 10, 12)})]
    assert families == ["gemm", "layer_norm_rows" if anchor == "LayerNormalization" else "gemm", "gemm"], families


def test_precedence_a_broadcast_activation_ends_the_chain():
    """LayerNorm -> ``* gate`` with ``gate`` an activation ``[1, 1, C]`` (a per-sample channel gate
    on tokens): a row kernel reads operands of its output's shape only, so the multiply stays a
    kernel of its own (``token_elementwise``), after the norm's (its Add before is fused)."""
    rng = np.random.default_rng(4)
    c = 12
    inits = {"w0": rng.standard_normal((c, c)) / np.sqrt(c), "g": np.ones(c), "b": np.zeros(c), "wg": rng.standard_normal((c, c)),
             "t2": rng.standard_normal(c)}
    nodes = [node("MatMul", ["x", "w0"], ["m0"]), node("LayerNormalization", ["m0", "g", "b"], ["l"], axis=-1),
             node("Add", ["l", "t2"], ["a"]), node("ReduceMean", ["m0"], ["pooled"], axes=[1]), node("MatMul", ["pooled", "wg"], ["gate"]),
             node("Mul", ["a", "gate"], ["y"])]
    ops = _run(_model(nodes, {k: np.asarray(v, np.float32) for k, v in inits.items()}, {"x": (1, 10, c)}), {"x": (1, 10, c)})
    assert "layer_norm_rows" in ops and len(ops) == 5, ops  # gemm, norm(+add), mean, gemm, multiply


def _map_token_block(chain: bool, c=8, size=4, side=False):
    """x [1, C, H, W] -> 1x1 conv -> tokens [1, HW, C] -> LayerNorm -> (``* s2 + t2``) -> Linear -> y:
    tokens made from a map (``side``: the map also read by a 1x1 conv, a second output, so it is
    held blocked)."""
    rng, inits = np.random.default_rng(5), {}
    inits.update(g=1 + 0.3 * rng.standard_normal(c), b=0.3 * rng.standard_normal(c), w1=rng.standard_normal((c, 12)) / np.sqrt(c),
                 b1=rng.standard_normal(12), s2=rng.standard_normal(c), t2=rng.standard_normal(c))
    nodes = [conv_node(rng, inits, "x", "d", c, c, k=1), node("Reshape", ["d", "shape"], ["r"]),
             node("Transpose", ["r"], ["t"], perm=[0, 2, 1]), node("LayerNormalization", ["t", "g", "b"], ["l"], axis=-1, epsilon=1e-6)]
    if chain:
        nodes += [node("Mul", ["l", "s2"], ["m"]), node("Add", ["m", "t2"], ["a"])]
    nodes += [node("MatMul", ["a" if chain else "l", "w1"], ["mm"]), node("Add", ["mm", "b1"], ["y"])]
    if side:
        nodes.append(conv_node(rng, inits, "d", "side", c, c, k=1))
    inits = {k: np.asarray(v, np.float32) for k, v in inits.items()} | {"shape": np.array([1, c, size * size], np.int64)}
    return _model(nodes, inits, {"x": (1, c, size, size)}, outputs=("y", "side") if side else ("y",))


def test_precedence_layer_norm_conv_before_the_rows_rule():
    """Tokens of a map held blocked (the map's other reader is a conv), LayerNorm read alone by a
    Linear: on the H200 the ``layer_norm_conv`` pattern (tried before every rule) folds the norm into
    the Linear's 1x1 conv, no norm kernel; PoCL (no fold) runs the norm. Tokens only the norm reads
    are written plain by the conv on both profiles (a last-axis norm reads either form:
    ``map_boundary``), and the rows rule takes the norm, with a chain after it too: one row kernel
    between the conv and the GEMM, with no layout transform; on the H200 the plain tokens' norm read
    only by the Linear folds into its tiled GEMM instead (``layer_norm_gemm``)."""
    folded = plan_kernels(_map_token_block(False, side=True), get_profile("nvidia-h200"))
    assert folded[:3] == ["conv2d_nchw4c"] * 3 and not any(k.startswith("layer_norm") for k in folded), folded
    assert "layer_norm_channels" in plan_kernels(_map_token_block(False, side=True), get_profile("pocl"))
    for profile, gemm in (("pocl", "gemm"), ("nvidia-h200", "gemm_tiled")):  # the profile's GEMM kernel
        for chain in (False, True):
            norm = [] if profile == "nvidia-h200" and not chain else ["layer_norm_rows"]
            assert plan_kernels(_map_token_block(chain), get_profile(profile)) == ["conv2d_nchw4c", *norm, gemm]


def test_kernel_check_refuses_a_row_kernels_expression():
    """``tir-adreno kernel --check`` has no NumPy reference for a row kernel's chain (its info
    records the expression as text): one clear error naming it, not a wrong comparison."""
    from tir_adreno.tools.workbench import WorkbenchError, reference_case

    info = {"op": "nn.softmax", "inputs": [[1, 10, 12]], "output": [1, 10, 12],
            "attrs": {"axis": 2, "epilogue": {"bias": False, "activation": None, "expr": "multiply(x, 0.5)"}}}
    with pytest.raises(WorkbenchError, match=r"no NumPy reference for an epilogue expression \(multiply\(x, 0.5\)\)"):
        reference_case(info, np.random.default_rng(0))
