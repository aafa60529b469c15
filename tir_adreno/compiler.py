"""Compile a model: import -> our Relax pass -> upstream for the rest -> kernels -> plan.

``compile_model`` takes an ONNX model (``ModelProto`` or path) or a Relax
``IRModule`` whose weights are bound as constants, and returns a
:class:`~tir_adreno.runtime.executor.CompiledModel` for one device.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

from tir_adreno.codegen import build
from tir_adreno.frontend import onnx_import
from tir_adreno.frontend.importer_defects import avoid_importer_defects
from tir_adreno.runtime import opencl as runtime
from tir_adreno.runtime.bundle import KernelModule
from tir_adreno.runtime.executor import Call, CompiledModel, Plan, TensorInfo
from tir_adreno.runtime.texture import is_texture_scope
from tir_adreno.strategy.profile import DeviceProfile, resolve, with_limits, with_placement, without_fusion
from tir_adreno.strategy.records import open_records
from tir_adreno.passes import CONFIG_ATTR, SOURCE_ATTR, dispatch_to_textures, kernel_index
from tir_adreno.passes.host_fold import fold_constants
from tir_adreno.passes.kernel_index import kernel_func
from tir_adreno.storage import VIEW_OPS, bind_alias, half_buffers, is_ours
from tir_adreno.strategy.precision import check_precision, half_storage
from tir_adreno.runtime.errors import UserError


class ModelError(UserError, ValueError):
    """The model cannot be read or imported."""


class UnsupportedOpError(ModelError):
    """The lowered model still calls an op that neither our pass nor TVM's legalization made a kernel of."""


def _upstream_rules():
    import tvm.s_tir.dlight as dl

    return dl.ApplyDefaultSchedule(
        dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()
    )


def load_onnx(model):
    """An ONNX ``ModelProto`` from a path or a ``ModelProto``; :class:`ModelError` when unreadable."""
    import onnx

    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        if not path.exists():
            raise ModelError(f"{path}: no such file")
        if path.stat().st_size == 0:
            raise ModelError(f"{path}: empty file, not an ONNX model")
        try:
            model = onnx.load(str(path))
        except Exception as err:  # onnx raises DecodeError and others
            raise ModelError(f"{path}: not an ONNX model ({type(err).__name__}: {err})") from None
        if not model.ir_version or not model.HasField("graph"):  # bytes protobuf happens to parse, e.g. a text file
            raise ModelError(f"{path}: not an ONNX model (no IR version or graph in it)")
    if not isinstance(model, onnx.ModelProto):
        raise ModelError(f"expected an ONNX ModelProto, a path or a Relax IRModule, got {type(model).__name__}")
    return model


def import_model(model, input_shapes: dict | None = None, shapes_hint: str = onnx_import.INPUT_SHAPES_HINT) -> tuple[tvm.IRModule, list[str]]:
    """(Relax module with bound weights, input names) from ONNX or Relax.

    ``input_shapes`` ({name: shape}) fixes ONNX inputs with symbolic dims (a
    named batch); shape arithmetic that becomes constant is folded first.
    ``shapes_hint`` is how the error for a missing shape tells the user to give one.
    """
    if isinstance(model, tvm.IRModule):
        if not any(gv.name_hint == "main" for gv in model.functions):
            raise ModelError("the Relax module has no 'main' function")
        if input_shapes:
            raise ModelError("input_shapes applies to ONNX models; bind a Relax module's shapes in its signature")
        return model, [p.name for p in model["main"].params]
    model = load_onnx(model)
    from tvm.relax.frontend.onnx import from_onnx

    try:
        shapes = onnx_import.input_shapes_of(model, input_shapes, shapes_hint)
    except ValueError as err:
        raise ModelError(str(err)) from None
    model = avoid_importer_defects(onnx_import.make_static(model, shapes))
    names = list(shapes)
    try:
        mod = from_onnx(model, shape_dict={n: list(s) for n, s in shapes.items()}, keep_params_in_input=False)
    except Exception as err:
        raise ModelError(f"TVM cannot import this ONNX model: {type(err).__name__}: {str(err).strip().splitlines()[-1][:300]}") from None
    return mod, names


def _target(ours: bool):
    """Our kernels use the Adreno texture target; the upstream baseline TVM's generic OpenCL."""
    return build.TEXTURE_TARGET if ours else build.OPENCL_TARGET


@dataclass(frozen=True)
class LowerContext:
    """What the lowering phases read: the device profile, whether buffers may hold what does not fit
    the images, whether our pass runs (False: the upstream baseline), the tuning records, the
    precision and whether indexed kernels become stubs (``passes.kernel_index``)."""

    profile: DeviceProfile
    allow_buffer: bool = True
    ours: bool = True
    records: object = None
    precision: str = "float32"
    lazy: bool = False


def _fold_constants(mod: tvm.IRModule, ctx: LowerContext) -> tvm.IRModule:
    """FoldConstant, plus the constant ops it cannot fold evaluated on the host."""
    return fold_constants(mod)


def _dispatch(mod: tvm.IRModule, ctx: LowerContext) -> tvm.IRModule:
    """Our pass (fusion patterns, then single-op rules): ops -> our texture kernels."""
    return dispatch_to_textures(mod, ctx.profile, ctx.allow_buffer, ctx.records, ctx.precision, ctx.lazy) if ctx.ours else mod


def _legalize(mod: tvm.IRModule, ctx: LowerContext) -> tvm.IRModule:
    """TVM's LegalizeOps for the ops our pass left."""
    return relax.transform.LegalizeOps()(mod)


def _schedule_upstream(mod: tvm.IRModule, ctx: LowerContext) -> tvm.IRModule:
    """dlight's default GPU schedules for the legalized PrimFuncs."""
    with build.as_target(_target(ctx.ours)):
        return _upstream_rules()(mod)


def _eliminate_dead_code(mod: tvm.IRModule, ctx: LowerContext) -> tvm.IRModule:
    """Bindings nothing reads, removed. CanonicalizeBindings first: a ``Split`` our pass lowers to
    one gather per part binds the parts as a tuple, and where a reader takes a part from the
    split's input instead (a concat gather reading the slice itself: MambaOut's gated block,
    EfficientViT-M0's cascaded heads), only the tuple still names that part's gather, which keeps
    it alive; with the tuple's items resolved, the unread gather goes."""
    return relax.transform.DeadCodeElimination()(relax.transform.CanonicalizeBindings()(mod))


#: The lowering, as named phases in order (the shape of TVM's ``relax/backend/adreno/pipeline.py``):
#: each ``phase(mod, ctx) -> mod``.
LOWER_PHASES = (
    ("fold_constants", _fold_constants),
    ("dispatch", _dispatch),
    ("legalize", _legalize),
    ("schedule_upstream", _schedule_upstream),
    ("eliminate_dead_code", _eliminate_dead_code),
)


def lower(mod: tvm.IRModule, profile: DeviceProfile, allow_buffer: bool = True, ours: bool = True, records=None,
          precision: str = "float32", lazy: bool = False) -> tvm.IRModule:
    """Our pass for ``profile`` (unless ``ours`` is False: the upstream baseline), then LegalizeOps
    and dlight for the rest: the phases of :data:`LOWER_PHASES`. ``records``: tuned conv choices
    (``records.Records``). ``lazy``: stubs for indexed kernels (``passes.kernel_index``), for
    :func:`plan_module` only."""
    ctx = LowerContext(profile, allow_buffer, ours, records, precision, lazy)
    for _name, phase in LOWER_PHASES:
        mod = phase(mod, ctx)
    return mod


def _shape_of(expr) -> str:
    ty = getattr(expr, "ty", None)
    shape = getattr(ty, "shape", None)
    dims = ", ".join(str(int(d)) if isinstance(d, tvm.tirx.IntImm) else str(d) for d in shape.values) if isinstance(shape, relax.ShapeExpr) else "?"
    return f"{getattr(ty, 'dtype', '')}[{dims}]"


def check_runnable(mod: tvm.IRModule) -> None:
    """:class:`UnsupportedOpError` (one line) when ``main`` of a lowered module still calls an op
    that is no kernel: the executor runs only ``call_tir``. Checked before any build."""
    left: dict[str, list] = {}
    for block in mod["main"].body.blocks:
        for b in block.bindings:
            value = b.value
            if isinstance(value, relax.Call) and getattr(value.op, "name", "") not in ("relax.call_tir", *VIEW_OPS):
                left.setdefault(getattr(value.op, "name", type(value.op).__name__), []).append(value)
    if not left:
        return
    op, calls = next(iter(left.items()))
    first = ", ".join(_shape_of(a) for a in calls[0].args if hasattr(getattr(a, "ty", None), "shape"))
    others = "".join(f"; also {other!r}" for other in list(left)[1:])
    raise UnsupportedOpError(
        f"no kernel for {op!r} ({len(calls)} call(s), the first on {first or 'no tensor'}): neither tir-adreno's pass "
        f"nor TVM's LegalizeOps lowers it and its inputs are not constants{others}")


def _const_array(expr) -> np.ndarray:
    # np.require, not np.ascontiguousarray: the latter turns a 0-d scalar (ReLU6's Clip bounds) into shape (1,)
    return np.require(expr.value.numpy(), requirements="C")


def _kernel_key(prim, target, half=frozenset()) -> str:
    """The plan's name of the kernel ``prim`` builds (its bundle key, sanitized or not), without
    parsing when ``prim`` is a stub (``passes.kernel_index``); ``half``: its half buffers."""
    if kernel_index.is_stub(prim):
        return build.script_key(kernel_index.entry_of(prim)["script"], target, False, half)
    return build.module_key(kernel_func(prim), target, False, half)


def _kernel_module(prim, target, half=frozenset()) -> KernelModule:
    """The built kernel of ``prim``: a stub's cached bundle, else built (a stub materialized)."""
    if kernel_index.is_stub(prim):
        module = build.cached_bundle(build.script_key(kernel_index.entry_of(prim)["script"], target, half=half))
        if module is not None:
            return module
        return build.build_cached(kernel_index.materialize(prim), target, half=half)
    return build.build_cached(kernel_func(prim), target, half=half)


def plan_module(mod: tvm.IRModule, input_names, progress=print, target=None, prims: dict | None = None,
                storage: str | None = None):
    """Build every PrimFunc ``main`` calls and lay out the calls; returns (plan, kernels, weights).
    ``prims``, when given, receives kernel key -> the PrimFunc with its attributes (``tir-adreno dump``).
    ``storage="float16"`` keeps the texture tensors of our kernels in half images
    (``strategy.precision.half_storage``) and their buffers in half wherever no upstream kernel
    or the model's caller sees them (``storage.half_buffers``); their weights are kept as float16
    arrays (saved in half)."""
    check_runnable(mod)
    func = mod["main"]
    tensors: list[TensorInfo] = []
    env: dict = {}
    weights: dict[int, np.ndarray] = {}
    calls: list[Call] = []
    kernels: dict[str, KernelModule] = {}
    const_ids: dict = {}

    def new_tensor(shape, dtype, scope, kind, name="", storage=None):
        tensors.append(TensorInfo(tuple(int(d) for d in shape), str(dtype), scope, kind, name, storage))
        return len(tensors) - 1

    inputs = []
    for name, p in zip(input_names, func.params):
        symbolic = [str(d) for d in p.ty.shape.values if not isinstance(d, tvm.tirx.IntImm)]
        if symbolic:
            raise ModelError(f"input {name!r} has symbolic dim {symbolic[0]!r}; bind it to a number in the Relax signature")
        shape = [int(d) for d in p.ty.shape.values]
        env[p] = new_tensor(shape, p.ty.dtype, "global", "input", name)
        inputs.append((name, env[p]))

    bindings = [b for block in func.body.blocks for b in block.bindings]
    call_bindings = [b for b in bindings if isinstance(b.value, relax.Call) and getattr(b.value.op, "name", "") == "relax.call_tir"]
    built: dict[str, str] = {}
    halves = half_buffers(mod, bindings) if storage else {}
    # Each call's kernel key, known first so that the progress counts the distinct kernels built
    # ([4/21] then [5/21]), not the calls (a kernel shared by calls is built once).
    keys = {}
    for b in call_bindings:
        prim = mod[b.value.args[0]]
        keys[b.var] = _kernel_key(prim, target, halves.get(b.var, frozenset()) if is_ours(prim) else frozenset())
    distinct = len(set(keys.values()))
    for binding in bindings:
        value = binding.value
        if bind_alias(env, binding):
            continue
        if isinstance(value, relax.Call) and getattr(value.op, "name", "") == "relax.call_tir":
            gv, args = value.args[0], value.args[1]
            prim = mod[gv]
            meta = {k: str(prim.attrs[a]) for k, a in (("config", CONFIG_ATTR), ("source", SOURCE_ATTR)) if a in prim.attrs}
            ours = is_ours(prim)
            half = halves.get(binding.var, frozenset()) if ours else frozenset()
            key = keys[binding.var]  # same kernel, same cache entry
            if prims is not None:
                prims[key] = prim
            if key not in built:
                progress(f"[{len(built) + 1}/{distinct}] build {gv.name_hint}")
                # images too keep float32 where the call's tensor is pinned (_half_buffers: statistics)
                kernels[key] = _kernel_module(prim, target, half).with_storage(storage if ours else None, half)
                built[key] = gv.name_hint
            module = kernels[key]
            (fname,) = module.functions
            params = module[fname].params
            arg_ids = []
            for k, arg in enumerate(args.fields):
                if isinstance(arg, tvm.ir.expr.GenericConst):
                    cid = arg  # TVM objects hash and compare by identity
                    if cid not in const_ids:
                        spec = params[k]
                        const_ids[cid] = new_tensor(spec.shape, spec.dtype, spec.scope, "const", f"w{len(weights)}", spec.storage)
                        weights[const_ids[cid]] = _const_array(arg).astype(spec.storage_dtype, copy=False)
                    arg_ids.append(const_ids[cid])
                elif isinstance(arg, relax.Var):
                    arg_ids.append(env[arg])
                else:
                    raise NotImplementedError(f"call_tir argument {type(arg).__name__} is not supported")
            outs = []
            for spec in params[len(arg_ids):]:
                outs.append(new_tensor(spec.shape, spec.dtype, spec.scope, "temp", storage=spec.storage))
            for k, t in enumerate(arg_ids):
                _check_arg(tensors[t], params[k], gv.name_hint)
            env[binding.var] = outs[0] if len(outs) == 1 else outs
            calls.append(Call(key, fname, tuple(arg_ids + outs), gv.name_hint, ours, **meta))
        else:
            op = getattr(getattr(value, "op", None), "name", type(value).__name__)
            raise NotImplementedError(f"the lowered model still has {op!r}, which the executor cannot run")
    out = func.body.body
    out_ids = env[out] if isinstance(out, relax.Var) else [env[f] for f in out.fields]
    out_ids = out_ids if isinstance(out_ids, list) else [out_ids]
    out_types = list(out.ty.fields) if hasattr(out.ty, "fields") else [out.ty]
    outputs = []
    for t, ty in zip(out_ids, out_types, strict=True):
        if tensors[t].kind == "input":  # an output that is an input needs its own copy: not supported
            raise NotImplementedError("a model output that is one of its inputs is not supported")
        tensors[t] = _output_info(tensors[t], ty, f"output{len(outputs)}")
        outputs.append(t)
    return Plan(tensors, calls, inputs, outputs), kernels, weights


def _output_info(info: TensorInfo, ty, name: str) -> TensorInfo:
    """``info`` as a model output of type ``ty``: in the output's shape, which differs only for a
    view of a buffer holding the same elements in the same order (``VIEW_OPS``)."""
    shape = tuple(int(d) for d in ty.shape.values)
    if shape != info.shape and (math.prod(shape) != math.prod(info.shape) or is_texture_scope(info.scope)):
        raise ValueError(f"output {name} {shape} is no view of its {info.scope} tensor {info.shape}")
    return TensorInfo(shape, info.dtype, info.scope, "output", name, info.storage)


def _check_arg(tensor: TensorInfo, spec, where: str):
    # A buffer read in another shape of as many elements is a view of it (``VIEW_OPS``: tokens
    # [N, H * W, C] a conv wrote as [N, H, W, C], passes.map_boundary): kernels index buffers flat.
    shape = spec.shape if _is_view(tensor, spec) else tensor.shape
    if (shape, tensor.dtype, tensor.scope, tensor.storage) != (spec.shape, spec.dtype, spec.scope, spec.storage):
        raise RuntimeError(f"{where}: argument {spec.name} expects {spec.shape} {spec.dtype} {spec.scope}, gets {tensor}")


def _is_view(tensor: TensorInfo, spec) -> bool:
    """Whether ``spec`` reads buffer ``tensor`` as a view: another shape of as many elements."""
    return not is_texture_scope(tensor.scope) and not is_texture_scope(spec.scope) and math.prod(tensor.shape) == math.prod(spec.shape)


def _dtypes(mod: tvm.IRModule) -> set[str]:
    """Every tensor dtype ``main`` touches: parameters, bound values and constants."""
    func = mod["main"]
    types = [p.ty for p in func.params]
    for block in func.body.blocks:
        for b in block.bindings:
            types.append(b.var.ty)
            args = getattr(b.value, "args", [])
            fields = [f for a in args for f in (a.fields if isinstance(a, relax.Tuple) else [a])]
            types += [f.ty for f in fields if isinstance(f, tvm.ir.expr.GenericConst)]
    return {str(t.dtype) for t in types if hasattr(t, "dtype")}


def check_device_support(mod: tvm.IRModule, profile: DeviceProfile, runs_on: runtime.Device | None = None) -> None:
    """:class:`ModelError` before any build when the device (``runs_on``, else ``profile``)
    cannot run the model's precision."""
    if "float16" not in _dtypes(mod):
        return
    if runs_on is not None and not runs_on.fp16:
        culprit = f"device {runs_on.name!r}"
    elif not profile.half_math:
        culprit = f"device profile {profile.name!r}"
    else:
        return
    raise ModelError(
        f"the model computes in float16 but {culprit} has no cl_khr_fp16 (half arithmetic); "
        "pick a device with fp16 (see 'tir-adreno devices') or convert the model to float32"
    )


def compile_plan(model, profile: DeviceProfile, records=None, allow_buffer: bool = True, ours: bool = True, progress=print,
                 input_shapes: dict | None = None, runs_on: runtime.Device | None = None, prims: dict | None = None,
                 precision: str = "float32", placement: str | None = None):
    """``model`` compiled for ``profile`` in ``precision`` as (plan, kernels, weights): no device needed.
    ``runs_on``: the device the plan will be loaded on, when known (checked before building).
    ``prims`` (a dict) receives kernel key -> PrimFunc (see :func:`plan_module`).
    ``placement`` ("texture" or "buffer") overrides the profile's ``activation_placement``.
    ValueError (``strategy.precision.PrecisionError``) when ``profile`` cannot run ``precision`` or
    ``placement`` is not a placement."""
    profile = with_placement(profile, placement)
    check_precision(precision, profile)
    if runs_on is not None:  # the device it will run on, too (a profile may promise half math it lacks)
        check_precision(precision, DeviceProfile.from_device(runs_on))
    progress("import")
    mod, names = import_model(model, input_shapes)
    check_device_support(mod, profile, runs_on)
    progress(f"lower for {profile.name} in {precision}, activations in {profile.activation_placement}s (tir-adreno pass, LegalizeOps, dlight)" if ours else "lower (LegalizeOps, dlight)")
    # Stubs unless the caller wants the PrimFuncs (prims): a warm compile then parses no TVMScript.
    mod = lower(mod, profile, allow_buffer, ours, open_records(records, profile, precision), precision, lazy=prims is None)
    plan, kernels, weights = plan_module(mod, names, progress, _target(ours), prims, half_storage(precision) if ours else None)
    plan.precision = precision if ours else "float32"
    return plan, kernels, weights


def compile_model(
    model, device=None, profile=None, records=None, allow_buffer: bool = True, pool: bool = True, ours: bool = True,
    limits=None, progress=print, input_shapes: dict | None = None, prims: dict | None = None, precision: str = "float32",
    placement: str | None = None,
    fuse: bool = True,
) -> CompiledModel:
    """Compile ``model`` (ONNX ``ModelProto`` or path, or a Relax IRModule with bound weights) and load it on ``device``.

    ``profile`` (a ``DeviceProfile`` or a name, default: ``device``'s own) is what the
    kernels are planned for; ``limits`` overrides its image limits (to plan for a smaller
    GPU). ``records`` (a path or ``records.Records`` written by ``tir-adreno tune``) gives
    tuned conv choices; records of another device are ignored with a warning. Nothing is
    measured. ``input_shapes`` ({input name: shape}) gives the shapes of ONNX inputs with
    symbolic dims (e.g. ``{"input": (4, 3, 224, 224)}`` for a named batch). ``ours=False`` compiles the same model with upstream TVM only (LegalizeOps +
    dlight GPU schedules, buffers), the baseline of the benchmarks.
    ``precision``: "float32", "float16_acc32" (every tensor of our kernels, weights included,
    in half: RGBA half images, half buffers read with ``vload_half``; float32 arithmetic; the
    model's inputs and outputs and upstream kernels' tensors stay float32) or "float16" (every
    kernel of ours in half storage and half arithmetic, float32 accumulation in reductions,
    average pooling and softmax; upstream ops stay float32 behind converting layout
    transforms): ``strategy.precision.PRECISIONS``.
    ``placement``: "texture" or "buffer", the default scope of activations (default: the
    profile's ``activation_placement``; records still place each tuned conv).
    ``fuse=False`` keeps every depthwise conv apart from the 1x1 conv after it (where the profile
    would fuse them: ``strategy.fusion.fuse_depthwise_pointwise``), a squeeze-excitation's pool and two
    1x1 convs apart (``strategy.excite.excitation_schedule``) and a mixed conv's group convs between
    their split and concat (``strategy.conv.mixed_conv_form``), for comparisons.
    """
    dev = runtime.get_device(device)
    target = without_fusion(with_limits(resolve(dev, profile), limits), not fuse)
    plan, kernels, weights = compile_plan(model, target, records, allow_buffer, ours, progress, input_shapes, dev, prims, precision,
                                          placement)
    progress(f"load {len(kernels)} kernels on {dev.name}")
    return CompiledModel(plan, kernels, weights, dev, pool)


#: Name under which the Adreno TIR pipeline is registered for ``tvm.compile``.
TIR_PIPELINE = "tir_adreno.adreno"


def _register_tir_pipeline():
    # tvm.compile maps "default" to the generic pipeline (no TextureFlatten: vload4 on
    # images) and cannot take the Adreno pass itself; a registered name works.
    from tvm.s_tir.backend.adreno.pipeline import default_tir_pipeline
    from tvm.tirx import compilation_pipeline as cp

    if TIR_PIPELINE not in cp.PIPELINE_MAP:
        cp.register_tir_pipeline(TIR_PIPELINE, lambda: (default_tir_pipeline(), cp.finalize_host_passes, cp.finalize_device_passes))


def tvm_compile(model, device=None, allow_buffer: bool = True):
    """The dispatched module through ``tvm.compile`` for ``qcom/adreno-opencl-texture``.

    For a TVM build with the OpenCL runtime (deploying over RPC). Our module is
    already legalized and scheduled, so the Relax side runs only the generic
    GPU lowering; TIR goes through the Adreno pipeline.
    """
    mod, _ = import_model(model)
    mod = lower(mod, resolve(device), allow_buffer)
    target = tvm.target.Target(build.TEXTURE_TARGET, host="llvm")

    @tvm.transform.module_pass(opt_level=0, name="TirAdrenoRelaxLowering")
    def relax_pipeline(mod, _ctx):
        gpu = relax.backend.gpu_generic
        with target:
            return tvm.transform.Sequential(gpu.dataflow_lower_passes(target) + gpu.finalize_passes(target))(mod)

    _register_tir_pipeline()
    return tvm.compile(mod, target=target, relax_pipeline=relax_pipeline, tir_pipeline=TIR_PIPELINE)


def opencl_sources(executable) -> list[str]:
    """OpenCL C of every OpenCL module inside a ``tvm.compile`` result."""

    def walk(m):
        yield m
        for child in m.imports:
            yield from walk(child)

    return [m.inspect_source() for m in walk(executable.mod) if getattr(m, "kind", "") == "opencl"]
