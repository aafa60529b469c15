"""The device a model is compiled for, described once (TVM's ``Target``, TFLite GPU's ``GpuInfo``).

A :class:`DeviceProfile` holds what the strategy (``tir_adreno.strategy.conv``)
needs to pick kernels: the device class (``kind``: "mobile", "gpu" or "cpu",
which selects the default conv configs), image limits, work-group and
local-memory limits, compute units, and whether RGBA half images and half
arithmetic work. It comes from a live OpenCL device
(:meth:`DeviceProfile.from_device`) or from a name (:func:`get_profile`), so a
model compiles for a device that is not attached: no environment variable is
involved.

Named profiles (:data:`PROFILES`):

- ``adreno``: an Adreno 6xx/7xx class phone GPU, from public specs and
  Qualcomm's OpenCL guide (80-NB295-11) as reported by ``clinfo`` on
  Adreno 640/660/740: image2d up to 16384 x 16384, 2048 array layers, work
  groups of 1024 (the guide's maximum; 256-512 in practice), 32 KiB local
  memory, 2-6 compute units (we take 4), OpenCL C 2.0 (3.0 on 7xx drivers),
  ``cl_khr_fp16`` with full half arithmetic and half images. These are also
  TVM's ``qcom/adreno-opencl-texture`` texture limits.
- ``nvidia-h200``: measured with ``benchmarks/device`` on the H200 (NVIDIA
  driver 580, OpenCL 3.0 CUDA): images 32768 x 32768 x 2048 layers, 132 SMs,
  work groups of 1024, 48 KiB local memory, half images yes; half arithmetic
  runs under the pragma but the half builtins are missing (docs/design.md): TVM's
  fp16 kernels run with the half prelude (``runtime.half_compat``; probed on the
  H200: every family within its fp16 bound), so ``half_math`` is True. Activations default to buffers
  (``activation_placement``): the driver's time floor is ~2x higher for image kernels.
- ``pocl``: PoCL's pthread CPU device (OpenCL C 1.2; emulated images
  8192 x 8192 x 2048 on this host, work groups of 4096, 1 MiB "local" memory).

``launch_cost_macs``: the multiply-adds one kernel launch is worth on the device, what
the strategy lets a fusion recompute to save a launch (``strategy.fusion.fuse_depthwise_pointwise``);
0 turns fusion off. Defaults per class (:data:`LAUNCH_COST_MACS`):

- "gpu" (H200): 1e7. A kernel costs at least ~5-6 us (buffers) to ~11-13 us (textures) of
  event time on NVIDIA's driver, while our 1x1 convs run ~1 TMAC/s: ~10 us x 1e12/s. Every
  MobileNetV2 block's depthwise recompute (<= ~8e6 extra MACs at 224) is cheaper than a launch.
- "mobile" (Adreno): 5e5. An Adreno launch costs a few us and its ALUs, not launches, bound
  MobileNet there (~100 GMAC/s achieved x ~5 us); fuse only where the recompute is
  (nearly) free: 1x1 convs with few output channel blocks (TFLite GPU fuses only such "thin"
  pointwise convs into a depthwise).
- "cpu" (PoCL): 5e5. Measured on this host's PoCL (2 cores): see docs/kernels.md "Fused depthwise -> 1x1 conv".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from tir_adreno.runtime.texture import DeviceLimits

#: Device classes: they pick the default conv configs (``tir_adreno.strategy.defaults``).
KINDS = ("mobile", "gpu", "cpu")
#: Where NCHW4c activations live by default (``DeviceProfile.activation_placement``).
PLACEMENTS = ("texture", "buffer")
#: Multiply-adds one kernel launch is worth, per device class (module docstring).
LAUNCH_COST_MACS = {"gpu": 10_000_000, "mobile": 500_000, "cpu": 500_000}
#: A GPU with at least this many compute units is a "gpu" (desktop / datacenter), fewer "mobile".
GPU_COMPUTE_UNITS = 16


def check_placement(placement: str, what: str = "placement") -> str:
    """``placement`` when it is one of :data:`PLACEMENTS`, else ValueError naming ``what``."""
    if placement not in PLACEMENTS:
        raise ValueError(f"{what} must be one of {PLACEMENTS}, got {placement!r}")
    return placement


@dataclass(frozen=True)
class DeviceProfile:
    """What compilation knows about a device. ``name`` (with ``driver``) keys tuning records."""

    name: str
    kind: str
    vendor: str
    limits: DeviceLimits
    max_work_group_size: int
    local_memory_bytes: int
    compute_units: int
    half_images: bool
    half_math: bool
    opencl_c_version: str
    driver: str = ""
    #: The default scope of every NCHW4c activation the Relax pass emits ("texture" or
    #: "buffer"); tuning records override it per conv, and a texture that does not fit
    #: the images falls back to a buffer either way.
    activation_placement: str = "texture"
    #: Convs of at least this many multiply-adds run on textures when ``activation_placement``
    #: is "buffer" (0: never): a big conv gains more from the texture cache than the driver's
    #: image-kernel floor costs. The Relax pass runs such a conv reading and writing its
    #: neighbours' scopes: no copy kernels.
    texture_min_macs: int = 0
    launch_cost_macs: int | None = None  # None: LAUNCH_COST_MACS[kind]
    #: Dense 1x1 and stem convs run the local-memory tiled kernel on buffers
    #: (``tir_adreno.strategy.defaults.tiled_default``) when it launches at least this many work groups
    #: (0: never): it reads each input pixel once per work group, where the direct kernel reads
    #: it once per channel tile, but it needs enough groups to fill the GPU.
    tiled_min_groups: int = 0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"DeviceProfile.kind must be one of {KINDS}, got {self.kind!r}")
        check_placement(self.activation_placement, "DeviceProfile.activation_placement")
        if not isinstance(self.texture_min_macs, int) or self.texture_min_macs < 0:
            raise ValueError(f"DeviceProfile.texture_min_macs must be an int >= 0, got {self.texture_min_macs!r}")
        if not isinstance(self.tiled_min_groups, int) or self.tiled_min_groups < 0:
            raise ValueError(f"DeviceProfile.tiled_min_groups must be an int >= 0, got {self.tiled_min_groups!r}")
        if self.launch_cost_macs is None:
            object.__setattr__(self, "launch_cost_macs", LAUNCH_COST_MACS[self.kind])
        if not isinstance(self.launch_cost_macs, int) or self.launch_cost_macs < 0:
            raise ValueError(f"DeviceProfile.launch_cost_macs must be an int >= 0, got {self.launch_cost_macs!r}")

    @property
    def key(self) -> str:
        """Records key: the profile name plus the driver version when known."""
        return f"{self.name} ({self.driver})" if self.driver else self.name

    @classmethod
    def from_device(cls, device=None) -> "DeviceProfile":
        """The profile of a live device (a ``runtime.Device``, a name substring or None for the default).

        A device that matches a named profile (PoCL, an H200, an Adreno) takes that
        profile's name, so records tuned on it apply when compiling for the name.
        """
        from tir_adreno.runtime import opencl as runtime

        dev = runtime.get_device(device)
        if dev not in _LIVE:
            _LIVE[dev] = cls._of(dev)
        return _LIVE[dev]

    @classmethod
    def _of(cls, dev) -> "DeviceProfile":
        from tir_adreno.runtime import opencl as runtime

        d = dev.cl_device
        kind = classify(int(d.type) & _CL_DEVICE_TYPE_CPU != 0, int(d.max_compute_units))
        known = _known_name(dev.name)
        named = PROFILES.get(known)  # a known device keeps its profile's measured placement rules
        return cls(
            name=known or _slug(d.name),
            kind=kind,
            vendor=d.vendor.strip(),
            limits=dev.limits,
            max_work_group_size=int(d.max_work_group_size),
            local_memory_bytes=int(d.local_mem_size),
            compute_units=int(d.max_compute_units),
            half_images=runtime.half_images(dev),
            half_math=dev.fp16,
            opencl_c_version=d.opencl_c_version.strip(),
            driver=d.driver_version.strip(),
            activation_placement=named.activation_placement if named else "texture",
            texture_min_macs=named.texture_min_macs if named else 0,
            tiled_min_groups=named.tiled_min_groups if named else 0,
        )


_CL_DEVICE_TYPE_CPU = 1 << 1
_LIVE: dict = {}  # runtime.Device -> its profile (devices are long-lived singletons)


def classify(is_cpu: bool, compute_units: int) -> str:
    """"cpu" for a CPU OpenCL (PoCL), "gpu" for >= :data:`GPU_COMPUTE_UNITS` compute units
    (NVIDIA / AMD / Intel discrete; H200: 132), else "mobile" (Adreno reports a handful)."""
    if is_cpu:
        return "cpu"
    return "gpu" if compute_units >= GPU_COMPUTE_UNITS else "mobile"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.strip().lower()).strip("-")[:40] or "device"


def _known_name(device_name: str) -> str | None:
    low = device_name.lower()
    if "portable computing language" in low:
        return "pocl"
    if "h200" in low:
        return "nvidia-h200"
    if "adreno" in low or "qualcomm" in low:
        return "adreno"
    return None


PROFILES: dict[str, DeviceProfile] = {
    "adreno": DeviceProfile(
        name="adreno", kind="mobile", vendor="QUALCOMM", limits=DeviceLimits(16384, 16384, 2048),
        max_work_group_size=1024, local_memory_bytes=32 * 1024, compute_units=4, half_images=True, half_math=True,
        opencl_c_version="OpenCL C 2.0",
    ),
    "nvidia-h200": DeviceProfile(
        name="nvidia-h200", kind="gpu", vendor="NVIDIA Corporation", limits=DeviceLimits(32768, 32768, 2048),
        max_work_group_size=1024, local_memory_bytes=48 * 1024, compute_units=132, half_images=True, half_math=True,
        opencl_c_version="OpenCL C 3.0",
        # NVIDIA's driver puts a ~11-13 us event-time floor on any kernel that touches an image,
        # ~5-6 us on buffer kernels (benchmarks/results/conv_layers-nvidia-h200.json,
        # depthwise-nvidia-h200.json): MobileNetV2's convs sum to 0.81 ms on textures, 0.53 ms on buffers.
        activation_placement="buffer",
        # ... except big convs: in a whole model (models_e2e-nvidia-h200.json, per-call rows)
        # ResNet-50's convs (>= 51M multiply-adds, but one of 13M) run faster on textures (1.38 ms
        # all textures vs 1.75 all buffers), MobileNetV2's (<= 20M) in buffers (0.50 vs 0.67 ms).
        texture_min_macs=32_000_000,
        # The tiled kernel: 1.3-2.0x the direct one on each ResNet-50 1x1 conv and the stem with
        # >= 96 work groups (benchmarks/results/conv_configs_tiled_buffer-nvidia-h200.json).
        tiled_min_groups=96,
    ),
    "pocl": DeviceProfile(
        name="pocl", kind="cpu", vendor="AuthenticAMD", limits=DeviceLimits(8192, 8192, 2048),
        max_work_group_size=4096, local_memory_bytes=1024 * 1024, compute_units=2, half_images=True, half_math=False,
        opencl_c_version="OpenCL C 1.2",
    ),
}


def with_placement(profile: DeviceProfile, placement: str | None) -> DeviceProfile:
    """``profile`` with every activation in ``placement`` (big convs too); itself for None."""
    if placement is None:
        return profile
    return replace(profile, activation_placement=check_placement(placement), texture_min_macs=0)


def get_profile(name: str) -> DeviceProfile:
    """The named profile (:data:`PROFILES`); ValueError listing the known names."""
    if name not in PROFILES:
        raise ValueError(f"unknown device profile {name!r}; known profiles: {', '.join(sorted(PROFILES))}")
    return PROFILES[name]


def resolve(device=None, profile=None) -> DeviceProfile:
    """``profile`` (a DeviceProfile or a name) when given, else the live ``device``'s profile."""
    if isinstance(profile, DeviceProfile):
        return profile
    if profile is not None:
        return get_profile(profile)
    return DeviceProfile.from_device(device)


def with_limits(profile: DeviceProfile, limits: DeviceLimits | None) -> DeviceProfile:
    """``profile`` with other image limits (to plan for a smaller GPU); itself for None."""
    return profile if limits is None else replace(profile, limits=limits)


def without_fusion(profile: DeviceProfile, off: bool = True) -> DeviceProfile:
    """``profile`` with kernel fusion off (``launch_cost_macs`` 0) when ``off``, else itself."""
    return replace(profile, launch_cost_macs=0) if off else profile
