"""``codegen.script_parser.call_factory``: the same PrimFuncs as a plain factory call, TVM left as it
was, errors raised in the caller (the defect it avoids: tests/upstream/test_tvm_defect17_*)."""

import pytest
import tvm
from tvm.script.parser.core.parser import ScriptMacro

from primfuncs.conv import conv2d_nchw4c, depthwise_conv2d_nchw4c
from primfuncs.conv.config import ConvConfig
from primfuncs.pool2d import max_pool2d
from tir_adreno.codegen import script_parser

CASES = [
    (conv2d_nchw4c, ((1, 6, 7, 9), (8, 6, 3, 3)), {"padding": 1}),
    (conv2d_nchw4c, ((1, 8, 9, 9), (8, 8, 1, 1)), {"config": ConvConfig(split_k=2)}),
    (depthwise_conv2d_nchw4c, ((1, 8, 10, 10), (8, 1, 3, 3)), {"strides": 2, "padding": 1}),
    (max_pool2d, ((1, 2, 9, 9, 4),), {"pool_size": 3, "strides": 2, "padding": 1}),
]


@pytest.mark.parametrize("factory,args,kwargs", CASES, ids=lambda v: getattr(v, "__name__", None))
def test_same_primfunc_as_a_plain_call(factory, args, kwargs):
    expected = factory(*args, **kwargs)
    tvm.ir.assert_structural_equal(script_parser.call_factory(factory, *args, **kwargs), expected)


def test_macro_lookup_restored_after_the_call():
    original = ScriptMacro._find_parser_def
    factory, args, kwargs = CASES[0]
    script_parser.call_factory(factory, *args, **kwargs)
    assert ScriptMacro._find_parser_def is original
    with script_parser.fast_macro_lookup():
        with script_parser.fast_macro_lookup():
            assert ScriptMacro._find_parser_def is script_parser._find_parser_def
        assert ScriptMacro._find_parser_def is script_parser._find_parser_def  # still inside the outer one
    assert ScriptMacro._find_parser_def is original


def test_factory_error_raised_in_the_caller():
    with pytest.raises(ValueError, match="channels"):
        script_parser.call_factory(conv2d_nchw4c, (1, 6, 7, 9), (8, 5, 3, 3))
    assert ScriptMacro._find_parser_def is script_parser._slow_find_parser_def


def test_no_parser_is_the_same_error():
    with pytest.raises(RuntimeError, match=ScriptMacro.parser_object_name):
        script_parser._find_parser_def(None)
