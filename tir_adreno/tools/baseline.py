"""Upstream TVM's generic OpenCL conv2d: the baseline our kernels are measured against.

The kernel is what ``tvm.compile`` would produce for a Relax ``nn.conv2d`` on
``Target({"kind": "opencl"})`` with the default GPU pipeline
(``relax/backend/gpu_generic``): ``LegalizeOps`` (TOPI conv, NCHW/OIHW
buffers, padding as an inlined stage), op fusion, then dlight's default GPU
rules (Matmul, GEMV, Reduction, GeneralReduction, Fallback). We run the same
passes and keep the scheduled PrimFunc, so the baseline is upstream's code,
built by our builder and launched through our runtime like our own kernels.
"""

from __future__ import annotations

import traceback
from pathlib import Path

import numpy as np
import tvm
from tvm import relax, tirx

from primfuncs._common import check_dtype
from primfuncs.conv import ConvGeometry, conv2d_geometry

from tir_adreno.codegen import build as _build
from tir_adreno.runtime import opencl as runtime

#: Name of the PrimFunc :func:`upstream_conv2d` returns.
FUNCTION_NAME = "upstream_conv2d"


class UpstreamScheduleError(RuntimeError):
    """Upstream TVM's own pipeline (legalization or a dlight rule) fails on this conv2d.

    Seen on TVM 0.27 for grouped (not depthwise) convs: dlight's GEMV rule
    asserts when the reduction has extent 1 (a 1x1 conv with one input channel
    per group), and for many shapes with 4 output channels per group the
    schedule dlight returns fails ``LowerCrossThreadReduction`` in TVM's
    default TIR pipeline. Dense and depthwise convs (all of ResNet-50 and
    MobileNetV2) compile.
    """


def _describe(err: Exception) -> str:
    """One line for an error raised inside TVM: its type, its key message line, where it came from."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    key = next((line for line in lines if "Check failed" in line), lines[0] if lines else "")
    frames = traceback.extract_tb(err.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"{type(err).__name__}: {key[:300]}{where}"


def _relax_conv2d(geom: ConvGeometry, dtype: str) -> tvm.IRModule:
    bb = relax.BlockBuilder()
    x = relax.Var("data", relax.TensorType([geom.n, geom.c, geom.h, geom.w], dtype))
    w = relax.Var("weight", relax.TensorType([geom.o, geom.cg, geom.kh, geom.kw], dtype))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit(
                relax.op.nn.conv2d(
                    x, w, strides=geom.strides, padding=geom.padding, dilation=geom.dilation, groups=geom.groups
                )
            )
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def _upstream_passes():
    """The TIR-producing part of ``relax.backend.gpu_generic.legalize_passes``."""
    from tvm.s_tir import dlight as dl

    return tvm.transform.Sequential(
        [
            relax.transform.LegalizeOps(),
            relax.transform.AnnotateTIROpPattern(),
            relax.transform.FoldConstant(),
            relax.transform.FuseOps(),
            relax.transform.FuseTIR(),
            dl.ApplyDefaultSchedule(
                dl.gpu.Matmul(),
                dl.gpu.GEMV(),
                dl.gpu.Reduction(),
                dl.gpu.GeneralReduction(),
                dl.gpu.Fallback(),
            ),
        ]
    )


def upstream_conv2d(data_shape, weight_shape, strides=1, padding=0, dilation=1, groups=1, dtype="float32"):
    """Upstream TVM's scheduled generic-OpenCL PrimFunc for one conv2d.

    Parameters are ``(data, weight, output)`` buffers in NCHW / OIHW / NCHW
    (scope ``global``). The function is named :data:`FUNCTION_NAME`; build it
    with ``tir_adreno.codegen.build.build(func, target=build.OPENCL_TARGET)``.
    """
    geom = conv2d_geometry(data_shape, weight_shape, strides, padding, dilation, groups)
    check_dtype(dtype)
    target = tvm.target.Target(_build.OPENCL_TARGET)
    try:
        with target:
            mod = _upstream_passes()(_relax_conv2d(geom, dtype))
    except Exception as err:  # TVM raises assorted errors from inside its passes
        raise UpstreamScheduleError(
            f"upstream TVM's GPU pipeline fails on conv2d data {tuple(data_shape)}, weight "
            f"{tuple(weight_shape)}, strides {geom.strides}, padding {geom.padding}, dilation "
            f"{geom.dilation}, groups {geom.groups}: {_describe(err)}"
        ) from err
    funcs = [(gv.name_hint, f) for gv, f in mod.functions.items() if isinstance(f, tirx.PrimFunc)]
    # TOPI's conv keeps padding as a stage inside one PrimFunc; dlight inlines it.
    # More than one function would need chaining through intermediates, which a
    # single conv2d never produces: refuse rather than benchmark something else.
    if len(funcs) != 1:
        names = [n for n, _ in funcs]
        raise RuntimeError(f"upstream pipeline produced {len(funcs)} PrimFuncs {names}, expected 1")
    (_, func), = funcs
    if not (func.attrs and func.attrs.get("tirx.is_scheduled", False)):
        raise RuntimeError("dlight left the upstream conv2d unscheduled")
    return func.with_attr("global_symbol", FUNCTION_NAME)


def build_upstream_conv2d(data_shape, weight_shape, strides=1, padding=0, dilation=1, groups=1, dtype="float32"):
    """:func:`upstream_conv2d` compiled (cached) to a :class:`~tir_adreno.runtime.bundle.KernelModule`."""
    func = upstream_conv2d(data_shape, weight_shape, strides, padding, dilation, groups, dtype)
    try:
        return _build.build_cached(func, _build.OPENCL_TARGET)
    except NotImplementedError:
        raise  # our builder's own limits (workspace, dynamic shapes) name themselves
    except Exception as err:  # TVM's default TIR pipeline rejects upstream's own schedule
        raise UpstreamScheduleError(
            f"TVM's default TIR pipeline cannot lower upstream's scheduled conv2d for data "
            f"{tuple(data_shape)}, weight {tuple(weight_shape)}, groups {groups}: {_describe(err)}"
        ) from err


def run_upstream_conv2d(x, w, strides=1, padding=0, dilation=1, groups=1, device=None) -> np.ndarray:
    """Run upstream's generic OpenCL conv2d on NCHW ``x`` and OIHW ``w``; returns NCHW."""
    for name, a in (("x", x), ("w", w)):
        if not isinstance(a, np.ndarray) or a.ndim != 4:
            shape = getattr(a, "shape", "")
            raise ValueError(f"{name} must be a 4-d numpy.ndarray, got {type(a).__name__} {shape}")
    if x.dtype != w.dtype:
        raise TypeError(f"w has dtype {w.dtype}, expected x's dtype {x.dtype}")
    geom = conv2d_geometry(x.shape, w.shape, strides, padding, dilation, groups)
    dev = runtime.get_device(device)
    module = build_upstream_conv2d(x.shape, w.shape, strides, padding, dilation, groups, x.dtype.name)
    loaded = dev.load(module)
    data, weight, out = loaded.alloc_params(FUNCTION_NAME)
    data.upload(x)
    weight.upload(w)
    out.poison()
    if out.shape != geom.out_shape:
        raise RuntimeError(f"upstream output shape {out.shape} != expected {geom.out_shape}")
    loaded(FUNCTION_NAME, data, weight, out)
    return out.numpy()
