"""Build PrimFuncs into a :class:`~tir_adreno.runtime.bundle.KernelModule`.

TVM lowers each PrimFunc (the Adreno texture pipeline for the texture target,
TVM's default pipeline for plain OpenCL) and emits OpenCL C. The wheel has no
OpenCL runtime, so instead of a runtime module we read the launch plan from
the lowered host function: its ``call_ffi_kernel`` calls name each kernel, its
buffer arguments and its grid, in launch order.
"""

from __future__ import annotations

import importlib

import tvm
from tvm import tirx

from tir_adreno.codegen import half_buffers
from tir_adreno.runtime import bounds, cache
from tir_adreno.runtime.bundle import FunctionPlan, KernelArg, KernelModule, Launch, TensorSpec
from tir_adreno.runtime.texture import is_texture_scope

#: Our kernels' target: Adreno OpenCL with texture scopes.
TEXTURE_TARGET = "qcom/adreno-opencl-texture"
#: Upstream TVM's generic OpenCL target (buffers only), the baseline we compare with.
OPENCL_TARGET = {"kind": "opencl"}

#: ``build(half=ALL_BUFFERS)``: every float32 buffer parameter of every function in half.
ALL_BUFFERS = "all"

_HOST = {"kind": "llvm"}
_memory_cache: dict[str, KernelModule] = {}


def as_target(target=None) -> tvm.target.Target:
    target = TEXTURE_TARGET if target is None else target
    if isinstance(target, tvm.target.Target):
        return target
    return tvm.target.Target(target)


def _as_module(func_or_mod) -> tvm.IRModule:
    if isinstance(func_or_mod, tvm.IRModule):
        return func_or_mod
    if isinstance(func_or_mod, tirx.PrimFunc):
        name = func_or_mod.attrs.get("global_symbol", "main") if func_or_mod.attrs else "main"
        return tvm.IRModule({str(name): func_or_mod.with_attr("global_symbol", str(name))})
    raise TypeError(f"expected a PrimFunc or IRModule, got {type(func_or_mod).__name__}")


def _unique_buffer_names(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with distinct parameter buffer names (the launch plan maps kernel
    arguments to parameters by name). Legalized ops can repeat names; TVMScript's
    printer renames repeats, so a print/parse round trip fixes them."""
    names = [getattr(p, "name", "") for p in func.params]
    if len(set(names)) == len(names):
        return func
    return tvm.script.from_source(func.script())


def _param_specs(func: tirx.PrimFunc, half: frozenset = frozenset()) -> tuple[TensorSpec, ...]:
    specs = []
    for i, buf in enumerate(func.params):
        if not hasattr(buf, "shape"):
            raise ValueError(f"parameter {buf.name} is not a buffer; only buffer parameters are supported")
        shape = tuple(int(d) for d in buf.shape)
        dtype, scope = str(buf.dtype), str(buf.scope())
        storage = "float16" if (half == ALL_BUFFERS or i in half) and dtype == "float32" and not is_texture_scope(scope) else None
        specs.append(TensorSpec(buf.name, shape, dtype, scope, storage))
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"buffer names must be unique, got {names}")
    return tuple(specs)


def _children(node):
    for attr in ("seq", "body", "then_case", "else_case", "value", "condition", "args"):
        child = getattr(node, attr, None)
        if child is None:
            continue
        if isinstance(child, (list, tuple)) or type(child).__name__ == "Array":
            yield from child
        else:
            yield child


def _ffi_kernel_calls(stmt):
    """All ``call_ffi_kernel`` calls under ``stmt``, in program order."""
    stack, calls = [stmt], []
    while stack:
        node = stack.pop()
        if isinstance(node, tvm.ir.Call) and getattr(node.op, "name", "") == "tirx.call_ffi_kernel":
            calls.append(node)
            continue
        if isinstance(node, tvm.ir.Call) and getattr(node.op, "name", "") == "tirx.tvm_call_packed":
            fname = node.args[0].value
            if fname != "__tvm_set_device":
                raise NotImplementedError(
                    f"lowered host code calls {fname!r} (workspace or device API): "
                    "kernels must use only their parameters and local/shared memory"
                )
        stack.extend(reversed(list(_children(node))))
    return calls


def _int(expr) -> int:
    if isinstance(expr, tirx.IntImm):
        return int(expr.value)
    raise NotImplementedError(f"launch extent {expr} is not a constant; only static shapes are supported")


def _launch(call, params: tuple[TensorSpec, ...]) -> Launch:
    kernel = call.args[0].value
    launch_params = [str(p) for p in call.attrs.launch_params]
    if any(not p.startswith(("blockIdx.", "threadIdx.")) for p in launch_params):
        raise NotImplementedError(f"unsupported launch parameters {launch_params}")
    n_ext = len(launch_params)
    arg_exprs = call.args[1 : len(call.args) - n_ext]
    extents = [_int(e) for e in call.args[len(call.args) - n_ext :]]
    index = {p.name: i for i, p in enumerate(params)}
    args = []
    for expr in arg_exprs:
        if isinstance(expr, tvm.ir.Call) and expr.op.name == "tirx.buffer_data":
            expr = expr.args[0]
        if isinstance(expr, tvm.ir.Var):
            if expr.name not in index:
                raise NotImplementedError(f"kernel {kernel} uses buffer {expr.name}, which is not a parameter")
            args.append(KernelArg("tensor", param=index[expr.name]))
        elif isinstance(expr, (tirx.IntImm, tirx.FloatImm)):
            args.append(KernelArg("scalar", dtype=str(expr.dtype), value=expr.value))
        else:
            raise NotImplementedError(f"kernel {kernel}: unsupported argument {expr}")
    groups, threads = [1, 1, 1], [1, 1, 1]
    for tag, extent in zip(launch_params, extents):
        kind, axis = tag.split(".")
        (groups if kind == "blockIdx" else threads)["xyz".index(axis)] = extent
    return Launch(
        kernel,
        tuple(args),
        tuple(g * t for g, t in zip(groups, threads)),
        tuple(threads),
    )


def lower_device(func_or_mod, target=None):
    """(host module, device module) after the target's TIR pipeline: the kernels as they go to
    OpenCL codegen (``tir-adreno kernel --show lowered``)."""
    return _lower_modules(_as_module(func_or_mod), as_target(target))[:2]


def _lower(mod: tvm.IRModule, target: tvm.target.Target, specs: dict | None = None):
    """(lowered host module, OpenCL C). ``specs`` (function -> its parameters' TensorSpecs): the
    kernels keep the buffers whose storage is "float16" in half (:mod:`.half_buffers`)."""
    host, device_mod, device_target = _lower_modules(mod, target)
    halves = _half_positions(host, specs or {})
    if halves:
        keeps_half = "float16" in device_mod.script()  # kernels of their own in half keep TVM's guard
        device_mod = tvm.IRModule({gv: half_buffers.half_params(f, halves.get(gv.name_hint, ()), gv.name_hint)
                                   for gv, f in device_mod.functions.items()})
    source = tvm.get_global_func("target.build.opencl")(device_mod, device_target).inspect_source()
    if halves and not keeps_half:
        source = half_buffers.strip_fp16_guard(source)
    return host, source


def _half_positions(host: tvm.IRModule, specs: dict) -> dict[str, tuple[int, ...]]:
    """Device kernel -> the positions of its arguments that are half-stored buffers, from the
    launches of the lowered host functions."""
    positions: dict[str, tuple[int, ...]] = {}
    for gv, func in host.functions.items():
        params = specs.get(gv.name_hint)
        if not params or not any(p.storage and not is_texture_scope(p.scope) for p in params):
            continue
        for launch in (_launch(c, params) for c in _ffi_kernel_calls(func.body)):
            half = tuple(i for i, a in enumerate(launch.args)
                         if a.kind == "tensor" and params[a.param].storage and not is_texture_scope(params[a.param].scope))
            if positions.setdefault(launch.kernel, half) != half:
                raise NotImplementedError(f"kernel {launch.kernel} is launched on half and float32 buffers alike")
    return {k: v for k, v in positions.items() if v}


def _lower_modules(mod: tvm.IRModule, target: tvm.target.Target):
    target = target.with_host(tvm.target.Target(_HOST))
    mod = tirx.transform.BindTarget(target)(mod)
    pipeline = tirx.get_default_tir_pipeline(target)
    if isinstance(pipeline, tuple):  # the generic pipeline comes with its finalizers, Adreno's alone
        pipeline = pipeline[0]
    with target:
        mod = pipeline(mod)
    host, devices = importlib.import_module("tvm.tirx.build").split_host_device_mods(mod)
    if len(devices) != 1:
        raise RuntimeError(f"expected one device module, got {len(devices)}")
    (device_target, device_mod), = devices.items()
    device_mod = tirx.compilation_pipeline.finalize_device_passes()(device_mod)
    return host, device_mod, device_target


def _check_bounds(check_bounds) -> bool:
    return bounds.enabled() if check_bounds is None else bool(check_bounds)


def build(func_or_mod, target=None, check_bounds: bool | None = None, half: frozenset = frozenset()) -> KernelModule:
    """Compile a PrimFunc (or an IRModule of PrimFuncs) to OpenCL C and a launch plan.

    ``target`` is :data:`TEXTURE_TARGET` (default) or any OpenCL target, e.g.
    :data:`OPENCL_TARGET`. Every function must have static shapes and buffer
    parameters only. ``check_bounds`` (default ``$TIR_ADRENO_CHECK_BOUNDS``)
    instruments every image access (:mod:`tir_adreno.runtime.bounds`): a launch that
    reads or writes outside an image raises :class:`~tir_adreno.runtime.bounds.BoundsError`.
    ``half``: positions of parameters kept in half when they are float32 buffers
    (``TensorSpec.storage`` "float16"; the kernels convert with ``vload_half``/``vstore_half``:
    precision "float16_acc32" on buffers; other positions in it are ignored), or
    :data:`ALL_BUFFERS`.
    """
    mod = _as_module(func_or_mod)
    mod = tvm.IRModule({gv: _unique_buffer_names(f) for gv, f in mod.functions.items()})
    target = as_target(target)
    specs = {gv.name_hint: _param_specs(f, half) for gv, f in mod.functions.items()}
    host, source = _lower(mod, target, specs)
    functions = {}
    for gv, func in host.functions.items():
        name = gv.name_hint
        if name not in specs:
            continue
        launches = tuple(_launch(c, specs[name]) for c in _ffi_kernel_calls(func.body))
        functions[name] = FunctionPlan(name, specs[name], launches)
    missing = set(specs) - set(functions)
    if missing:
        raise RuntimeError(f"no host function found for {sorted(missing)}")
    module = KernelModule(source, functions, str(target.kind.name) + ":" + ",".join(target.keys))
    return bounds.instrument(module) if _check_bounds(check_bounds) else module


def module_key(func_or_mod, target=None, check_bounds: bool | None = None, half: frozenset = frozenset()) -> str:
    """Cache key of a build: the TVMScript text, the target, the TVM version, the sanitizer option
    and the half-stored buffers."""
    return script_key(module_script(func_or_mod), target, check_bounds, half)


def module_script(func_or_mod) -> str:
    """The TVMScript a build is keyed on (of the module a PrimFunc is built in)."""
    return _as_module(func_or_mod).script()


def script_key(script: str, target=None, check_bounds: bool | None = None, half: frozenset = frozenset()) -> str:
    """:func:`module_key` from the module's TVMScript text (``IRModule.script()``), no PrimFunc needed."""
    parts = ("bundle", tvm.__version__, as_target(target).export(), script)
    if half:
        parts += ("half buffers", half if half == ALL_BUFFERS else ",".join(str(i) for i in sorted(half)))
    return cache.key(*parts, "check_bounds") if _check_bounds(check_bounds) else cache.key(*parts)


def _bundle_path(key: str):
    return cache.cache_dir() / "bundles" / f"{key}.json"


def cached_bundle(key: str, use_disk: bool = True) -> KernelModule | None:
    """The bundle built under ``key`` (:func:`module_key`) from memory or disk; None on a miss
    (missing, corrupt, another key's)."""
    if key in _memory_cache:
        return _memory_cache[key]
    payload = cache.read(_bundle_path(key), key) if use_disk else None
    if payload is None:
        return None
    try:
        module = KernelModule.from_json(payload.decode())
    except (ValueError, KeyError, UnicodeDecodeError):
        return None
    _memory_cache[key] = module
    return module


def build_cached(func_or_mod, target=None, use_disk: bool = True, check_bounds: bool | None = None,
                 half: frozenset = frozenset()) -> KernelModule:
    """:func:`build` with an in-process cache and an on-disk bundle cache."""
    check_bounds = _check_bounds(check_bounds)
    key = module_key(func_or_mod, target, check_bounds, half)
    module = cached_bundle(key, use_disk)
    if module is None:
        module = build(func_or_mod, target, check_bounds, half)
        if use_disk:
            cache.store(_bundle_path(key), module.to_json().encode(), key)
        _memory_cache[key] = module
    return module
