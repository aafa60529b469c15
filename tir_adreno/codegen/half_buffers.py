"""Half storage for the buffers of float32 kernels ("float16_acc32" on buffers).

A half image needs nothing from the kernel (``read_imagef``/``write_imagef`` convert in the
texture unit); a half buffer does: its float32 loads and stores become the core-OpenCL
conversions ``vload_half{N}`` / ``vstore_half{N}_rte`` (no ``cl_khr_fp16``: ``half`` is used
only as a pointer type, which OpenCL allows everywhere). The rewrite runs on the lowered
device module (after vectorization and flattening), so every factory stays as it is: the
parameter becomes ``__global half*``, each ``A[i]`` a ``vload_half(0, &A[i])`` and each
``A[Ramp(i, 1, n)]`` a ``vload_halfn(0, &A[i])``; stores likewise, rounding to nearest even
(as NumPy's ``astype(float16)`` does on upload).
"""

from __future__ import annotations

import re

import tvm_ffi
from tvm import ir, tirx

#: Vector widths ``vload_halfN`` / ``vstore_halfN`` exist for.
_WIDTHS = (1, 2, 3, 4, 8, 16)
#: TVM's OpenCL codegen guards any ``half`` in the source with this block (``#error`` without
#: cl_khr_fp16). Kernels that use half only as a pointer type need no extension: it goes.
_FP16_GUARD = re.compile(r"#ifdef cl_khr_fp16\n.*?#endif\n", re.S)


def _lanes(dtype: str) -> int:
    return int(dtype.split("x")[1]) if "x" in dtype else 1


def _base(index, kernel: str, name: str):
    """The first element of a unit-stride access (a scalar index or ``Ramp(base, 1, n)``)."""
    if type(index).__name__ == "Ramp":
        if not (isinstance(index.stride, tirx.IntImm) and int(index.stride.value) == 1):
            raise NotImplementedError(f"kernel {kernel}: half buffer {name} accessed with stride {index.stride}")
        return index.base
    if "x" in str(index.ty.dtype):
        raise NotImplementedError(f"kernel {kernel}: half buffer {name} accessed with vector index {index}")
    return index


class _HalfParams:
    """The rewrite of one kernel: float32 buffers declared on ``params`` become half."""

    def __init__(self, func, positions, kernel: str):
        self.kernel = kernel
        self.ptrs = {}  # old pointer param -> its half twin
        for i in positions:
            old = func.params[i]
            if str(old.ty.element_type.dtype) != "float32":
                continue
            self.ptrs[old] = tirx.Var(old.name, ir.PointerType(ir.PrimType("float16"), old.ty.storage_scope))
        self.bufs = {}  # old buffer var -> half buffer var

    def declare(self, node):
        ptr = self.ptrs.get(node.data)
        if ptr is None:
            return node
        buf = node.buffer
        half = tirx.decl_buffer(tuple(buf.ty.shape), "float16", buf.name, data=ptr, scope=ptr.ty.storage_scope)
        self.bufs[buf] = half
        return tirx.DeclBuffer(half, data=ptr)

    def address(self, half, index, name: str):
        (index,) = index
        return tirx.address_of(tirx.BufferLoad(half, [_base(index, self.kernel, name)]))

    def load(self, node):
        half = self.bufs.get(node.source)
        if half is None:
            return node
        dtype = str(node.ty.dtype)
        n = _lanes(dtype)
        if n not in _WIDTHS:
            raise NotImplementedError(f"kernel {self.kernel}: {n}-lane load of half buffer {half.name}")
        suffix = "" if n == 1 else str(n)
        return tirx.call_pure_extern(dtype, f"vload_half{suffix}", 0, self.address(half, node.indices, half.name))

    def store(self, node):
        half = self.bufs.get(node.buffer)
        if half is None:
            return node
        n = _lanes(str(node.value.ty.dtype))
        if n not in _WIDTHS:
            raise NotImplementedError(f"kernel {self.kernel}: {n}-lane store to half buffer {half.name}")
        suffix = "" if n == 1 else str(n)
        call = tirx.call_extern("int32", f"vstore_half{suffix}_rte", node.value, 0, self.address(half, node.indices, half.name))
        return tirx.Evaluate(call)

    def __call__(self, node):
        kind = type(node).__name__
        if kind == "DeclBuffer":
            return self.declare(node)
        if kind == "TensorLoad":
            return self.load(node)
        if kind == "BufferStore":
            return self.store(node)
        return node


def _uses(body, old_vars) -> list[str]:
    """Names of ``old_vars`` still referenced in ``body`` (a rewrite that missed an access)."""
    left = []

    def visit(node):
        if type(node).__name__ == "Var" and any(node.same_as(v) for v in old_vars):
            left.append(node.name)
        return node

    tvm_ffi.structural_map(body, visit)
    return left


def half_params(func: tirx.PrimFunc, positions, kernel: str) -> tirx.PrimFunc:
    """Device kernel ``func`` with its float32 buffer parameters at ``positions`` stored in half."""
    rewrite = _HalfParams(func, positions, kernel)
    if not rewrite.ptrs:
        return func
    # Pre-order: a DeclBuffer comes before the accesses to its buffer (flat statement lists),
    # and the replacement's children (indices, stored values) are visited after it.
    body = tvm_ffi.structural_map(func.body, rewrite, order="pre")
    left = _uses(body, list(rewrite.ptrs) + list(rewrite.bufs))
    if left:
        raise NotImplementedError(f"kernel {kernel}: half buffers {sorted(set(left))} used other than by loads and stores")
    params = [rewrite.ptrs.get(p, p) for p in func.params]
    return tirx.PrimFunc(params, body, func.ret_type, func.attrs)


def strip_fp16_guard(source: str) -> str:
    """``source`` without TVM's cl_khr_fp16 guard (kernels that keep half only behind pointers)."""
    return _FP16_GUARD.sub("", source)
