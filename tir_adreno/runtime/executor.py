"""Run a compiled model on the pyopencl runtime: tensors, memory pool, profile.

A :class:`CompiledModel` is plain data: a plan (tensors and kernel calls in
order), the kernel bundles and the packed weights. It never imports TVM, so a
saved model (:meth:`CompiledModel.save`) runs where only numpy and pyopencl
are installed (:func:`load_model`).
"""

from __future__ import annotations

import io
import json
import math
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from tir_adreno.runtime import cache, launcher, opencl as runtime, saved, weights as saved_weights
from tir_adreno.runtime.bundle import KernelModule, TensorSpec
from tir_adreno.runtime.startup import StartupReport, import_ms, mark_imported
from tir_adreno.runtime.texture import image_format, is_texture_scope, texture_extent
from tir_adreno.runtime.errors import UserError
from tir_adreno.runtime.programs import BuildError

#: 2: ``model.json`` names the digests of the other files (``files``).
MODEL_FORMAT = 2


class TargetMismatchError(UserError, ValueError):
    """A model compiled for another device profile does not fit this device."""


class ModelInputError(UserError, ValueError):
    """The inputs given to :meth:`CompiledModel.run` do not match the model."""


def check_inputs(inputs, specs) -> list[np.ndarray]:
    """``inputs`` (a dict by name, or a list in order) checked against ``specs``
    [(name, shape, dtype)]; the arrays in order. :class:`ModelInputError` names the culprit."""
    names = [name for name, _, _ in specs]
    if isinstance(inputs, dict):
        unknown = sorted(set(inputs) - set(names))
        if unknown:
            raise ModelInputError(f"unknown input {unknown[0]!r}; model inputs: {names}")
        missing = [n for n in names if n not in inputs]
        if missing:
            raise ModelInputError(f"missing input {missing[0]!r}; model inputs: {names}")
        arrays = [inputs[n] for n in names]
    else:
        arrays = list(inputs)
        if len(arrays) != len(names):
            raise ModelInputError(f"model takes {len(names)} inputs {names}, got {len(arrays)}")
    arrays = [np.asarray(x) for x in arrays]
    for (name, shape, dtype), x in zip(specs, arrays):
        if x.shape != tuple(shape):
            raise ModelInputError(f"input {name!r} has shape {x.shape}, expected {tuple(shape)}")
        if x.dtype != np.dtype(dtype):
            raise ModelInputError(f"input {name!r} has dtype {x.dtype}, expected {dtype}")
    return arrays


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of the plan. ``kind``: input, const, temp (an intermediate) or output.
    ``storage``: the allocation's element type when it differs from ``dtype`` (see
    ``bundle.TensorSpec``: "float16" for half images and half buffers under "float16_acc32")."""

    shape: tuple[int, ...]
    dtype: str
    scope: str
    kind: str
    name: str = ""
    storage: str | None = None

    @property
    def storage_dtype(self) -> str:
        return self.storage or self.dtype

    @property
    def nbytes(self) -> int:
        """Bytes allocated on the device (half images and buffers: half the float32 bytes)."""
        if is_texture_scope(self.scope):
            w, h, d = texture_extent(self.shape, self.scope)
            return w * h * d * image_format(self.storage_dtype)[1]
        return math.prod(self.shape) * np.dtype(self.storage_dtype).itemsize

    def alloc_key(self):
        """Tensors with equal keys can share one image or buffer."""
        if is_texture_scope(self.scope):
            return ("image", texture_extent(self.shape, self.scope), self.dtype, self.storage_dtype)
        return ("buffer", self.nbytes)

    def spec(self, name: str) -> TensorSpec:
        return TensorSpec(name, self.shape, self.dtype, self.scope, self.storage)


@dataclass(frozen=True)
class Call:
    """One kernel call: ``function`` of kernel bundle ``kernel`` on tensors ``args``
    (its parameters in order, outputs last). ``ours``: one of our texture kernels.
    ``config`` / ``source``: for convs, the strategy's config string and whether it came
    from tuning records ("records") or the defaults ("default")."""

    kernel: str
    function: str
    args: tuple[int, ...]
    label: str
    ours: bool
    config: str | None = None
    source: str | None = None


@dataclass
class Plan:
    tensors: list[TensorInfo]
    calls: list[Call]
    inputs: list[tuple[str, int]]
    outputs: list[int]
    #: "float32", "float16_acc32" or "float16" (``strategy.PRECISIONS``): the kernels' dtype and
    #: the tensors' storage say what it means.
    precision: str = "float32"

    def to_dict(self):
        return {
            "tensors": [asdict(t) for t in self.tensors],
            "calls": [asdict(c) for c in self.calls],
            "inputs": self.inputs,
            "outputs": self.outputs,
            "precision": self.precision,
        }

    @classmethod
    def from_dict(cls, d):
        return cls(
            [TensorInfo(tuple(t["shape"]), t["dtype"], t["scope"], t["kind"], t["name"], t.get("storage"))
             for t in d["tensors"]],
            [Call(c["kernel"], c["function"], tuple(c["args"]), c["label"], c["ours"], c.get("config"), c.get("source"))
             for c in d["calls"]],
            [(name, int(i)) for name, i in d["inputs"]],
            [int(i) for i in d["outputs"]],
            d.get("precision", "float32"),
        )

    def lifetimes(self) -> dict[int, tuple[int, int]]:
        """temp tensor -> (index of its first call, index of its last call)."""
        spans = {}
        for i, call in enumerate(self.calls):
            for t in call.args:
                if self.tensors[t].kind == "temp":
                    first, _ = spans.get(t, (i, i))
                    spans[t] = (first, i)
        return spans

    def assign_memory(self, pool: bool = True) -> tuple[dict[int, int], list[TensorInfo]]:
        """Map every temp tensor to a slot; returns (tensor -> slot, slot descriptions).

        With ``pool`` a slot is reused once its tensor's last call has run
        (same image extent and format, or same buffer size); without it each
        temp gets its own slot.
        """
        spans = self.lifetimes()
        slot_of, slots, free = {}, [], {}
        order = sorted(spans, key=lambda t: spans[t][0])
        releases: dict[int, list[int]] = {}
        for t in order:
            first, last = spans[t]
            for i in [k for k in releases if k < first]:
                for slot in releases.pop(i):
                    free.setdefault(slots[slot].alloc_key(), []).append(slot)
            key = self.tensors[t].alloc_key()
            if pool and free.get(key):
                slot = free[key].pop()
            else:
                slot = len(slots)
                slots.append(self.tensors[t])
            slot_of[t] = slot
            releases.setdefault(last, []).append(slot)
        return slot_of, slots

    def memory_bytes(self, pool: bool = True) -> dict[str, int]:
        """Device bytes of weights, inputs/outputs and intermediates (all alive at once)."""
        _, slots = self.assign_memory(pool)
        by_kind = lambda kinds: sum(t.nbytes for t in self.tensors if t.kind in kinds)  # noqa: E731
        temps = sum(s.nbytes for s in slots)
        return {
            "weights": by_kind({"const"}),
            "io": by_kind({"input", "output"}),
            "intermediates": temps,
            "total": by_kind({"const", "input", "output"}) + temps,
        }


class CompiledModel:
    """A model ready to run on one OpenCL device."""

    def __init__(self, plan: Plan, kernels: dict[str, KernelModule], weights: dict[int, np.ndarray], device=None, pool: bool = True,
                 startup: StartupReport | None = None, programs=None):
        start = time.perf_counter()
        self.plan = plan
        self.kernels = kernels
        self.weights = weights
        #: Where this model's start-up time went (:mod:`tir_adreno.runtime.startup`); ``load_model``
        #: passes its own report in, with the reading and verifying of the saved files, and
        #: ``programs``: the builds it started (``Device.load_all``) while it read the weights.
        self.startup = report = startup or StartupReport(import_ms=import_ms())
        with report.phase("device_ms"):
            self.device = runtime.get_device(device)
        too_big = [t for t in plan.tensors if is_texture_scope(t.scope) and not self.device.limits.fits(t.shape, t.scope)]
        if too_big:
            raise TargetMismatchError(
                f"the model was planned for larger images: tensor {too_big[0].shape} in {too_big[0].scope} exceeds "
                f"{self.device.name}'s image limits (compile it for this device's profile)")
        self.pool = pool
        self._times_ms: list[float] | None = None
        waiting = programs or self.device.load_all(kernels, counts=report.programs)
        self._tensors = self._allocate()  # uploads the weights while the program loads
        with report.phase("programs_ms"):
            self._loaded = waiting()
        with report.phase("bind_ms"):
            self._launch_options = (None, "plain")  # $TIR_ADRENO_LAUNCHER; see use_launcher
            self._bind()
            self._input_tensors = [self._tensors[i] for _, i in plan.inputs]
            self._output_tensors = [self._tensors[i] for i in plan.outputs]
            self._staging: tuple[list, list] | None = None  # pinned (inputs, outputs); see use_pinned
            self.use_pinned()
        report.total_ms += (time.perf_counter() - start) * 1e3

    # -- setup ----------------------------------------------------------------------------
    def _spec(self, i: int) -> TensorSpec:
        t = self.plan.tensors[i]
        return t.spec(t.name or f"t{i}")

    def _allocate(self) -> list[runtime.Tensor]:
        dev, report = self.device, self.startup
        with report.phase("bind_ms"):
            slot_of, slots = self.plan.assign_memory(self.pool)
            slot_mem = [dev.empty(s.spec(f"slot{k}")).mem for k, s in enumerate(slots)]
        tensors, uploading = [], []  # the arrays stay alive until the queue finishes
        for i, t in enumerate(self.plan.tensors):
            if t.kind == "temp":
                tensors.append(runtime.Tensor(dev, self._spec(i), slot_mem[slot_of[i]]))
                continue
            with report.phase("upload_ms" if t.kind == "const" else "bind_ms"):
                tensor = dev.empty(self._spec(i))
                if t.kind == "const":
                    uploading.append(tensor.checked(self.weights[i]))
                    tensor.enqueue_upload(uploading[-1])
                    report.weight_bytes += tensor.nbytes
            tensors.append(tensor)
        with report.phase("upload_ms"):
            dev.queue.finish()
        return tensors

    def _bind(self):
        # The memory pool is fixed, so every kernel argument is set once, here.
        self._bound = [
            self._loaded[c.kernel].bind(c.function, [self._tensors[a] for a in c.args]) for c in self.plan.calls
        ]
        self._launches = [x for b in self._bound for x in b.launches]
        self.use_launcher(*self._launch_options)

    def use_launcher(self, kind: str | None = None, queue: str = "plain") -> None:
        """How the fast run (``run(profile=False)``) enqueues its kernels: ``kind`` auto, ctypes
        or pyopencl (None: ``$TIR_ADRENO_LAUNCHER``, see :mod:`tir_adreno.runtime.launcher`), on the
        device's ``"plain"`` queue or, for comparison with what ``run`` did before, its
        ``"profiling"`` one."""
        if queue not in ("plain", "profiling"):
            raise ValueError(f"queue must be 'plain' or 'profiling', got {queue!r}")
        self._launch_options = (kind, queue)
        self._queue = self.device.plain_queue if queue == "plain" else self.device.queue
        # The fast path: every launch of the model in one launcher, one loop per run; sanitized
        # modules go call by call (each call zeroes and queues its bounds record).
        sanitized = any(b.bounds is not None for b in self._bound)
        self.launcher = None if sanitized else launcher.make_launcher(self._queue, self._launches, kind)

    def use_pinned(self, enabled: bool | None = None) -> None:
        """Whether the fast run stages inputs and outputs in pinned host memory: one
        :class:`runtime.PinnedHost` per model input and output, allocated and mapped here, once
        (``enabled`` None: ``$TIR_ADRENO_PINNED``, default 1). Each run copies its inputs into
        them, the device copies from and to them directly, and the outputs are copied out after
        the one wait. Where the device refuses: a ``PinnedMemoryWarning`` and the ordinary path."""
        enabled = runtime.pinned_requested() if enabled is None else bool(enabled)
        self.release()
        if enabled:
            pins = runtime.pin(self.device, self._input_tensors + self._output_tensors)
            if pins is not None:
                n = len(self._input_tensors)
                self._staging = (pins[:n], pins[n:])

    @property
    def pinned(self) -> bool:
        """Whether the fast run goes through pinned staging (:meth:`use_pinned`)."""
        return self._staging is not None

    def release(self) -> None:
        """Unmap and free the pinned staging (later fast runs take the ordinary path until
        :meth:`use_pinned`); the model's device memory goes with the model itself."""
        staging, self._staging = self._staging, None
        for pin in staging[0] + staging[1] if staging else ():
            pin.release()

    def _enqueue_fast(self) -> None:
        if self.launcher is not None:
            self.launcher.enqueue()
        else:
            for bound in self._bound:
                bound.enqueue(queue=self._queue)

    @property
    def launcher_kind(self) -> str:
        """The fast run's launcher: "ctypes" or "pyopencl" (a sanitized model: always pyopencl)."""
        return "pyopencl" if self.launcher is None else self.launcher.kind

    def replace_kernel(self, key: str, module: KernelModule) -> None:
        """Run ``module`` wherever the plan calls kernel ``key`` (an edited kernel, same signature)."""
        self.kernels[key] = module
        self._loaded[key] = self.device.load(module)
        self._bind()

    @property
    def precision(self) -> str:
        return self.plan.precision

    @property
    def input_names(self) -> list[str]:
        return [name for name, _ in self.plan.inputs]

    def get_input(self, name: str) -> np.ndarray:
        """The pinned host array the fast run uploads input ``name`` from (named after TVM's
        ``GraphModule.get_input``): fill it in place and pass it to :meth:`run`, which then skips
        its host copy (a 224x224 image: 13 us of memcpy per run). Valid until :meth:`use_pinned`
        or :meth:`release`; RuntimeError where the run is not staged in pinned memory."""
        if name not in self.input_names:
            raise ModelInputError(f"unknown input {name!r}; model inputs: {self.input_names}")
        if self._staging is None:
            raise RuntimeError("inputs are not staged in pinned memory (use_pinned(False), $TIR_ADRENO_PINNED=0, "
                               "or the device refused it): pass ordinary arrays to run()")
        return self._staging[0][self.input_names.index(name)].array

    # -- running --------------------------------------------------------------------------
    def _check_inputs(self, inputs) -> list[np.ndarray]:
        """``inputs`` as C-contiguous arrays in input order and in the storage dtype of their
        tensors; ModelInputError when they do not match."""
        specs = [(name, self.plan.tensors[i].shape, self.plan.tensors[i].dtype) for name, i in self.plan.inputs]
        return [np.ascontiguousarray(x, dtype=t.spec.storage_dtype) for x, t in zip(check_inputs(inputs, specs), self._input_tensors)]

    def run(self, inputs, profile: bool = False) -> list[np.ndarray]:
        """Run once; ``inputs`` maps input names to arrays (or is a list in input order).

        Returns new arrays (NCHW as the model defines them). The fast path
        (``profile=False``) enqueues the uploads, every kernel (arguments were set
        when the model was loaded; :meth:`use_launcher` says how) and the downloads
        on the device's queue without profiling, then waits once at the end; it
        keeps no events; inputs and outputs go through pinned host memory
        (:meth:`use_pinned`). ``profile=True`` runs on the profiling queue, poisons the
        outputs first (an element no kernel wrote comes back NaN) and records every
        kernel's OpenCL event time for :meth:`profile` and :meth:`kernel_time_ms`.
        Either way the run's queue is finished before ``run`` returns, so the two
        queues never hold work at the same time.
        """
        arrays = self._check_inputs(inputs)  # held until the queue finishes (non-blocking uploads)
        queue = self.device.queue if profile else self._queue
        if profile:
            for t in self._output_tensors:
                t.poison()
        events = [[] for _ in self._bound]

        def kernels():
            if profile:
                for bound, evs in zip(self._bound, events):
                    bound.enqueue(evs)
            else:
                self._enqueue_fast()

        outputs = self._transfer(arrays, queue, kernels, pinned=not profile)
        for loaded in self._loaded.values():  # sanitized builds ($TIR_ADRENO_CHECK_BOUNDS) raise here
            loaded.check_bounds()
        if profile:
            self._times_ms = [sum(runtime.event_seconds(e) for e in evs) * 1e3 for evs in events]
        return [out.astype(t.spec.dtype, copy=False) for t, out in zip(self._output_tensors, outputs)]

    def _transfer(self, arrays, queue, kernels, pinned: bool = True) -> list[np.ndarray]:
        """Enqueue the uploads of ``arrays``, then ``kernels()``, then the downloads, all on
        ``queue``, and wait: the outputs in their storage dtype, new arrays. With ``pinned``
        and staging (:meth:`use_pinned`) the transfers go through the pinned arrays."""
        staging = self._staging if pinned else None
        if staging is not None:
            for pin, x in zip(staging[0], arrays):
                if x is not pin.array:  # filled in place (get_input): nothing to copy
                    np.copyto(pin.array, x)  # the previous run finished: its upload read it already
            arrays = [pin.array for pin in staging[0]]
            outputs = [pin.array for pin in staging[1]]
        else:
            outputs = [np.empty(t.shape, t.spec.storage_dtype) for t in self._output_tensors]
        for t, x in zip(self._input_tensors, arrays):
            t.enqueue_upload(x, queue)
        kernels()
        for t, out in zip(self._output_tensors, outputs):
            t.enqueue_download(out, queue)
        queue.finish()
        # The next run overwrites the pinned arrays: never hand them out.
        return outputs if staging is None else [out.copy() for out in outputs]

    def io_time_ms(self, inputs, repeat: int = 20) -> float:
        """Median wall ms of a fast run's uploads and downloads alone (no kernels, same queue):
        the part of :meth:`run`'s wall time that is neither launches nor kernels."""
        arrays = self._check_inputs(inputs)
        samples = []
        for _ in range(repeat):
            start = time.perf_counter()
            self._transfer(arrays, self._queue, lambda: None)
            samples.append((time.perf_counter() - start) * 1e3)
        return statistics.median(samples)

    @property
    def launch_count(self) -> int:
        """OpenCL kernel launches per run (a call may launch several kernels)."""
        return len(self._launches)

    def launch_time_us(self, repeat: int = 20, bound: bool = True) -> float:
        """Host microseconds per kernel launch: the median over ``repeat`` runs of the time
        to enqueue every kernel the way the fast run does (no uploads, no wait), over
        :attr:`launch_count`. ``bound=False`` times the unbound path instead (arguments
        checked and set on every launch, events kept, profiling queue: what ``run`` did
        before arguments were bound at load), for comparison."""
        samples = []
        for _ in range(repeat):
            start = time.perf_counter()
            if bound:
                self._enqueue_fast()
            else:
                for call in self.plan.calls:
                    self._loaded[call.kernel].launch(call.function, [self._tensors[a] for a in call.args])
            samples.append(time.perf_counter() - start)
            (self._queue if bound else self.device.queue).finish()
            for loaded in self._loaded.values():
                loaded.check_bounds()
        return statistics.median(samples) * 1e6 / max(1, self.launch_count)

    def _placement(self, call: Call) -> str:
        scopes = {self.plan.tensors[a].scope for a in call.args}
        return "texture" if any(is_texture_scope(s) for s in scopes) else "buffer"

    def profile(self) -> list[dict]:
        """Per kernel call: op, kernel, ours, placement, and ``time_ms`` (its OpenCL event
        time) from the last ``run(..., profile=True)``, None before any such run."""
        times = self._times_ms or [None] * len(self.plan.calls)
        return [
            {
                "op": c.label,
                "kernel": c.function,
                "ours": c.ours,
                "placement": self._placement(c),
                "time_ms": t,
                **({"config": c.config, "source": c.source} if c.config is not None else {}),
            }
            for c, t in zip(self.plan.calls, times)
        ]

    def kernel_time_ms(self) -> float:
        """Sum of the kernels' OpenCL event times of the last ``run(..., profile=True)``."""
        if self._times_ms is None:
            raise RuntimeError("kernel_time_ms() needs a profiled run: call run(inputs, profile=True) first")
        return sum(self._times_ms)

    def memory_bytes(self) -> dict[str, int]:
        return self.plan.memory_bytes(self.pool)

    # -- persistence ----------------------------------------------------------------------
    def save(self, directory, include_weights: bool = True) -> Path:
        """Write ``model.json`` (plan + kernels) and ``weights.npz``, each atomically with a checksum.

        ``include_weights=False`` leaves the weights out (a timing-only copy for a
        machine that cannot take their size; see ``load_model(random_weights=...)``).
        """
        return save_model(directory, self.plan, self.kernels, self.weights if include_weights else None)


def save_model(directory, plan: Plan, kernels: dict[str, KernelModule], weights: dict[int, np.ndarray] | None, target: str = "",
               reference=None, force: bool = True) -> Path:
    """Write a saved model, whole or not at all (:func:`saved.replacing_folder`): ``model.json``
    (plan + kernels, and the digests of the other files), ``weights.npz`` unless ``weights`` is
    None, ``reference.npz`` when ``reference`` is (inputs, outputs) (:func:`write_reference`).
    ``target`` names the device profile it was compiled for. ``force=False`` refuses a folder
    holding files we did not write (:class:`saved.SavedModelError`)."""
    directory = Path(directory)
    with saved.replacing_folder(directory, force) as staging:
        saved.write_model_files(staging, model_doc(plan, kernels, target), weights, reference)
    return directory


def model_doc(plan: Plan, kernels: dict[str, KernelModule], target: str) -> dict:
    """``model.json``'s document but for the digests of the other files."""
    return {"format": MODEL_FORMAT, "target": target, "plan": plan.to_dict(),
            "kernels": {k: json.loads(m.to_json()) for k, m in kernels.items()}}


#: Re-exported: the saved model's functions live in :mod:`tir_adreno.runtime.saved`.
REFERENCE_FILE, save_reference, load_reference = saved.REFERENCE_FILE, saved.save_reference, saved.load_reference


def _kernels_and_plan(directory: Path, doc: dict) -> tuple[dict[str, KernelModule], "Plan"]:
    """The kernel bundles and the plan of a checked ``model.json`` document; SavedModelError
    naming the file when a part is missing or malformed (a document edited and re-checksummed)."""
    try:
        kernels = {k: KernelModule.from_dict(v) for k, v in doc["kernels"].items()}
        plan = Plan.from_dict(doc["plan"])
        for call in plan.calls:  # every call's kernel and tensors are in the file
            kernels[call.kernel][call.function]
            [plan.tensors[i] for i in call.args]
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:
        what = f"no {err}" if isinstance(err, KeyError) else str(err).splitlines()[0] if str(err) else type(err).__name__
        raise saved.SavedModelError(f"{directory / saved.MODEL_FILE}: malformed saved model ({what}); compile the model again") from None
    return kernels, plan


def load_model(directory, device=None, pool: bool = True, random_weights: int | None = None) -> CompiledModel:
    """Load a model saved by :meth:`CompiledModel.save`; needs no TVM. Programs come from the binary cache.

    The saved files are memory-mapped and their checksums computed once per file
    (``cache.read_once_verified``); the model's one program is keyed by model.json's checksum
    (it covers every kernel source) and loads in a background thread while the weights are
    read and uploaded. ``random_weights=seed`` fills weights saved without values with seeded
    random numbers: the model then only serves timing.
    """
    start = time.perf_counter()
    report = StartupReport(import_ms=import_ms())
    directory = Path(directory)
    doc, doc_digest = saved.read_doc(directory, lambda path: _checked(path, report), with_digest=True)
    if doc["format"] != MODEL_FORMAT:
        raise saved.SavedModelError(f"{directory}: model format {doc['format']} != {MODEL_FORMAT} (compile the model again)")
    with report.phase("read_ms"):
        kernels, plan = _kernels_and_plan(directory, doc)
    with report.phase("device_ms"):
        device = runtime.get_device(device)
    if plan.precision == "float16" and not runtime.half_math(device):
        raise TargetMismatchError(f"{directory}: compiled in precision 'float16' (half math), which {device.name} does not "
                                  "run (probe kernel); compile it in 'float16_acc32' (half storage, float math)")
    weights_path = directory / saved.WEIGHTS_FILE
    saved.check_regular(weights_path)
    # built while the weights are read; model.json's checksum stands for the sources in the key
    programs = _built_or_refused(device.load_all(kernels, counts=report.programs, source_id=doc_digest.hex()), directory, device)
    weights_file = _checked(weights_path, report)
    if weights_file is None and random_weights is not None and not weights_path.exists():
        weights_file = (b"", None)
    if weights_file is None:
        programs()  # let the builds finish (and fill the cache) before saying so
        raise saved.SavedModelError(f"{directory}: missing, truncated or corrupt {saved.WEIGHTS_FILE}")
    # weights asked to be random where none are saved (a timing-only copy): nothing to bind
    if weights_file[1] is not None or (saved.WEIGHTS_FILE in doc[saved.FILES_KEY] and random_weights is None):
        saved.check_bound(directory, doc, saved.WEIGHTS_FILE, weights_file[1])
    with report.phase("read_ms"):
        weights = _weights(weights_file[0], plan, random_weights)
    report.total_ms = (time.perf_counter() - start) * 1e3  # the constructor adds its own time
    return CompiledModel(plan, kernels, weights, device, pool, startup=report, programs=programs)


def _built_or_refused(wait, directory: Path, device):
    """``wait`` (``Device.load_all``'s) whose build failure is the saved model's: a SavedModelError
    naming its model.json (its OpenCL was edited, or this driver refuses it)."""

    def programs():
        try:
            return wait()
        except BuildError as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else "build failed"
            raise saved.SavedModelError(f"{directory / saved.MODEL_FILE}: its OpenCL does not build on {device.name} ({first})") from None

    return programs


def _checked(path: Path, report: StartupReport) -> tuple[memoryview, bytes] | None:
    """(payload, checksum) of the saved file ``path``, memory-mapped and verified (once per
    file: ``cache.read_once_verified``; the time goes to ``verify_ms``), None when missing,
    truncated or corrupt."""
    with report.phase("verify_ms"):
        return cache.read_once_verified(path)


def _weights(weight_bytes, plan: Plan, random_weights: int | None) -> dict[int, np.ndarray]:
    """The saved weights by tensor index, or seeded random ones (``random_weights``) for a
    model saved without them (``weight_bytes`` empty)."""
    if len(weight_bytes):  # views into the verified bytes: no copy, no second checksum
        found = {int(k): w for k, w in saved_weights.arrays(weight_bytes).items()}
        for i, t in enumerate(plan.tensors):
            if t.kind == "const" and (i not in found or found[i].shape != tuple(t.shape)):
                raise saved.SavedModelError(f"weights.npz: no weight {i} of shape {tuple(t.shape)} (the weights of another model)")
        return found
    rng = np.random.default_rng(random_weights)
    return {i: (rng.standard_normal(t.shape) * 0.05).astype(t.storage_dtype) for i, t in enumerate(plan.tensors) if t.kind == "const"}


mark_imported()  # the runtime is imported (this module is its top): see startup.import_ms
