"""Every kernel family's float16 kernels as saved cases: built here (TVM), run anywhere (no TVM).

A case is a :class:`~tir_adreno.tuning.programs.ConvProgram` (one or more stages whose
parameters match by name), its inputs (already rounded to half), and a float64 reference
computed from those rounded inputs, with the terms of the fp16 bound of
tests/kernels/test_fp16.py (S: the same computation on magnitudes; K: the reduction length;
``half_stages``: intermediates stored in half). :func:`check` holds an output to that bound
with u16 in the accumulation term (half arithmetic). ``dtype="float32"`` builds the same cases
in float32, so the cases and their references are checked on PoCL (tests/benchmarks).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tir_adreno.runtime import opencl as runtime
from tir_adreno.runtime.bundle import KernelModule
from tir_adreno.strategy.packing import pack_bias, pack_nchw4c, unpack_nchw4c
from tir_adreno.tuning.programs import ConvProgram

U16, ETA16 = 2.0**-11, 2.0**-25
#: Winograd F(2x2)'s measured s (tests/kernels/test_fp16.py WINOGRAD_S).
WINOGRAD_S = 16


def bound(ref, s_abs, k: int, half_stages: float = 0, unit: float = U16, c: float = 2.0):
    """test_fp16's bound; ``unit`` is the accumulation's roundoff (u16: half arithmetic)."""
    return U16 * np.abs(ref) + ETA16 + half_stages * U16 * s_abs + c * k * unit * s_abs


def _half(x) -> np.ndarray:
    return np.asarray(x).astype(np.float16).astype(np.float64)


class _Builder:
    """Collects cases: each a program, named inputs and the reference terms."""

    def __init__(self, dtype: str, seed: int = 0):
        self.dtype, self.rng, self.cases = dtype, np.random.default_rng(seed), {}

    def rand(self, *shape, scale=1.0) -> np.ndarray:
        """Random values already rounded to half (the kernels' inputs and the reference's)."""
        return _half(self.rng.standard_normal(shape) * scale)

    def add(self, name, funcs, inputs: dict, ref, s_abs, k, half_stages=0, channels=None, stages=None):
        """``funcs``: a PrimFunc or a conv plan; ``inputs``: parameter name -> array (NCHW arrays
        of 4-d blocked parameters are packed here); ``channels``: the output is NCHW4c of so many."""
        from tir_adreno.codegen import build

        if hasattr(funcs, "primfuncs"):  # a conv plan
            from tir_adreno.tuning.programs import build_program

            program = build_program(funcs)
        else:
            module = build.build(funcs)
            program = ConvProgram(name, module, tuple(module.functions))
        specs = program.specs
        if isinstance(inputs, (list, tuple)):  # positional: the parameters before the output
            inputs = dict(zip(program.inputs, inputs))
        packed = {}
        for pname, value in inputs.items():
            shape = specs[pname].shape
            if value.ndim == 4 and len(shape) == 5:
                value = pack_nchw4c(value)
            elif value.ndim == 1 and len(shape) == 2:
                value = pack_bias(value)
            packed[pname] = np.asarray(value).reshape(shape).astype(self.dtype)
        self.cases[name] = dict(program=program, inputs=packed, ref=np.asarray(ref, np.float64),
                                s=np.broadcast_to(np.asarray(s_abs, np.float64), np.shape(ref)).copy(),
                                k=int(k), half_stages=half_stages, channels=channels)


def _elementwise(b: _Builder, scope: str):
    from primfuncs import elementwise
    from tir_adreno.reference import activation

    shape, f16, tag = (1, 6, 5, 7), b.dtype, scope.replace("global.", "").replace("global", "buffer")
    s5 = (1, 2, 5, 7, 4)
    x, y = b.rand(*shape, scale=3), b.rand(*shape, scale=3)
    b.add(f"add/{tag}", elementwise.binary(s5, "add", f16, scope), [x, y], x + y, abs(x) + abs(y), 1, channels=6)
    b.add(f"multiply/{tag}", elementwise.binary(s5, "multiply", f16, scope), [x, y], x * y, abs(x * y), 1, channels=6)
    bias = b.rand(6)
    b.add(f"bias_add/{tag}", elementwise.bias_add(s5, f16, scope), [x, bias], x + bias[None, :, None, None],
          abs(x) + abs(bias[None, :, None, None]), 1, channels=6)
    b.add(f"relu6/{tag}", elementwise.relu6(s5, f16, scope), [x], np.clip(x, 0, 6), abs(x), 1, channels=6)
    for act in ("sigmoid", "silu", "hardswish", "gelu", "gelu_tanh"):
        ref = activation(x, act)
        # exp/erf/tanh through float, the rest in half: a few roundings of the output's size.
        b.add(f"{act}/{tag}", elementwise.activation(s5, act, f16, scope), [x], ref, abs(x) + 1, 4, channels=6)


def _layout(b: _Builder):
    from primfuncs import layout
    from primfuncs._common import TEXTURE

    x = b.rand(1, 6, 5, 7, scale=100)
    b.add("nchw_to_nchw4c/texture", layout.nchw_to_nchw4c(x.shape, b.dtype, TEXTURE), [x], x, 0, 0, channels=6)
    b.add("nchw4c_to_nchw/texture", layout.nchw4c_to_nchw(x.shape, b.dtype, TEXTURE), [pack_nchw4c(x)], x, 0, 0)


def _pool_reduce(b: _Builder, scope: str):
    from primfuncs import pool2d, reduce
    from tir_adreno import reference

    tag = scope.replace("global.", "").replace("global", "buffer")
    x = b.rand(1, 7, 9, 9)
    s5 = (1, 2, 9, 9, 4)
    args = ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False, False)
    for kind in ("max", "avg"):
        f = getattr(pool2d, f"{kind}_pool2d")(s5, (3, 3), 2, 1, dtype=b.dtype, scope=scope)
        b.add(f"{kind}_pool2d/{tag}", f, [x], reference.pool2d(x, kind, *args),
              reference.pool2d(abs(x), "avg", *args), 9, channels=7)
    b.add(f"global_avg_pool2d/{tag}", pool2d.global_avg_pool2d(s5, dtype=b.dtype, scope=scope), [x],
          x.mean(axis=(2, 3), keepdims=True), abs(x).mean(axis=(2, 3), keepdims=True), 81, channels=7)
    b.add(f"sum_hw/{tag}", reduce.reduce(s5, 7, "sum", (2, 3), True, dtype=b.dtype, scope=scope), [x],
          x.sum(axis=(2, 3), keepdims=True), abs(x).sum(axis=(2, 3), keepdims=True), 81, channels=7)
    b.add(f"max_c/{tag}", reduce.reduce(s5, 7, "max", (1,), True, dtype=b.dtype, scope=scope), [x],
          x.max(axis=1, keepdims=True), abs(x).max(axis=1, keepdims=True), 1, channels=1)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    b.add(f"softmax/{tag}", reduce.softmax(s5, 7, b.dtype, scope), [x], e / e.sum(axis=1, keepdims=True), 1, 7 + 4,
          channels=7)


def _concat(b: _Builder):
    from primfuncs import concat
    from primfuncs._common import TEXTURE

    x, y = b.rand(1, 4, 5, 6), b.rand(1, 3, 5, 6)
    f = concat.concat_channels(1, (4, 3), 5, 6, dtype=b.dtype, scope=TEXTURE)
    b.add("concat/texture", f, [x, y], np.concatenate([x, y], axis=1), 0, 0, channels=7)


def _convs(b: _Builder, profile):
    from primfuncs import conv
    from primfuncs.epilogue import Epilogue
    from tir_adreno import reference
    from tir_adreno.strategy import conv as strategy

    precision = "float16" if b.dtype == "float16" else "float32"

    def case(name, x_shape, w_shape, stride=1, pad=0, groups=1, act=None, residual=False, choice=None, w_scale=1.0):
        geom = conv.conv2d_geometry(x_shape, w_shape, stride, pad, 1, groups)
        plan = strategy.conv2d_plan(geom, Epilogue(bias=True, activation=act, residual=residual), precision, profile,
                                    choice=choice)
        x, w, bias = b.rand(*x_shape), b.rand(*w_shape, scale=w_scale), b.rand(w_shape[0])
        r = b.rand(*geom.out_shape) if residual else None
        args = dict(strides=(stride, stride), padding=(pad,) * 4, groups=groups)
        ref = reference.conv2d_epilogue(reference.conv2d_nchw(x, w, **args), bias, r, act)
        s = reference.conv2d_epilogue(reference.conv2d_nchw(abs(x), abs(w), **args), abs(bias), None if r is None else abs(r))
        inputs = {"X": x, plan.weight_name: plan.pack_weights(w), "Bias": bias, **({"Residual": r} if residual else {})}
        k = (x_shape[1] // groups) * w_shape[2] * w_shape[3] + 2
        stages = WINOGRAD_S if plan.algorithm.startswith("winograd") else 0
        b.add(f"conv/{name}/{plan.algorithm}/{plan.tensor('X').scope.replace('global.', '')}", plan, inputs, ref, s, k,
              stages, channels=w_shape[0])

    case("3x3", (1, 16, 10, 10), (24, 16, 3, 3), pad=1, act="relu")
    case("3x3s2", (1, 12, 11, 11), (8, 12, 3, 3), stride=2, pad=1, act="relu6")
    case("1x1_residual", (1, 32, 8, 8), (32, 32, 1, 1), residual=True)
    case("1x1_long", (1, 512, 7, 7), (64, 512, 1, 1), act="relu", w_scale=512**-0.5)
    case("1x1_tiled", (1, 64, 28, 28), (256, 64, 1, 1))
    case("depthwise", (1, 24, 9, 9), (24, 1, 3, 3), pad=1, groups=24, act="relu6")
    case("3x3", (1, 16, 10, 10), (24, 16, 3, 3), pad=1, act="silu", choice=strategy.ConvChoice("direct"))  # on textures
    case("3x3_winograd", (1, 8, 8, 8), (8, 8, 3, 3), pad=1, choice=strategy.ConvChoice("winograd_2x2"))


def build_cases(dtype: str = "float16", profile=None) -> dict:
    """Every family's cases in ``dtype`` (name -> case dict), for ``profile`` (default nvidia-h200)."""
    from primfuncs._common import BUFFER, TEXTURE
    from tir_adreno.strategy.profile import get_profile

    b = _Builder(dtype)
    for scope in (TEXTURE, BUFFER):
        _elementwise(b, scope)
        _pool_reduce(b, scope)
    _layout(b)
    _concat(b)
    _convs(b, profile or get_profile("nvidia-h200"))
    return b.cases


def save_cases(cases: dict, out: Path) -> None:
    """Each case as ``<i>.json`` (program + terms) and ``<i>.npz`` (inputs, ref, s)."""
    out.mkdir(parents=True, exist_ok=True)
    index = []
    for i, (name, c) in enumerate(cases.items()):
        p = c["program"]
        meta = dict(name=name, algorithm=p.algorithm, stages=list(p.stages), module=json.loads(p.module.to_json()),
                    k=c["k"], half_stages=c["half_stages"], channels=c["channels"])
        (out / f"{i}.json").write_text(json.dumps(meta))
        np.savez_compressed(out / f"{i}.npz", ref=c["ref"], s=c["s"], **{f"in_{k}": v for k, v in c["inputs"].items()})
        index.append(name)
    (out / "index.json").write_text(json.dumps(index))


def load_cases(src: Path) -> dict:
    cases = {}
    for i, name in enumerate(json.loads((src / "index.json").read_text())):
        meta = json.loads((src / f"{i}.json").read_text())
        with np.load(src / f"{i}.npz") as npz:
            arrays = {k: npz[k] for k in npz.files}
        program = ConvProgram(meta["algorithm"], KernelModule.from_dict(meta["module"]), tuple(meta["stages"]))
        cases[name] = dict(program=program, inputs={k[3:]: v for k, v in arrays.items() if k.startswith("in_")},
                           ref=arrays["ref"], s=arrays["s"], k=meta["k"], half_stages=meta["half_stages"],
                           channels=meta["channels"])
    return cases


def run_case(case: dict, device: runtime.Device, unit: float = U16, repeat: int = 10) -> dict:
    """Run one case on ``device``: its worst ratio of error to the bound (<= 1 passes), its
    relative error (max |diff| / max |ref|) and its median kernel time."""
    program = case["program"]
    specs = program.specs
    tensors = {n: device.empty(specs[n]).upload(v) for n, v in case["inputs"].items()}
    out = program.outputs[-1]
    tensors[out] = device.empty(specs[out]).poison()
    program.run(device, tensors)
    y = tensors[out].numpy().astype(np.float64)
    if case["channels"] is not None and y.ndim == 5:
        y = unpack_nchw4c(y, case["channels"])
    ref = case["ref"]
    y = y.reshape(ref.shape)
    finite = bool(np.all(np.isfinite(y)))
    ratio = float((np.abs(y - ref) / bound(ref, case["s"], case["k"], case["half_stages"], unit)).max()) if finite else float("inf")
    rel = float(np.abs(y - ref).max() / max(np.abs(ref).max(), 1e-30)) if finite else float("inf")
    seconds = program.time(device, tensors, warmup=2, repeat=repeat)
    return dict(ok=finite and ratio <= 1, bound_ratio=ratio, relative_error=rel, kernel_us=seconds * 1e6,
                stages=len(program.stages))
