"""TVM 0.27 defect 11: a scalar bound inside an sblock and used as an index is "ill-formed".

    with T.sblock("copy"):
        vi = T.axis.spatial(8, i)
        j = vi * 2
        B[vi] = A[j]

is rejected by the TVMScript parser's well-formedness check:

    DiagnosticError: error: Program is not well-formed. ...
    TIR is ill-formed: buffer j is used at ...block.reads[0].region[0].min.source
    without a prior DeclBuffer or other declaration.

The parser turns ``j = vi * 2`` into a block-local scalar (printed as
``j = T.Buffer((1,), "int32", scope="local")``, ``j: T.int32 = vi * 2``), and
the inferred block signature becomes ``T.reads(A[j], j.source[0])``: the read
region of ``A`` refers to ``j`` outside the body that declares it. With
``check_well_formed=False`` the same function parses and builds; with the
signature written out (``T.reads(A[vi * 2])``, the control test) it parses.
"""

import pytest
import tvm
from tvm.script import tirx as T
from defect import KnownDefect, pinned


def test_control_explicit_signature_parses():
    @T.prim_func(s_tir=True)
    def copy(a: T.handle, b: T.handle):
        A = T.match_buffer(a, (16,), "float32")
        B = T.match_buffer(b, (8,), "float32")
        for i in range(8):
            with T.sblock("copy"):
                vi = T.axis.spatial(8, i)
                T.reads(A[vi * 2])
                T.writes(B[vi])
                j = vi * 2
                B[vi] = A[j]

    assert isinstance(copy, tvm.tirx.PrimFunc)


def parse_copy():
    """The repro: a strided copy whose index ``j`` is bound inside the sblock."""

    @T.prim_func(s_tir=True)
    def copy(a: T.handle, b: T.handle):
        A = T.match_buffer(a, (16,), "float32")
        B = T.match_buffer(b, (8,), "float32")
        for i in range(8):
            with T.sblock("copy"):
                vi = T.axis.spatial(8, i)
                j = vi * 2
                B[vi] = A[j]

    return copy


@pytest.mark.xfail(
    strict=True,
    raises=KnownDefect,
    reason="TVM 0.27: a value bound inside an sblock and used as an index leaks "
    "into the inferred T.reads: 'buffer j is used ... without a prior DeclBuffer'",
)
def test_sblock_bound_scalar_index_parses():
    with pinned(r"TIR is ill-formed: buffer j is used"):
        try:
            copy = parse_copy()
        except tvm.error.DiagnosticError as err:
            key = next((line for line in str(err).splitlines() if "ill-formed" in line), str(err))
            raise AssertionError(f"TVMScript parser rejects the PrimFunc: {key.strip()}") from err
        assert isinstance(copy, tvm.tirx.PrimFunc)



if __name__ == "__main__":
    import sys

    from standalone import run

    sys.exit(run(globals()))
