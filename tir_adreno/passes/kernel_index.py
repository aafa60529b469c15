"""Kernels named by their factory call, so a compile parses each kernel's TVMScript at most once
and a warm compile not at all (issue 22).

Parsing a conv factory's ``@T.prim_func`` costs ~0.35 s, and the bundle cache is keyed on the
parsed PrimFunc's script, so before this every compile parsed every kernel to look it up. A
:class:`KernelCall` (factory, arguments, stage, attributes) has a key computed *before* parsing:
the factory's module and name, its normalized arguments and the hash of the ``primfuncs``
package sources (``strategy.records.kernels_version``), so an edited kernel module is a new key.

- In process, :meth:`KernelCall.primfunc` is memoized: each (shape, config) is parsed once.
- On disk, the index maps the key to what the pass and the planner need of the kernel without
  the PrimFunc: its parameter specs, its symbol and the TVMScript of the kernel as built (the
  bundle cache's key comes from it). An entry is a ``runtime.cache`` file (atomic, checksummed,
  keyed on the TVM version too): a corrupt or foreign entry is a miss.
- The pass then emits ``call_tir`` to a :func:`stub` (the parameters only, no body) carrying
  :data:`CALL_ATTR`; ``compiler.plan_module`` resolves it to the cached bundle and calls the
  factory (:func:`materialize`) only on a bundle miss.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, is_dataclass, replace

import numpy as np
import tvm
from tvm import tirx

from tir_adreno.codegen.build import module_script
from tir_adreno.codegen.script_parser import call_factory
from tir_adreno.passes.op_info import CONFIG_ATTR, FLOAT32_ATTR, OP_ATTR, OURS_ATTR, SOURCE_ATTR
from tir_adreno.runtime import cache
from tir_adreno.strategy.records import kernels_version

#: PrimFunc attribute of a stub: the key of the :class:`KernelCall` it stands for.
CALL_ATTR = "tir_adreno.kernel_call"

_parsed: dict[str, object] = {}  # factory key -> what the factory returned
_calls: dict[str, "KernelCall"] = {}  # call key -> the call, to materialize a stub
_entries: dict[str, dict] = {}  # call key -> index entry
_version: list[str] = []
#: How many times a factory was called (parsed TVMScript) in this process: tests count it.
factory_calls = [0]


def _kernels_version() -> str:
    if not _version:
        _version.append(kernels_version())
    return _version[0]


class UnkeyedArgument(TypeError):
    """A factory argument that has no stable key: the call is made the plain way (parsed)."""


def normalized(value):
    """``value`` as plain data whose repr says everything a factory argument says: numbers,
    strings, None, sequences, dicts and dataclasses (geometry, config, epilogue), recursively.
    TypeError for anything else (a repr such as ``<X at 0x...>`` or a truncated array would
    make keys that collide or never match)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):  # a NumPy scalar (a clip bound read from a constant)
        return normalized(value.item())
    if isinstance(value, (tuple, list)):
        return tuple(normalized(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), normalized(v)) for k, v in value.items()))
    if is_dataclass(value) and not isinstance(value, type):
        return (type(value).__qualname__, tuple((f.name, normalized(getattr(value, f.name))) for f in fields(value)))
    raise UnkeyedArgument(f"kernel factory argument {value!r} ({type(value).__name__}) has no stable key")


@dataclass(frozen=True)
class KernelCall:
    """One kernel as a factory call: ``factory(*args, **kwargs)``, its ``stage`` when the factory
    returns several (Winograd's ``.stages``), then ``attrs`` set on the PrimFunc in order."""

    factory: object
    args: tuple
    kwargs: tuple
    stage: int | None = None
    attrs: tuple = ()

    @classmethod
    def of(cls, factory, *args, stage: int | None = None, **kwargs) -> "KernelCall":
        return cls(factory, args, tuple(sorted(kwargs.items())), stage)

    def with_attr(self, name: str, value) -> "KernelCall":
        return replace(self, attrs=self.attrs + ((name, value),))

    @property
    def factory_key(self) -> str:
        f = self.factory
        arguments = repr(normalized((self.args, dict(self.kwargs))))
        return cache.key("kernel-call", tvm.__version__, _kernels_version(), f.__module__, f.__qualname__, arguments)

    @property
    def key(self) -> str:
        return cache.key(self.factory_key, repr(self.stage), repr(normalized(self.attrs)))

    def primfunc(self) -> tirx.PrimFunc:
        """The PrimFunc (the factory is called once per process for each factory key)."""
        fkey = self.factory_key
        if fkey not in _parsed:
            factory_calls[0] += 1
            _parsed[fkey] = call_factory(self.factory, *self.args, **dict(self.kwargs))
        built = _parsed[fkey]
        func = built if self.stage is None else built.stages[self.stage]
        for name, value in self.attrs:
            func = func.with_attr(name, value)
        return func


def _path(key: str):
    return cache.cache_dir() / "kernel-index" / f"{key}.json"


def emitted(func: tirx.PrimFunc, op_info: dict | None = None) -> tirx.PrimFunc:
    """``func`` as the pass puts it in the module: scheduled (dlight leaves it), marked ours,
    the op it computes (``op_info``) attached, no global symbol (the module names it)."""
    func = func.with_attr("tirx.is_scheduled", True).with_attr(OURS_ATTR, True)
    if op_info is not None:
        func = func.with_attr(OP_ATTR, json.dumps(op_info, sort_keys=True))
    return func.without_attr("global_symbol")


def kernel_func(prim: tirx.PrimFunc) -> tirx.PrimFunc:
    """``prim`` without the attributes that describe it (config, its source, the op, float32
    parameters): what is built and cached."""
    for attr in (CONFIG_ATTR, SOURCE_ATTR, OP_ATTR, FLOAT32_ATTR):
        prim = prim.without_attr(attr)
    return prim


def symbol(func: tirx.PrimFunc) -> str | None:
    return str(func.attrs["global_symbol"]) if func.attrs is not None and "global_symbol" in func.attrs else None


def _describe(func: tirx.PrimFunc) -> dict:
    """The index entry of ``func`` as the factory made it (its call's attributes set)."""
    params = [[b.name, [int(d) for d in b.shape], str(b.dtype), str(b.scope())] for b in func.params]
    return {"params": params, "symbol": symbol(func), "script": module_script(kernel_func(emitted(func)))}


def lookup(call: KernelCall) -> dict:
    """The index entry of ``call``: from memory, then disk, else the factory is called and the
    entry written."""
    key = call.key
    _calls[key] = call
    if key in _entries:
        return _entries[key]
    payload = cache.read(_path(key), key)
    entry = None
    if payload is not None:
        try:
            entry = json.loads(payload.decode())
            entry = entry if {"params", "symbol", "script"} <= set(entry) else None
        except (ValueError, UnicodeDecodeError):
            entry = None
    if entry is None:
        func = call.primfunc()
        entry = _describe(func)
        cache.store(_path(key), json.dumps(entry).encode(), key)
    _entries[key] = entry
    return entry


def stub(entry: dict, call: KernelCall) -> tirx.PrimFunc:
    """A PrimFunc with ``entry``'s parameters and no body, standing for ``call``'s kernel."""
    params = [tirx.decl_buffer(shape, dtype, name, scope=scope) for name, shape, dtype, scope in entry["params"]]
    func = tirx.PrimFunc(params, tirx.Evaluate(0))
    return func.with_attr(CALL_ATTR, call.key)


def is_stub(func) -> bool:
    return func.attrs is not None and CALL_ATTR in func.attrs


def entry_of(func) -> dict:
    return _entries[str(func.attrs[CALL_ATTR])]


def call_of(stub_func) -> KernelCall:
    """The :class:`KernelCall` a stub stands for (in the process that made the stub)."""
    return _calls[str(stub_func.attrs[CALL_ATTR])]


def materialize(stub_func) -> tirx.PrimFunc:
    """The kernel a stub stands for, as it gets built (:func:`kernel_func`): the factory is called."""
    return kernel_func(emitted(call_of(stub_func).primfunc()))


def kernel(factory, *args, **kwargs) -> KernelCall:
    """``factory(*args, **kwargs)`` as a :class:`KernelCall` for ``Rewriter.emit_kernel``."""
    return KernelCall.of(factory, *args, **kwargs)
