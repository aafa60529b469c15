"""The texture bounds sanitizer: image coordinates checked against the image's size.

PoCL's clamp sampler (and Oclgrind) return 0 for an out-of-range read, which
equals the padding, so a kernel that lost its coordinate clamps still passes
every numeric test. :func:`instrument` rewrites a bundle's OpenCL C so that
every ``READ_IMAGEF``/``read_image*``/``write_image*`` call first checks its
coordinate against ``get_image_width/height/array_size`` and records the
first violation (kernel, argument, coordinate, image size) in an extra int
buffer, the last argument of every kernel; the runtime binds that buffer and
raises :class:`BoundsError` after the launch. Text only: no TVM needed.
"""

from __future__ import annotations

import dataclasses
import os
import re

from tir_adreno.runtime.bundle import KernelArg, KernelModule
from tir_adreno.runtime.errors import SettingError

#: Environment switch, read here only (``build.build``'s ``check_bounds=None`` asks :func:`enabled`).
ENV = "TIR_ADRENO_CHECK_BOUNDS"
#: Name of the record buffer parameter appended to every kernel.
BUFFER_PARAM = "tir_adreno_bounds"
#: Ints in the record: flag, kernel index, argument index, is_write, x, y, layer, width, height, layers.
RECORD_INTS = 10

_HELPER = f"""// tir-adreno bounds sanitizer (TIR_ADRENO_CHECK_BOUNDS)
int4 tir_adreno_check(__global int* rec, int kernel_id, int arg_id, int is_write, int4 c, int w, int h, int d) {{
  if (c.x < 0 || c.x >= w || c.y < 0 || c.y >= h || c.z < 0 || c.z >= d) {{
    if (atomic_cmpxchg(rec, 0, 1) == 0) {{
      rec[1] = kernel_id; rec[2] = arg_id; rec[3] = is_write;
      rec[4] = c.x; rec[5] = c.y; rec[6] = c.z; rec[7] = w; rec[8] = h; rec[9] = d;
    }}
  }}
  return c;
}}
#define TIR_ADRENO_SIZE(img) (int)get_image_width(img), (int)get_image_height(img), (int)get_image_array_size(img)
#define TIR_ADRENO_READ(F, K, A, img, smp, coord) \\
  F(img, smp, tir_adreno_check({BUFFER_PARAM}, K, A, 0, coord, TIR_ADRENO_SIZE(img)))
#define TIR_ADRENO_WRITE(F, K, A, img, coord, value) \\
  F(img, tir_adreno_check({BUFFER_PARAM}, K, A, 1, coord, TIR_ADRENO_SIZE(img)), value)

"""

_KERNEL = re.compile(r"__kernel\s+void\s+(\w+)\s*\(([^)]*)\)\s*([;{])")
_READ = re.compile(r"\b(READ_IMAGE[FH]|read_image[fhi])\(\s*(\w+)\s*,")
_WRITE = re.compile(r"\b(write_image[fhi])\(\s*(\w+)\s*,")
_ANY_ACCESS = re.compile(r"\b(?:READ_IMAGE[FH]|read_image[fhi]|write_image[fhi])\s*\(")


class BoundsError(RuntimeError):
    """A kernel read or wrote an image outside its size (found by the bounds sanitizer)."""


def enabled() -> bool:
    """Whether ``$TIR_ADRENO_CHECK_BOUNDS`` asks for instrumented builds ("1", "true", "on")."""
    value = os.environ.get(ENV, "").strip().lower()
    if value in ("", "0", "false", "off", "no"):
        return False
    if value in ("1", "true", "on", "yes"):
        return True
    raise SettingError(f"${ENV} must be 0 or 1, got {value!r}")


def kernel_names(source: str) -> list[str]:
    """Kernel names in order of definition (the index :func:`instrument` records)."""
    return [m.group(1) for m in _KERNEL.finditer(source) if m.group(3) == "{"]


def _arg_names(params: str) -> list[str]:
    return [p.strip().split()[-1].lstrip("*") for p in params.split(",") if p.strip()]


def instrument(module: KernelModule) -> KernelModule:
    """``module`` with every image access checked and a record buffer as every kernel's last argument."""
    if module.check_bounds:
        return module
    source = module.source
    kernels = kernel_names(source)
    pieces, last = [], 0
    for m in _KERNEL.finditer(source):
        name, params, end = m.groups()
        pieces.append(source[last : m.start()])
        pieces.append(f"__kernel void {name}({params}, __global int* {BUFFER_PARAM}){end}")
        last = m.end()
        if end == "{":  # the body runs to the next kernel (TVM emits one function after another)
            nxt = _KERNEL.search(source, last)
            body = source[last : nxt.start() if nxt else len(source)]
            pieces.append(_instrument_body(body, kernels.index(name), _arg_names(params), name))
            last += len(body)
    pieces.append(source[last:])
    source = "".join(pieces)
    first = _KERNEL.search(source)
    source = source[: first.start()] + _HELPER + source[first.start() :] if first else source
    bounds = KernelArg("bounds")
    functions = {
        name: dataclasses.replace(
            plan, launches=tuple(dataclasses.replace(x, args=x.args + (bounds,)) for x in plan.launches)
        )
        for name, plan in module.functions.items()
    }
    return KernelModule(source, functions, module.target, check_bounds=True)


def _instrument_body(body: str, kernel: int, args: list[str], name: str) -> str:
    def replace(kind):
        def sub(m):
            func, image = m.groups()
            if image not in args:
                raise NotImplementedError(f"{name}: image access to {image}, which is not a kernel argument")
            return f"TIR_ADRENO_{kind}({func}, {kernel}, {args.index(image)}, {image},"

        return sub

    lines = body.split("\n")
    for i, line in enumerate(lines):
        if line.lstrip().startswith("#"):  # the next function's READ_IMAGEF definitions
            continue
        lines[i] = _WRITE.sub(replace("WRITE"), _READ.sub(replace("READ"), line))
        if _ANY_ACCESS.search(lines[i]):  # every access was rewritten to "TIR_ADRENO_...(F, ...": none may be left
            raise NotImplementedError(f"{name}: an image access of an unknown form cannot be checked: {line.strip()}")
    return "\n".join(lines)


def describe(record, module: KernelModule, function: str) -> str | None:
    """The error message for a record buffer's contents, or None when no access was out of range."""
    flag, kernel, arg, is_write, x, y, z, w, h, d = (int(v) for v in record[:RECORD_INTS])
    if not flag:
        return None
    kernel_name = kernel_names(module.source)[kernel]
    what = f"argument {arg}"
    for launch in module[function].launches:
        if launch.kernel == kernel_name and arg < len(launch.args) and launch.args[arg].kind == "tensor":
            what = f"parameter {module[function].params[launch.args[arg].param].name}"
            break
    verb = "wrote" if is_write else "read"
    return f"{kernel_name}: {what} {verb} at (x={x}, y={y}, layer={z}) outside {w} x {h} x {d}"
