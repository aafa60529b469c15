"""Short OpenCL summary: platforms, devices, image support and limits.

Run by benchmarks/device/setup.sh; also usable alone: python3 clinfo.py
"""
import os
import sys

import pyopencl as cl


def _fmt_types(ctx, mem_type, order):
    names = {v: k for k, v in vars(cl.channel_type).items() if k.isupper()}
    try:
        fmts = cl.get_supported_image_formats(ctx, cl.mem_flags.READ_WRITE, mem_type)
    except cl.Error as e:  # pragma: no cover - driver dependent
        return f"? ({e})"
    types = sorted(names.get(f.channel_data_type, str(f.channel_data_type))
                   for f in fmts if f.channel_order == order)
    return ",".join(types) or "-"


def main():
    print(f"python {sys.version.split()[0]}  pyopencl {cl.VERSION_TEXT}  "
          f"OCL_ICD_VENDORS={os.environ.get('OCL_ICD_VENDORS', '')}")
    try:
        platforms = cl.get_platforms()
    except cl.Error as e:
        print(f"no OpenCL platform: {e}")
        return 1
    for p in platforms:
        print(f"platform: {p.name} | {p.vendor} | {p.version}")
        for d in p.get_devices():
            ext = d.extensions.split()
            fp16 = [e for e in ext if "fp16" in e or "half" in e]
            print(f"  device: {d.name} | {cl.device_type.to_string(d.type)} | "
                  f"{d.version} | driver {d.driver_version}")
            print(f"    CUs {d.max_compute_units}  wg {d.max_work_group_size}  "
                  f"global {d.global_mem_size >> 20} MiB  "
                  f"max_alloc {d.max_mem_alloc_size >> 20} MiB  "
                  f"local {d.local_mem_size >> 10} KiB")
            print(f"    image_support {bool(d.image_support)}  "
                  f"image2d_max {d.image2d_max_width}x{d.image2d_max_height}  "
                  f"image_max_array_size {getattr(d, 'image_max_array_size', '?')}  "
                  f"image3d_max {d.image3d_max_width}x{d.image3d_max_height}"
                  f"x{d.image3d_max_depth}")
            print(f"    fp16 extensions: {' '.join(fp16) or 'none'}  "
                  f"cl_khr_fp64 {'cl_khr_fp64' in ext}  "
                  f"cl_khr_3d_image_writes {'cl_khr_3d_image_writes' in ext}")
            if d.image_support:
                ctx = cl.Context([d])
                rgba = cl.channel_order.RGBA
                print("    RGBA image2d types: "
                      + _fmt_types(ctx, cl.mem_object_type.IMAGE2D, rgba))
                print("    RGBA image2d_array types: "
                      + _fmt_types(ctx, cl.mem_object_type.IMAGE2D_ARRAY, rgba))
    return 0


if __name__ == "__main__":
    sys.exit(main())
