"""A layer norm over the channels folded into the 1x1 conv that reads it (ConvNeXt's and
EdgeNeXt's ``dwconv -> LayerNorm(C) -> pwconv1``): the conv reads the raw ``X`` and normalizes in
its epilogue, so the layer norm kernel and one tensor round trip disappear.

For pixel ``p`` with ``mu_p``, ``r_p = 1 / sqrt(var_p + eps)`` over its ``C`` channels,
``LN(x)_c = (x_c - mu_p) r_p gamma_c + beta_c``, and the unpadded 1x1 conv after it is

    y_o = r_p (sum_c W'_oc x_c - mu_p s_o) + b'_o,   W' = W diag(gamma), s_o = sum_c W'_oc, b' = W beta + b

(``W'``, ``s`` and ``b'`` folded by the caller, in float64). A 1x1 conv's work item reads every
input channel of its pixels anyway: it accumulates the statistics next to its products and applies
the correction before its epilogue (:func:`norm_macros`).

Numerics (float32 statistics whatever the storage): every input value is read shifted by
``K_p = x_p,0``, the pixel's first channel, and the work item sums ``d_c = x_c - K_p`` three
ways: ``S1 = sum d``, ``S2 = sum d^2`` and the products ``sum W'_oc d_c``. Then
``mu_p - K_p = S1 / C``, ``var_p = S2 / C - (S1 / C)^2`` and
``y_o = r_p (sum W' d - (S1 / C) s_o) + b'_o`` exactly as above. Without the shift both
``E[x^2] - E[x]^2`` and ``W' x - mu s`` cancel catastrophically when the mean is large against the
spread (a pixel at 1000 +- 1 loses ~20 bits of 24 in the first; even a two-pass float32 mean is off
by ~ulp(1000) = 6e-5 there, 6e-5 of the spread); with it every sum is over values of the
size of the spread (``K_p`` is one of the pixel's own values, so ``|mu_p - K_p|`` is a few standard
deviations at most: the textbook shifted-data variance), the subtraction ``x - K`` is exact for
nearby values (Sterbenz), and the same shift serves all three sums, so the shifted statistics need
one subtraction per input lane, no second pass and no Welford division per channel. The shift is
per pixel, so split_k slices (and the tiled kernel's staging) all use the same one and their partial
sums simply add (the statistics ride in extra accumulator rows through the split's reduction).

A group norm over ``(C / groups, H, W)`` (MobileViT-v2's GroupNorm1) folds into the tiled 1x1 conv
that reads it differently (:class:`GroupNormFold`): its statistics span the whole map, so they come
from the partials ``group_norm_partials`` wrote (``(count, mean, M2)`` per pixel slice), which each
work group of the conv folds itself (``primfuncs.layernorm.partials_fold_macros``, the same step as
``group_norm_apply``'s) into the mean and ``r = 1 / sqrt(var + eps)`` of each group of its sample;
it then reads its input normalized, ``(x_c - mean_g) r_g`` per staged lane (no cancellation: the
conv multiplies normalized values), with ``gamma`` folded into ``W`` and ``W beta`` into the bias
by the caller (in float64). The plan becomes ``partials -> conv`` instead of
``partials -> apply -> conv``.

ConvNeXt-V2's global response norm (GRN) before a conv, ``x * s + beta`` with the per-channel
scale ``s = 1 + gamma sqrt(S) / (mean_c sqrt(S) + eps)`` from the sums of squares ``S`` over H, W,
folds into the tiled conv the same way (:func:`check_grn`): the conv takes ``S`` (float32, from
``sum_squares_hw``) where a gated conv takes its gate, and ``Gamma`` after it; each work group
computes ``s`` of every input channel in shared memory (``primfuncs.grn.grn_macros``, the steps
``grn_scale`` takes) and multiplies the staged input by it as by a gate (``W beta`` in the bias,
by the caller). The plan becomes ``sum_squares_hw -> conv`` instead of
``sum_squares_hw -> grn_scale -> conv``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tvm.script import tirx as T

from .._common import LANES, check_slices, clamp
from ..layernorm import group_norm_pixels

F32 = "float32"


def norm_foldable(geom) -> bool:
    """Whether a layer norm over the input channels folds into conv ``geom``: a dense 1x1 conv with
    stride 1 and no padding (every output pixel reads exactly its own input pixel's channels)."""
    return (geom.kh, geom.kw, geom.groups) == (1, 1, 1) and geom.strides == (1, 1) and not any(geom.padding)


def check_norm(geom, norm_eps, dtype: str, acc_dtype: str, refusal: str | None = None) -> bool:
    """Whether a conv factory folds a layer norm (``norm_eps`` not None), checked: a dense 1x1 conv,
    stride 1, unpadded (``geom`` None: a GEMM's, whose rows are the norm's), a float32 kernel (half
    storage is the allocation's: float16_acc32), ``refusal`` None (else the reason this kernel variant
    takes none); ValueError naming the culprit."""
    if norm_eps is None:
        return False
    if isinstance(norm_eps, bool) or not isinstance(norm_eps, (int, float)) or not norm_eps >= 0:
        raise ValueError(f"norm_eps must be a float >= 0 (a layer norm's epsilon), got {norm_eps!r}")
    if refusal is not None:
        raise ValueError(f"norm_eps: {refusal}")
    if geom is not None and not norm_foldable(geom):
        raise ValueError(f"norm_eps: a layer norm folds into a dense 1x1 conv with stride 1 and no padding, got kernel "
                         f"{geom.kh}x{geom.kw}, groups {geom.groups}, strides {geom.strides}, padding {geom.padding}")
    if (dtype, acc_dtype) != (F32, F32):
        raise ValueError(f"norm_eps: the folded layer norm's shifts and statistics need a float32 kernel, got dtype {dtype!r}, "
                         f"acc_dtype {acc_dtype!r}")
    return True


@dataclass(frozen=True)
class GroupNormFold:
    """A group norm of the conv's input folded into it: ``groups`` groups over (C / groups, H, W)
    (1, or whole 4-channel blocks each), its statistics from the ``slices`` partials per (sample,
    group) of ``group_norm_partials`` (``Stats``, ``(N * groups, slices, 3)`` float32), ``epsilon``."""

    groups: int
    slices: int
    epsilon: float


def fold_items(slices: int, items: int) -> int:
    """Items of a work group of ``items`` that fold a folded group norm's ``slices`` partials:
    ``ceil(sqrt(slices))`` at most, so each folds about as many partials as one item then folds
    their results (``~2 sqrt(slices)`` serial Chan steps; the H200's 196 slices: 14 + 14, where all
    of a 256-item work group would leave 196 steps to the one that combines)."""
    return max(1, min(int(items), math.isqrt(int(slices) - 1) + 1))


def group_norm_refusal(geom, fold: GroupNormFold) -> str | None:
    """Why a group norm ``fold`` of conv ``geom``'s input cannot fold into it (None: it can): a dense
    1x1 conv, stride 1, unpadded (:func:`norm_foldable`), ``groups`` of whole 4-channel blocks (or
    one), ``slices`` an ``equal_slices`` count of a group's pixels, ``epsilon`` >= 0."""
    g = fold.groups
    if not norm_foldable(geom):
        return (f"a group norm folds into a dense 1x1 conv with stride 1 and no padding, got kernel {geom.kh}x{geom.kw}, "
                f"groups {geom.groups}, strides {geom.strides}, padding {geom.padding}")
    if not (isinstance(g, int) and g >= 1 and geom.c % g == 0 and (g == 1 or (geom.c // g) % LANES == 0)):
        return f"groups={g!r} must be 1 or divide channels={geom.c} into groups of a multiple of {LANES} channels"
    if isinstance(fold.epsilon, bool) or not isinstance(fold.epsilon, (int, float)) or not fold.epsilon >= 0:
        return f"epsilon must be a float >= 0, got {fold.epsilon!r}"
    try:
        check_slices(group_norm_pixels((geom.n, geom.c4, geom.h, geom.w, LANES), g), fold.slices, "a group's pixels")
    except ValueError as e:
        return str(e)
    return None


def check_group_norm(geom, fold, dtype: str, acc_dtype: str, refusal: str | None = None) -> bool:
    """Whether a conv factory folds a group norm (``fold`` a :class:`GroupNormFold`, not None),
    checked as :func:`check_norm` does (float32 kernel, ``refusal``) and :func:`group_norm_refusal`."""
    if fold is None:
        return False
    if not isinstance(fold, GroupNormFold):
        raise ValueError(f"group_norm must be a GroupNormFold, got {fold!r}")
    reason = refusal or group_norm_refusal(geom, fold)
    if reason is not None:
        raise ValueError(f"group_norm: {reason}")
    if (dtype, acc_dtype) != (F32, F32):
        raise ValueError(f"group_norm: the folded group norm's statistics need a float32 kernel, got dtype {dtype!r}, "
                         f"acc_dtype {acc_dtype!r}")
    return True


def check_grn(grn_eps, gated: bool, dtype: str, acc_dtype: str) -> bool:
    """Whether a conv factory reads GRN's scale folded in (``grn_eps``, GRN's epsilon, not None),
    checked: its sums of squares come where the input gate does (``gated``), a float32 kernel (half
    storage is the allocation's: float16_acc32); ValueError naming the culprit."""
    if grn_eps is None:
        return False
    if isinstance(grn_eps, bool) or not isinstance(grn_eps, (int, float)) or not grn_eps >= 0:
        raise ValueError(f"grn_eps must be a float >= 0 (GRN's epsilon), got {grn_eps!r}")
    if not gated:
        raise ValueError("grn_eps: GRN's sums of squares are read in the input gate's place: give gate_scope")
    if (dtype, acc_dtype) != (F32, F32):
        raise ValueError(f"grn_eps: GRN's scale needs a float32 kernel, got dtype {dtype!r}, acc_dtype {acc_dtype!r}")
    return True


def shifted_rstd(s2, mean, inv_count, epsilon: float):
    """``r = 1 / sqrt(var + eps)`` of a row (a pixel's channels, a GEMM row's K values) from its
    shifted sums: ``var = S2 / C - mean^2`` with ``mean = S1 / C`` the shifted mean ``mu - K``
    (``inv_count``: ``1 / C``). ``var >= 0`` up to rounding; the clamp keeps NaN (a non-finite row
    stays NaN, as the layer norm's). The one formula of every folded layer norm (:func:`norm_macros`,
    ``primfuncs.gemm_tiled``)."""
    return T.FloatImm(F32, 1.0) / T.sqrt(clamp(s2 * inv_count - mean * mean, T.FloatImm(F32, 0.0)) + T.FloatImm(F32, float(epsilon)))


def norm_macros(ocb: int, cols: int, channels: int, epsilon: float, out_block):
    """``(accumulate_statistics, normalize)`` of a tile of ``ocb`` output blocks x ``cols`` pixels
    whose accumulator ``acc`` has rows ``ob * cols + i`` (output block ``ob`` of pixel ``i``) and,
    after them, one statistics row per pixel, ``ocb * cols + i`` = (S1, S2, 0, 0) of its shifted
    inputs. ``out_block(a, b, ob)``: the (clamped) output block of the tile's ``ob``-th block."""
    first = ocb * cols  # the first statistics row
    inv_c = T.FloatImm(F32, 1.0 / channels)

    @T.macro
    def accumulate_statistics(acc, xs, i, lanes):
        """S1 += x, S2 += x * x over the first ``lanes`` channels of pixel ``xs[i]`` (shifted inputs)."""
        for j in T.unroll(lanes):
            acc[first + i, 0] = acc[first + i, 0] + T.Cast(F32, xs[i, j])
            acc[first + i, 1] = acc[first + i, 1] + T.Cast(F32, xs[i, j]) * T.Cast(F32, xs[i, j])

    @T.macro
    def normalize(acc, WeightSum, a, b):
        """``acc[ob * cols + i] = r_i (acc - (mu_i - K_i) s)`` in place: the layer norm of the
        tile's pixels applied to its products (``s = WeightSum[out_block]``)."""
        st = T.sblock_alloc_buffer((cols, 2), F32, scope="local")  # mu - K, 1 / sqrt(var + eps)
        ws = T.sblock_alloc_buffer((LANES,), WeightSum.dtype, scope="local")
        for i in T.unroll(cols):
            st[i, 0] = acc[first + i, 0] * inv_c
            st[i, 1] = shifted_rstd(acc[first + i, 1], st[i, 0], inv_c, epsilon)
        for ob in T.unroll(ocb):
            for lane in T.vectorized(4):
                ws[lane] = WeightSum[out_block(a, b, ob), lane]
            for i in T.unroll(cols):
                for lane in T.unroll(4):
                    acc[ob * cols + i, lane] = (acc[ob * cols + i, lane] - st[i, 0] * T.Cast(F32, ws[lane])) * st[i, 1]

    return accumulate_statistics, normalize
