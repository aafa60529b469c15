"""TVM 0.27 defect 15: dlight's GEMV schedule of a (1, 512) x (512, 10) matmul writes past its output.

A classifier head (Relax ``matmul`` of data (1, 512) and weight (512, 10)),
legalized with ``relax.transform.LegalizeOps`` and scheduled with dlight's
default GPU rules under the Adreno target (``qcom/adreno-opencl-texture``: how
a model's ops that have no texture kernel are scheduled), gets one work group
of 64 x 4 threads (under ``Target({"kind": "opencl"})`` it gets 10 x 16 and is
correct). Every read is guarded by ``get_local_id(0) < 10``, but the final
store is not:

    if (get_local_id(1) == 0) { matmul_ptr[get_local_id(0)] = red_buf0_ptr[get_local_id(0) * 4]; }

so threads 10..63 write 54 floats past the end of the 10-float output. On PoCL
(buffers are host memory) this corrupts the heap: the built-in ResNet-18 at
32x32 with 10 classes aborts the process now and then ("corrupted size vs.
prev_size"); on a GPU it silently overwrites whatever buffer follows. The test
runs the kernel on an output buffer larger than the tensor, filled with a
sentinel, and checks that nothing past the tensor changed.
"""

import numpy as np
import pyopencl as cl
import pytest
import tvm
from tvm import relax
from tvm.s_tir import dlight as dl

if __name__ == "__main__":  # standalone run: import this checkout's tir_adreno
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tir_adreno.codegen import build
from tir_adreno.runtime import opencl as runtime
from tir_adreno.runtime.bundle import TensorSpec
from tir_adreno.reference import relative_error


def _scheduled_matmul(m, k, n):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([m, k], "float32"))
    w = relax.Var("w", relax.TensorType([k, n], "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.matmul(x, w))
        bb.emit_func_output(y)
    mod = relax.transform.LegalizeOps()(bb.get())
    rules = dl.ApplyDefaultSchedule(
        dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()
    )
    with tvm.target.Target(build.TEXTURE_TARGET):
        mod = rules(mod)
    (func,) = [f for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    return func


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="TVM 0.27: dlight GEMV store not guarded by the output extent")
def test_dlight_gemv_writes_only_its_output(device):
    m, k, n = 1, 512, 10
    module = build.build(_scheduled_matmul(m, k, n), build.TEXTURE_TARGET)
    (name,) = module.functions
    x_spec, w_spec, y_spec = module[name].params
    rng = np.random.default_rng(0)
    x = device.array(rng.standard_normal((m, k)).astype("float32"), "global", x_spec.name)
    w = device.array(rng.standard_normal((k, n)).astype("float32"), "global", w_spec.name)
    # The output tensor is the first m * n floats of a larger buffer holding a sentinel.
    sentinel = np.full(256, 12345.0, np.float32)
    big = cl.Buffer(device.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=sentinel)
    y = runtime.Tensor(device, TensorSpec(y_spec.name, (m, n), "float32", "global"), big)
    device.load(module)(name, x, w, y)
    out = np.empty_like(sentinel)
    cl.enqueue_copy(device.queue, out, big)
    device.queue.finish()
    ref = x.numpy().astype(np.float64) @ w.numpy().astype(np.float64)
    assert relative_error(out[: m * n].reshape(m, n), ref) <= 1e-4  # the product itself is right
    past = np.flatnonzero(out[m * n :] != sentinel[m * n :])
    assert past.size == 0, f"{past.size} floats written past the {m * n}-float output"


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="TVM 0.27: dlight GEMV binds the 10-output store loop to 64 threads unguarded")
def test_dlight_gemv_store_block_is_guarded():
    """The dlight half alone (docs/upstream/patches/defect15-dlight-gemv-small-output.diff fixes
    it): the store block runs under a loop of the launch's 64 threads in x, guarded by `< 10`.
    With that fixed, the kernel above still writes past its output until the C++ half
    (LowerCrossThreadReduction keeps the one-clause guard on the write-back) is in too."""
    script = _scheduled_matmul(1, 512, 10).script()
    store = script[script.index('T.sblock("matmul")') :].split("T.reads")[0]
    assert "T.where(" in store and "< T.int64(10)" in store, f"store block unguarded:\n{store}"


if __name__ == "__main__":
    import sys

    from standalone import run

    sys.exit(run(globals()))
