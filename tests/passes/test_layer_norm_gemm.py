"""The ``layer_norm_gemm`` pattern: a LayerNormalization over the last axis of plain tokens
``[1, L, C]`` read only by a MatMul with a constant folds into the tiled GEMM on the H200 profile
(no ``layer_norm_rows`` kernel, one GEMM whose op info records ``norm_eps``, no layout transform),
its bias, a per-column scale and GELU in the same kernel; a norm with a second reader stays apart.
onnx.helper graphs against onnxruntime (random inputs; outputs poisoned by ``run``)."""

import json

import numpy as np
import pytest
from onnx import TensorProto, helper

from helpers.onnx_graphs import LAYOUT_KERNELS, PATTERN_RTOL, plan_kernels
from tir_adreno.strategy.profile import get_profile

node = helper.make_node
H200 = "nvidia-h200"


def _model(nodes, inits, inputs, outputs=("y",), opset=20):
    tensors = [helper.make_tensor(k, TensorProto.FLOAT, a.shape, np.asarray(a, np.float32).ravel().tolist()) for k, a in inits.items()]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(s)) for k, s in inputs.items()],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], tensors)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _block(c=18, n=30, gelu=True, scale=False, side=False, seed=3):
    """x [1, L, C] -> LayerNormalization(axis=-1) -> MatMul W [C, N] -> Add b (-> Mul s) (-> Gelu) -> y;
    ``side``: the norm's output is also a second output (two readers)."""
    rng = np.random.default_rng(seed)
    inits = {"g": 1 + 0.3 * rng.standard_normal(c), "be": 0.3 * rng.standard_normal(c), "w": rng.standard_normal((c, n)) / np.sqrt(c),
             "b": rng.standard_normal(n), "s": 1 + 0.5 * rng.standard_normal(n)}
    nodes = [node("LayerNormalization", ["x", "g", "be"], ["l"], axis=-1, epsilon=1e-5), node("MatMul", ["l", "w"], ["m"]),
             node("Add", ["m", "b"], ["a"])]
    last = "a"
    if scale:
        nodes.append(node("Mul", [last, "s"], ["sc"]))
        last = "sc"
    if gelu:
        nodes.append(node("Gelu", [last], ["ge"]))
        last = "ge"
    nodes.append(node("Identity", [last], ["y"]))
    return _model(nodes, inits, {"x": (1, 13, c)}, outputs=("y", "l") if side else ("y",))


def _run(model, profile=H200, mean=0.0):
    """The model's kernels after a checked run on ``profile``'s plan (inputs ``mean + N(0, 1)``)."""
    from tir_adreno import compile_model
    from tir_adreno.reference import reference_outputs, relative_error

    rng = np.random.default_rng(7)
    x = model.graph.input[0]
    shape = [d.dim_value for d in x.type.tensor_type.shape.dim]
    feeds = {x.name: (mean + rng.standard_normal(shape)).astype(np.float32)}
    compiled = compile_model(model, profile=profile, progress=lambda _: None)
    outs = compiled.run(feeds, profile=True)
    for out, ref in zip(outs, reference_outputs(model, feeds)):
        assert relative_error(out, ref) <= PATTERN_RTOL, relative_error(out, ref)
    return [r["op"] for r in compiled.profile()]


def _op_infos(model, profile) -> list[dict]:
    """The op info of each kernel ``model`` launches on ``profile``, in order (lowered, nothing built)."""
    from tvm import relax

    from tir_adreno.compiler import import_model, lower
    from tir_adreno.passes.kernel_index import OP_ATTR

    mod, _ = import_model(model)
    lowered = lower(mod, get_profile(profile), lazy=True)
    infos = []

    def visit(e):
        if isinstance(e, relax.Call) and getattr(e.op, "name", "") == "relax.call_tir":
            attrs = lowered[e.args[0]].attrs
            infos.append(json.loads(str(attrs[OP_ATTR])) if attrs is not None and OP_ATTR in attrs else {})

    relax.analysis.post_order_visit(lowered["main"].body, visit)
    return infos


@pytest.mark.parametrize("gelu, scale", [(True, False), (False, True)], ids=["bias_gelu", "bias_scale"])
def test_token_norm_folds_into_the_tiled_gemm(gelu, scale):
    """H200: one ``gemm_tiled`` launch (its op info: ``norm_eps``, the bias and GELU in the epilogue),
    no norm kernel, no layout transform; the same output as onnxruntime. PoCL (the register GEMM,
    no fold) keeps the norm's row kernel."""
    model = _block(gelu=gelu, scale=scale)
    assert plan_kernels(model, get_profile(H200)) == ["gemm_tiled"]
    (info,) = _op_infos(model, H200)
    assert info["op"] == "matmul" and info["attrs"]["norm_eps"] == pytest.approx(1e-5), info
    epilogue = info["attrs"]["epilogue"]
    assert epilogue["bias"] and ("gelu" in str(epilogue.get("expr")) if gelu else epilogue.get("expr") is None), info
    ops = _run(model)
    assert ops == ["gemm_tiled"] and not any(op.startswith(LAYOUT_KERNELS) for op in ops), ops
    assert plan_kernels(model, get_profile("pocl")) == ["layer_norm_rows", "gemm"]


def test_token_norm_with_a_large_mean_folds_exactly():
    """Tokens at 100 +- 1 (C = 18, N = 30): the shifted statistics keep the folded norm within the
    pattern tolerance of onnxruntime's."""
    assert _run(_block(gelu=False), mean=100.0) == ["gemm_tiled"]


def test_token_norm_with_two_readers_stays_apart():
    """The norm's output is also a graph output: it is computed (``layer_norm_rows``), the GEMM
    reads it unfolded; both outputs match onnxruntime."""
    model = _block(side=True)
    assert plan_kernels(model, get_profile(H200)) == ["layer_norm_rows", "gemm_tiled"]
    assert all("norm_eps" not in info.get("attrs", {}) for info in _op_infos(model, H200))
    assert _run(model) == ["layer_norm_rows", "gemm_tiled"]


def test_kernel_check_has_a_reference_for_the_folded_gemm(device):
    """``tir-adreno kernel --check``'s reference of the fold's op info (``info["gemm"]["norm_eps"]``):
    the kernel's inputs (A, the folded weight, its column sums, the bias) and ``LN(A) @ B + bias``,
    which the kernel matches."""
    from helpers.numeric import assert_close, run_kernel
    from primfuncs import gemm
    from primfuncs.epilogue import Epilogue
    from tir_adreno.tools.workbench import reference_case

    (info,) = _op_infos(_block(gelu=False), H200)
    inputs, ref, channels = reference_case(info, np.random.default_rng(2))
    g = info["gemm"]
    assert channels is None and len(inputs) == 4 and g["norm_eps"] == pytest.approx(1e-5)
    func = gemm.gemm(g["a_shape"], g["b_shape"], config=gemm.GemmConfig(1, 1, 8, 8, tiled=True, k_chunk=4), epilogue=Epilogue(bias=True),
                     norm_eps=g["norm_eps"])
    assert_close(run_kernel(device, func, *[np.asarray(x, np.float32) for x in inputs]), ref, 1e-4)
