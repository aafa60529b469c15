"""Nothing a legal model holds crashes the executor (issue 21): an op on constants only is folded
at compile time even when TVM cannot legalize it (``relax.cumsum``: EdgeNeXt's positional
encoding over a constant mask), and an op that becomes no kernel is named in one line at compile
time, before any kernel is built (exit 2 at the CLI)."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from helpers.cli import assert_user_error, cli
from helpers.onnx_graphs import check_pattern, pattern_graph
from tir_adreno import compile_model
from tir_adreno.compiler import UnsupportedOpError, import_model
from tir_adreno.passes.host_fold import fold_constants


def _with_axis(model, axis: int):
    model.graph.initializer.append(numpy_helper.from_array(np.array(axis, np.int64), "axis"))
    return model


def _constant_cumsum_graph():
    """y = relu(x + cumsum(mask, axis=1)) with a constant mask of the input's shape (588 bytes: larger
    than the import's constant folding takes, as EdgeNeXt's positional encoding is, so it reaches
    TVM): the cumsum folds, the add and relu are one kernel (on the plain model input: the layout
    planner packs nothing)."""
    mask = np.random.default_rng(3).uniform(0.5, 1.5, (1, 3, 7, 7))
    nodes = [helper.make_node("CumSum", ["mask", "axis"], ["cs"]), helper.make_node("Add", ["x", "cs"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    return _with_axis(pattern_graph(nodes, {"mask": mask}), 1)


def test_cumsum_of_a_constant_folds_at_compile_time():
    assert check_pattern(_constant_cumsum_graph()) == ["elementwise_plain"]


def test_fold_constants_evaluates_what_fold_constant_cannot():
    mod, _ = import_model(_constant_cumsum_graph())
    ops = lambda m: [getattr(b.value.op, "name", "") for blk in m["main"].body.blocks for b in blk.bindings]  # noqa: E731
    assert "relax.cumsum" in ops(mod)
    assert "relax.cumsum" not in ops(fold_constants(mod))


def _activation_cumsum_graph():
    model = _with_axis(pattern_graph([helper.make_node("CumSum", ["x", "axis"], ["y"])], {}), 2)
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 7, 7]))  # no importer warning
    return model


def test_an_op_without_a_kernel_is_named_at_compile_time():
    built = []
    with pytest.raises(UnsupportedOpError, match=r"no kernel for 'relax\.cumsum' \(1 call\(s\), the first on float32\[1, 3, 7, 7\]\)"):
        compile_model(_activation_cumsum_graph(), progress=built.append)
    assert not any("build" in m for m in built), built


def test_cli_names_the_op_in_one_line(tmp_path):
    path = tmp_path / "cumsum.onnx"
    path.write_bytes(_activation_cumsum_graph().SerializeToString())
    assert_user_error(cli("run", str(path)), "no kernel for 'relax.cumsum'")


def _same(a, b) -> bool:
    from tvm import ir

    try:
        ir.assert_structural_equal(a, b)
        return True
    except ValueError:
        return False


def _batch_norm_graph():
    """max pool -> batch norm -> relu: nothing to fold, but the batch norm's mean and variance
    outputs are bound and unused (FoldConstant removes them; the affine rule needs them gone)."""
    rng = np.random.default_rng(2)
    inits = {k: rng.uniform(0.5, 1.5, 6) for k in ("s", "b", "m", "v")}
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2]),
             helper.make_node("BatchNormalization", ["p", "s", "b", "m", "v"], ["n"]), helper.make_node("Relu", ["n"], ["y"])]
    return pattern_graph(nodes, inits, channels=6)


def test_fold_constant_is_skipped_only_where_it_would_fold_nothing():
    """``may_fold`` spares a warm compile FoldConstant's legalization of every op (0.35 s on
    ResNet-50): False on the built-in models and a batch norm after a pool, whose every op reads
    an activation, and ``fold_constants`` then gives what FoldConstant gives (unused bindings
    removed); True on a graph with a call on constants only (the cumsum) and on one whose
    constant input is a var bound to a constant (FoldConstant inlines it)."""
    from tvm import relax

    from tir_adreno.frontend import models
    from tir_adreno.passes.host_fold import may_fold

    batch_norm, _ = import_model(_batch_norm_graph())
    for mod in (models.get_model("resnet18", image_size=32, num_classes=10),
                models.get_model("mobilenet_v2", image_size=32, num_classes=10), batch_norm):
        assert not may_fold(mod)
        assert _same(fold_constants(mod), relax.transform.FoldConstant()(mod))
    assert not _same(fold_constants(batch_norm), batch_norm)  # the unused outputs went
    mod, _ = import_model(_constant_cumsum_graph())
    assert may_fold(mod)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            c = bb.emit(relax.const(np.ones((1, 4), "float32")))  # a var bound to a constant
            y = bb.emit(relax.op.add(c, relax.const(np.ones((1, 4), "float32"))))
            out = bb.emit_output(relax.op.multiply(x, y))
        bb.emit_func_output(out)
    mod = bb.get()
    assert may_fold(mod) and not _same(relax.transform.FoldConstant()(mod), mod)
