"""pyopencl runtime: devices, tensors in images or buffers, launches, binary cache.

Importable without TVM: it runs :class:`~tir_adreno.runtime.bundle.KernelModule`
bundles built elsewhere.
"""

from __future__ import annotations

import math
import os
import statistics
import warnings
from dataclasses import dataclass

import numpy as np
import pyopencl as cl

from tir_adreno.runtime import bounds, cache, half_compat, link, pocl_binary, programs
from tir_adreno.runtime.half_compat import half_images, half_math, half_mode  # noqa: F401 (their home was here)
from tir_adreno.runtime.bounds import BoundsError  # noqa: F401 (raised by LoadedModule; importable from here)
from tir_adreno.runtime.bundle import FunctionPlan, KernelModule, TensorSpec
from tir_adreno.runtime.startup import ProgramCounts
from tir_adreno.runtime.texture import DeviceLimits, image_format, is_texture_scope, texture_extent
from tir_adreno.runtime.errors import SettingError, UserError

#: Poison written into outputs before a run, so an element a kernel never wrote shows up.
POISON = {"float32": np.float32(np.nan), "float16": np.float16(np.nan)}
#: OpenCL build options of a new :class:`Device` (``Device.build_options``; ``Device.load`` takes an override).
BUILD_OPTIONS = ""
#: Options that compile as for an OpenCL C 1.2 driver. PoCL reports device version 3.0, so
#: ``__OPENCL_VERSION__`` stays 300 under ``-cl-std=CL1.2`` and TVM's ``READ_IMAGEF`` would keep
#: its sampler branch; moving ``CL_VERSION_2_0``/``CL_VERSION_3_0`` out of reach makes it take the
#: sampler-less 1.2 branch that many Adreno drivers compile.
CL12_OPTIONS = "-cl-std=CL1.2 -DCL_VERSION_2_0=200000 -DCL_VERSION_3_0=300000"


class DeviceNotFoundError(UserError, LookupError):
    """No OpenCL device matches the requested name."""


def _all_devices():
    found = []
    try:
        platforms = cl.get_platforms()
    except cl.LogicError:
        platforms = []
    for platform in platforms:
        try:
            devices = platform.get_devices()
        except cl.Error:
            continue
        found.extend((platform, d) for d in devices)
    return found


def list_devices() -> list[dict]:
    """Every OpenCL device with its image support, texture limits, RGBA half images
    (precision "float16_acc32") and half math (precision "float16": the probe kernel)."""
    rows = []
    for platform, dev in _all_devices():
        device = _device(dev)
        rows.append(
            {
                "platform": platform.name.strip(),
                "device": dev.name.strip(),
                "type": cl.device_type.to_string(dev.type),
                "version": dev.version.strip(),
                "driver": dev.driver_version.strip(),
                "image_support": bool(dev.image_support),
                "image2d_max_width": int(dev.image2d_max_width),
                "image2d_max_height": int(dev.image2d_max_height),
                "image_max_array_size": int(dev.image_max_array_size),
                "fp16": "cl_khr_fp16" in dev.extensions,
                "half_images": half_images(device),
                "half_math": half_math(device),
            }
        )
    return rows


def _pick(name: str | None):
    devices = _all_devices()
    if not devices:
        raise DeviceNotFoundError("no OpenCL platform found (install pocl-binary-distribution or a GPU driver)")
    if name:
        wanted = name.lower()
        for platform, dev in devices:
            if wanted in dev.name.lower() or wanted in platform.name.lower():
                return dev
        names = ", ".join(f"{p.name.strip()}: {d.name.strip()}" for p, d in devices)
        raise DeviceNotFoundError(f"no OpenCL device matches {name!r}; available: {names}")
    for want in (cl.device_type.GPU, cl.device_type.CPU):
        for _, dev in devices:
            if dev.type & want:
                return dev
    return devices[0][1]


@dataclass
class Tensor:
    """A tensor on the device: an image2d_array for texture scopes, else a buffer."""

    device: "Device"
    spec: TensorSpec
    mem: object

    @property
    def shape(self):
        return self.spec.shape

    @property
    def nbytes(self) -> int:
        return math.prod(self.spec.shape) * np.dtype(self.spec.storage_dtype).itemsize

    def _region(self):
        return texture_extent(self.spec.shape, self.spec.scope)

    def checked(self, array: np.ndarray) -> np.ndarray:
        """``array`` in the storage dtype; a half-stored tensor takes its dtype (rounded to
        nearest half here) or half values as they are (saved weights)."""
        if tuple(array.shape) != tuple(self.spec.shape):
            raise ValueError(f"{self.spec.name}: shape {tuple(array.shape)} != expected {self.spec.shape}")
        if array.dtype not in {np.dtype(self.spec.dtype), np.dtype(self.spec.storage_dtype)}:
            raise TypeError(f"{self.spec.name}: dtype {array.dtype} != expected {self.spec.dtype}")
        return np.ascontiguousarray(array, dtype=self.spec.storage_dtype)

    def upload(self, array: np.ndarray) -> "Tensor":
        self.enqueue_upload(self.checked(np.asarray(array)))
        self.device.queue.finish()
        return self

    def numpy(self) -> np.ndarray:
        """The tensor in its dtype (a half-stored one: float32 holding exactly the stored halves)."""
        out = np.empty(self.spec.shape, self.spec.storage_dtype)
        self.enqueue_download(out)
        self.device.queue.finish()
        return out.astype(self.spec.dtype, copy=False)

    def enqueue_upload(self, array: np.ndarray, queue=None) -> None:
        """Enqueue a copy of C-contiguous ``array`` (shape and dtype already checked) to the
        device on ``queue`` (default: the device's profiling queue) without waiting: ``array``
        must stay alive and unchanged until the queue finishes."""
        self._enqueue_copy(queue, self.mem, array)

    def enqueue_download(self, out: np.ndarray, queue=None) -> None:
        """Enqueue a copy into C-contiguous ``out`` on ``queue`` (default: the device's profiling
        queue) without waiting: valid once the queue finishes."""
        self._enqueue_copy(queue, out, self.mem)

    def _enqueue_copy(self, queue, dst, src) -> None:
        queue = self.device.queue if queue is None else queue
        if is_texture_scope(self.spec.scope):
            cl.enqueue_copy(queue, dst, src, origin=(0, 0, 0), region=self._region(), is_blocking=False)
        else:
            cl.enqueue_copy(queue, dst, src, is_blocking=False)

    def poison(self) -> "Tensor":
        return self.upload(np.full(self.spec.shape, POISON[self.spec.dtype], self.spec.dtype))


#: ``$TIR_ADRENO_PINNED``: 1 (default) stages a model's inputs and outputs in pinned host memory.
PINNED_ENV = "TIR_ADRENO_PINNED"


class PinnedMemoryWarning(RuntimeWarning):
    """The device refused pinned host memory; transfers go through ordinary numpy memory."""


def pinned_requested() -> bool:
    """``$TIR_ADRENO_PINNED`` (0 or 1, default 1); ValueError naming the variable otherwise."""
    value = os.environ.get(PINNED_ENV, "").strip() or "1"
    if value not in ("0", "1"):
        raise SettingError(f"${PINNED_ENV} must be 0 or 1, got {value!r}")
    return value == "1"


class PinnedHost:
    """A host array the device copies from and to directly: a buffer allocated with
    ``ALLOC_HOST_PTR`` (pinned by drivers such as NVIDIA's), mapped once into :attr:`array`.
    A copy from ordinary numpy memory goes through the driver's own pinned bounce buffer:
    one more host copy and a synchronous stage per transfer. :meth:`release` unmaps it."""

    def __init__(self, device: "Device", shape, dtype, queue):
        dtype = np.dtype(dtype)
        nbytes = max(1, math.prod(shape) * dtype.itemsize)
        self.queue = queue
        self.buffer = cl.Buffer(device.context, cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR, nbytes)
        try:
            self.array, _ = cl.enqueue_map_buffer(
                queue, self.buffer, cl.map_flags.READ | cl.map_flags.WRITE, 0, tuple(shape), dtype, is_blocking=True)
        except cl.Error:
            self.buffer.release()
            raise

    def release(self) -> None:
        """Unmap and free (idempotent); :attr:`array` must not be used afterwards."""
        if self.array is not None:
            self.array.base.release(self.queue)
            self.queue.finish()
            self.array = None
            self.buffer.release()


def pin(device: "Device", tensors) -> list[PinnedHost] | None:
    """A :class:`PinnedHost` of each tensor's shape and storage dtype, mapped on the device's
    plain queue; None, with one :class:`PinnedMemoryWarning`, where the device refuses."""
    pins = []
    try:
        for t in tensors:
            pins.append(PinnedHost(device, t.shape, t.spec.storage_dtype, device.plain_queue))
    except cl.Error as err:
        for p in pins:
            p.release()
        warnings.warn(f"{device.name} refused pinned host memory ({err}); uploads and downloads go through "
                      f"ordinary memory", PinnedMemoryWarning, stacklevel=3)
        return None
    return pins


class BoundCall:
    """The kernel launches of one function with their arguments set once (:meth:`LoadedModule.bind`).

    :meth:`enqueue` only enqueues: no argument setting, no checks, no waits. Each
    bound call owns its kernel objects, so two calls of one function on different
    tensors never overwrite each other's arguments.
    """

    __slots__ = ("queue", "launches", "bounds")

    def __init__(self, queue, launches, bounds=None):
        self.queue = queue
        #: (pyopencl Kernel, global size, local size) in launch order.
        self.launches = launches
        #: Sanitized modules: (the module's pending list, function, record buffer); each
        #: enqueue zeroes the record and leaves it for ``LoadedModule.check_bounds``.
        self.bounds = bounds

    def enqueue(self, events: list | None = None, queue=None) -> None:
        """Enqueue every kernel on ``queue`` (default: the one it was bound for, the profiling
        queue); with ``events`` (a list) append their events to it."""
        enqueue, queue = cl.enqueue_nd_range_kernel, self.queue if queue is None else queue
        if self.bounds is not None:
            pending, name, record = self.bounds
            cl.enqueue_fill_buffer(queue, record, np.int32(0), 0, bounds.RECORD_INTS * 4)
            pending.append((name, record))
        if events is None:
            for kernel, global_size, local_size in self.launches:
                enqueue(queue, kernel, global_size, local_size)
        else:
            for kernel, global_size, local_size in self.launches:
                events.append(enqueue(queue, kernel, global_size, local_size))


class LoadedModule:
    """A :class:`KernelModule` whose program is built for one device: its own, or a model's
    linked program where its kernels have other names (``kernel_names``: old -> new)."""

    def __init__(self, device: "Device", module: KernelModule, program, kernel_names: dict[str, str] | None = None,
                 made: dict[str, list] | None = None):
        self.device = device
        self.module = module
        self._program = program
        self._names = kernel_names or {}
        self._made = made if made is not None else {}  # kernel objects made ahead, taken by bind()
        self._kernels: dict = {}  # name -> kernel, made by launch(): a bound model never needs them
        self._bounds: list[tuple[str, object]] = []  # (function, record buffer) not yet checked

    def __getitem__(self, name: str) -> FunctionPlan:
        return self.module[name]

    def alloc_params(self, name: str) -> list[Tensor]:
        return [self.device.empty(spec) for spec in self.module[name].params]

    def _checked_plan(self, name: str, tensors) -> FunctionPlan:
        plan = self.module[name]
        if len(tensors) != len(plan.params):
            raise ValueError(f"{name} takes {len(plan.params)} tensors, got {len(tensors)}")
        for t, spec in zip(tensors, plan.params):
            # A buffer is its elements in order: the same count is the same buffer (a model's [N, C]
            # output viewing its [N, C/4, 1, 1, 4] logits); an image's shape is its extent.
            same_shape = t.spec.shape == spec.shape or (not is_texture_scope(spec.scope) and math.prod(t.spec.shape) == math.prod(spec.shape))
            if not same_shape or t.spec.dtype != spec.dtype or t.spec.scope != spec.scope:
                raise ValueError(f"{name}: argument {spec.name} expects {spec}, got {t.spec}")
            if not is_texture_scope(spec.scope) and t.spec.storage_dtype != spec.storage_dtype:
                # A buffer is read as the kernel was built for (vload_half or not); an image converts.
                raise ValueError(f"{name}: argument {spec.name} is a {spec.storage_dtype} buffer to this kernel, "
                                 f"got a {t.spec.storage_dtype} one")
        return plan

    @staticmethod
    def _set_args(kernel, launch, tensors, record) -> None:
        for i, arg in enumerate(launch.args):
            if arg.kind == "tensor":
                kernel.set_arg(i, tensors[arg.param].mem)
            elif arg.kind == "bounds":
                kernel.set_arg(i, record)
            else:
                kernel.set_arg(i, np.array(arg.value, dtype=arg.dtype))

    def _new_record(self):
        """A zeroed bounds record (sanitized modules), or None."""
        if not self.module.check_bounds:
            return None
        zeros = np.zeros(bounds.RECORD_INTS, np.int32)
        return cl.Buffer(self.device.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=zeros)

    def bind(self, name: str, tensors) -> BoundCall:
        """Function ``name`` on ``tensors`` with every kernel argument set now, once
        (fresh kernel objects); :meth:`BoundCall.enqueue` then runs it any number of times."""
        plan = self._checked_plan(name, tensors)
        record = self._new_record()
        launches = []
        for launch in plan.launches:
            kernel_name = self._names.get(launch.kernel, launch.kernel)
            ahead = self._made.get(kernel_name)
            kernel = ahead.pop() if ahead else cl.Kernel(self._program, kernel_name)
            self._set_args(kernel, launch, tensors, record)
            launches.append((kernel, tuple(launch.global_size), tuple(launch.local_size)))
        return BoundCall(self.device.queue, launches, None if record is None else (self._bounds, name, record))

    def launch(self, name: str, tensors) -> list:
        """Enqueue every kernel of function ``name``; returns their events."""
        plan = self._checked_plan(name, tensors)
        events = []
        record = self._new_record()  # one zeroed record per call, read by check_bounds()
        if record is not None:
            self._bounds.append((name, record))
        for launch in plan.launches:
            kernel = self._kernels.get(launch.kernel)
            if kernel is None:
                kernel = self._kernels[launch.kernel] = cl.Kernel(self._program, self._names.get(launch.kernel, launch.kernel))
            self._set_args(kernel, launch, tensors, record)
            events.append(
                cl.enqueue_nd_range_kernel(self.device.queue, kernel, launch.global_size, launch.local_size)
            )
        return events

    def __call__(self, name: str, *tensors) -> float:
        """Run function ``name`` on device tensors; returns its kernel time in seconds."""
        events = self.launch(name, tensors)
        self.device.queue.finish()
        self.check_bounds()
        seconds = sum(event_seconds(e) for e in events)
        self.device.kernel_seconds += seconds
        return seconds

    def check_bounds(self) -> None:
        """After the queue finished: raise :class:`BoundsError` for the first launch (since the
        last check) of a sanitized module that read or wrote an image out of range."""
        pending, self._bounds = self._bounds, []
        for name, buffer in pending:
            record = np.empty(bounds.RECORD_INTS, np.int32)
            cl.enqueue_copy(self.device.queue, record, buffer)
            message = bounds.describe(record, self.module, name)
            if message:
                raise BoundsError(message)

    def time(self, name: str, tensors, warmup: int = 2, repeat: int = 10) -> float:
        """Median kernel time (OpenCL events) of function ``name`` in seconds."""
        for _ in range(warmup):
            self(name, *tensors)
        return statistics.median(self(name, *tensors) for _ in range(repeat))


def event_seconds(event) -> float:
    return (event.profile.end - event.profile.start) * 1e-9


class Device:
    """One OpenCL device with two in-order queues and a program-binary cache.

    ``queue`` has profiling enabled (kernel times: ``LoadedModule`` calls, profiled model
    runs); ``plain_queue`` has not (the fast model run: no timestamps to record). Work on one
    queue is finished before the other is used: they share memory but not ordering.
    """

    def __init__(self, cl_device):
        self.cl_device = cl_device
        self.context = cl.Context([cl_device])
        self.queue = cl.CommandQueue(self.context, properties=cl.command_queue_properties.PROFILING_ENABLE)
        self.plain_queue = cl.CommandQueue(self.context)
        self.limits = DeviceLimits(
            int(cl_device.image2d_max_width),
            int(cl_device.image2d_max_height),
            int(cl_device.image_max_array_size),
            bool(cl_device.image_support),
        )
        self.build_options = BUILD_OPTIONS
        #: Kernel time (OpenCL events) of every ``LoadedModule`` call so far: what an op cost.
        self.kernel_seconds = 0.0
        self._programs: dict[str, cl.Program] = {}  # binary key -> program (see programs.start_model)
        self._identity: tuple | None = None  # see _binary_key
        #: Every program this device made: from source, from a cached binary, reused in process.
        self.program_counts = ProgramCounts()

    @property
    def name(self) -> str:
        return f"{self.cl_device.platform.name.strip()}: {self.cl_device.name.strip()}"

    @property
    def fp16(self) -> bool:
        """Whether the device runs TVM's float16 kernels (half math, natively or through the half
        prelude): decided by :func:`half_mode`'s probe kernel, not by the extension string."""
        return half_math(self)

    def __repr__(self):
        return f"Device({self.name!r})"

    # -- memory ---------------------------------------------------------------------------
    def empty(self, spec: TensorSpec) -> Tensor:
        flags = cl.mem_flags.READ_WRITE
        if spec.storage not in (None, spec.dtype) and not is_texture_scope(spec.scope) and (spec.dtype, spec.storage) != ("float32", "float16"):
            # Images convert on access; a buffer only as float32 kernels built for half buffers
            # read it (vload_half / vstore_half: codegen.half_buffers).
            raise ValueError(f"{spec.name}: storage {spec.storage} of a {spec.dtype} buffer ({spec.scope!r}); "
                             "buffers hold their dtype or float32 in float16")
        if is_texture_scope(spec.scope):
            channel_type, _ = image_format(spec.storage_dtype)
            fmt = cl.ImageFormat(cl.channel_order.RGBA, getattr(cl.channel_type, channel_type))
            mem = cl.create_image(self.context, flags, fmt, shape=texture_extent(spec.shape, spec.scope), is_array=True)
        else:
            nbytes = max(1, math.prod(spec.shape) * np.dtype(spec.storage_dtype).itemsize)
            mem = cl.Buffer(self.context, flags, nbytes)
        return Tensor(self, spec, mem)

    def array(self, array: np.ndarray, scope: str = "global", name: str = "t", storage: str | None = None) -> Tensor:
        """``array`` on the device; ``storage="float16"`` keeps it in half (rounded on upload): a
        half image, or a half buffer for kernels built with half buffers."""
        array = np.asarray(array)
        return self.empty(TensorSpec(name, tuple(array.shape), array.dtype.name, scope, storage)).upload(array)

    # -- programs -------------------------------------------------------------------------
    def _binary_key(self, source: str, options: str | None = None) -> str:
        options = self.build_options if options is None else options
        return cache.key("program", source, *self._device_identity(), options, *self._prelude_key([source]))

    def needs_prelude(self, sources) -> bool:
        """Whether this device builds ``sources`` with the half prelude: a float16 kernel among
        them where :func:`half_mode` says "prelude" (asked only then: no probe for float32)."""
        return any(half_compat.uses_half(s) for s in sources) and half_mode(self) == "prelude"

    def program_source(self, source: str) -> str:
        """What this device builds for ``source`` (one kernel's or a model's linked source): the
        half prelude before it where :meth:`needs_prelude` (``programs`` builds this)."""
        return half_compat.with_prelude(source) if self.needs_prelude([source]) else source

    def _prelude_key(self, sources) -> tuple:
        """What a binary key adds for the prelude (nothing where none is used: float32 keys unchanged)."""
        return (half_compat.PRELUDE,) if self.needs_prelude(sources) else ()

    def _device_identity(self) -> tuple:
        if self._identity is None:  # device queries are driver calls: ask once
            d = self.cl_device
            self._identity = (d.platform.name, d.platform.version, d.name, d.version, d.driver_version)
        if self._identity[0].strip() == "Portable Computing Language":  # how its binaries are cached
            return self._identity + (pocl_binary.form(),)
        return self._identity

    def build_program(self, source: str, build_options: str | None = None):
        """Build ``source`` with ``build_options`` (default :attr:`build_options`), reusing a
        cached binary (keyed by source, device, driver and options) when a valid one exists."""
        options = self.build_options if build_options is None else build_options
        how, ms, program = programs.build(self, source, options, self._binary_key(source, options))
        self.program_counts.add(how, ms)
        return program

    def _linked_key(self, source_id: str, options: str, sources=()) -> str:
        """The binary key of a model's linked program from ``source_id``, a digest that covers
        its kernels' sources (see ``programs.start_model``), instead of the linked source
        (``sources``: those kernels' sources, for the half prelude's part of the key)."""
        return cache.key("linked-program", link.VERSION, source_id, *self._device_identity(), options,
                         *self._prelude_key(sources))

    def load(self, module: KernelModule, build_options: str | None = None, counts: ProgramCounts | None = None) -> LoadedModule:
        """Bind ``module``'s plan to its program built with ``build_options`` (default
        :attr:`build_options`). ``counts`` records how the program came."""
        return self.load_all({"": module}, build_options, counts)()[""]

    def load_all(self, modules: dict[str, KernelModule], build_options: str | None = None,
                 counts: ProgramCounts | None = None, source_id: str | None = None):
        """Start building the program of ``modules`` (by name) in a background thread: one
        program for all of them (their sources linked, ``programs.start_model``; ``source_id``
        keys its binary); returns a function that waits for it and gives
        ``{name: LoadedModule}``. Meanwhile the caller can do other start-up work
        (``load_model`` reads the weights)."""
        options = self.build_options if build_options is None else build_options
        counters = [self.program_counts] + ([counts] if counts is not None else [])
        wait = programs.start_model(self, modules, options, counters, source_id)

        def ready() -> dict[str, LoadedModule]:
            return {name: LoadedModule(self, modules[name], *built) for name, built in wait().items()}

        return ready


_devices: dict[str, Device] = {}


def get_device(device: "str | Device | None" = None) -> Device:
    """The device to run on: ``device`` (a name substring or a Device), else
    ``$TIR_ADRENO_DEVICE``, else the first GPU, else the first CPU."""
    if isinstance(device, Device):
        return device
    name = device or os.environ.get("TIR_ADRENO_DEVICE") or None
    return _device(_pick(name))


def _device(cl_device) -> Device:
    """The one :class:`Device` of ``cl_device`` (devices are long-lived singletons)."""
    key = f"{cl_device.platform.name}|{cl_device.name}|{cl_device.int_ptr}"
    if key not in _devices:
        _devices[key] = Device(cl_device)
    return _devices[key]


def probe(device=None) -> str | None:
    """None when ``device`` (default: the default device) builds and runs a kernel, else why not."""
    try:
        dev = get_device(device)
        prg = cl.Program(dev.context, "__kernel void twice(__global float* a) { a[get_global_id(0)] *= 2.0f; }").build()
        host = np.arange(4, dtype=np.float32)
        buf = cl.Buffer(dev.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=host)
        prg.twice(dev.queue, (4,), None, buf)
        out = np.empty_like(host)
        cl.enqueue_copy(dev.queue, out, buf)
        dev.queue.finish()
    except Exception as err:  # any failure means "cannot run here"; say which
        lines = str(err).strip().splitlines()
        line = next((x for x in lines if "error" in x.lower()), lines[-1] if lines else "")
        return f"{type(err).__name__}: {line.strip()}{programs.build_hint(str(err))}"
    return None if np.array_equal(out, 2 * host) else "a kernel ran but computed wrong numbers"

