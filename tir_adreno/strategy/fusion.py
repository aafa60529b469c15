"""Fusion decisions: the one question the fusion patterns (``passes.patterns``) ask the strategy,
:func:`can_fuse`, and the predicates it dispatches to, one per kind of fusion (:data:`FUSION_KINDS`).

A pattern matches a subgraph; whether its fused plan runs on a device, in a precision, with the
tuning records, is decided here: an input gate read by a conv, a layer norm, group norm or GRN
folded into a conv, a layer norm over the rows folded into the tiled GEMM that reads them, a depthwise conv computed inside its 1x1 reader, EdgeNeXt's split depthwise
convs. The conv plans these fusions produce are ``strategy.conv.conv2d_plan``'s (its ``gate_scope``,
``norm_eps``, ``group_norm`` and ``grn_eps`` keywords) and :class:`FusedPlan`'s; the schedules of
the fused kernels that are not convs live beside their kernels (``strategy.excite``,
``strategy.norm``, ``strategy.attention``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from primfuncs import conv as _conv
from primfuncs._common import TEXTURE
from primfuncs.conv import ConvConfig, ConvGeometry
from primfuncs.conv import tiled as _tiled
from primfuncs.conv.config import MAX_LOCAL_BYTES
from primfuncs.conv.norm import GroupNormFold, group_norm_refusal, norm_foldable
from primfuncs.conv.prologue import Prologue
from primfuncs.epilogue import Epilogue

from tir_adreno.strategy import defaults
from tir_adreno.strategy.conv import (ConvChoice, accumulator_kwargs, config_string, conv_activation_scope, default_choice,
                                      folds_group_norm, norm_config, resolve_choice, takes_gate)
from tir_adreno.strategy.gemm import gemm_config, producer_gemm_config
from tir_adreno.strategy.packing import pack_oihw4o
from tir_adreno.strategy.placement import weight_scope as weight_scope_of
from tir_adreno.strategy.precision import check_precision, conv_accumulator_dtype, kernel_dtype
from tir_adreno.strategy.profile import DeviceProfile


def fuses(profile: DeviceProfile) -> bool:
    """Whether kernels take in their neighbours at all on ``profile``: ``launch_cost_macs`` > 0
    (``compile_model(fuse=False)`` sets it 0, every op its own kernel). Every fusion needs it."""
    return profile.launch_cost_macs > 0


@dataclass(frozen=True)
class Fusion:
    """A yes from :func:`can_fuse` for a fusion whose plan is another's (``conv2d_plan`` with the
    fold's keyword): its kind and the geometry of the conv that takes the fused op in."""

    kind: str
    geometry: ConvGeometry | None


#: The kinds of fusion :func:`can_fuse` answers, and what each means.
FUSION_KINDS = {
    "gate": "a conv reads x * gate[n, c] (a squeeze-excitation's gate multiply; GRN's scale): fuse_gate",
    "layer_norm": "a dense 1x1 conv reads the layer norm over its input channels folded in: fold_norm",
    "layer_norm_gemm": "the tiled GEMM (geometry: a GemmGeometry) reads the layer norm over A's rows folded in: fold_norm_gemm",
    "producer_gemm": "a GEMM (geometry: a GemmGeometry) computes its A from the elementwise chain producing it (detail: ops): fold_producer_gemm",
    "group_norm": "a dense 1x1 conv reads a split group norm of its input folded in (detail: fold): fold_group_norm",
    "grn": "a gated conv computes GRN's scale from the sums of squares itself: fold_grn",
    "depthwise_pointwise": "a 1x1 conv (detail: pointwise) computes the depthwise conv it reads: fuse_depthwise_pointwise",
    "split_depthwise": "EdgeNeXt's split depthwise convs as one launch per conv: hierarchical_depthwise",
}


def can_fuse(kind: str, geometry: ConvGeometry | None, profile: DeviceProfile, precision: str = "float32", records=None,
             **detail) -> Fusion | FusedPlan | None:
    """Whether the fusion ``kind`` (:data:`FUSION_KINDS`) runs for the conv ``geometry`` on
    ``profile`` in ``precision`` with ``records``: a :class:`Fusion` (or for "depthwise_pointwise",
    ``geometry`` the depthwise conv and ``detail`` its ``pointwise`` reader and ``allow_buffer``,
    the :class:`FusedPlan`), else None (the ops run apart). ``detail``: "group_norm" takes ``fold``
    (a ``GroupNormFold``). The predicates are looked up when called, so a benchmark may patch one."""
    if kind == "depthwise_pointwise":
        return fuse_depthwise_pointwise(geometry, detail["pointwise"], profile, records, precision, detail.get("allow_buffer", True))
    if kind == "gate":
        yes = fuse_gate(geometry, precision, profile, records)
    elif kind == "layer_norm":
        yes = fold_norm(geometry, precision, profile, records)
    elif kind == "layer_norm_gemm":
        yes = fold_norm_gemm(geometry, precision, profile)
    elif kind == "producer_gemm":
        yes = fold_producer_gemm(geometry, detail["ops"], profile)
    elif kind == "group_norm":
        yes = fold_group_norm(geometry, detail["fold"], precision, profile, records)
    elif kind == "grn":
        yes = fold_grn(geometry, precision, profile, records)
    elif kind == "split_depthwise":
        yes = hierarchical_depthwise(profile)
    else:
        raise ValueError(f"unknown fusion kind {kind!r}; known: {sorted(FUSION_KINDS)}")
    return Fusion(kind, geometry) if yes else None


def fuse_gate(geometry: ConvGeometry, precision: str, profile: DeviceProfile, records=None) -> bool:
    """Whether conv ``geometry`` should read ``x * gate[n, c]`` itself (a squeeze-excitation's gate
    multiply, one launch less) instead of the multiply running apart: with kernel fusion on
    (``launch_cost_macs`` > 0) when its plan's kernel takes a gate (:func:`takes_gate`). The cost
    is one multiply per input lane read (the direct kernel: ``1 / (4 oc_block)`` of the conv's
    multiply-adds; the tiled one multiplies as it stages the input, once per work group) and one
    gate pixel read per input block; Winograd plans decline (their input transform is a kernel
    of its own), so the multiply stays apart there."""
    if profile.launch_cost_macs <= 0:
        return False
    return takes_gate(resolve_choice(geometry, precision, profile, records)[0], geometry)


#: Device classes whose 1x1 convs read a layer norm before them folded in (:func:`fold_norm`), and
#: a split group norm's statistics (:func:`fold_group_norm`: only wide GPUs split a group norm, so
#: PoCL and Adreno keep their one ``group_norm`` launch whatever this says): wide
#: GPUs, where a launch costs more than the statistics (H200: no slower tiled convs, 12-15 launches
#: and 0.09 ms of kernel time less per model). Not PoCL: there ConvNeXt-V2's folded 40-channel
#: pwconv1s ran 1.2-1.9x their time apart in two runs, more than the layer norm launches saved
#: (``benchmarks/norm_fold.py``, docs/kernels.md); not Adreno, unmeasured and ALU-bound like it.
FOLD_NORM_KINDS = ("gpu",)


def fold_norm(geometry: ConvGeometry, precision: str, profile: DeviceProfile, records=None) -> bool:
    """Whether conv ``geometry`` should read the layer norm over its input channels folded in
    (``primfuncs.conv.norm``: the norm's kernel and one round trip of its output less) instead of
    the layer norm kernel running before it: with kernel fusion on (``launch_cost_macs`` > 0) on a
    device class of :data:`FOLD_NORM_KINDS`, for a dense 1x1 conv with stride 1 and no padding
    whose plan's kernel folds it (the direct conv's blocked path or the tiled GEMM:
    :func:`takes_gate`) in float32 arithmetic (float32, float16_acc32). The cost: one subtraction
    and two multiply-adds per input lane read (the statistics; the direct kernel: ``3 / (16
    oc_block)`` of its multiply-adds, the tiled one once per staged pixel and output channel tile
    row), and a few operations per output pixel."""
    if not folds_norms(profile, precision):
        return False
    return norm_foldable(geometry) and takes_gate(resolve_choice(geometry, precision, profile, records)[0], geometry)


def fold_norm_gemm(geometry, precision: str, profile: DeviceProfile) -> bool:
    """Whether the GEMM ``geometry`` (``primfuncs.gemm.GemmGeometry``: a Linear by a constant on
    plain tokens) should read the layer norm over its A's rows (K) folded in (``gemm(norm_eps=)``,
    ``primfuncs.gemm_tiled``: the ``layer_norm_rows`` launch and one round trip of its output less)
    instead of the norm's row kernel running before it: with kernel fusion on (:func:`fuses`), a
    float32 kernel (float32, float16_acc32: ``strategy.precision.kernel_dtype``), A read as stored
    (not ``trans_a``), and the product's config the tiled kernel (``strategy.gemm.gemm_config``:
    the register and split kernels take no norm). The cost: one subtraction per staged value of A
    (once per work group) and two multiply-adds per value an item reads (``1 / (8 cols)`` of its
    FMAs), and a few operations per output."""
    if not fuses(profile) or kernel_dtype(precision) != "float32" or geometry.trans_a:
        return False
    return gemm_config(geometry, profile).tiled


def fold_producer_gemm(geometry, ops: int, profile: DeviceProfile) -> bool:
    """Whether the GEMM ``geometry`` (a Linear by a constant on plain tensors) should compute its A
    from the elementwise chain of ``ops`` ops that alone produces it (``gemm(a_producer=)``: the
    chain's launch, its store and one read of A less) instead of the chain's kernel running
    before it: with kernel fusion on (:func:`fuses`), where a config evaluates the chain few
    enough times (``strategy.gemm.producer_gemm_config``). MambaOut-Femto on the H200 profile:
    the second Linears of its first three stages fold (tiled: A read 1, 3 and 6 times; stage 3's
    long reduction leaves the split kernel for it); its last stage's do not (49 tokens: split,
    72 reads, no tiled config fills the GPU)."""
    return fuses(profile) and producer_gemm_config(geometry, ops, profile) is not None


def folds_norms(profile: DeviceProfile, precision: str) -> bool:
    """Whether ``profile`` folds norms into convs at all (:data:`FOLD_NORM_KINDS`, fusion on, float32 arithmetic)."""
    return profile.launch_cost_macs > 0 and profile.kind in FOLD_NORM_KINDS and kernel_dtype(precision) == "float32"


def fold_group_norm(geometry: ConvGeometry, fold: GroupNormFold, precision: str, profile: DeviceProfile, records=None) -> bool:
    """Whether conv ``geometry`` should read the group norm ``fold`` of its input folded in
    (``primfuncs.conv.norm.GroupNormFold``: the plan ``group_norm_partials -> conv`` instead of
    ``group_norm_partials -> group_norm_apply -> conv``, one launch and one round trip of the
    norm's output less) where layer norms fold (:func:`fold_norm`: a device class of
    :data:`FOLD_NORM_KINDS`, fusion on, float32 arithmetic), for a dense 1x1 conv, stride 1, no
    padding, whose plan is the tiled kernel (:func:`folds_group_norm`) and whose work group's
    shared memory holds the fold's (:func:`norm_config`). The split form (``group_norm_partials``)
    exists on wide GPUs only (``strategy.norm.group_norm_schedule``), so only they ask. The cost: a
    work group folds its sample's partials first (as each ``group_norm_apply`` work group does), and
    one subtraction and one multiply per staged input lane. The H200's MobileViT-v2 1x1 convs all
    run tiled (``profile.tiled_min_groups``)."""
    if not folds_norms(profile, precision) or group_norm_refusal(geometry, fold) is not None:
        return False
    return _tiled_fold_fits(geometry, precision, profile, records, group_norm=fold)


def _tiled_fold_fits(geometry: ConvGeometry, precision: str, profile: DeviceProfile, records=None,
                     group_norm: GroupNormFold | None = None, grn_blocks: int = 0) -> bool:
    """Whether conv ``geometry``'s plan is the tiled kernel (:func:`folds_group_norm`) and its work
    group's shared memory holds a folded ``group_norm`` or GRN's ``grn_blocks`` scales once
    :func:`norm_config` has shrunk its ``split_k``."""
    choice = resolve_choice(geometry, precision, profile, records)[0]
    if not folds_group_norm(choice):
        return False
    dtype, acc_dtype = kernel_dtype(precision), conv_accumulator_dtype(precision, geometry.reduction_length)
    config = norm_config(choice.config, dtype, acc_dtype, group_norm, grn_blocks)
    return _tiled.tiled_local_bytes(config, dtype, acc_dtype, False, group_norm, grn_blocks) <= MAX_LOCAL_BYTES


def fold_grn(geometry: ConvGeometry, precision: str, profile: DeviceProfile, records=None) -> bool:
    """Whether the gated conv ``geometry`` after ConvNeXt-V2's GRN (:func:`fuse_gate` said yes)
    should compute GRN's scale itself from the sums of squares (``grn_eps``: the plan
    ``sum_squares_hw -> conv`` instead of ``sum_squares_hw -> grn_scale -> conv``, one launch less)
    where norms fold (:func:`fold_norm`: a device class of :data:`FOLD_NORM_KINDS`, fusion on,
    float32 arithmetic), for a dense conv whose plan is the tiled kernel (:func:`folds_group_norm`:
    its work group computes the C scales once, in shared memory; the direct kernel's items would each
    take all C square roots) and whose shared memory holds them (:func:`norm_config`). The cost: C
    square roots and ``~2 sqrt(C / 4)`` serial additions per work group before its tile."""
    if not folds_norms(profile, precision) or geometry.groups != 1:
        return False
    return _tiled_fold_fits(geometry, precision, profile, records, grn_blocks=geometry.c4)


@dataclass(frozen=True)
class FusedPlan:
    """A depthwise conv and the 1x1 conv that reads it, run as one kernel
    (``primfuncs.conv.depthwise_pointwise_nchw4c``): :func:`fuse_depthwise_pointwise`."""

    depthwise: ConvGeometry
    pointwise: ConvGeometry
    precision: str
    config: ConvConfig
    placement: str
    source: str
    scope: str
    weight_scope: str
    recompute_macs: int  # depthwise multiply-adds the fused kernel does beyond the depthwise conv's own
    #: X / Y / Residual in another scope than ``scope`` (a placement boundary; None: ``scope``)
    in_scope: str | None = None
    out_scope: str | None = None
    residual_scope: str | None = None

    @property
    def config_string(self) -> str:
        return f"fused {config_string(self.config)} {self.placement}"

    @property
    def out_shape(self) -> tuple[int, ...]:
        p = self.pointwise
        return (p.n, p.o4, p.oh, p.ow, 4)

    def primfunc(self, dw_epilogue: Epilogue, epilogue: Epilogue):
        """The fused PrimFunc (needs TVM)."""
        factory, kwargs = self.stage(dw_epilogue, epilogue)
        return factory(**kwargs)

    def stage(self, dw_epilogue: Epilogue, epilogue: Epilogue) -> tuple:
        """The fused kernel as (factory, kwargs), like :attr:`ConvPlan.stages`."""
        d, p = self.depthwise, self.pointwise
        return _conv.depthwise_pointwise_nchw4c, dict(
            data_shape=(d.n, d.c, d.h, d.w), dw_weight_shape=(d.o, 1, d.kh, d.kw), pw_weight_shape=(p.o, p.cg, 1, 1),
            strides=d.strides, padding=d.padding, dilation=d.dilation, groups=p.groups,
            epilogue=replace(epilogue, out_scope=self.out_scope, residual_scope=self.residual_scope),
            prologue=Prologue(weight_scope=self.weight_scope, depthwise=dw_epilogue,
                              **accumulator_kwargs(self.precision, p.reduction_length)),
            dtype=kernel_dtype(self.precision), config=self.config, scope=self.in_scope or self.scope)

    def pack_weights(self, w_oihw: np.ndarray) -> np.ndarray:
        """Either conv's OIHW weights as the fused kernel reads them (OIHW4o)."""
        return pack_oihw4o(np.asarray(w_oihw).astype(kernel_dtype(self.precision)))


def fusable(dw: ConvGeometry, pw: ConvGeometry) -> bool:
    """Can ``pw`` (reading ``dw``'s output) take ``dw`` as its prologue? A depthwise conv with
    multiplier 1, then a 1x1 conv with stride 1, no padding, dense or with block-aligned groups
    (``_conv.blocked_path``: EfficientViT's multi-scale aggregation)."""
    return (dw.is_depthwise and dw.o == dw.c and (pw.kh, pw.kw) == (1, 1) and _conv.blocked_path(pw)
            and pw.strides == (1, 1) and pw.padding == (0, 0, 0, 0) and (pw.n, pw.c, pw.h, pw.w) == dw.out_shape)


def fuse_depthwise_pointwise(dw: ConvGeometry, pw: ConvGeometry, profile: DeviceProfile, records=None,
                             precision: str = "float32", allow_buffer: bool = True) -> FusedPlan | None:
    """The fused kernel's plan when ``pw`` should compute ``dw`` on the fly, else None.

    The 1x1 conv's tile (its tuned record's direct config and placement, else the
    profile's default) gets ``dw`` as a prologue. Each of its ``ceil(O/4 / oc_block)``
    output channel tiles recomputes the depthwise conv (a grouped 1x1's tile, in one group, its
    group's channels only), so the fused kernel does ``(tiles / groups - 1) x`` the depthwise
    MACs on top; fuse when that is below what one launch is worth on the device
    (``profile.launch_cost_macs``, 0: never): the launch and the intermediate's round trip
    through memory are saved.
    """
    check_precision(precision, profile)
    if not fusable(dw, pw):
        return None
    choice = records.lookup(pw, precision) if records is not None else None
    source = "records" if choice is not None and choice.algorithm == "direct" else "default"
    if source == "default":  # the placement only: a default tiled config has no prologue
        choice = ConvChoice(placement=(choice or default_choice(pw, profile)).placement)
    tiled = choice.config is not None and choice.config.tiled  # a record's: its prologue variant is the direct one
    config = choice.config if choice.config and not tiled else defaults.default_config(pw, profile, prologue=True)
    dw_macs = dw.flops // 2
    recompute = -(-pw.o4 // _conv.blocked_oc_block(pw, config.oc_block)) * dw_macs // pw.groups - dw_macs
    if recompute >= profile.launch_cost_macs:
        return None
    scope = conv_activation_scope(dw, profile, choice.placement, allow_buffer, out=pw)
    weights = [(dw.o4, 1, dw.kh, dw.kw, 4), (pw.o4, pw.cg, 1, 1, 4)]
    weight_scope = weight_scope_of(weights, scope, profile, allow_buffer)  # the kernel reads both alike
    placement = "texture" if scope == TEXTURE else "buffer"
    return FusedPlan(dw, pw, precision, config, placement, source, scope, weight_scope, recompute)


def hierarchical_depthwise(profile: DeviceProfile) -> bool:
    """Whether EdgeNeXt's hierarchical split depthwise convs (timm ``SplitTransposeBlock``: channel
    slices, ``sp = conv_i(sp + chunk_i)``, concat; ``passes.patterns.split_depthwise``) run as one
    ``hierarchical_depthwise`` launch per conv, each writing the whole map: with fusion on
    (``launch_cost_macs`` > 0). It saves the slices, the adds and the concat (EdgeNeXt-XXS: 21
    launches -> 6) for one copy of the map per conv (its small maps: 28 x 28 x 48 down to
    7 x 7 x 168); else as exported."""
    return profile.launch_cost_macs > 0
