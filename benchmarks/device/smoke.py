"""Smoke test for the remote machine: image2d_array round trip + torch/cuDNN.

    source benchmarks/device/setup.sh && python3 benchmarks/device/smoke.py
"""
import sys
import time

import numpy as np
import pyopencl as cl

SRC = r"""
__constant sampler_t smp = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_NONE
                           | CLK_FILTER_NEAREST;
__kernel void fill(__global const float4 *src, __write_only image2d_array_t dst) {
    int x = get_global_id(0), y = get_global_id(1), z = get_global_id(2);
    int w = get_global_size(0), h = get_global_size(1);
    write_imagef(dst, (int4)(x, y, z, 0), src[(z * h + y) * w + x]);
}
__kernel void copy(__read_only image2d_array_t src, __write_only image2d_array_t dst) {
    int4 c = (int4)(get_global_id(0), get_global_id(1), get_global_id(2), 0);
    write_imagef(dst, c, read_imagef(src, smp, c) * 2.0f);
}
"""


def opencl_check():
    devs = [d for p in cl.get_platforms() for d in p.get_devices()]
    gpus = [d for d in devs if d.type & cl.device_type.GPU]
    if not devs:
        print("opencl: no device")
        return False
    dev = (gpus or devs)[0]
    ctx = cl.Context([dev])
    q = cl.CommandQueue(ctx)
    t0 = time.perf_counter()
    prg = cl.Program(ctx, SRC).build()
    build_s = time.perf_counter() - t0
    w, h, n = 4, 3, 2
    host = np.arange(w * h * n * 4, dtype=np.float32).reshape(n, h, w, 4)
    mf = cl.mem_flags
    fmt = cl.ImageFormat(cl.channel_order.RGBA, cl.channel_type.FLOAT)
    buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=host)
    a = cl.create_image(ctx, mf.READ_WRITE, fmt, shape=(w, h, n), is_array=True)
    b = cl.create_image(ctx, mf.READ_WRITE, fmt, shape=(w, h, n), is_array=True)
    prg.fill(q, (w, h, n), None, buf, a)
    prg.copy(q, (w, h, n), None, a, b)
    out_a = np.empty_like(host)
    out_b = np.empty_like(host)
    cl.enqueue_copy(q, out_a, a, origin=(0, 0, 0), region=(w, h, n))
    cl.enqueue_copy(q, out_b, b, origin=(0, 0, 0), region=(w, h, n))
    # host -> image upload path too
    c = cl.create_image(ctx, mf.READ_WRITE, fmt, shape=(w, h, n), is_array=True)
    cl.enqueue_copy(q, c, host, origin=(0, 0, 0), region=(w, h, n))
    out_c = np.empty_like(host)
    cl.enqueue_copy(q, out_c, c, origin=(0, 0, 0), region=(w, h, n))
    q.finish()
    ok = (np.array_equal(out_a, host) and np.array_equal(out_b, 2 * host)
          and np.array_equal(out_c, host))
    print(f"opencl: {dev.name} image2d_array {w}x{h}x{n} RGBA float "
          f"write_imagef/read_imagef copy {'OK' if ok else 'MISMATCH'} "
          f"(build {build_s:.2f}s)")
    if not ok:
        print(out_a.ravel()[:16], out_b.ravel()[:16], out_c.ravel()[:16])
    return ok


def torch_check():
    import torch
    print(f"torch {torch.__version__} cuda {torch.version.cuda} "
          f"cudnn {torch.backends.cudnn.version()} "
          f"device {torch.cuda.get_device_name()}")
    torch.backends.cudnn.allow_tf32 = False
    x = torch.randn(1, 8, 16, 16, device="cuda")
    wt = torch.randn(4, 8, 3, 3, device="cuda")
    y = torch.nn.functional.conv2d(x, wt, padding=1)
    ref = torch.nn.functional.conv2d(x.cpu().double(), wt.cpu().double(), padding=1)
    err = (y.cpu().double() - ref).abs().max().item()
    ok = err < 1e-3
    print(f"torch: cuDNN conv2d fp32 max_err {err:.2e} {'OK' if ok else 'MISMATCH'}")
    return ok


if __name__ == "__main__":
    ok = opencl_check()
    ok = torch_check() and ok
    sys.exit(0 if ok else 1)
