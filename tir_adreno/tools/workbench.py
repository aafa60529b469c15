"""The compiler engineer's loop: a model's kernels as TVMScript files, edited and rebuilt in place.

- :func:`dump` writes one TVMScript file per distinct kernel a compiled model
  runs (``07_conv2d_nchw4c.py``), headed by what it computes, plus
  ``manifest.json`` (file, hash of the generated text, op metadata).
- :func:`load_edits` / :func:`apply_edits`: files whose text no longer matches
  the manifest are parsed, checked against the generated kernel's signature,
  built and swapped into the compiled model (``tir-adreno run --kernels``).
- :func:`kernel_command`: one file built, shown, checked against the float64
  NumPy reference of its op and timed (``tir-adreno kernel``).
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tir_adreno import reference
from tir_adreno.strategy import packing as blocked
from tir_adreno.runtime.bundle import TensorSpec
from tir_adreno.runtime.errors import UserError

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
#: Header line of a kernel file that carries its op metadata (what ``kernel --check`` compares with).
OP_LINE = "# op: "
SHOW = ("tir", "lowered", "opencl")


class WorkbenchError(UserError, ValueError):
    """A bad kernel file, manifest or request: one line for the user (CLI exit 2)."""


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# --------------------------------------------------------------------------------------------
# dump


def _kernel_name(position: int, label: str) -> str:
    # bb.add_func numbers repeated names (conv2d_nchw4c1); the position keeps files unique
    return f"{position:02d}_{re.sub(r'(?<=[a-z_])[0-9]+$', '', label)}"


def _op_info(func) -> dict | None:
    from tir_adreno.passes import OP_ATTR

    attrs = func.attrs
    return json.loads(str(attrs[OP_ATTR])) if attrs is not None and OP_ATTR in attrs else None


def _param_specs(func) -> list[TensorSpec]:
    from tir_adreno.codegen.build import _param_specs as specs

    return list(specs(func))


def _spec_text(spec: TensorSpec) -> str:
    return f"{spec.name} {list(spec.shape)} {spec.dtype} {spec.scope}"


def _header(name: str, info: dict | None, call, specs, rows, model_arg: str, path: Path) -> list[str]:
    lines = []
    if info is None:
        made = "ours, no op recorded" if call.ours else "upstream: legalized by TVM, scheduled by dlight"
        lines.append(f"tir-adreno kernel {name} ({made})")
    else:
        stage = f", {info['stage']}" if info.get("stage") else ""
        node = f", model node {info['node']}" if info.get("node") else ""
        lines.append(f"tir-adreno kernel {name} (ours): {info['op']}{stage}{node}")
        if info.get("attrs"):
            lines.append("  attrs: " + " ".join(f"{k}={v}" for k, v in sorted(info["attrs"].items())))
        if info.get("depthwise"):  # a fused depthwise -> 1x1 kernel: the depthwise conv computed in its prologue
            dw = info["depthwise"]
            lines.append(f"  depthwise prologue: weight {dw['weight']}, epilogue: " + " ".join(f"{k}={v}" for k, v in dw["epilogue"].items()))
        if info.get("epilogue"):
            lines.append("  epilogue: " + " ".join(f"{k}={v}" for k, v in info["epilogue"].items()))
        shapes = ", ".join(str(s) for s in info["inputs"])
        weight = f", weight {info['weight']}" if info.get("weight") else ""
        lines.append(f"  logical shapes (NCHW): input {shapes}{weight} -> output {info['output']}")
        if call.config:
            lines.append(f"  config: {call.config} (from {call.source}; register tile x work group, see ConvConfig)")
    lines.append("  params (shape, dtype, scope): " + " | ".join(_spec_text(s) for s in specs))
    lines.append(f"  used by: profile rows {', '.join(str(r) for r in rows)} of `tir-adreno run {model_arg}`")
    lines.append(f"  rebuild: tir-adreno kernel {path} --check --time")
    lines.append(f"           tir-adreno run {model_arg} --kernels {path.parent} --check")
    lines.append("Edit the TVMScript below (tile, loops, work group); keep the parameters (shapes, dtypes, scopes).")
    header = [f"# {line}".rstrip() for line in lines]
    return header + ([OP_LINE + json.dumps(info, sort_keys=True)] if info is not None else [])


def dump(compiled, prims: dict, directory, model_arg: str) -> list[Path]:
    """Write the kernels of ``compiled`` (``prims``: kernel key -> PrimFunc, from
    ``compile_model(..., prims=prims)``) into ``directory``; returns the files written."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rows: dict[str, list[int]] = {}
    for i, call in enumerate(compiled.plan.calls):
        rows.setdefault(call.kernel, []).append(i)
    from tir_adreno.compiler import kernel_func

    entries, written = {}, []
    for position, (key, call_rows) in enumerate(rows.items()):
        call = compiled.plan.calls[call_rows[0]]
        info = _op_info(prims[key])
        func = kernel_func(prims[key])  # exactly what the model builds
        name = _kernel_name(position, call.label)
        path = directory / f"{name}.py"
        specs = _param_specs(func)
        text = "\n".join(_header(name, info, call, specs, call_rows, model_arg, path)) + "\n" + func.script() + "\n"
        path.write_text(text)
        written.append(path)
        entries[name] = {
            "file": path.name,
            "sha256": text_hash(text),
            "key": key,
            "function": call.function,
            "ours": call.ours,
            "op": info if info is not None else {"op": "unrecorded" if call.ours else "upstream", "label": call.label},
            "rows": call_rows,
            "params": [[list(s.shape), s.dtype, s.scope] for s in specs],
        }
    manifest = {"format": MANIFEST_FORMAT, "model": model_arg, "kernels": entries}
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return written


# --------------------------------------------------------------------------------------------
# reading files back


def header_op(path) -> dict | None:
    """The op metadata in a kernel file's header (None: an upstream kernel)."""
    for line in Path(path).read_text().splitlines():
        if line.startswith(OP_LINE):
            try:
                return json.loads(line[len(OP_LINE):])
            except ValueError as err:
                raise WorkbenchError(f"{path}: unreadable '{OP_LINE.strip()}' header line ({err})") from None
        if not line.startswith("#"):
            break
    return None


def parse_kernel(path) -> "object":
    """The PrimFunc of a kernel file; a parse error becomes one line: file:line: message."""
    import tvm

    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise WorkbenchError(f"{path}: cannot read ({err.strerror})") from None
    try:
        func = tvm.script.from_source(text)
    except SyntaxError as err:
        raise WorkbenchError(f"{path}:{err.lineno}: {err.msg}") from None
    except Exception as err:  # TVM's DiagnosticError: "error: MSG\n --> <str>:LINE:COL ..."
        message = str(err).strip()
        where = re.search(r"--> [^:\n]*:(\d+):\d+", message)
        first = message.splitlines()[0].removeprefix("error:").strip() if message else type(err).__name__
        raise WorkbenchError(f"{path}:{where.group(1) if where else '?'}: {first}") from None
    if not isinstance(func, tvm.tirx.PrimFunc):
        raise WorkbenchError(f"{path}: expected one T.prim_func, got {type(func).__name__}")
    return func


def load_manifest(directory) -> dict:
    path = Path(directory) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise WorkbenchError(f"{path}: no such file (write the directory with `tir-adreno dump MODEL -o {directory}`)") from None
    except (OSError, ValueError) as err:
        raise WorkbenchError(f"{path}: not a readable manifest ({err})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT or "kernels" not in manifest:
        raise WorkbenchError(f"{path}: not a tir-adreno dump manifest (format {MANIFEST_FORMAT})")
    return manifest


@dataclass
class Edit:
    name: str
    path: Path
    entry: dict
    func: object  # the parsed PrimFunc


def load_edits(directory) -> list[Edit]:
    """Parse the files of a dump whose text differs from what was generated (before compiling)."""
    directory = Path(directory)
    edits = []
    for name, entry in load_manifest(directory)["kernels"].items():
        path = directory / entry["file"]
        if not path.exists():
            raise WorkbenchError(f"{path}: listed in {directory / MANIFEST} but missing")
        if text_hash(path.read_text()) != entry["sha256"]:
            edits.append(Edit(name, path, entry, parse_kernel(path)))
    return edits


def _signature_mismatch(edited, generated) -> str | None:
    if len(edited) != len(generated):
        return f"{len(edited)} parameters, the model's kernel has {len(generated)}"
    for e, g in zip(edited, generated):
        if (e.shape, e.dtype, e.scope) != (g.shape, g.dtype, g.scope):
            return f"parameter {e.name} is {list(e.shape)} {e.dtype} {e.scope}, the model's {g.name} is {list(g.shape)} {g.dtype} {g.scope}"
    return None


def apply_edits(compiled, prims: dict, edits: list[Edit], inputs, target=None, repeat: int = 3) -> dict[int, tuple[float, float]]:
    """Swap the edited kernels into ``compiled``; returns profile row -> (generated ms, edited ms),
    medians of ``repeat`` runs of the whole model (OpenCL event times) before and after."""
    from tir_adreno.codegen import build
    from tir_adreno.compiler import kernel_func

    for edit in edits:
        generated = prims.get(edit.entry["key"])
        if generated is None:
            raise WorkbenchError(f"{edit.path}: this model has no kernel {edit.name} (the dump is of another model or device kind; dump again)")
        mismatch = _signature_mismatch(_param_specs(edit.func), _param_specs(kernel_func(generated)))
        if mismatch:
            raise WorkbenchError(f"{edit.path}: signature differs from the model's kernel: {mismatch}")
    if not edits:
        return {}
    before = _row_times(compiled, inputs, repeat)
    for edit in edits:
        try:
            module = build.build(edit.func, target)
        except Exception as err:  # TVM lowering errors on a user's edit
            raise WorkbenchError(f"{edit.path}: does not build: {str(err).strip().splitlines()[-1][:300]}") from None
        (fname,) = module.functions
        if fname != edit.entry["function"]:
            raise WorkbenchError(f"{edit.path}: function is named {fname!r}, the model calls {edit.entry['function']!r}")
        compiled.replace_kernel(edit.entry["key"], module)
    after = _row_times(compiled, inputs, repeat)
    return {row: (before[row], after[row]) for edit in edits for row in edit.entry["rows"]}


def _row_times(compiled, inputs, repeat: int) -> list[float]:
    compiled.run(inputs)  # warm-up
    runs = []
    for _ in range(repeat):
        compiled.run(inputs, profile=True)
        runs.append([p["time_ms"] for p in compiled.profile()])
    return [statistics.median(column) for column in zip(*runs)]


# --------------------------------------------------------------------------------------------
# one kernel: build, show, check against NumPy, time

#: Ops whose kernels must match their reference exactly (data movement, max/min, clamps).
EXACT_OPS = {"nchw_to_nchw4c", "nhwc_to_nchw4c", "nchw4c_to_nchw", "nchw4c_to_nhwc", "copy", "concat", "max", "min", "nn.max_pool2d"}
#: Activations that only compare and select (exact).
EXACT_ACTIVATIONS = {"relu", "relu6", "clip"}


def tolerance(info: dict) -> float:
    """Relative error allowed against the float64 reference (float32 kernels; docs/design.md)."""
    if info["op"] in EXACT_OPS or (info["op"] == "activation" and info["attrs"]["activation"] in EXACT_ACTIVATIONS):
        return 0.0
    if info["op"] == "nn.conv2d" and info.get("algorithm") == "winograd_4x4":
        return 1e-3  # F(4x4)'s transforms have larger terms; measured 2e-5 on real layers
    return 1e-4


def reference_case(info: dict, rng: np.random.Generator, pack_weights=blocked.pack_oihw4o):
    """(kernel inputs in their blocked layouts, reference output, channels to unpack the
    kernel's NCHW4c output to; None: compare the output as it is). ``pack_weights``: a
    conv's OIHW weights as its first kernel reads them (Winograd: ``G g G^T``)."""
    op, attrs = info["op"], info.get("attrs", {})
    pack = blocked.pack_nchw4c

    def rand(shape):  # float32 values (what the kernel gets), held in float64
        return rng.standard_normal(shape if isinstance(shape, int) else tuple(shape)).astype(np.float32).astype(np.float64)

    logical = [rand(s) for s in info["inputs"]]
    x = logical[0]
    if op in ("nchw_to_nchw4c", "copy"):
        return [x if op == "nchw_to_nchw4c" else pack(x)], pack(x), None
    if op == "nhwc_to_nchw4c":
        return [x.transpose(0, 2, 3, 1)], pack(x), None
    if op in ("nchw4c_to_nchw", "nchw4c_to_nhwc"):
        return [pack(x)], x if op == "nchw4c_to_nchw" else x.transpose(0, 2, 3, 1), None
    channels = info["output"][1]

    def epilogue_inputs(epilogue, channels, shape):
        """(bias, residual, their kernel inputs) of a conv epilogue the info records."""
        _refuse_expression(epilogue)
        b = rand(channels) if epilogue["bias"] else None
        r = rand(shape) if epilogue.get("residual") else None
        return b, r, ([] if b is None else [blocked.pack_bias(b)]) + ([] if r is None else [pack(r)])

    if op == "nn.conv2d":  # X [Gate [Gamma] | Stats] W [WeightSum] [Bias] [Residual]
        w = rand(info["weight"])
        gate = [rand(info["gate"])] if info.get("gate") else []  # it reads X * Gate[n, c] (a fused SE multiply)
        grn = info.get("grn_epsilon")  # the Gate is GRN's sums of squares S of X, Gamma after it: X * (1 + gamma * Nx)
        if grn is not None:
            squares, gamma = (x * x).sum(axis=(2, 3), keepdims=True), rand(x.shape[1])
            gate = [1 + gamma[None, :, None, None] * reference.grn_nx(squares, grn)]
        eps = info.get("norm_epsilon")  # it reads LN(X) over the channels (W: gamma folded in; WeightSum: sum_c W)
        z = x if eps is None else reference.layer_norm(x, np.ones(x.shape[1]), np.zeros(x.shape[1]), axis=1, epsilon=eps)
        gn = info.get("group_norm")  # it reads GN(X), its statistics the partials of group_norm_partials (Stats)
        stats = [] if gn is None else [reference.group_norm_partials(x, gn["groups"], gn["slices"])]
        z = z if gn is None else reference.group_norm(x, gn["groups"], gn["epsilon"])
        y = reference.conv2d_nchw(z * gate[0] if gate else z, w, attrs["strides"], attrs["padding"], attrs["dilation"],
                                  attrs["groups"])
        epilogue = info["epilogue"]
        b, r, extra = epilogue_inputs(epilogue, channels, y.shape)
        y = reference.conv2d_epilogue(y, b, r, epilogue["activation"], *epilogue.get("clip", (0.0, 6.0)))
        # a first conv reads the plain input, a conv after tokens reads them channels-last
        x_in = {"NCHW": x, "NHWC": np.ascontiguousarray(x.transpose(0, 2, 3, 1))}.get(info.get("data_layout"), pack(x))
        sums = [] if eps is None else [blocked.pack_bias(w.sum(axis=(1, 2, 3)))]
        gated = [pack(squares), blocked.pack_bias(gamma)] if grn is not None else [pack(g) for g in gate]
        inputs = [x_in, *gated, *stats, pack_weights(w), *sums, *extra]
        if info.get("out_layout") in ("NHWC", "NCHW"):  # a plain Y, compared as stored (tokens for a GEMM)
            return inputs, (y.transpose(0, 2, 3, 1) if info["out_layout"] == "NHWC" else y), None
        return inputs, y, channels
    if op == "depthwise_pointwise":  # X, W_dw [Bias_dw], W [Bias] [Residual]
        dw, epilogue = info["depthwise"], info["epilogue"]
        w_dw, w = rand(dw["weight"]), rand(info["weight"])
        b_dw, _, dw_extra = epilogue_inputs(dw["epilogue"], x.shape[1], None)
        b, r, extra = epilogue_inputs(epilogue, channels, info["output"])
        y = reference.depthwise_pointwise(
            x, w_dw, w, attrs["strides"], attrs["padding"], attrs["dilation"], b_dw, dw["epilogue"]["activation"], b, r,
            epilogue["activation"], dw["epilogue"].get("clip", (0.0, 6.0)), epilogue.get("clip", (0.0, 6.0)),
            attrs.get("groups", 1))
        return [pack(x), pack_weights(w_dw), *dw_extra, pack_weights(w), *extra], y, channels
    if op == "matmul":
        return _gemm_case(info, rand)
    if attrs.get("viewed"):  # a row kernel reading its input through movement ops (rules.rows): its buffer is another tensor's
        raise _no_reference("a row kernel reading its input through a view")
    _refuse_expression(attrs.get("epilogue") or {})  # a row kernel's chain (rules.rows)
    _refuse_expression(info.get("epilogue") or {})  # a pool with its chain (``rules.pool``)
    inputs = [pack(a) for a in logical]
    bounds = attrs.get("bounds") or (0.0, 6.0)
    if op == "activation":
        y = reference.activation(x, attrs["activation"], *bounds)
    elif op == "affine":  # act(x * scale[c] + shift[c]), scale and shift packed like a bias
        scale, shift = rand(channels), rand(channels)
        inputs += [blocked.pack_bias(scale), blocked.pack_bias(shift)]
        y = reference.activation(x * scale[None, :, None, None] + shift[None, :, None, None], attrs["activation"], *bounds)
    elif op in ("add", "subtract", "multiply", "divide"):
        y = getattr(np, op)(logical[0], logical[1])
    elif op == "concat":
        y = np.concatenate(logical, axis=1)
    elif op in ("sum", "mean", "max", "min"):
        y = reference.reduce(x, op, tuple(attrs["axis"]), keepdims=True)
    elif op == "sum_squares":  # GRN's statistics: sum x * x, each tap squared as read
        y = reference.reduce(x * x, "sum", tuple(attrs["axis"]), keepdims=True)
    elif op == "nn.softmax":
        y = reference.softmax(x, axis=attrs.get("axis", 1))
    elif op == "patch_unfold":
        y = reference.patch_unfold(x, *attrs["patch"])
    elif op == "patch_fold":
        y = reference.patch_fold(x, *attrs["patch"], *info["output"][2:])
    elif op in ("nn.max_pool2d", "nn.avg_pool2d"):
        y = reference.pool2d(x, **attrs)
    elif op == "nn.adaptive_avg_pool2d":
        y = reference.adaptive_pool2d(x, "avg", attrs["output_size"])
    else:
        raise _no_reference(f"op {op!r}")
    return inputs, y, channels


def _no_reference(what: str) -> WorkbenchError:
    """The error for a kernel ``kernel --check`` has no NumPy reference for: where to check it instead."""
    return WorkbenchError(f"no NumPy reference for {what}; check it in its model: tir-adreno run MODEL --kernels DIR --check")


def _refuse_expression(epilogue: dict) -> None:
    """An epilogue with an elementwise chain (``primfuncs.epilogue_expr``): the info records it as
    text only, so there is no reference here (WorkbenchError saying where to check it)."""
    if epilogue.get("expr"):
        raise _no_reference(f"an epilogue expression ({epilogue['expr']})")


def _gemm_case(info: dict, rand):
    """(inputs, reference, None) of our GEMM kernel (``info["gemm"]``: A and B as stored, transposes,
    alpha): ``act(alpha op(A) op(B) + bias + residual)``, every tensor plain (bias packed)."""
    g, epilogue = info["gemm"], info["attrs"]["epilogue"]
    _refuse_expression(epilogue)
    if g.get("views"):  # an operand read through movement ops in another tensor's buffer
        raise _no_reference("a GEMM reading its operands through views")
    if g.get("producer"):  # A computed from the elementwise chain's inputs as it is read
        raise _no_reference(f"a GEMM computing its A as {g['producer']}")
    a, b = rand(g["a_shape"]), rand(g["b_shape"])
    extra = []
    if g.get("norm_eps") is not None:  # a layer norm over A's rows folded in: B is its folded weight, WeightSum its column sums
        extra = [blocked.pack_bias(np.asarray(b, np.float64).sum(axis=0).astype(np.float32))]
        a_read = reference.layer_norm(a, np.ones(a.shape[-1]), np.zeros(a.shape[-1]), axis=-1, epsilon=g["norm_eps"])
    else:
        a_read = np.swapaxes(a, -1, -2) if g["trans_a"] else a
    y = g["alpha"] * (a_read @ (np.swapaxes(b, -1, -2) if g["trans_b"] else b))
    if g.get("out_perm"):  # Y stored with its axes permuted (a transpose after the product folded into the store)
        y = np.ascontiguousarray(np.transpose(y, g["out_perm"]))
    if epilogue["bias"]:
        bias = rand(y.shape[-1])
        y, extra = y + bias, [*extra, blocked.pack_bias(bias)]
    if epilogue.get("residual"):
        residual = rand(y.shape)
        y, extra = y + residual, [*extra, residual]
    return [a, b, *extra], reference.activation(y, epilogue["activation"], *epilogue.get("clip", (0.0, 6.0))), None


def _duration(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.1f} us"


def _winograd_stages(path, func, info: dict, dev):
    """The three kernels of the Winograd conv ``info`` records (its plan rebuilt for ``dev``),
    the file's ``func`` in its stage's place; returns (kernels, the file's index, plan)."""
    from primfuncs.conv import conv2d_geometry
    from primfuncs.epilogue import Epilogue

    from tir_adreno.strategy import conv as strategy
    from tir_adreno.strategy.profile import resolve
    from tir_adreno.passes import CONV_STAGES

    a, e = info["attrs"], info["epilogue"]
    _refuse_expression(e)
    geom = conv2d_geometry(info["inputs"][0], info["weight"], a["strides"], a["padding"], a["dilation"], a["groups"])
    clip = e.get("clip", (0.0, 6.0))
    epilogue = Epilogue(e["bias"], e["activation"], e["residual"], clip[0], clip[1])
    plan = strategy.conv2d_plan(geom, epilogue, "float32", resolve(dev), choice=strategy.ConvChoice.from_dict(info["choice"]),
                                **info.get("io_scopes", {}))
    stages = list(plan.primfuncs())
    index = list(CONV_STAGES.values()).index(info["stage"])
    mismatch = _signature_mismatch(_param_specs(func), _param_specs(stages[index]))
    if mismatch:
        raise WorkbenchError(f"{path}: signature differs from the {info['stage']} of this conv on {dev.name}: {mismatch}")
    stages[index] = func
    return stages, index, plan


def _chain_tensors(dev, specs, inputs):
    """Device tensors of a kernel chain (a single kernel, or Winograd's three: X -> V, V U -> M,
    M [Bias] [Residual] -> Y) from the conv's blocked ``inputs``; the last output poisoned."""
    upload = lambda spec, x: dev.empty(spec).upload(np.ascontiguousarray(x, spec.dtype))  # noqa: E731
    if len(specs) == 1:
        (s,) = specs
        return [[*(upload(p, x) for p, x in zip(s, inputs)), dev.empty(s[-1]).poison()]]
    x, u, *extra = inputs
    v, m = dev.empty(specs[0][1]), dev.empty(specs[1][2])
    return [[upload(specs[0][0], x), v], [v, upload(specs[1][1], u), m],
            [m, *(upload(p, t) for p, t in zip(specs[2][1:-1], extra)), dev.empty(specs[2][-1]).poison()]]


def kernel_command(path, device=None, check: bool = False, time: bool = False, show: str | None = None, out=print) -> int:
    """``tir-adreno kernel FILE``: build one kernel file; show, check and time it. Returns the exit code.
    A Winograd stage runs between the other two stages of its conv (rebuilt from the header)."""
    from tir_adreno.codegen import build
    from tir_adreno.runtime import opencl as runtime

    if show is not None and show not in SHOW:
        raise WorkbenchError(f"--show must be one of {', '.join(SHOW)}, got {show!r}")
    func = parse_kernel(path)
    info = header_op(path)
    if check and info is None:
        raise WorkbenchError(f"{path}: an upstream kernel records no op, so it has no NumPy reference; check it in its model: tir-adreno run MODEL --kernels DIR --check")
    dev = runtime.get_device(device)
    funcs, index, pack_weights = [func], 0, blocked.pack_oihw4o
    if info is not None and info.get("stage", "direct") != "direct":
        funcs, index, plan = _winograd_stages(path, func, info, dev)
        pack_weights = plan.pack_weights
    modules = [build.build_cached(f) for f in funcs]
    module = modules[index]
    if show == "tir":
        out(func.script())
    elif show == "lowered":
        out(build.lower_device(func)[1].script())
    elif show == "opencl":
        out(module.source)
    names = [next(iter(m.functions)) for m in modules]
    loaded = [dev.load(m) for m in modules]
    stage = f" ({info['stage']}, run between the other Winograd stages)" if len(funcs) > 1 else ""
    out(f"{Path(path).name}: {info['op'] if info else 'upstream kernel'}{stage} on {dev.name}")
    status = 0
    rng = np.random.default_rng(0)
    if check or time:
        specs = [m[n].params for m, n in zip(modules, names)]
        if info is not None:
            inputs, expected, channels = reference_case(info, rng, pack_weights)
        else:
            inputs = [rng.standard_normal(spec.shape) for spec in specs[0][:-1]]
        tensors = _chain_tensors(dev, specs, inputs)
        result = tensors[-1][-1]
    if check:
        for lm, n, ts in zip(loaded, names, tensors):
            lm(n, *ts)
        y = result.numpy()
        if channels is not None:
            y = blocked.unpack_nchw4c(y, channels)
        elif y.shape != expected.shape and y.size == expected.size:  # an unpacking kernel's out_shape (a reshape)
            expected = expected.reshape(y.shape)
        error = reference.relative_error(y, expected)
        tol = tolerance(info)
        ok = error <= tol
        out(f"check {'passed' if ok else 'FAILED'}: relative error {error:.2e} vs float64 NumPy (tolerance {tol:g})")
        status = 0 if ok else 1
    if time:
        seconds = loaded[index].time(names[index], tensors[index])
        out(f"time {_duration(seconds)} (median of 10 runs, OpenCL events)")
    return status
