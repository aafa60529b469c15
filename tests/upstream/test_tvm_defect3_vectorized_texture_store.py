"""TVM 0.27 defect 3: a texture store in a vectorized loop is wrong.

A texture -> texture copy whose store sits in a ``T.vectorized(4)`` loop over
the RGBA lane axis is lowered by the Adreno TIR pipeline
(``tvm.s_tir.backend.adreno.pipeline.default_tir_pipeline``) into a serial
loop over the 4 lanes, each iteration doing

    float4 v__1 = ((float*)&v_)[k_s];          // scalar -> float4 broadcast
    write_imagef(B_ptr, coord, as_float4(v__1));

so every output pixel ends up holding its last lane (.w) in all four lanes.
The kernel compiles and runs; only the numbers are wrong. Observed on PoCL:
output[..., c] == input[..., 3] for every c. Upstream's own unit test only
looks for "write_imagef" in the source, so it passes.

``test_control_vector_store_copy_is_exact`` runs the same copy written the
way that works (vectorized load into a local pixel, one Ramp store) through
the same harness, to show that the harness itself is right.
"""

import numpy as np
import pytest
import tvm
from tvm.s_tir.backend.adreno.pipeline import default_tir_pipeline
from tvm.script import tirx as T
from tvm.tirx.build import split_host_device_mods
from tvm.tirx.compilation_pipeline import finalize_device_passes
from defect import KnownDefect, pinned

# [N, C/4, H, W, 4] in global.texture -> image2d_array: N*C/4 layers, H rows,
# W columns, one RGBA float pixel per (n, c, h, w).
N, C4, H, W = 1, 2, 2, 3
SHAPE = (N, C4, H, W, 4)


@T.prim_func(s_tir=True)
def copy_vectorized_store(a: T.handle, b: T.handle):
    A = T.match_buffer(a, SHAPE, "float32", scope="global.texture")
    B = T.match_buffer(b, SHAPE, "float32", scope="global.texture")
    for c in T.thread_binding(C4, thread="blockIdx.y"):
        for h in T.thread_binding(H, thread="blockIdx.x"):
            for w in T.thread_binding(W, thread="threadIdx.x"):
                for k in T.vectorized(4):
                    with T.sblock("copy"):
                        vc, vh, vw, vk = T.axis.remap("SSSS", [c, h, w, k])
                        B[0, vc, vh, vw, vk] = A[0, vc, vh, vw, vk]


@T.prim_func(s_tir=True)
def copy_ramp_store(a: T.handle, b: T.handle):
    A = T.match_buffer(a, SHAPE, "float32", scope="global.texture")
    B = T.match_buffer(b, SHAPE, "float32", scope="global.texture")
    for c in T.thread_binding(C4, thread="blockIdx.y"):
        for h in T.thread_binding(H, thread="blockIdx.x"):
            for w in T.thread_binding(W, thread="threadIdx.x"):
                with T.sblock("copy"):
                    vc, vh, vw = T.axis.remap("SSS", [c, h, w])
                    L = T.sblock_alloc_buffer((4,), "float32", scope="local")
                    for k in T.vectorized(4):
                        L[k] = A[0, vc, vh, vw, k]
                    B[0, vc, vh, vw, T.Ramp(0, 1, 4)] = L[T.Ramp(0, 1, 4)]


def _lower_to_opencl(func):
    target = tvm.target.Target("qcom/adreno-opencl-texture").with_host(tvm.target.Target("llvm"))
    mod = tvm.tirx.transform.BindTarget(target)(tvm.IRModule({"main": func}))
    with target:
        mod = default_tir_pipeline()(mod)
    _, device_mods = split_host_device_mods(mod)
    (device_mod,) = device_mods.values()
    device_mod = finalize_device_passes()(device_mod)
    return tvm.get_global_func("target.build.opencl")(device_mod, target).inspect_source()


def _run_copy_on_opencl(src):
    """Launch the single kernel of `src` as (W*H, C4) global, (W, 1) local on images."""
    cl = pytest.importorskip("pyopencl")
    try:
        devices = [d for p in cl.get_platforms() for d in p.get_devices() if d.image_support]
    except cl.Error:
        devices = []
    if not devices:
        pytest.skip("no OpenCL device with image support")
    ctx = cl.Context([devices[0]])
    queue = cl.CommandQueue(ctx)
    (kernel,) = cl.Program(ctx, src).build().all_kernels()

    rng = np.random.default_rng()
    a = rng.standard_normal(SHAPE).astype(np.float32)
    fmt = cl.ImageFormat(cl.channel_order.RGBA, cl.channel_type.FLOAT)
    mf = cl.mem_flags
    region = (W, H, N * C4)
    img_a = cl.create_image(
        ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, fmt, shape=region, hostbuf=a, is_array=True
    )
    img_b = cl.create_image(ctx, mf.READ_WRITE, fmt, shape=region, is_array=True)
    cl.enqueue_fill_image(queue, img_b, np.full(4, np.nan, np.float32), (0, 0, 0), region)
    # blockIdx.x = h, threadIdx.x = w, blockIdx.y = c
    kernel(queue, (H * W, C4), (W, 1), img_a, img_b)
    out = np.empty_like(a)
    cl.enqueue_copy(queue, out, img_b, origin=(0, 0, 0), region=region)
    queue.finish()
    return a, out


def test_control_vector_store_copy_is_exact():
    a, out = _run_copy_on_opencl(_lower_to_opencl(copy_ramp_store))
    np.testing.assert_array_equal(out, a)


@pytest.mark.xfail(
    strict=True,
    raises=KnownDefect,
    reason="TVM 0.27: texture store in a vectorized loop is scalarized into "
    "write_imagef(B, coord, as_float4(scalar)); each pixel gets its last lane",
)
def test_vectorized_texture_store_copy_is_exact():
    with pinned(r"each pixel holds its last lane broadcast: True"):
        src = _lower_to_opencl(copy_vectorized_store)
        a, out = _run_copy_on_opencl(src)
        broadcast_last_lane = np.allclose(out, np.repeat(a[..., 3:], 4, axis=-1))
        np.testing.assert_array_equal(
            out,
            a,
            err_msg=f"each pixel holds its last lane broadcast: {broadcast_last_lane}",
        )


if __name__ == "__main__":
    import sys

    from standalone import run

    sys.exit(run(globals()))
