"""The kernel index (``passes.kernel_index``, issue 22): a warm compile parses no TVMScript and
plans exactly what a compile with real PrimFuncs plans; a corrupt index entry is a miss; an
edited ``primfuncs`` module is a new key. Counts, not timings."""

import shutil

import numpy as np
import primfuncs
import pytest
import tvm.tirx.script.parser.entry as tirx_entry  # where @T.prim_func parses

from helpers.onnx_graphs import tiny_model
from tir_adreno.codegen import build
from tir_adreno.compiler import compile_plan
from tir_adreno.passes import kernel_index
from tir_adreno.strategy.profile import get_profile


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """An empty disk cache; :func:`forget` then makes this process look new (no memos)."""
    monkeypatch.setenv("TIR_ADRENO_CACHE_DIR", str(tmp_path / "cache"))
    forget()
    yield tmp_path / "cache"
    forget()


def forget():
    for memo in (kernel_index._parsed, kernel_index._calls, kernel_index._entries, build._memory_cache):
        memo.clear()
    kernel_index._version.clear()


@pytest.fixture
def parses(monkeypatch):
    """How many TVMScript functions were parsed since the fixture started."""
    count = [0]
    parse = tirx_entry.parse

    def counting(*args, **kwargs):
        count[0] += 1
        return parse(*args, **kwargs)

    monkeypatch.setattr(tirx_entry, "parse", counting)
    return count


def _compile(prims=None):
    plan, kernels, weights = compile_plan(tiny_model(), get_profile("adreno"), progress=lambda _: None, prims=prims)
    calls = list(plan.calls)
    return calls, {k: m.to_json() for k, m in kernels.items()}, {k: w.tobytes() for k, w in weights.items()}


def test_warm_compile_parses_nothing_and_plans_the_same(fresh, parses):
    cold = _compile()
    assert parses[0] > 0 and kernel_index.factory_calls[0] > 0
    assert list((fresh / "kernel-index").iterdir())
    forget()
    before = kernel_index.factory_calls[0], parses[0]
    assert _compile() == cold
    assert (kernel_index.factory_calls[0], parses[0]) == before  # no factory called, nothing parsed
    forget()
    assert _compile(prims={}) == cold  # real PrimFuncs (dump, the workbench) plan the same


def test_each_kernel_is_parsed_once_per_process(fresh):
    start = kernel_index.factory_calls[0]
    _compile()
    first = kernel_index.factory_calls[0] - start
    _compile(prims={})  # wants the PrimFuncs: the memo has them
    assert kernel_index.factory_calls[0] - start == first


def test_a_corrupt_index_entry_is_a_miss(fresh, parses):
    cold = _compile()
    entries = list((fresh / "kernel-index").iterdir())
    for path in entries:
        data = bytearray(path.read_bytes())
        data[-3] ^= 0xFF
        path.write_bytes(bytes(data))
    forget()
    before = kernel_index.factory_calls[0]
    assert _compile() == cold
    assert kernel_index.factory_calls[0] - before == len(entries)  # every entry rebuilt from its factory
    forget()
    before = kernel_index.factory_calls[0]
    assert _compile() == cold
    assert kernel_index.factory_calls[0] == before  # and rewritten whole


def test_an_edited_primfuncs_module_is_a_new_key(fresh, tmp_path, monkeypatch):
    call = kernel_index.kernel(primfuncs.elementwise.copy, (1, 2, 3, 3, 4), scope="global.texture")
    copy = tmp_path / "primfuncs"
    shutil.copytree(primfuncs.__path__[0], copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(primfuncs, "__path__", [str(copy)])
    kernel_index._version.clear()
    unchanged = call.key
    kernel_index._version.clear()
    assert call.key == unchanged
    with open(copy / "elementwise.py", "a") as f:
        f.write("\n# an edit\n")
    kernel_index._version.clear()
    assert call.key != unchanged


def test_arguments_without_a_stable_key_are_refused():
    with pytest.raises(kernel_index.UnkeyedArgument):
        kernel_index.kernel(primfuncs.elementwise.copy, object()).key
    numpy_scalar = kernel_index.kernel(primfuncs.elementwise.clip, (1, 1, 1, 1, 4), np.float32(0.5), 6.0)
    assert numpy_scalar.key == kernel_index.kernel(primfuncs.elementwise.clip, (1, 1, 1, 1, 4), 0.5, 6.0).key
