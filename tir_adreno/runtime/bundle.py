"""A compiled kernel module: OpenCL C source plus a launch plan.

This is what :func:`tir_adreno.codegen.build.build` produces and what the runtime
loads. It is plain data (JSON + source), so a machine without TVM can run it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from tir_adreno.runtime import cache
from tir_adreno.runtime.texture import is_texture_scope

FORMAT_VERSION = 1


@dataclass(frozen=True)
class TensorSpec:
    """A PrimFunc parameter: name, shape, dtype and storage scope.

    ``storage``: the element type of the allocation when it differs from ``dtype``
    ("float16" for a float32 tensor kept in half: "float16_acc32"). On an RGBA half image
    the kernel still reads and writes float4 (``read_imagef`` converts in the texture
    unit), so only the allocation, upload and download see it; a half buffer is read with
    ``vload_half`` by a kernel built for it (``codegen.build.build(half=...)``, which sets
    the storage of those parameters).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    scope: str
    storage: str | None = None

    @property
    def storage_dtype(self) -> str:
        return self.storage or self.dtype

    @classmethod
    def from_dict(cls, d):
        return cls(d["name"], tuple(d["shape"]), d["dtype"], d["scope"], d.get("storage"))


@dataclass(frozen=True)
class KernelArg:
    """One kernel argument: a parameter of the function (``param`` index) or a scalar."""

    kind: str  # "tensor" | "scalar" | "bounds" (the bounds sanitizer's record buffer, bound by the runtime)
    param: int = -1
    dtype: str = ""
    value: float = 0

    @classmethod
    def from_dict(cls, d):
        return cls(**d)


@dataclass(frozen=True)
class Launch:
    """One kernel launch: OpenCL kernel name, arguments, NDRange."""

    kernel: str
    args: tuple[KernelArg, ...]
    global_size: tuple[int, ...]
    local_size: tuple[int, ...]

    @classmethod
    def from_dict(cls, d):
        return cls(
            d["kernel"],
            tuple(KernelArg.from_dict(a) for a in d["args"]),
            tuple(d["global_size"]),
            tuple(d["local_size"]),
        )


@dataclass(frozen=True)
class FunctionPlan:
    """A PrimFunc as the runtime sees it: its parameters and its launches in order."""

    name: str
    params: tuple[TensorSpec, ...]
    launches: tuple[Launch, ...]

    @classmethod
    def from_dict(cls, d):
        return cls(
            d["name"],
            tuple(TensorSpec.from_dict(p) for p in d["params"]),
            tuple(Launch.from_dict(x) for x in d["launches"]),
        )


@dataclass
class KernelModule:
    """OpenCL source and the launch plan of every function in it."""

    source: str
    functions: dict[str, FunctionPlan] = field(default_factory=dict)
    target: str = ""
    #: Built with the texture bounds sanitizer (:mod:`tir_adreno.runtime.bounds`).
    check_bounds: bool = False

    def __getitem__(self, name: str) -> FunctionPlan:
        try:
            return self.functions[name]
        except KeyError:
            raise KeyError(f"no function {name!r}; module has {sorted(self.functions)}") from None

    def with_storage(self, storage: str | None, positions: frozenset | None = None) -> "KernelModule":
        """This module with its texture parameters stored as ``storage`` ("float16": half
        images for float32 kernels, precision "float16_acc32"); the same source, so the
        same program. Itself for None. ``positions``: the parameters that may be stored so
        (default: all); a texture parameter not among them stays a float32 image (statistics
        a kernel passes to another, pinned to float32)."""
        if storage is None:
            return self

        def store(i: int, spec: TensorSpec) -> TensorSpec:
            keep = not is_texture_scope(spec.scope) or spec.dtype == storage or (positions is not None and i not in positions)
            return spec if keep else replace(spec, storage=storage)

        funcs = {k: replace(f, params=tuple(store(i, p) for i, p in enumerate(f.params))) for k, f in self.functions.items()}
        return KernelModule(self.source, funcs, self.target, self.check_bounds)

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": FORMAT_VERSION,
                "target": self.target,
                "check_bounds": self.check_bounds,
                "source": self.source,
                "functions": {k: asdict(v) for k, v in self.functions.items()},
            }
        )

    @classmethod
    def from_json(cls, text: str) -> "KernelModule":
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_dict(cls, d: dict) -> "KernelModule":
        """The module of :meth:`to_json`'s document, already parsed (a saved model holds many)."""
        if d.get("format") != FORMAT_VERSION:
            raise ValueError(f"kernel bundle format {d.get('format')} != {FORMAT_VERSION}")
        funcs = {k: FunctionPlan.from_dict(v) for k, v in d["functions"].items()}
        return cls(d["source"], funcs, d.get("target", ""), bool(d.get("check_bounds", False)))

    def save(self, path) -> None:
        """Write the bundle to ``path`` atomically (integrity-checked on load)."""
        cache.write(Path(path), self.to_json().encode())

    @classmethod
    def load(cls, path) -> "KernelModule":
        payload = cache.read(Path(path))
        if payload is None:
            raise ValueError(f"{path}: missing, truncated or corrupt kernel bundle")
        return cls.from_json(payload.decode())
