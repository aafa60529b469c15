"""The one place that decides how a conv runs on a device profile (TFLite GPU's ``selectors/``).

:func:`conv2d_plan` turns a conv (geometry, epilogue, precision) plus a
:class:`~tir_adreno.strategy.profile.DeviceProfile` and tuning records into a
:class:`ConvPlan`: algorithm, kernel stages (factory + arguments), the tensors
with shapes and scopes, the config and how weights are packed. ``ops.conv2d``,
the Relax pass, ``tune`` and the benchmarks all call it. Adding a conv variant is
one factory in ``primfuncs/`` plus one branch in :meth:`ConvPlan.primfuncs`.

Without a record the plan is the direct conv with the profile's default config
(``tir_adreno.strategy.defaults.default_config``) in the profile's ``activation_placement``
(textures where they fit, or buffers), depthwise convs where their defaults place them
(:func:`default_choice`; ``source="default"``); with one it is the record's algorithm, config and
placement (``source="records"``). Nothing is measured here. Precisions:
``tir_adreno.strategy.precision``; whether a conv takes a fused op in (a gate, a folded norm, its
depthwise producer): ``tir_adreno.strategy.fusion.can_fuse``; pooling schedules: ``tir_adreno.strategy.pool``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from primfuncs import conv as _conv
from primfuncs._common import BUFFER, TEXTURE
from primfuncs.conv import ConvConfig, ConvGeometry
from primfuncs.conv import winograd as _winograd
from primfuncs.conv import tiled as _tiled
from primfuncs.conv.config import MAX_LOCAL_BYTES
from primfuncs.conv.norm import GroupNormFold, group_norm_refusal, norm_foldable
from primfuncs.conv.prologue import Prologue
from primfuncs.conv.winograd_math import winograd_weight_transform
from primfuncs.epilogue import Epilogue
from primfuncs.gather import view_buffer

from tir_adreno.runtime import texture
from tir_adreno.strategy import defaults
from tir_adreno.strategy.packing import pack_oihw4o
from tir_adreno.strategy.placement import activation_scope, conv_placement
from tir_adreno.strategy.placement import weight_scope as weight_scope_of
from tir_adreno.strategy.width import is_wide
from tir_adreno.strategy.precision import check_precision, conv_accumulator_dtype, half_storage, kernel_dtype
from tir_adreno.strategy.profile import DeviceProfile, check_placement

#: Conv algorithms, most accurate first (ties in tuning go to the earlier one).
ALGORITHMS = ("direct", "winograd_2x2", "winograd_4x4")
#: Winograd output tile m of each Winograd algorithm.
WINOGRAD_TILES = {"winograd_2x2": 2, "winograd_4x4": 4}
#: Algorithms the automatic choice and tuning may use per precision. Winograd F(4x4)'s
#: transforms amplify the rounding of its half-stored intermediates ~4x past the fp16 bound
#: that F(2x2) holds (measured in tests/kernels/test_fp16.py), so fp16 precisions use direct and F(2x2).
PRECISION_ALGORITHMS = {"float32": ALGORITHMS, "float16_acc32": ALGORITHMS[:2], "float16": ALGORITHMS[:2]}


@dataclass(frozen=True)
class ConvChoice:
    """What tuning decides per conv layer and records hold: algorithm, config, placement.

    ``config`` None means the profile's default for the algorithm. Without a choice the
    placement is the profile's ``activation_placement`` (:func:`default_choice`).
    """

    algorithm: str = "direct"
    config: ConvConfig | None = None
    placement: str = "texture"

    def __post_init__(self):
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {self.algorithm!r}")
        check_placement(self.placement)

    @property
    def name(self) -> str:
        config = "default" if self.config is None else config_string(self.config)
        return f"{self.algorithm} {config} {self.placement}"

    def to_dict(self) -> dict:
        c = self.config
        config = None if c is None else dict(oc_block=c.oc_block, w_block=c.w_block, work_group=list(c.work_group),
                                             split_k=c.split_k, register_window=c.register_window, flat=c.flat,
                                             tiled=c.tiled, k_chunk=c.k_chunk)
        return {"algorithm": self.algorithm, "config": config, "placement": self.placement}

    @classmethod
    def from_dict(cls, d: dict) -> "ConvChoice":
        c = d.get("config")
        # register_window / flat / tiled: absent from records written before those knobs existed.
        config = None if c is None else ConvConfig(int(c["oc_block"]), int(c["w_block"]), tuple(int(v) for v in c["work_group"]),
                                                   int(c["split_k"]), bool(c.get("register_window", False)),
                                                   bool(c.get("flat", False)), bool(c.get("tiled", False)),
                                                   int(c.get("k_chunk", 4)))
        return cls(d["algorithm"], config, d.get("placement", "texture"))


def config_string(config: ConvConfig) -> str:
    """Short readable form, e.g. ``oc2 w4 wg8x4x1 k4`` (register tile, work group, split_k), then
    ``reg`` (window in registers), ``flat`` (1-D grid) and ``tiled c<k_chunk>`` (local-memory
    tiled GEMM) when set."""
    wg = "x".join(str(v) for v in config.work_group)
    flags = (" reg" if config.register_window else "") + (" flat" if config.flat else "")
    flags += f" tiled c{config.k_chunk}" if config.tiled else ""
    return f"oc{config.oc_block} w{config.w_block} wg{wg} k{config.split_k}{flags}"


@dataclass(frozen=True)
class TensorPlan:
    name: str
    shape: tuple[int, ...]
    scope: str


@dataclass(frozen=True)
class ConvPlan:
    """How one conv runs. ``stages``: (factory, kwargs) pairs; :meth:`primfuncs` calls them.

    ``tensors``: every parameter of the stages by name (``X``, ``W``/``U``, ``Bias``,
    ``Residual``, Winograd's ``V`` and ``M``, ``Y``) with shape and scope. ``scope`` is the
    conv's own (its placement, where its weights and intermediates live); ``X``, ``Y`` and
    ``Residual`` may lie in the other scope at a placement boundary (mixed-scope kernels).
    """

    geometry: ConvGeometry
    epilogue: Epilogue
    precision: str
    algorithm: str
    config: ConvConfig
    placement: str
    source: str
    scope: str
    weight_scope: str
    tile_scope: str
    tensors: tuple[TensorPlan, ...]
    stages: tuple = field(repr=False)

    @property
    def config_string(self) -> str:
        text = config_string(self.config)
        if self.algorithm != "direct":
            text = f"F{WINOGRAD_TILES[self.algorithm]} {text}"
        return f"{text} {self.placement}"

    @property
    def choice(self) -> ConvChoice:
        return ConvChoice(self.algorithm, self.config, self.placement)

    @property
    def weight_name(self) -> str:
        """The packed weights' parameter: ``W`` (direct, OIHW4o) or ``U`` (Winograd, ``G g G^T``)."""
        return "W" if self.algorithm == "direct" else "U"

    @property
    def io_scopes(self) -> dict:
        """``conv2d_plan`` keywords that rebuild this plan's scopes of X, Y and Residual."""
        scopes = {t.name: t.scope for t in self.tensors}
        return dict(in_scope=scopes["X"], out_scope=scopes["Y"], residual_scope=scopes.get("Residual"))

    def tensor(self, name: str) -> TensorPlan:
        return next(t for t in self.tensors if t.name == name)

    def primfuncs(self) -> tuple:
        """The stage PrimFuncs in launch order (needs TVM)."""
        (factory, kwargs), = self.stages
        built = factory(**kwargs)
        return (built,) if self.algorithm == "direct" else tuple(built.stages)

    def pack_weights(self, w_oihw: np.ndarray) -> np.ndarray:
        """OIHW weights (float64 or float32) as the first GEMM / conv stage reads them."""
        if self.algorithm == "direct":
            return pack_oihw4o(np.asarray(w_oihw).astype(self.dtype))
        return winograd_weight_transform(w_oihw, WINOGRAD_TILES[self.algorithm], np.dtype(self.dtype))

    @property
    def dtype(self) -> str:
        """The kernels' dtype (:func:`kernel_dtype`)."""
        return kernel_dtype(self.precision)

    @property
    def storage(self) -> str | None:
        """Storage dtype of the plan's tensors (:func:`half_storage`): images and buffers."""
        return half_storage(self.precision)

    def storage_of(self, name: str) -> str | None:
        """Storage dtype of tensor ``name``: half under "float16_acc32", in any scope."""
        return self.storage


def eligible_algorithms(geometry: ConvGeometry, precision: str = "float32") -> tuple[str, ...]:
    """The algorithms that can run ``geometry`` (Winograd: 3x3, stride 1, dilation 1, groups 1)
    within ``precision``'s error bound (:data:`PRECISION_ALGORITHMS`)."""
    return PRECISION_ALGORITHMS[precision] if _winograd.winograd_eligible(geometry) else ("direct",)


def check_algorithm(geometry: ConvGeometry, algorithm: str, requested: str | None = None, precision: str = "float32"):
    """ValueError when ``algorithm`` cannot run ``geometry`` (or not in ``precision``), naming
    what was ``requested``."""
    if algorithm in eligible_algorithms(geometry) and algorithm not in PRECISION_ALGORITHMS[precision]:
        raise ValueError(f"algorithm={requested or algorithm!r} exceeds the fp16 error bound in precision {precision!r}; "
                         f"allowed: {PRECISION_ALGORITHMS[precision]}")
    if algorithm not in eligible_algorithms(geometry):
        raise ValueError(f"algorithm={requested or algorithm!r} needs a 3x3 kernel, stride 1, dilation 1 and groups 1: "
                         f"{_winograd.winograd_ineligibility(geometry)}")


def accumulator_kwargs(precision: str, reduction_length: int) -> dict:
    """``acc_dtype`` for a conv factory when it is not the kernel dtype (:func:`conv_accumulator_dtype`),
    else nothing: float32 plans keep their stage arguments (and cache keys) as they were."""
    acc_dtype = conv_accumulator_dtype(precision, reduction_length)
    return {} if acc_dtype == kernel_dtype(precision) else {"acc_dtype": acc_dtype}


def direct_conv2d(geometry: ConvGeometry, epilogue: Epilogue = Epilogue(), dtype: str = "float32",
                  config: ConvConfig | None = None, scope: str = TEXTURE, weight_scope: str | None = None,
                  out_scope: str | None = None, residual_scope: str | None = None, acc_dtype: str | None = None,
                  gate_scope: str | None = None, data_layout: str = "NCHW4c", norm_eps: float | None = None,
                  group_norm: GroupNormFold | None = None, grn_eps: float | None = None, x_view: tuple = ()):
    """The direct conv PrimFunc of ``geometry``: the depthwise kernel for ``groups == C``, else the
    general one (the config sweep in ``benchmarks/conv_configs.py`` calls this with every config);
    ``gate_scope``: with an input gate, ``data_layout`` "NCHW" / "NHWC": X a plain buffer, ``norm_eps``: a
    layer norm over X's channels folded in, ``group_norm``: a group norm of X folded in (the tiled
    kernel; ``primfuncs.conv.conv2d_nchw4c``), ``grn_eps``: GRN's scale folded in, its sums in the gate's place,
    ``x_view``: X read through gather steps (a channel slice of a plain X, a channel window of a blocked one)."""
    g = geometry
    attrs = dict(strides=g.strides, padding=g.padding, dilation=g.dilation, dtype=dtype, config=config, scope=scope,
                 epilogue=replace(epilogue, out_scope=out_scope, residual_scope=residual_scope))
    if g.is_depthwise and gate_scope is None and norm_eps is None and group_norm is None:
        return _conv.depthwise_conv2d_nchw4c((g.n, g.c, g.h, g.w), (g.o, g.cg, g.kh, g.kw), **attrs,
                                             prologue=Prologue(weight_scope=weight_scope, acc_dtype=acc_dtype,
                                                               data_layout=data_layout, x_view=x_view))
    prologue = Prologue(weight_scope, data_layout, gate_scope, norm_eps, group_norm, grn_eps, acc_dtype, x_view=x_view)
    return _conv.conv2d_nchw4c((g.n, g.c, g.h, g.w), (g.o, g.cg, g.kh, g.kw), groups=g.groups, prologue=prologue, **attrs)


def plain_io_plan(plan: ConvPlan, data_layout: str | None = None, out_layout: str | None = None,
                  residual_layout: str | None = None, x_view: tuple = ()) -> ConvPlan | None:
    """``plan`` reading X as a plain buffer in ``data_layout`` ("NCHW": a model's input read by its
    first conv; "NHWC": tokens ``[N, H * W, C]`` read as their map) and/or writing Y as a plain
    buffer in ``out_layout`` ("NHWC": tokens; "NCHW"), so no layout kernel runs on that side (None:
    that side stays blocked); None where its kernel cannot: Winograd, grouped convs that are not
    depthwise (a depthwise conv reads and writes plain too, in either layout: EfficientViT's query
    split off a plain qkv map; a dense one in any config), gated or
    norm-folding convs reading X plain (a gated one or one folding a layer norm writes Y plain:
    TinyViT's qkv Linear for its attention's GEMMs), half kernels (a plain tensor is float32). ``residual_layout`` ("NHWC",
    "NCHW"): the residual read from a plain buffer in that layout (``Epilogue.residual_layout``: a
    map held plain added where it is; direct and tiled kernels, gated or norm-folding too, O a multiple of 4).
    ``x_view`` (with ``data_layout``): X read through ``primfuncs.gather`` steps from that layout's
    tensor to the buffer (a channel slice of a Linear's output, MambaOut's), X's tensor plan the buffer's."""
    (factory, kwargs), = plan.stages
    g = plan.geometry
    if plan.algorithm != "direct" or plan.dtype != "float32" or (g.groups != 1 and not g.is_depthwise):
        return None
    # the input side's kernels read a gate or fold a norm from blocked pixels only; the epilogue is
    # shared (a gated conv or a folded layer norm's writes Y or reads the residual plain as any direct conv does)
    folds = {"gate_scope", "norm_eps", "group_norm", "grn_eps"} & set(kwargs)
    if (folds and data_layout is not None) or (folds - {"gate_scope", "norm_eps"} and out_layout is not None):
        return None
    tensors, kwargs, epilogue = dict((t.name, t) for t in plan.tensors), dict(kwargs), plan.epilogue
    if data_layout is not None:
        logical = (g.n, g.h, g.w, g.c) if data_layout == "NHWC" else (g.n, g.c, g.h, g.w)
        tensors["X"] = TensorPlan("X", view_buffer(logical, x_view)[1], BUFFER)
        kwargs.update(scope=BUFFER, data_layout=data_layout, **({"x_view": tuple(x_view)} if x_view else {}))
    if out_layout is not None:
        epilogue = replace(epilogue, out_layout=out_layout)
        tensors["Y"] = TensorPlan("Y", epilogue.out_shape(g.n, g.o, g.oh, g.ow), BUFFER)
        kwargs.update(epilogue=epilogue, out_scope=BUFFER)
    if residual_layout is not None:
        if not epilogue.residual or g.o % 4:
            return None
        epilogue = replace(epilogue, residual_layout=residual_layout)
        tensors["Residual"] = TensorPlan("Residual", epilogue.residual_shape((g.n, g.o4, g.oh, g.ow, 4)), BUFFER)
        if "Residual2" in tensors:  # the kernel reads its second operand in the residual's scope
            tensors["Residual2"] = replace(tensors["Residual2"], scope=BUFFER)
        kwargs.update(epilogue=epilogue, residual_scope=BUFFER)
    return replace(plan, epilogue=epilogue, tensors=tuple(tensors.values()), stages=((factory, kwargs),))


def blocked_view_plan(plan: ConvPlan, x_view: tuple) -> ConvPlan | None:
    """``plan`` reading its blocked X through ``primfuncs.gather`` steps (``x_view``: a window of
    whole channel blocks of a wider map, so no slice kernel runs before it), X's tensor plan that
    map's; None where its kernel cannot: Winograd, or X read plain already."""
    (factory, kwargs), = plan.stages
    if plan.algorithm != "direct" or kwargs.get("data_layout", "NCHW4c") != "NCHW4c" or not x_view:
        return None
    g = plan.geometry
    tensors = tuple(replace(t, shape=view_buffer((g.n, g.c4, g.h, g.w, 4), x_view)[1]) if t.name == "X" else t for t in plan.tensors)
    return replace(plan, tensors=tensors, stages=((factory, {**kwargs, "x_view": tuple(x_view)}),))


def default_choice(geometry: ConvGeometry, profile: DeviceProfile) -> ConvChoice:
    """What a conv gets without records: the direct conv with the profile's default config, in
    the profile's ``activation_placement`` (on textures from ``profile.texture_min_macs``
    multiply-adds up), or for depthwise convs where a ``defaults.DEPTHWISE_DEFAULTS``
    entry that names a placement puts them; dense convs the profile runs tiled
    (``profile.tiled_min_groups``, ``defaults.tiled_default``) take that config on buffers."""
    placement = conv_placement(geometry.flops // 2, profile)
    if geometry.is_depthwise:
        placement = defaults.depthwise_entry(geometry, profile).get("placement", placement)
    tiled = defaults.tiled_default(geometry, profile)  # None for depthwise convs (groups > 1)
    if tiled is not None:  # measured faster on buffers than on textures on every layer
        return ConvChoice(config=tiled, placement="buffer")
    return ConvChoice(placement=placement)


def conv_activation_scope(geom: ConvGeometry, profile: DeviceProfile, placement: str, allow_buffer: bool,
                      out: ConvGeometry | None = None) -> str:
    """Where a conv's input and output (``out``'s output: a fused pair's) live."""
    out = out or geom
    shapes = [(geom.n, geom.c4, geom.h, geom.w, 4), (out.n, out.o4, out.oh, out.ow, 4)]
    return activation_scope(shapes, profile, placement, allow_buffer)


def resolve_choice(geometry: ConvGeometry, precision: str, profile: DeviceProfile, records=None,
            choice: ConvChoice | None = None) -> tuple[ConvChoice, str]:
    """(the choice, its source): ``choice`` ("explicit"), else the records' ("records"), else the default."""
    if choice is not None:
        return choice, "explicit"
    found = records.lookup(geometry, precision) if records is not None else None
    return (found, "records") if found is not None else (default_choice(geometry, profile), "default")


def takes_gate(choice: ConvChoice, geometry: ConvGeometry) -> bool:
    """Whether the kernel of ``choice`` reads an input gate: the direct conv's blocked path (dense
    or block-aligned groups) and the tiled GEMM (dense), not Winograd."""
    return choice.algorithm == "direct" and _conv.blocked_path(geometry)


def reads_second(choice: ConvChoice) -> bool:
    """Whether ``choice``'s kernel reads a second activation in its epilogue (``Epilogue.reads_second``:
    a residual and a fused chain's operand, or two operands): the direct kernel, not the tiled GEMM nor Winograd."""
    return choice.algorithm == "direct" and not (choice.config is not None and choice.config.tiled)


def second_operand_choice(choice: ConvChoice, geometry: ConvGeometry, profile: DeviceProfile) -> ConvChoice:
    """``choice``, or where its kernel reads no second activation the direct kernel in its placement
    (its untiled config): a chain fused with its second operand saves a launch, the choice's kernel less."""
    if reads_second(choice):
        return choice
    return ConvChoice("direct", defaults.default_config(geometry, profile, prologue=True), choice.placement)


def folds_group_norm(choice: ConvChoice) -> bool:
    """Whether ``choice``'s kernel folds a group norm: the tiled GEMM (its work group folds the
    statistics in shared memory once; the direct kernel's items would each fold all the partials)."""
    return choice.algorithm == "direct" and choice.config is not None and choice.config.tiled


def norm_config(config: ConvConfig, dtype: str, acc_dtype: str, group_norm: GroupNormFold | None = None,
                 grn_blocks: int = 0) -> ConvConfig:
    """``config`` for a conv with a folded norm: a tiled config's ``split_k`` halved until its
    partial sums, a statistics row per pixel more (a layer norm), the folded partials (a
    ``group_norm``), or GRN's ``grn_blocks`` scales, fit in local memory."""
    normed = group_norm is None and not grn_blocks

    def local_bytes(c):
        return _tiled.tiled_local_bytes(c, dtype, acc_dtype, normed, group_norm, grn_blocks)

    while config.tiled and config.split_k > 1 and local_bytes(config) > MAX_LOCAL_BYTES:
        config = replace(config, split_k=config.split_k // 2)
    return config


def conv2d_plan(
    geometry: ConvGeometry,
    epilogue: Epilogue,
    precision: str,
    profile: DeviceProfile,
    records=None,
    choice: ConvChoice | None = None,
    allow_buffer: bool = True,
    in_scope: str | None = None,
    out_scope: str | None = None,
    residual_scope: str | None = None,
    gate_scope: str | None = None,
    norm_eps: float | None = None,
    group_norm: GroupNormFold | None = None,
    grn_eps: float | None = None,
) -> ConvPlan:
    """The plan of one conv on ``profile``.

    ``choice`` forces algorithm / config / placement (``ops.conv2d(algorithm=...)``,
    tuning candidates); else ``records`` (a ``tir_adreno.strategy.records.Records``) gives the
    tuned choice for this conv, else the default (direct, the profile's config, the
    profile's ``activation_placement``). ``allow_buffer=False`` raises ``TextureLimitError``
    for a tensor that does not fit the profile's images. ``in_scope`` / ``out_scope`` /
    ``residual_scope`` (default: the placement's scope; the residual's defaults to
    ``out_scope``) read ``X`` / write ``Y`` / read ``Residual`` in another scope, so the
    Relax pass runs a conv at a placement boundary with no copy kernel. ``gate_scope``: the conv
    reads ``X * Gate[n, c]``, ``Gate`` (``[N, C/4, 1, 1, 4]``) in that scope; ValueError when the
    choice's kernel takes no gate (:func:`takes_gate`; :func:`fuse_gate` asks first). ``norm_eps``:
    the conv reads the layer norm of X over its channels with that epsilon, folded in (its kernel
    takes ``WeightSum`` after ``W``); ValueError where it cannot (:func:`fold_norm` asks first).
    ``group_norm`` (a ``GroupNormFold``): the conv reads the group norm of X folded in, its kernel
    taking ``Stats`` (``group_norm_partials``' output) after ``X``; ValueError where it cannot
    (:func:`fold_group_norm` asks first). ``grn_eps`` (with ``gate_scope``): the Gate is GRN's float32
    sums of squares and the kernel takes ``Gamma`` after it, computing GRN's scale itself (the tiled
    kernel; :func:`fold_grn` asks first).
    """
    check_precision(precision, profile)
    dtype = kernel_dtype(precision)
    choice, source = resolve_choice(geometry, precision, profile, records, choice)
    if epilogue.reads_second:
        choice = second_operand_choice(choice, geometry, profile)
    check_algorithm(geometry, choice.algorithm, precision=precision)
    if gate_scope is not None and not takes_gate(choice, geometry):
        raise ValueError(f"gate_scope={gate_scope!r}: the {choice.name} kernel of this conv takes no input gate "
                         f"(the direct conv's blocked path and the tiled conv do)")
    if norm_eps is not None and not (norm_foldable(geometry) and takes_gate(choice, geometry)):
        raise ValueError(f"norm_eps={norm_eps!r}: a layer norm folds into a dense 1x1 conv (stride 1, no padding) run by "
                         f"the direct or tiled kernel; this is {choice.name} of {geometry}")
    refusal = None if group_norm is None else group_norm_refusal(geometry, group_norm) or (
        None if folds_group_norm(choice) else f"a group norm folds into the tiled kernel, this is {choice.name}")
    if refusal is not None:
        raise ValueError(f"group_norm={group_norm!r} of {geometry}: {refusal}")
    if grn_eps is not None and (gate_scope is None or not folds_group_norm(choice)):
        raise ValueError(f"grn_eps={grn_eps!r}: GRN's scale folds into a gated conv run by the tiled kernel; this is "
                         f"{choice.name} of {geometry}, gate_scope {gate_scope!r}")
    g = geometry
    scope = conv_activation_scope(g, profile, choice.placement, allow_buffer)
    in5, out5 = (g.n, g.c4, g.h, g.w, 4), (g.n, g.o4, g.oh, g.ow, 4)
    x_scope, y_scope = in_scope or scope, out_scope or scope
    r_scope = residual_scope or y_scope
    for shape, s in ((in5, x_scope), (out5, y_scope), (out5, r_scope)):
        texture.place(shape, s, profile.limits, allow_buffer=False)  # a texture override must fit: raises, naming the limit
    io = dict(scope=x_scope, out_scope=y_scope, residual_scope=r_scope)
    extra = [TensorPlan("Bias", epilogue.bias_shape(g.o4), BUFFER)] if epilogue.reads_bias else []
    extra += [TensorPlan("Residual", epilogue.residual_shape(out5), r_scope)] if epilogue.reads_residual else []
    extra += [TensorPlan("Residual2", epilogue.residual_shape(out5, 1), r_scope)] if epilogue.reads_second else []
    if choice.algorithm == "direct":
        config = choice.config or defaults.default_config(g, profile)
        if norm_eps is not None or group_norm is not None or grn_eps is not None:
            config = norm_config(config, dtype, conv_accumulator_dtype(precision, g.reduction_length), group_norm,
                                  g.c4 if grn_eps is not None else 0)
        w5 = (g.o4, g.cg, g.kh, g.kw, 4)
        weight_scope = weight_scope_of([w5], scope, profile, allow_buffer)
        tile_scope = scope
        gate = {} if gate_scope is None else {"gate_scope": gate_scope}  # ungated plans keep their arguments (and keys)
        gate.update({} if norm_eps is None else {"norm_eps": float(norm_eps)})
        gate.update({} if group_norm is None else {"group_norm": group_norm})
        gate.update({} if grn_eps is None else {"grn_eps": float(grn_eps)})
        stages = ((direct_conv2d, dict(geometry=g, epilogue=epilogue, dtype=dtype, config=config, weight_scope=weight_scope,
                                       **io, **gate, **accumulator_kwargs(precision, g.reduction_length))),)
        gates = [TensorPlan("Gate", (g.n, g.c4, 1, 1, 4), gate_scope)] if gate_scope is not None else []
        gates += [TensorPlan("Gamma", (g.c4, 4), BUFFER)] if grn_eps is not None else []
        gates += [TensorPlan("Stats", (g.n * group_norm.groups, group_norm.slices, 3), BUFFER)] if group_norm is not None else []
        sums = [TensorPlan("WeightSum", (g.o4, 4), BUFFER)] if norm_eps is not None else []
        tensors = (TensorPlan("X", in5, x_scope), *gates, TensorPlan("W", w5, weight_scope), *sums, *extra,
                   TensorPlan("Y", out5, y_scope))
    else:
        m = WINOGRAD_TILES[choice.algorithm]
        shapes = _winograd.winograd_shapes(g, m)
        config = choice.config or _winograd.default_config(g, m)
        weight_scope = weight_scope_of([shapes.weight], scope, profile, allow_buffer)
        # V and M are internal: buffers when too large, whatever allow_buffer says.
        fits = all(profile.limits.fits(s, TEXTURE) for s in (shapes.tile, shapes.product))
        tile_scope = scope if scope == TEXTURE and fits else BUFFER
        stages = ((_winograd.conv2d_winograd_nchw4c,
                   dict(data_shape=(g.n, g.c, g.h, g.w), weight_shape=(g.o, g.cg, g.kh, g.kw), padding=g.padding,
                        epilogue=replace(epilogue, out_scope=io["out_scope"], residual_scope=io["residual_scope"]),
                        dtype=dtype, m=m, config=config, scope=io["scope"],
                        prologue=Prologue(weight_scope=weight_scope, tile_scope=tile_scope,  # the GEMM sums over the input channels
                                          **accumulator_kwargs(precision, g.cg)))),)
        tensors = (TensorPlan("X", in5, x_scope), TensorPlan("V", shapes.tile, tile_scope),
                   TensorPlan("U", shapes.weight, weight_scope), TensorPlan("M", shapes.product, tile_scope),
                   *extra, TensorPlan("Y", out5, y_scope))
    placement = "texture" if scope == TEXTURE else "buffer"
    return ConvPlan(g, epilogue, precision, choice.algorithm, config, placement, source, scope, weight_scope,
                    tile_scope, tensors, stages)


def mixed_conv_form(forms: dict[str, int], pieces: int, profile: DeviceProfile) -> str | None:
    """How a mixed conv (``passes.mixed_conv``: a conv per channel group between a split and a
    concat) runs: the form of ``forms`` (form -> the multiply-adds its one conv adds over the
    ``pieces`` group convs: kernels zero-padded to the largest, a dense form's off-diagonal blocks)
    that adds the fewest, with fusion on (``launch_cost_macs`` > 0), when it adds none (MixNet's
    equal 1x1 groups as one grouped conv) or, on a wide GPU (``pool.is_wide``), when what it adds
    costs less than the launches it saves: the split, the concat and all group convs but one (the
    batch norm after the concat, now a conv's, and a gate multiply before the split fuse as well);
    else None (as exported: split, group convs, concat). On PoCL MixNet-S's depthwise groups
    merged under ``launch_cost_macs`` made its depthwise kernels 50-64 ms slower in all, more than
    the launches saved (``benchmarks/mixed_conv.py``, docs/kernels.md "Mixed convs")."""
    if not forms or profile.launch_cost_macs <= 0:
        return None
    form = min(forms, key=forms.get)  # dicts keep order: a tie goes to the first (grouped before dense)
    if forms[form] == 0 or (is_wide(profile) and forms[form] <= (pieces + 1) * profile.launch_cost_macs):
        return form
    return None
