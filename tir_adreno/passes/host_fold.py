"""Constant folding on the host, for every op: what ``relax.transform.FoldConstant`` leaves.

``FoldConstant`` folds only ops that ``LegalizeOps`` can legalize. TVM 0.27 has ops without a
legalization (``relax.cumsum``, ``relax.sort``, ... are dispatched to target kernels by
``relax.backend.DispatchSortScan``), so a call whose inputs are all constants (EdgeNeXt's
positional encoding: ``cumsum`` over a constant mask) would reach the executor as an op it
cannot run. Here each such call is evaluated once with the Relax VM on the CPU (LLVM) and
replaced by its value; ``FoldConstant`` then folds what the value feeds. A call the VM cannot
evaluate is left as it is (``compiler.unsupported_ops`` names it).
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.analysis import remove_all_unused

#: Rounds of host evaluation + FoldConstant (each round folds one more layer of a constant
#: chain whose ops FoldConstant cannot fold itself).
MAX_ROUNDS = 16


def _is_constant(arg) -> bool:
    if isinstance(arg, relax.Tuple):
        return all(_is_constant(f) for f in arg.fields)
    # tensors (GenericConst), prim values, strings and dtypes are all tvm.ir.expr.Constant in TVM 0.27
    return isinstance(arg, (tvm.ir.expr.Constant, relax.ShapeExpr))


def _static_tensor(call) -> bool:
    ty = call.ty
    shape = getattr(ty, "shape", None)
    return isinstance(ty, relax.TensorType) and isinstance(shape, relax.ShapeExpr) and all(
        isinstance(d, tvm.tirx.IntImm) for d in shape.values)


def is_constant_call(call) -> bool:
    """A call of a Relax op (not ``call_tir`` and kin) on constants only, giving one static tensor."""
    return (isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op) and not call.op.name.startswith("relax.call_")
            and len(call.args) > 0 and all(_is_constant(a) for a in call.args) and _static_tensor(call))


def evaluate_on_host(call):
    """The value of ``call`` (a NumPy array) computed by the Relax VM on the CPU, or None when TVM
    cannot build it there."""
    bb = relax.BlockBuilder()
    with bb.function("main", []):
        bb.emit_func_output(bb.emit(call))
    target = tvm.target.Target("llvm")
    try:
        with target:
            mod = relax.backend.DispatchSortScan()(bb.get())
            mod = relax.transform.LegalizeOps()(mod)
        executable = tvm.compile(mod, target=target)
        value = relax.VirtualMachine(executable, tvm.cpu())["main"]()
    except tvm.error.TVMError:
        return None
    return value.numpy()


@relax.expr_functor.mutator
class _HostFolder(relax.PyExprMutator):
    """Replaces each constant call that ``FoldConstant`` left by its value."""

    def __init__(self, mod):
        super().__init__(mod)
        self.folded = 0

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not is_constant_call(call):
            return call
        value = evaluate_on_host(call)
        if value is None:
            return call
        self.folded += 1
        return relax.const(value, str(call.ty.dtype))


def _inputs(call) -> list:
    """The arguments of ``call`` that FoldConstant needs constant: a ``call_tir``'s tensors, an op's all."""
    if isinstance(call.op, tvm.ir.Op) and call.op.name.startswith("relax.call_"):
        return list(call.args[1:2])
    return list(call.args)


def may_fold(mod: tvm.IRModule) -> bool:
    """Whether some call of ``mod``'s Relax functions has only constant inputs (or a var bound
    to one, which FoldConstant inlines): False means that FoldConstant would fold nothing (it
    would only remove unused bindings, :func:`remove_unused`). It legalizes every op of a
    dataflow block only to find that out (for ResNet-50: 0.35 s of TE and PrimFunc
    construction), so this walk spares a warm recompile that. Anything this walk does not know
    (control flow, a binding of another kind) answers True."""
    for func in mod.functions.values():
        if not isinstance(func, relax.Function):
            continue
        if not isinstance(func.body, relax.SeqExpr):
            return True
        constant_vars = set()

        def constant(expr) -> bool:
            if isinstance(expr, relax.Tuple):
                return all(constant(f) for f in expr.fields)
            if isinstance(expr, relax.TupleGetItem):
                return constant(expr.tuple_value)
            return _is_constant(expr) or expr in constant_vars

        for block in func.body.blocks:
            for binding in block.bindings:
                value = binding.value
                if isinstance(value, relax.Call):
                    if all(constant(a) for a in _inputs(value)):
                        return True
                elif isinstance(value, (relax.Var, relax.Tuple, relax.TupleGetItem)) or _is_constant(value):
                    if constant(value):
                        constant_vars.add(binding.var)
                else:
                    return True  # control flow, a nested function, ...: let FoldConstant look
    return False


def remove_unused(mod: tvm.IRModule) -> tvm.IRModule:
    """What ``FoldConstant`` does to a module in which it folds nothing: every Relax function
    through ``RemoveAllUnused`` (an ONNX batch norm's unused mean and variance outputs go)."""
    functions = {gv: remove_all_unused(f) if isinstance(f, relax.Function) else f for gv, f in mod.functions.items()}
    return tvm.IRModule(functions, attrs=mod.attrs)


def fold_constants(mod: tvm.IRModule) -> tvm.IRModule:
    """``FoldConstant``, with the calls it cannot fold evaluated on the host, until nothing changes."""
    if not may_fold(mod):
        return remove_unused(mod)
    mod = relax.transform.FoldConstant()(mod)
    for _ in range(MAX_ROUNDS):
        folder = _HostFolder(mod)
        main = folder.visit_expr(mod["main"])
        if not folder.folded:
            break
        functions = {gv: (main if gv.name_hint == "main" else f) for gv, f in mod.functions.items()}
        mod = tvm.IRModule(functions, attrs=mod.attrs)
        mod = relax.transform.FoldConstant()(mod)
    return mod
