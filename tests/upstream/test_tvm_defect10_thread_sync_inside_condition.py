"""TVM 0.27 defect 10: a shared-memory tree-reduction step with a loop under ``if`` fails to lower.

The classic reduction step ``if t < s: red[t] += red[t + s]`` on a ``shared``
buffer, where each thread adds a short row (a loop over the 4 lanes of a
pixel), cannot be lowered by TVM's default TIR pipeline for OpenCL:
``ThreadSync`` (thread_storage_sync.cc, ``ThreadSyncPlanner::Summarize``)
wants a barrier inside the lane loop, i.e. inside the thread-dependent
condition, and stops with

    InternalError: Check failed: condition_counter() == 0 (1 vs. 0) :
    Cannot insert syncs inside condition

No barrier is needed there: thread t only reads ``red[t + 4, :]``, which no
thread writes in this step; the barriers belong before and after the ``if``.
The same step on a single element (no inner loop) lowers, and so does the
lane loop written ``T.vectorized(4)`` (the control test); ``T.unroll(4)``
fails like the serial loop. The Adreno texture target fails the same way.
"""

import pytest
import tvm
from tvm.script import tirx as T
from defect import KnownDefect, pinned


@T.prim_func(s_tir=True)
def tree_step_lane_loop(a: T.handle, b: T.handle):
    A = T.match_buffer(a, (8, 4), "float32")
    B = T.match_buffer(b, (8, 4), "float32")
    for g in T.thread_binding(1, thread="blockIdx.x"):
        with T.sblock("group"):
            red = T.sblock_alloc_buffer((8, 4), "float32", scope="shared")
            for t in T.thread_binding(8, thread="threadIdx.x"):
                with T.sblock("load"):
                    for lane in range(4):
                        red[t, lane] = A[t, lane]
            for t in T.thread_binding(8, thread="threadIdx.x"):
                with T.sblock("step"):
                    if t < 4:
                        for lane in range(4):
                            red[t, lane] = red[t, lane] + red[t + 4, lane]
            for t in T.thread_binding(8, thread="threadIdx.x"):
                with T.sblock("store"):
                    for lane in range(4):
                        B[t, lane] = red[t, lane]


@T.prim_func(s_tir=True)
def tree_step_vectorized(a: T.handle, b: T.handle):
    A = T.match_buffer(a, (8, 4), "float32")
    B = T.match_buffer(b, (8, 4), "float32")
    for g in T.thread_binding(1, thread="blockIdx.x"):
        with T.sblock("group"):
            red = T.sblock_alloc_buffer((8, 4), "float32", scope="shared")
            for t in T.thread_binding(8, thread="threadIdx.x"):
                with T.sblock("load"):
                    for lane in range(4):
                        red[t, lane] = A[t, lane]
            for t in T.thread_binding(8, thread="threadIdx.x"):
                with T.sblock("step"):
                    if t < 4:
                        for lane in T.vectorized(4):
                            red[t, lane] = red[t, lane] + red[t + 4, lane]
            for t in T.thread_binding(8, thread="threadIdx.x"):
                with T.sblock("store"):
                    for lane in range(4):
                        B[t, lane] = red[t, lane]


def _build_opencl(func):
    target = tvm.target.Target({"kind": "opencl"}, host={"kind": "llvm"})
    lib = tvm.tirx.build(func, target)  # TVM's default TIR pipeline for the target
    (dev,) = [m for m in lib.imports if m.kind == "opencl"]
    return dev.inspect_source()


def test_control_vectorized_lane_loop_lowers():
    assert "barrier(CLK_LOCAL_MEM_FENCE)" in _build_opencl(tree_step_vectorized)


@pytest.mark.xfail(
    strict=True,
    raises=KnownDefect,
    reason="TVM 0.27: ThreadSync 'Cannot insert syncs inside condition' on a "
    "shared-memory reduction step with a loop under if t < s",
)
def test_tree_reduction_step_with_lane_loop_lowers():
    with pinned(r"Cannot insert syncs inside condition"):
        try:
            src = _build_opencl(tree_step_lane_loop)
        except tvm.error.InternalError as err:
            raise AssertionError(f"default OpenCL TIR pipeline: {err}") from err
        assert "barrier(CLK_LOCAL_MEM_FENCE)" in src, src


if __name__ == "__main__":
    import sys

    from standalone import run

    sys.exit(run(globals()))
