"""Storage planning: where a lowered module's tensors may be kept in half (``float16_acc32``: float32
kernels on half images and buffers), and which bindings only rename, pack or view tensors.

``plan_module`` (``tir_adreno.compiler``) asks :func:`half_buffers` per call of our kernels: the
arguments only our kernels touch may be stored in half; the model's inputs and outputs, every tensor
an upstream kernel reads or writes, and the float32 statistics a kernel pins (``FLOAT32_ATTR``) stay
float32.
"""

from __future__ import annotations

import tvm
from tvm import relax

from tir_adreno.passes import FLOAT32_ATTR, OURS_ATTR


def is_ours(prim) -> bool:
    """Whether our pass emitted ``prim`` (importer-made PrimFuncs, e.g. from emit_te, are upstream's)."""
    return prim.attrs is not None and bool(prim.attrs.get(OURS_ATTR, False))


#: Calls the executor runs without a kernel: a buffer seen in another shape (``Rewriter.plain``
#: writes a model's ``[N, C]`` output as a view of its ``[N, C/4, 1, 1, 4]`` buffer) and the
#: null argument LegalizeOps gives that view.
VIEW_OPS = ("relax.memory.view", "relax.null_value")


def bind_alias(env: dict, binding) -> bool:
    """Bind ``binding.var`` in ``env`` (relax var -> tensor) when its value only renames, packs,
    unpacks or views tensors (the view's shape is the output's: ``compiler._output_info``); False
    for any other value."""
    value = binding.value
    op = getattr(getattr(value, "op", None), "name", "") if isinstance(value, relax.Call) else ""
    if op in VIEW_OPS:
        env[binding.var] = env[value.args[0]] if op == "relax.memory.view" else None
    elif isinstance(value, relax.Var):
        env[binding.var] = env[value]
    elif isinstance(value, relax.TupleGetItem):
        env[binding.var] = env[value.tuple_value][int(value.index)]
    elif isinstance(value, relax.Tuple):
        env[binding.var] = [env[f] for f in value.fields]
    else:
        return False
    return True


def half_buffers(mod: tvm.IRModule, bindings) -> dict:
    """Per call of our kernels (its bound var): the positions of its arguments (outputs after the
    inputs) that may be stored in half, i.e. tensors that only our kernels touch. The model's
    inputs and outputs and every tensor an upstream kernel reads or writes stay float32: at that
    boundary our kernel reads or writes float32, converting itself (``build(half=...)``). So do the
    parameters a kernel call marks with ``FLOAT32_ATTR`` (statistics passed between two kernels)."""
    func = mod["main"]
    env = {p: ("input", i) for i, p in enumerate(func.params)}
    pinned, calls = set(env.values()), []
    for b in bindings:
        v = b.value
        if bind_alias(env, b):
            continue
        if isinstance(v, relax.Call) and getattr(v.op, "name", "") == "relax.call_tir":
            fields = getattr(b.var.ty, "fields", None)
            outs = [(b.var, k) for k in range(len(fields) if fields is not None else 1)]
            env[b.var] = outs if fields is not None else outs[0]
            ids = [("const", a) if isinstance(a, tvm.ir.expr.GenericConst) else env[a] for a in v.args[1].fields] + outs
            prim = mod[v.args[0]]
            if not is_ours(prim):
                pinned.update(ids)
            elif prim.attrs is not None and FLOAT32_ATTR in prim.attrs:  # our kernel's float32 intermediates
                pinned.update(ids[int(k)] for k in prim.attrs[FLOAT32_ATTR])
            calls.append((b.var, ids))
    out = env[func.body.body] if isinstance(func.body.body, relax.Var) else [env[f] for f in func.body.body.fields]
    pinned.update(out if isinstance(out, list) else [out])
    return {var: frozenset(k for k, t in enumerate(ids) if t not in pinned) for var, ids in calls}
