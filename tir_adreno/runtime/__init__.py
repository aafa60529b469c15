"""Everything that runs a compiled model without TVM: OpenCL devices and tensors, kernel bundles,
launchers, the executor (``load_model``), on-disk caches.

Nothing in this package imports TVM (a test runs a saved model with ``tvm`` unimportable).
"""

from tir_adreno.runtime import startup

startup.mark_import_started()  # before numpy and pyopencl: startup.import_ms measures them

from tir_adreno.runtime.opencl import Device, DeviceNotFoundError, Tensor, get_device, list_devices, probe  # noqa: E402

__all__ = ["Device", "DeviceNotFoundError", "Tensor", "get_device", "list_devices", "probe"]
