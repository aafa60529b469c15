"""Mutation check of the test suite: named mutants, each applied to a temporary copy of the
repository and run against the README's test command (CI's, with ``-x``; the run is ended at the
first failed test, ``benchmarks/first_failure.py``, not when xdist's workers drain); prints the kill table.

A mutant is a small, plausible bug (batch norm's epsilon dropped, a conv's coordinate clamp
removed, an attribute read under a misspelled name, a float16 sum run in half, ...). It is
"killed" when the tests fail, and "survived" when they pass: then the suite cannot tell the bug
from the code. Every mutant must be killed, in every run: ``--runs N`` repeats each with N
hypothesis seeds (random draws vary from run to run, as in CI). A new kernel family, rule or
precision path lands with a mutant its tests kill. Not part of CI (the whole suite per mutant
and run): run it before a release and after changing tests; docs/testing.md has the last table.

Mutants are located by exact code snippets searched over the tree (``primfuncs/``,
``tir_adreno/``), not by file path, so moving code between modules does not break them; a
snippet found other than exactly once stops the run with an error naming it. The copy holds the
files a fresh clone has plus new ones not yet committed; the working tree is never touched.

    python benchmarks/mutants.py --runs 5               # every mutant x 5 seeds, the whole suite (the table)
    python benchmarks/mutants.py --quick                # each mutant against its own tests (minutes)
    python benchmarks/mutants.py --only hardsigmoid_offset --tests tests/kernels/test_elementwise.py
    python benchmarks/mutants.py --list
    python benchmarks/mutants.py --runs 5 --own-first   # the whole suite, each mutant's own test files first

``--own-first`` runs the same command, the same tests, but orders each mutant's own test files
(``Mutant.tests``) first (the pytest plugin ``benchmarks/files_first.py`` reorders the collected
items): a mutant its own tests kill stops in about a minute instead of
whenever the suite reaches them, and one they miss is still run against every other test. It
first runs the unmutated suite once (``--baseline``, implied), which must pass: a test that
fails without any mutant would otherwise count as every mutant's kill (stop 52's table took such
kills for five mutants from a test that failed on its own).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from files_first import FILES_FIRST
from first_failure import FIRST_FAILURE

ROOT = Path(__file__).resolve().parents[1]
#: Where mutants' snippets are searched.
SEARCHED = ("primfuncs", "tir_adreno")


@dataclasses.dataclass(frozen=True)
class Mutant:
    name: str
    what: str
    edits: tuple[tuple[str, str], ...]  # (exact old text, new text), each old text unique in the tree
    tests: tuple[str, ...]  # pytest node ids or files, relative to the repository root


#: A batch norm without a conv (one affine kernel) and MobileNetV2's block (folded into convs).
BATCH_NORM_TESTS = ("tests/passes/test_coverage.py::test_batch_norm_without_conv_is_one_affine_kernel",
                    "tests/models/test_onnx_import.py::test_mobilenet_v2_block_batch_2")

MUTANTS = (
    Mutant(
        "bn_eps_dropped", "batch norm folded without its epsilon",
        (("np.sqrt(var.astype(np.float64) + float(node.attrs.epsilon))", "np.sqrt(var.astype(np.float64))"),),
        BATCH_NORM_TESTS,
    ),
    Mutant(
        "bn_eps_x100", "batch norm's epsilon multiplied by 100",
        (("np.sqrt(var.astype(np.float64) + float(node.attrs.epsilon))",
          "np.sqrt(var.astype(np.float64) + 100 * float(node.attrs.epsilon))"),),
        BATCH_NORM_TESTS,
    ),
    Mutant(
        "conv_clamp_removed", "the direct conv's top-row coordinate clamp removed (PoCL reads 0 there: only the sanitizer sees it)",
        (("            ih = T.max(ih, 0)\n", "            ih = ih\n"),),
        ("tests/kernels/test_conv2d.py::test_conv2d_matches_numpy",),
    ),
    Mutant(
        "winograd_constant", "Winograd F(4x4) output transform: an 8 off by 0.5%",
        (("[0, 1, -1, 8, -8, 1]", "[0, 1, -1, 8.04, -8, 1]"),),
        ("tests/kernels/test_conv2d_winograd.py::test_winograd_matches_numpy",
         "tests/kernels/test_conv2d_winograd.py::test_ops_conv2d_winograd"),
    ),
    Mutant(
        "residual_twice", "the conv epilogue adds the residual twice",
        (("        load_residual(tmp, epilogue.residual_layout, Residual, n, c, h, w)\n        for lane in T.unroll(4):\n"
          "            acc[k, lane] = acc[k, lane] + tmp[lane]\n",
          "        load_residual(tmp, epilogue.residual_layout, Residual, n, c, h, w)\n        for lane in T.unroll(4):\n"
          "            acc[k, lane] = acc[k, lane] + tmp[lane] + tmp[lane]\n"),),
        ("tests/kernels/test_conv2d.py::test_conv2d_group_paths",),
    ),
    Mutant(
        "layout_lanes_swapped", "NCHW -> NCHW4c packs the four lanes of a pixel in reverse order",
        (("A[vz // c4, T.min((vz % c4) * 4 + lane, c - 1), vh, vw]", "A[vz // c4, T.min((vz % c4) * 4 + 3 - lane, c - 1), vh, vw]"),),
        ("tests/kernels/test_layout.py",),
    ),
    Mutant(
        "pool_window_off_by_one", "sliding pooling windows start one position late",
        (("        return o * self.stride - self.pad_before\n", "        return o * self.stride - self.pad_before + 1\n"),),
        ("tests/kernels/test_pool2d.py::test_pool2d", "tests/kernels/test_pool2d.py::test_max_pool_padding_is_minus_infinity"),
    ),
    Mutant(
        "maxpool_nan_reverted", "max pooling with the plain max (OpenCL's fmax drops a NaN)",
        (('"max": (maximum, lambda dtype: _inf(dtype, -1.0))', '"max": (T.max, lambda dtype: _inf(dtype, -1.0))'),),
        ("tests/kernels/test_nonfinite.py::test_max_pool2d",),
    ),
    # -- issue 38: a mutant per kernel family and precision path; the first three survived the whole suite there
    Mutant(
        "pool_count_include_pad_misread",
        "the pooling rule reads count_include_pad under a misspelled name with a default, so count_include_pad=1 averages as 0",
        (('count_include_pad=bool(getattr(a, "count_include_pad", False))', 'count_include_pad=bool(getattr(a, "count_include_pads", False))'),),
        ("tests/passes/test_onnx_attributes.py",),
    ),
    Mutant(
        "fused_dw_pw_half_accumulator",
        "float16: the fused depthwise -> 1x1 kernel loses its accumulator dtype, so 1x1 sums over K > 32 run in half",
        (("                              **accumulator_kwargs(self.precision, p.reduction_length)),\n", "                              ),\n"),),
        ("tests/kernels/test_fp16_accumulation.py", "tests/kernels/test_fp16.py"),
    ),
    Mutant(
        "xca_partials_model_dtype",
        "float16_acc32: the split cross-covariance attention's partial sums are stored like any tensor of ours (half), not pinned to float32",
        (("p = rw.emit_float32(partials, [src], (n * heads, k, d, 2 * d + 1), info)",
          "p = rw.emit_kernel(partials, [src], (n * heads, k, d, 2 * d + 1), op_info=info)"),),
        ("tests/passes/test_precision_plan.py", "tests/passes/test_attention.py"),  # the plan-level float32 check kills it
    ),
    Mutant(
        "xca_partials_first_k_pixel",
        "the split cross-covariance attention's partials read head t's first k pixel for every pixel of its k (d > 4 in the split form)",
        (("load_pixel(pk, X, bh // heads, T.min(k0(bh) // 4 + kb, c4 - 1), y, x)",
          "load_pixel(pk, X, bh // heads, T.min(k0(bh) // 4, c4 - 1), y, x)"),),
        ("tests/passes/test_attention.py",),
    ),
    Mutant(
        "xca_finish_last_slice_dropped",
        "the split cross-covariance attention's finish adds the partials of every token slice but the last",
        (("                        for k in range(slices):\n                            s[0] = s[0]",
          "                        for k in range(slices - 1):\n                            s[0] = s[0]"),),
        ("tests/passes/test_attention.py",),
    ),
    Mutant(
        "softmax_attention_last_item_sum_dropped",
        "softmax attention in one kernel divides by the exponentials' sum of every item but the last",
        (("                for u in T.serial(1, threads):\n                    acc[1] = acc[1] + part_sum[u]",
          "                for u in T.serial(1, threads - 1):\n                    acc[1] = acc[1] + part_sum[u]"),),
        ("tests/kernels/test_softmax_attention.py",),
    ),
    Mutant(
        "softmax_attention_score_scale_dropped",
        "the softmax attention pattern drops a scale the scores' tail took after the product (EfficientViT's `* scale`)",
        (('"alpha": q.scale * k.scale * pre.alpha,', '"alpha": q.scale * k.scale,'),),
        ("tests/passes/test_softmax_attention_pattern.py",),
    ),
    Mutant(
        "softmax_attention_size_limit_ignored",
        "the strategy fuses softmax attention of any size (the multiply-add limit measured on the H100 dropped)",
        (("or rows * keys * (head_dim + value_dim) > SOFTMAX_ATTENTION_MAX_MACS:", ":"),),
        ("tests/passes/test_softmax_attention_pattern.py",),
    ),
    Mutant(
        "producer_broadcast_at_leading_axes",
        "a GEMM's elementwise producer aligns a broadcast input at A's first axes instead of its last (a per-column vector read along the rows)",
        (("    pad = len(index) - len(shape)\n    return tuple(0 if d == 1 else i for d, i in zip(shape, index[pad:]))",
          "    return tuple(0 if d == 1 else i for d, i in zip(shape, index))"),),
        ("tests/kernels/test_gemm_producer.py", "tests/passes/test_producer_gemm_pattern.py"),
    ),
    Mutant(
        "producer_gemm_repeated_reads_ignored",
        "the strategy folds an elementwise producer into any GEMM, whatever its column tiles repeat of the evaluations",
        (("        if config is not None and (a_reads(geom, config) - 1) *", "        if config is not None and 0 *"),),
        ("tests/passes/test_producer_gemm_pattern.py",),
    ),
    Mutant(
        "pattern_reading_plain_counted_blocked",
        "the map boundary counts a pattern whose kernels read plain tensors (a chain a GEMM computes) as a reader of a blocked map",
        (('        if getattr(candidate, "reads_plain", False):\n            continue\n', ""),),
        ("tests/passes/test_producer_gemm_pattern.py",),
    ),
    Mutant(
        "plain_residual_second_operand_scope",
        "a conv reading its residual plain hands its second operand over in the output's scope, not the residual's buffer",
        (('            tensors["Residual2"] = replace(tensors["Residual2"], scope=BUFFER)\n', "            pass\n"),),
        ("tests/passes/test_epilogue_chain.py::test_two_full_operands_with_a_plain_residual",),
    ),
    Mutant(
        "pool_ceil_overhang_counted",
        "average pooling with count_include_pad counts a ceil_mode window's overhang past the padding",
        (("            return T.min(self.taps, (self.extent + self.pad_after - s + d - 1) // d)\n", "            return self.taps\n"),),
        ("tests/kernels/test_pool2d.py", "tests/passes/test_onnx_attributes.py"),
    ),
    Mutant(
        "dw_window_top_pad_for_columns",
        "the depthwise register window offsets its columns by the top padding instead of the left",
        (("x0 * win.sw - win.pl + j)", "x0 * win.sw - win.pt + j)"),),
        ("tests/kernels/test_conv2d.py::test_conv2d_matches_numpy", "tests/kernels/test_conv2d_fused.py"),
    ),
    Mutant(
        "conv_norm_fold_eps_dropped",
        "a layer norm folded into a 1x1 conv loses its epsilon",
        (("st[i, 1] = shifted_rstd(acc[first + i, 1], st[i, 0], inv_c, epsilon)",
          "st[i, 1] = shifted_rstd(acc[first + i, 1], st[i, 0], inv_c, 0.0)"),),
        ("tests/kernels/test_conv2d_norm.py", "tests/passes/test_norm_fold.py"),
    ),
    Mutant(
        "gemm_norm_eps_dropped",
        "a layer norm folded into the tiled GEMM loses its epsilon",
        (("shifted_rstd(acc[i, stat + 1], acc[i, stat], inv_k, norm_eps)", "shifted_rstd(acc[i, stat + 1], acc[i, stat], inv_k, 0.0)"),),
        ("tests/kernels/test_gemm_norm.py", "tests/passes/test_layer_norm_gemm.py"),
    ),
    Mutant(
        "gemm_norm_shift_dropped",
        "a layer norm folded into the tiled GEMM sums unshifted values (E[x^2] - E[x]^2 cancels on a large mean)",
        (("regs[rnd, lane] = regs[rnd, lane] - read(Src, shift(vb, tile, x_of(rnd * threads + item)))", "regs[rnd, lane] = regs[rnd, lane]"),),
        ("tests/kernels/test_gemm_norm.py::test_norm_gemm_large_mean", "tests/passes/test_layer_norm_gemm.py"),
    ),
    Mutant(
        "gemm_prefetch_same_step",
        "the prefetching tiled GEMM reads the current step's A again instead of the next one's",
        (("fetch_a((A, A1, A2, A3), regs_a, bz, by, step + 1, ty * gx + tx)", "fetch_a((A, A1, A2, A3), regs_a, bz, by, step, ty * gx + tx)"),),
        ("tests/kernels/test_gemm_tiled.py::test_tiled_gemm_kernel", "tests/kernels/test_gemm_norm.py"),
    ),
    Mutant(
        "view_vector_lanes_dropped",
        "a vector read through a view (q, k, v of attention in the qkv buffer) reads its first element in every lane",
        (("return index if lane is None else (*index[:-1], index[-1] + lane)", "return index if lane is None else (*index[:-1], index[-1])"),),
        ("tests/kernels/test_gemm_tiled.py::test_tiled_gemm_reads_views_and_stores_permuted", "tests/kernels/test_gemm_out_perm.py"),
    ),
    Mutant(
        "rows_view_dropped",
        "a row kernel no longer reads its input through the movement ops before it (a gather kernel runs before each)",
        (('    return rw.expr(root), ({"x_view": steps} if steps else {})', "    return rw.expr(var), {}"),),
        ("tests/passes/test_rows_rule.py::test_rows_read_split_parts_and_transposes_in_place",),
    ),
    Mutant(
        "conv_view_offset_dropped",
        "a conv reading its plain input through a view (a channel slice of a wider buffer) reads the buffer's first channels",
        (("        return gather.through(self.view, self.logical, index, lane)",
          "        return gather.through((), self.logical, index, lane)"),),
        ("tests/kernels/test_conv2d_plain_io.py::test_conv_reads_a_channel_slice_in_place",),
    ),
    Mutant(
        "conv_view_dropped",
        "a conv no longer reads a channel slice of a Linear's output in place (a gather kernel runs before MambaOut's depthwise convs)",
        (('    plain_in = plain_input(rw, node, views=True) if x.layout == "NCHW" else None',
          '    plain_in = plain_input(rw, node) if x.layout == "NCHW" else None'),),
        ("tests/passes/test_map_boundary_h200.py::test_depthwise_conv_reads_its_channel_slice_in_place",),
    ),
    Mutant(
        "channel_window_offset_dropped",
        "a slice of whole channel blocks read in place (EfficientViT's head chunks) reads the map's first blocks",
        (("    return x, (gather.Affine(x.shape5, (0, begin // 4, 0, 0, 0), (1,) * 5),)",
          "    return x, (gather.Affine(x.shape5, (0, 0, 0, 0, 0), (1,) * 5),)"),),
        ("tests/passes/test_channel_windows.py",),
    ),
    Mutant(
        "channel_window_partial_blocks",
        "a channel slice ending inside a 4-lane block (not at the map's last channel) is read in place too: its padded lanes hold the next channels",
        (("    if begin % 4 or ((end - begin) % 4 and end != x.channels):", "    if begin % 4:"),),
        ("tests/passes/test_channel_windows.py",),
    ),
    Mutant(
        "binary_view_dropped",
        "a binary op reading A as a channel window of a wider map reads the map's first blocks",
        (("            x[lane] = A[gather.through(a_view, shape, (vz // c4, vz % c4, vh, vw, 0), lane)]",
          "            x[lane] = A[gather.through((), shape, (vz // c4, vz % c4, vh, vw, 0), lane)]"),),
        ("tests/kernels/test_elementwise.py::test_binary_reads_channel_windows_in_place",),
    ),
    Mutant(
        "token_tail_stays_nchw",
        "a conv's tail through the views to tokens keeps the map's layout, so XCiT's gamma and residual on its tokens run as kernels after it",
        (('    tail.layout, tail.tokens_of = "NHWC", (n, c, h, w)', "    tail.tokens_of = (n, c, h, w)"),),
        ("tests/passes/test_token_tail.py",),
    ),
    Mutant(
        "group_norm_fold_first_group_mean",
        "the tiled conv's folded group norm subtracts the first group's mean from every channel block (each block's own rstd kept)",
        (("px[lane] = (px[lane] - gs[x_block(step, rnd * threads + item) // group_blocks * 2]) * gs[",
          "px[lane] = (px[lane] - gs[0]) * gs["),),
        ("tests/kernels/test_conv2d_group_norm.py::test_group_norm_conv_matches_numpy",),
    ),
    Mutant(
        "float16_accumulation_threshold_raised",
        "float16: convs accumulate in float32 only above K = 4096 instead of K = 32 (docs/precision.md's rule)",
        (("FLOAT_ACCUMULATION_MIN_K = 32\n", "FLOAT_ACCUMULATION_MIN_K = 4096\n"),),
        ("tests/kernels/test_fp16_accumulation.py", "tests/passes/test_strategy.py"),
    ),
    Mutant(
        "resize_half_pixel_as_asymmetric",
        "resize's half_pixel coordinates lose their half-pixel shift (computed as asymmetric)",
        (("        return (2 * i + 1) * size_in - size_out, 2 * size_out\n", "        return 2 * i * size_in, 2 * size_out\n"),),
        ("tests/passes/test_convnext_shufflenet_ops.py", "tests/passes/test_onnx_attributes.py"),
    ),
    Mutant(
        "reduce_mean_padded_channels",
        "a mean over the channels divides by the padded channel count (C rounded up to 4)",
        (("    count = (channels if 1 in axes else 1)", "    count = (c4 * 4 if 1 in axes else 1)"),),
        ("tests/kernels/test_reduce.py",),
    ),
    Mutant(
        "layer_norm_eps_dropped",
        "the channel layer norm kernel loses its epsilon",
        (("stats[1] = T.FloatImm(acc, 1.0) / T.sqrt(stats[1] / count + T.FloatImm(acc, float(epsilon)))",
          "stats[1] = T.FloatImm(acc, 1.0) / T.sqrt(stats[1] / count)"),),
        ("tests/kernels/test_layer_norm.py", "tests/passes/test_convnext_shufflenet_ops.py"),
    ),
    Mutant(
        "sliced_norm_eps_dropped",
        "the sliced statistics (group norm, the wide layer norm) lose their epsilon",
        (("stats[1] = T.FloatImm(f32, 1.0) / T.sqrt(m2 / count(0) + T.FloatImm(f32, float(epsilon)))",
          "stats[1] = T.FloatImm(f32, 1.0) / T.sqrt(m2 / count(0))"),),
        ("tests/kernels/test_layer_norm.py", "tests/passes/test_group_norm.py"),
    ),
    Mutant(
        "concat_lane_shift",
        "concat reads each output lane from the next lane of its input's pixel",
        (("px[lane] = src[(cb * 4 + lane - offset) % 4]", "px[lane] = src[(cb * 4 + lane - offset + 1) % 4]"),),
        ("tests/passes/test_coverage.py::test_concat_of_six_inputs", "tests/passes/test_relax_pass.py::test_pool_reduce_softmax_concat"),
    ),
    Mutant(
        "hardsigmoid_offset",
        "the hardsigmoid epilogue (and hardswish through it) shifts by 2.5 instead of 3",
        (("return o.clip(x + o.const(beta * scale), o.const(0), o.const(scale)) / o.const(scale)",
          "return o.clip(x + o.const(beta * scale - 0.5), o.const(0), o.const(scale)) / o.const(scale)"),),
        # the table is the references' formula too: its own test (the textbook definitions) and onnxruntime kill it
        ("tests/kernels/test_activation_table.py", "tests/kernels/test_elementwise.py", "tests/passes/test_coverage.py"),
    ),
    Mutant(
        "grn_mean_over_padded_channels",
        "GRN's mean of the channel norms divides by the padded channel count (C rounded up to 4)",
        (('mean[0] = mean[0] / T.FloatImm("float32", float(channels))', 'mean[0] = mean[0] / T.FloatImm("float32", float(c4 * 4))'),),
        ("tests/kernels/test_conv2d_grn.py", "tests/passes/test_grn.py"),
    ),
    Mutant(
        "softmax_padded_lanes_counted",
        "the channel softmax adds exp of the padded lanes to its sum",
        (("s[0] = s[0] + T.if_then_else(real(cb, lane), T.exp(T.Cast(acc_dtype, x[lane]) - m[0]), zero)",
          "s[0] = s[0] + T.exp(T.Cast(acc_dtype, x[lane]) - m[0])"),),
        ("tests/kernels/test_reduce.py",),
    ),
    Mutant(
        "excite_split_mean_off",
        "the split excitation's pooled mean divides by H*W + 1",
        (('inv_pixels = T.FloatImm("float32", 1.0 / (h * w))', 'inv_pixels = T.FloatImm("float32", 1.0 / (h * w + 1))'),),
        ("tests/passes/test_excite.py::test_excitation_split_kernel",),
    ),
    Mutant(
        "rows_softmax_max_dropped",
        "the row softmax exponentiates x without subtracting the row's max (overflows past 88)",
        (("taps(X, partial_sum, vr, zero, _add, lambda v, st: T.exp(v - st[0]),", "taps(X, partial_sum, vr, zero, _add, lambda v, st: T.exp(v),"),
         ("epilogue, T.exp(read(X, vr, r, t) - st[0]) / st[1], Bias", "epilogue, T.exp(read(X, vr, r, t)) / st[1], Bias")),
        ("tests/kernels/test_rows.py::test_softmax_rows",),
    ),
    Mutant(
        "rows_norm_eps_dropped",
        "the row layer norm / RMS norm loses its epsilon",
        (("st[1] = one / T.sqrt(st[1] / count + eps)", "st[1] = one / T.sqrt(st[1] / count)"),),
        ("tests/kernels/test_rows.py::test_layer_norm_rows",),
    ),
    Mutant(
        "rows_chunk_short",
        "the row kernels' first combine level skips the last partial of each chunk",
        (("for k in T.unroll(1, chunk):\n                        acc[0] = combine(acc[0], partial[t * chunk + k])",
          "for k in T.unroll(1, chunk - 1):\n                        acc[0] = combine(acc[0], partial[t * chunk + k])"),),
        ("tests/kernels/test_rows.py::test_reduce_rows",),
    ),
    Mutant(
        "rows_mean_divisor",
        "the row mean divides by the row's length + 1",
        (("count = T.FloatImm(F32, float(rows.length))", "count = T.FloatImm(F32, float(rows.length + 1))"),),
        ("tests/kernels/test_rows.py::test_reduce_rows",),
    ),
    Mutant(
        "channel_affine_axis",
        "the per-channel affine on plain tensors indexes its channel as if the axis were the last",
        (("Scale[v // inner % channels] + Shift[v // inner % channels]", "Scale[v % channels] + Shift[v % channels]"),),
        ("tests/kernels/test_rows.py::test_channel_affine",),
    ),
    Mutant(
        "row_epilogue_channel_axis",
        "a row kernel's expression epilogue reads its per-channel constants along the first axis, not the last",
        (("    channel = index[-1]\n", "    channel = index[0]\n"),),
        ("tests/kernels/test_rows_epilogue.py::test_row_kernel_expression_epilogue",),
    ),
    Mutant(
        "rows_chain_operand_first",
        "the rows rule passes a chain's operand before its per-channel constants",
        (("        args.append(rw.expr(chain.operand))", "        args.insert(0, rw.expr(chain.operand))"),),
        ("tests/passes/test_epilogue_chain.py::test_a_deep_chain_with_every_leaf_kind",),
    ),
    Mutant(
        "rows_chain_channels_axis",
        "the rows rule looks for a chain's per-channel constants along the first axis (so none fuse)",
        (('Anchor(shape[-1], "NHWC", ("full",), constant_operand=True)', 'Anchor(shape[0], "NHWC", ("full",), constant_operand=True)'),),
        ("tests/passes/test_rows_chain.py",),
    ),
    Mutant(
        "second_operand_from_first",
        "the conv epilogue reads its second activation (Residual2) from the first's buffer (Residual)",
        (("        load_operand(second, _operand_kind(epilogue, 1), Second, n, c, h, w)",
          "        load_operand(second, _operand_kind(epilogue, 1), Residual, n, c, h, w)"),),
        ("tests/kernels/test_two_operands.py::test_direct_conv_reads_two_activations",),
    ),
    Mutant(
        "gemm_second_operand_row",
        "the GEMM's expression reads its second operand from the first operand's scratch row",
        (("        return tuple(T.Cast(acc_dtype, px[1 + i, lane]) for i in range(extras))",
          "        return tuple(T.Cast(acc_dtype, px[1, lane]) for i in range(extras))"),),
        ("tests/kernels/test_two_operands.py::test_gemm_reads_two_activations",),
    ),
    Mutant(
        "gemm_tiled_k_tail_kept",
        "the tiled GEMM stages the copies past K as read (clamped to the last reduction index) instead of zeroing them",
        (("                    if k_tail:\n                        for lane in T.unroll(width):",
          "                    if False:\n                        for lane in T.unroll(width):"),),
        ("tests/kernels/test_gemm_tiled.py::test_tiled_gemm_zeroes_past_k_before_an_inf",),
    ),
    Mutant(
        "gemm_split_partial_dropped",
        "the split GEMM's first item adds the other items' partials from the third on (the second item's share of K is lost)",
        (("                                        for t in T.serial(1, ks):", "                                        for t in T.serial(2, ks):"),),
        ("tests/kernels/test_gemm_split.py::test_split_gemm_kernel",),
    ),
    Mutant(
        "patch_gemm_kernel_axes_swapped",
        "a patchify conv's weights as B in (kw, kh, C) order while its view reads patches in (kh, kw, C) order",
        (("    order = (2, 3, 1, 0) if data_layout == \"NHWC\" else (1, 2, 3, 0)", "    order = (3, 2, 1, 0) if data_layout == \"NHWC\" else (1, 2, 3, 0)"),),
        ("tests/passes/test_patch_gemm.py",),
    ),
    Mutant(
        "gemm_scale_folded_twice",
        "the GEMM folds a scalar multiply its operand's kernel already applied (an anchor's chain took it)",
        (("if static_shape(x) == static_shape(var) and not _holds_product(rw, x, var):", "if static_shape(x) == static_shape(var):"),),
        ("tests/passes/test_rows_chain.py::test_precedence_gemm_operand_scale_after_a_norm_is_the_chains",),
    ),
    Mutant(
        "chain_through_any_slice",
        "a slice that drops channels is taken for the value itself (an identity slice), so a chain reads every channel",
        (("    if shape is None or shape != static_shape(value.args[0]):\n        return False\n    strides", "    if shape is None:\n        return False\n    strides"),),
        ("tests/passes/test_epilogue_chain.py::test_the_chain_steps_through_a_slice_of_every_channel",),
    ),
    Mutant(
        "concat_epilogue_padded_lanes",
        "the concat's epilogue leaves the padded lanes of the last block as the expression made them (sigmoid(0) = 0.5)",
        (("store_output_pixel(Y, acc, 0, src, epilogue, Bias, Residual, vz // c4, vz % c4, vh, vw, total)",
          "store_output_pixel(Y, acc, 0, src, epilogue, Bias, Residual, vz // c4, vz % c4, vh, vw, None)"),),
        ("tests/kernels/test_pool2d_epilogue.py::test_concat_with_an_expression_epilogue",),
    ),
    Mutant(
        "resize_epilogue_dropped",
        "the resize kernel stores the resized pixel without its epilogue (the chain after it is lost)",
        (("            store_output_pixel(Y, px, 0, tmp, epilogue, Bias, Residual, vz // c4, vz % c4, vh, vw, channels)",
          "            store_pixel(Y, vz // c4, vz % c4, vh, vw, out)"),),
        ("tests/kernels/test_pool2d_epilogue.py::test_resize_with_an_expression_epilogue",),
    ),
    Mutant(
        "concat_plain_input_packed",
        "a channel concat or binary op packs an operand held only plain instead of reading its buffer (the either-form rule misses)",
        (("    return (rw.fuses and rw.allow_buffer and rw.dtype == \"float32\" and not v.blocked and v.layout == \"NCHW\"",
          "    return (False and rw.allow_buffer and rw.dtype == \"float32\" and not v.blocked and v.layout == \"NCHW\""),),
        ("tests/passes/test_plain_operands.py",),
    ),
    Mutant(
        "concat_plain_offset_dropped",
        "a plain input of a channel concat is read at the output's channel, not its own",
        (("px[lane] = X[n, T.min(T.max(cb * 4 + lane - offset, 0), count - 1), h, w]",
          "px[lane] = X[n, T.min(T.max(cb * 4 + lane, 0), count - 1), h, w]"),),
        ("tests/passes/test_plain_operands.py",),
    ),
    Mutant(
        "concat_view_offset_dropped",
        "a channel concat reads a window of a wider map at the window's own block, not the map's",
        (("            dst[lane] = src[through(view, shape, (n, c, h, w, 0), lane)]",
          "            dst[lane] = src[n, c, h, w, lane]"),),
        ("tests/kernels/test_plain_operand_kernels.py::test_concat_reads_windows_of_wider_maps",),
    ),
    Mutant(
        "concat_window_copied",
        "a channel concat copies a split's part out of its map instead of reading it there (the split launch stays)",
        (("    expr, view = rw.blocked_view(v, scope)", "    expr, view = rw.blocked(v, scope), ()"),),
        ("tests/passes/test_split.py::test_a_concat_reads_split_parts_in_place",),
    ),
    Mutant(
        "batch_norm_step_shift_negated",
        "a batch norm taken into an elementwise chain subtracts its per-channel shift instead of adding it",
        (("    return ex.Binary(\"add\", ex.Binary(\"multiply\", expr, scale), shift), [node, getter]",
          "    return ex.Binary(\"subtract\", ex.Binary(\"multiply\", expr, scale), shift), [node, getter]"),),
        ("tests/passes/test_epilogue_chain.py::test_a_batch_norm_after_the_activation_is_the_epilogue",
         "tests/passes/test_token_elementwise.py::test_a_batch_norm_in_a_chain_on_tokens"),
    ),
    Mutant(
        "channel_concat_wants_blocked",
        "the layout planner counts a channel concat as a reader that wants its inputs blocked",
        (("        if user.op == \"relax.concat\" and on_channels(user):  # reads either form (rules.concat)\n            return set()",
          "        if user.op == \"relax.concat\" and on_channels(user):  # reads either form (rules.concat)\n            return {BLOCKED}"),),
        ("tests/passes/test_plain_operands.py::test_channel_concat_wants_either_form",),
    ),
    Mutant(
        "binary_plain_lane_dropped",
        "a binary op's plain operand is read at its block's first channel for every lane",
        (("B[vz // c4, T.min((vz % c4) * 4 + lane, channels - 1), vh, vw], zero)",
          "B[vz // c4, T.min((vz % c4) * 4, channels - 1), vh, vw], zero)"),),
        ("tests/passes/test_plain_operands.py",),
    ),
    Mutant(
        "binary_plain_swap_not_commutative",
        "a plain first operand is swapped into B for any binary op (head - map computed as map - head)",
        (("if not broadcast and not plain_b and node.op in COMMUTATIVE and read_in_place(rw, a):",
          "if not broadcast and not plain_b and read_in_place(rw, a):"),),
        ("tests/passes/test_plain_operands.py",),
    ),
    Mutant(
        "linear_norm_shift_dropped",
        "a batch norm folded into its Linear loses its shift",
        (("value = relax.op.add(product, relax.const(shift.astype(np.float32)))",
          "value = relax.op.add(product, relax.const((0 * shift).astype(np.float32)))"),),
        ("tests/passes/test_rows_rule.py::test_linear_batch_norm_folds_into_the_gemm",),
    ),
    Mutant(
        "rows_rule_takes_blocked",
        "the plain-tensor rules take an op on a blocked map too (unpacking it)",
        (("    if value is not None and value.blocked:\n        return None\n", ""),),
        ("tests/passes/test_rows_rule.py::test_map_softmax_stays_blocked",),
    ),
    Mutant(
        "plain_elementwise_last_axis_broadcast",
        "the plain elementwise kernel reads a broadcast last axis (extent 1) at the output's column",
        (("col = (item % (last // v)) * v + lane if shape[-1] != 1 else 0", "col = (item % (last // v)) * v + lane"),),
        ("tests/kernels/test_plain_elementwise.py",),
    ),
    Mutant(
        "chain_walk_keeps_refused_leaves",
        "the elementwise-chain walk keeps the leaves a refused step recorded (a per-channel row its epilogue never reads)",
        (("    if found is None:\n        leaves.restore(state)\n", "    if found is None:\n        pass\n"),),
        ("tests/passes/test_epilogue_chain.py::test_a_refused_step_records_no_leaf",),
    ),
    Mutant(
        "layout_plan_ignores_readers",
        "the layout planner charges running plain one transform for the result whatever its readers want",
        (("cost_plain = blocked_now + (BLOCKED in wants)", "cost_plain = blocked_now + 1"),),
        ("tests/passes/test_layout_plan.py",),
    ),
    Mutant(
        "split_plan_ignores_parts",
        "the layout planner never charges a blocked split for the parts its readers want plain",
        (("cost_blocked = sum(PLAIN in w for w in wants) + plain_now", "cost_blocked = plain_now"),),
        ("tests/passes/test_layout_plan_split.py::test_cascaded_attention_has_no_layout_kernel",),
    ),
    Mutant(
        "split_plan_map_readers_plain",
        "the layout planner takes a softmax or a reduction over a split's 4-d part as a plain reader",
        (("return {BLOCKED} if len(static_shape(var) or ()) == 4 else self._reader_wants(user)", "return self._reader_wants(user)"),),
        ("tests/passes/test_mobilevit.py::test_mobilevit_attention_without_relu_keeps_the_broadcast_kernels",),
    ),
    Mutant(
        "input_norm_shift_dropped",
        "a batch norm folded into the Linear that reads it loses its shift",
        (("return matmul.var, node.args[0], None, scale[:, None] * w, shift @ w",
          "return matmul.var, node.args[0], None, scale[:, None] * w, 0 * (shift @ w)"),),
        ("tests/passes/test_layout_plan_split.py::test_cascaded_attention_has_no_layout_kernel",),
    ),
    Mutant(
        "gather_permute_inverted", "the gather reads a transpose through the inverse permutation",
        (("                moved[src] = (index[a], ranges[a])\n", "                moved[a] = (index[src], ranges[src])\n"),),
        ("tests/kernels/test_gather.py::test_gather_matches_numpy",),
    ),
    Mutant(
        "split_part_offset", "a split part read at the previous part's offset",
        (("sum(f[axis] for f in fields[: node.index])", "sum(f[axis] for f in fields[: max(0, node.index - 1)])"),),
        ("tests/passes/test_token_layout.py::test_attention_heads_split_and_merge",),
    ),
    Mutant(
        "plain_output_lanes_reversed",
        "a conv writing plain tokens (NHWC) stores the four channels of each block in reverse order",
        (("Y[n, h, w, c * 4 + lane] = acc[k, lane]", "Y[n, h, w, c * 4 + 3 - lane] = acc[k, lane]"),),
        ("tests/kernels/test_conv2d_plain_io.py",),
    ),
    Mutant(
        "channels_last_view_written_nchw",
        "a conv whose map is read through a permute to channels-last writes its plain buffer in NCHW order",
        (("return \"NHWC\", ((user, (n, h, w, c)),)", "return \"NCHW\", ((user, (n, h, w, c)),)"),),
        ("tests/passes/test_map_boundary.py",),
    ),
    Mutant(
        "token_region_not_followed",
        "a conv's token region stops at the ops that run in either form (a layer norm, a Linear, pixelwise ops) instead of following their readers",
        (("        todo += [reader.var for reader, want in zip(readers, wants) if want == FOLLOW]\n", "        todo += []\n"),),
        ("tests/passes/test_map_boundary.py::test_layer_norm_and_linear_followed_to_heads",),
    ),
    Mutant(
        "linear_output_kept_blocked",
        "a Linear run as a 1x1 conv on blocked tokens writes its value blocked even when its token region wants it plain",
        (("        return _linear_output(rw, var, nchw)\n", "        return None\n"),),
        ("tests/passes/test_map_boundary_linear.py",),
    ),
    Mutant(
        "conv_reader_not_either",
        "a conv that reads a plain NCHW value in place still counts as a blocked reader (its writer keeps the value blocked)",
        (("    found = [_reader(rw, u, nchw) for u in users if not _plan_reads_plain(rw, u, var, \"NCHW\")]\n",
          "    found = [_reader(rw, u, nchw) for u in users]\n"),),
        ("tests/passes/test_map_boundary_either.py",),
    ),
    Mutant(
        "shared_input_packed",
        "a conv reading a plain NCHW value beside the token views it was written for packs it instead of reading it in place",
        (("        found = _shared_input(rw, node, v)\n", "        found = None\n"),),
        ("tests/passes/test_map_boundary_either.py",),
    ),
    Mutant(
        "token_region_stops_at_blocked",
        "a token region stops at a value some reader wants blocked, so the plain readers beyond it are not counted",
        (("        for form in (BLOCKED, PLAIN):\n            if form in wants:\n                wanted[form].add(v)\n",
          "        if BLOCKED in wants:\n            wanted[BLOCKED].add(v)\n            continue\n"
          "        if PLAIN in wants:\n            wanted[PLAIN].add(v)\n"),),
        ("tests/passes/test_map_boundary_both.py",),
    ),
    Mutant(
        "plain_view_operand_unknown",
        "a pixelwise reader's other operand not computed yet counts as unknown even when it is a view only the plain form has",
        (("        return PLAIN if var in rw.exprs or plain_view or rw.plan.plain_to_come(rw, var) else None\n",
          "        return PLAIN if var in rw.exprs or rw.plan.plain_to_come(rw, var) else None\n"),),
        ("tests/passes/test_map_boundary_plain_view.py",),
    ),
    Mutant(
        "plain_operand_to_come_unknown",
        "a token region's pixelwise reader whose other operand is still to come, from plain values only, counts as either form",
        (("        memo[var] = bool(operands) and all(", "        memo[var] = False and all("),),
        ("tests/passes/test_layout_plan_ahead.py::test_key_read_with_the_plain_query_side_is_written_plain",),
    ),
    Mutant(
        "in_place_reader_wants_blocked",
        "the layout planner counts a binary op of two maps that reads a plain operand in place as a blocked reader of it",
        (("            if not self._reads_in_place(rw, user, node.var):", "            if True:"),),
        ("tests/passes/test_layout_plan_ahead.py::test_scaled_tokens_added_to_a_blocked_map_in_place",),
    ),
    Mutant(
        "plain_chain_takes_in_place_add",
        "a plain elementwise chain takes the add that would read its value in place beside a blocked map (unpacking the map)",
        (("        return any(isinstance(a, relax.Var) and a not in rw.values and a not in rw.exprs\n",
          "        return False and any(isinstance(a, relax.Var) and a not in rw.values and a not in rw.exprs\n"),),
        ("tests/passes/test_layout_plan_ahead.py::test_scaled_tokens_added_to_a_blocked_map_in_place",),
    ),
    Mutant(
        "plain_class_token_packed",
        "a Linear on [N, K] held only plain runs as a 1x1 conv on its packed form instead of the GEMM",
        (("and not LayoutPlan.held(rw, a)[1] and", "and"),),
        ("tests/passes/test_layout_plan_ahead.py::test_linear_on_a_plain_class_token_is_a_gemm",),
    ),
    Mutant(
        "import_fold_skipped",
        "ONNX import hands TVM's importer the graph with its constant subgraphs unfolded (a Pad's amounts from Constants)",
        (("    return fold_constants(model)", "    return model"),),
        ("tests/models/test_onnx_import.py::test_pads_built_from_constants_are_folded",),
    ),
    Mutant(
        "import_fold_slim_shapes",
        "import folding takes onnxslim's own symbolic shape inference (it floors a float Div of shape values)",
        (("onnxslim.slim(model, no_shape_infer=True,", "onnxslim.slim(model, no_shape_infer=False,"),),
        ("tests/models/test_onnx_import.py::test_pads_from_a_shape_chain_are_folded",),
    ),
    Mutant(
        "import_fold_reorders",
        "import folding keeps onnxslim's node order (by depth) instead of the exported one",
        (("    return _in_exported_order(model, exported)", "    return model"),),
        ("tests/models/test_onnx_import.py::test_folding_keeps_the_exported_node_order",),
    ),
    Mutant(
        "import_fold_size_unbounded",
        "import folding folds constant subgraphs of any size (weights computed by onnxruntime instead of TVM)",
        (("FOLDED_BYTES = 256", "FOLDED_BYTES = 1 << 30"),),
        ("tests/models/test_onnx_import.py::test_large_constant_subgraphs_stay_for_tvm",),
    ),
    Mutant(
        "tile_unit_axis_refused",
        "topi tile's constant index 0 on a repeated axis of 1 is not read as a Tile step (the Tile stays upstream's)",
        (("return size == 1 and isinstance(index, tirx.IntImm) and int(index.value) == 0", "return False"),),
        ("tests/passes/test_token_layout.py::test_tile_of_an_unsqueezed_axis",),
    ),
    Mutant(
        "token_reduction_axis_L_as_H",
        "a reduction over the tokens of a blocked map [N, L, C] reduces only the map's rows (H), not H and W",
        (('_MAP_AXES = {"N": (0,), "C": (1,), "L": (2, 3)}', '_MAP_AXES = {"N": (0,), "C": (1,), "L": (2,)}'),),
        ("tests/passes/test_view_reductions.py",),
    ),
    Mutant(
        "token_chain_any_op",
        "a conv's value followed to plain readers through any op, not only movement ops and constant scalings",
        (("if user.op not in MOVEMENT and not _scales_by_constants(user, var):", "if False:"),),
        ("tests/passes/test_token_chain.py",),
    ),
    Mutant(
        "token_chain_residual_ignored",
        "token chains stop at a pixelwise op with a second activation even where no reader wants its result blocked",
        (("    return (plan is not None and node.op in FLEXIBLE", "    return (False and plan is not None and node.op in FLEXIBLE"),),
        ("tests/passes/test_token_chain.py::test_heads_with_a_residual_add_are_written_plain",),
    ),
    Mutant(
        "depthwise_pointwise_fused_before_tokens",
        "a depthwise + 1x1 conv pair fused although the 1x1 conv alone would write its token readers' plain buffer",
        (("    if _writes_plain_alone(rw, pw_node, pw, data_layout):\n        return None\n", ""),),
        ("tests/passes/test_token_chain.py",),
    ),
    Mutant(
        "pool_epilogue_padding_lanes",
        "a pool with an expression epilogue writes the expression of 0 into the padding lanes of its last channel block",
        (("store_output_pixel(Out, px, 0, tmp, epilogue, Bias, Residual, vn, co, vh, vw, channels)",
          "store_output_pixel(Out, px, 0, tmp, epilogue, Bias, Residual, vn, co, vh, vw, None)"),),
        ("tests/kernels/test_pool2d_epilogue.py",),
    ),
    Mutant(
        "plain_residual_lanes_reversed",
        "a conv's residual read from a plain NHWC buffer takes its four channels in reverse order",
        (("            tmp[lane] = Residual[n, h, w, c * 4 + lane]", "            tmp[lane] = Residual[n, h, w, c * 4 + 3 - lane]"),),
        ("tests/kernels/test_plain_residual_pool.py::test_conv_reads_plain_residual",),
    ),
    Mutant(
        "head_gemv_packs_plain",
        "the head GEMV takes a class token or map held plain only (packing it) instead of leaving it to the GEMM",
        (("    if not found[0].blocked and found[0].plain is not None:\n", "    if False:\n"),),
        ("tests/passes/test_fused_plain_h200.py",),
    ),
    Mutant(
        "depthwise_excitation_packs_plain",
        "the fused depthwise conv + excitation packs a map held plain instead of reading it in place",
        (("    plain = plain_input(rw, node)\n", "    plain = None\n"),),
        ("tests/passes/test_fused_plain_h200.py::test_global_query_on_plain_tokens_fused",),
    ),
    Mutant(
        "channel_group_concat_blocked",
        "a channel group's concat runs blocked although its inputs are plain and its readers want it plain",
        (("    return value_wants(rw, node.var) == {PLAIN}", "    return False"),),
        ("tests/passes/test_channel_groups.py",),
    ),
    Mutant(
        "long_reduction_kept_tiled",
        "a product whose reduction is long for its outputs keeps the tiled kernel wherever a tiled config fills the GPU",
        (("    if tiled is not None and not _long_reduction(geom):", "    if tiled is not None:"),),
        ("tests/passes/test_gemm_rule.py::test_split_gemm_for_long_reductions_on_many_outputs",),
    ),
    Mutant(
        "elementwise_view_lane_dropped",
        "an elementwise operand read through a view without vector loads reads the first lane's element for all 4 lanes",
        (("                X[k, lane] = view_element((A0, A1, A2, A3), k, vi, lane)",
          "                X[k, lane] = view_element((A0, A1, A2, A3), k, vi, 0)"),),
        ("tests/kernels/test_plain_elementwise.py::test_operands_read_through_views",),
    ),
    Mutant(
        "view_kept_past_broadcast",
        "an elementwise chain that broadcasts past its view operand's shape keeps the view (no walk again without views)",
        (("        found = _chain(rw, node, shape, views=False)  # the output broadcast past the views' shape",
          "        pass  # the output broadcast past the views' shape"),),
        ("tests/passes/test_token_elementwise.py::test_a_view_operand_whose_chain_broadcasts_past_it",),
    ),
    Mutant(
        "nhwc_flat_row_in_pixel_order",
        "the flat grid's channels-fastest order (a channels-last input) takes its row as the pixel order does",
        (("return k % ot, k // (ot * wt) % oh,", "return k % ot, k // wt % oh,"),),
        ("tests/kernels/test_conv2d_plain_io.py",),
    ),
    Mutant(
        "mixed_band_kernel_off_center",
        "a mixed conv's rectangular kernel (InceptionNeXt's 1x11) zero-padded with its column offset taken from its height",
        (("top, left = (big - kh) // 2, (big - kw) // 2", "top, left = (big - kh) // 2, (big - kh) // 2"),),
        ("tests/passes/test_mixed_conv.py::test_inception_mixer_is_one_depthwise_conv",),
    ),
    Mutant(
        "mixed_identity_part_dropped",
        "a mixed conv's identity part (the split's part read by the concat itself) merged as zeros",
        (("return ConvPiece(geom, np.ones((c, 1, 1, 1)), np.zeros(c), [], identity=True)",
          "return ConvPiece(geom, np.zeros((c, 1, 1, 1)), np.zeros(c), [], identity=True)"),),
        ("tests/passes/test_mixed_conv.py::test_inception_mixer_is_one_depthwise_conv",),
    ),
)


class SnippetError(RuntimeError):
    """A mutant's snippet is not in the tree exactly once (the code moved or changed: update the mutant)."""


def tracked_files(root: Path) -> list[str]:
    """The repository's files as a fresh clone has them, plus new files not yet committed."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                         capture_output=True, check=True).stdout
    return [f for f in out.decode().split("\0") if f and (root / f).is_file()]


def copy_tree(root: Path, dest: Path) -> Path:
    for rel in tracked_files(root):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, target)
    return dest


def locate(tree: Path, snippet: str) -> Path:
    """The one source file under :data:`SEARCHED` holding ``snippet`` exactly once."""
    hits = [(path, path.read_text().count(snippet)) for top in SEARCHED for path in sorted((tree / top).rglob("*.py"))]
    hits = [(path, n) for path, n in hits if n]
    if len(hits) != 1 or hits[0][1] != 1:
        where = ", ".join(f"{p.relative_to(tree)} x{n}" for p, n in hits) or "nowhere"
        raise SnippetError(f"snippet found {where}, not exactly once:\n{snippet}")
    return hits[0][0]


def apply(mutant: Mutant, tree: Path) -> list[str]:
    """Apply ``mutant`` to the copy at ``tree``; returns "file:line" of each edit."""
    where = []
    for old, new in mutant.edits:
        path = locate(tree, old)
        text = path.read_text()
        where.append(f"{path.relative_to(tree)}:{text[: text.index(old)].count(chr(10)) + 1}")
        path.write_text(text.replace(old, new, 1))
    return where


#: The suite's test of this script: it finds every mutant's snippet in the tree, so it fails on any mutated copy.
SNIPPET_CHECK = "tests/benchmarks/test_mutants_script.py"


def ci_command(root: Path) -> list[str]:
    """The README's test command, as .ci/run takes it (the second line of its first code block,
    the pytest part after ``&&``), with this interpreter."""
    lines = root.joinpath("README.md").read_text().split("```")[1].split("\n")[1:]  # after the fence and its language
    command = shlex.split(lines[1].split("&&")[-1])
    if command[:3] != ["python3", "-m", "pytest"]:
        raise SystemExit(f"README's test command is not 'python3 -m pytest ...': {lines[1]!r}")
    return [sys.executable, *command[1:]]


def pytest_command(root: Path, tests, seed: int, own_first: bool = False) -> list[str]:
    """CI's command stopping at the first failure (``-x``) with hypothesis seed ``seed``; with
    ``tests`` (a selection for quick iteration) those, in one process, instead of the suite;
    ``own_first``: the suite with the plugin that runs the files of ``FILES_FIRST`` first."""
    base = ci_command(root) if not tests else [sys.executable, "-m", "pytest", "-q", "-n", "0", *tests]
    # the snippet check fails under every mutant (its snippet is gone from the copy): not a kill
    ignore = [f"--ignore={SNIPPET_CHECK}"] if not tests else []
    order = ["-p", "files_first"] if own_first and not tests else []
    return [*base, *ignore, *order, "-x", "-p", "first_failure", "-p", "no:cacheprovider", f"--hypothesis-seed={seed}"]


def run_tests(tree: Path, command, env) -> tuple[int, float, str]:
    """(pytest's exit code, seconds until the first failure or the end, its output). The plugin
    ``first_failure`` names the first failed test in a file; the run is stopped there (its whole
    process group: xdist's workers and the programs they started), since ``-x`` under xdist lets
    each worker finish the files it holds. A stopped run returns exit code 1 and pytest's
    ``FAILED <test> - <error>`` line for :func:`first_failure`."""
    start = time.perf_counter()
    path = os.pathsep.join([str(tree), str(tree / "benchmarks")])  # for ``-p files_first``, ``-p first_failure``
    marker = tree / ".first-failure"
    marker.unlink(missing_ok=True)
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(command, cwd=tree, stdout=log, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                                env={**env, "PYTHONPATH": path, FIRST_FAILURE: str(marker)})
        while proc.poll() is None and not marker.exists():
            time.sleep(0.5)
        seconds = time.perf_counter() - start
        code = proc.poll()
        if code is None:  # stopped at the first failure
            _stop_group(proc)
            test, error = (marker.read_text().splitlines() + ["", ""])[:2]
            code, tail = 1, f"\nFAILED {test} - stopped at this first failure\n{error}\n"
        else:
            tail = ""
        log.seek(0)
        return code, seconds, log.read() + tail


def _stop_group(proc) -> None:
    """SIGTERM to ``proc``'s process group, SIGKILL after 20 s."""
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 60)):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=wait)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def first_failure(output: str) -> str:
    """The failing test (pytest's first ``FAILED``/``ERROR`` line) and the first exception it raised, shortened."""
    lines = output.splitlines()
    test = next((ln.split(" ", 1)[1].split(" - ")[0] for ln in lines if ln.startswith(("FAILED ", "ERROR "))), "")
    error = next((ln[1:].strip() for ln in lines if ln.startswith("E ") and ("Error" in ln or "assert" in ln)), "")
    return f"{test.replace('tests/', '', 1)}: {error[:90]}" if test else ""


def verdict(code: int, output: str) -> str:
    """pytest: 0 all passed, 1 some failed; 2 is "interrupted", which is also how xdist's ``-x``
    ends after a failure (a test named FAILED/ERROR: a kill); anything else is not a kill."""
    if code == 1 or (code == 2 and first_failure(output)):
        return "killed"
    return "SURVIVED" if code == 0 else f"error (pytest exit {code})"


def test_env(tmp: Path) -> dict:
    env = dict(os.environ)
    env.setdefault("HYPOTHESIS_PROFILE", "mutants")  # tests/conftest.py: ci's examples, no shrinking
    env.setdefault("TIR_ADRENO_CACHE_DIR", str(tmp / "cache"))  # kernels are keyed by their source: mutants never collide
    # A run stopped at its first failure skips the suite's own clean-up: its temp files stay in ``tmp``.
    env["TIR_ADRENO_TEST_TMP"] = env["TMPDIR"] = str(tmp / "tmp")
    (tmp / "tmp").mkdir(exist_ok=True)
    env.pop("TIR_ADRENO_CHECK_BOUNDS", None)  # CI's setting: the tests decide where the sanitizer runs
    return env


@dataclasses.dataclass
class Run:
    seed: int
    result: str
    seconds: float
    failure: str


def run_mutant(m: Mutant, pristine: Path, work: Path, env, args) -> tuple[list[str], list[Run]]:
    """``m`` applied to a fresh copy of ``pristine``, its tests run once per seed."""
    tree = work / m.name
    shutil.copytree(pristine, tree)
    where = apply(m, tree)
    tests = args.tests or (m.tests if args.quick else None)
    env = {**env, FILES_FIRST: os.pathsep.join(dict.fromkeys(t.split("::")[0] for t in m.tests))}
    runs = []
    for seed in range(args.seed, args.seed + args.runs):
        code, seconds, out = run_tests(tree, pytest_command(tree, tests, seed, args.own_first), env)
        runs.append(Run(seed, verdict(code, out), seconds, first_failure(out)))
        print(f"{m.name} (seed {seed}): {runs[-1].result} in {seconds:.0f} s ({', '.join(where)}) {first_failure(out)}", flush=True)
        if runs[-1].result.startswith("error"):
            print(out[-3000:])
    if not args.keep:
        shutil.rmtree(tree)
    return where, runs


def table(rows, runs: int) -> str:
    """The kill table in Markdown (docs/testing.md)."""
    out = ["| mutant | where | killed | s to first failure | killing test (first run that killed) |", "|---|---|---|---|---|"]
    for m, where, results in rows:
        killed = [r for r in results if r.result == "killed"]
        times = ", ".join(f"{r.seconds:.0f}" if r.result == "killed" else r.result.split(" ")[0].lower() for r in results)
        failure = killed[0].failure.replace("|", "/") if killed else "-"
        out.append(f"| `{m.name}`: {m.what} | {', '.join(where)} | {len(killed)}/{runs} | {times} | {failure} |")
    return "\n".join(out)


def selection(args) -> str:
    if args.tests:
        return " ".join(args.tests)
    if args.quick:
        return "each mutant's tests"
    return "the README's test command, each mutant's test files first" if args.own_first else "the README's test command"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="comma-separated mutant names (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--runs", type=int, default=1, help="runs per mutant, hypothesis seeds --seed, --seed + 1, ... (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="the first run's hypothesis seed (default 0)")
    parser.add_argument("--quick", action="store_true", help="each mutant against its own tests (Mutant.tests), not the whole suite")
    parser.add_argument("--tests", nargs="+", metavar="TEST", help="every mutant against these tests (files or node ids), not the whole suite")
    parser.add_argument("--own-first", action="store_true",
                        help="the whole suite with each mutant's own test files first (not with --quick or --tests)")
    parser.add_argument("--baseline", action="store_true", help="first run the tests on the unmutated copy (they must pass; implied by --own-first)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copies (their paths are printed)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.own_first and (args.quick or args.tests):
        parser.error("--own-first orders the whole suite: not with --quick or --tests")

    mutants = MUTANTS
    if args.only:
        names = args.only.split(",")
        unknown = sorted(set(names) - {m.name for m in MUTANTS})
        if unknown:
            parser.error(f"unknown mutants {unknown}; known: {', '.join(m.name for m in MUTANTS)}")
        mutants = tuple(m for m in MUTANTS if m.name in names)
    if args.list:
        for m in mutants:
            print(f"{m.name:<24} {m.what}\n{'':<24} tests (--quick): {' '.join(m.tests)}")
        return 0

    start = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="tir-adreno-mutants-"))
    try:
        env = test_env(work)
        pristine = copy_tree(ROOT, work / "pristine")
        for m in mutants:  # every snippet first: a moved one fails the run before any test runs
            for old, _ in m.edits:
                locate(pristine, old)
        shown = args.tests or (["<each mutant's tests>"] if args.quick else None)
        print(f"command: {' '.join(pytest_command(pristine, shown, args.seed, args.own_first))} (HYPOTHESIS_PROFILE={env['HYPOTHESIS_PROFILE']})", flush=True)
        if args.baseline or args.own_first:  # a kill counts only where the unmutated suite passes
            tests = args.tests or (list(dict.fromkeys(t for m in mutants for t in m.tests)) if args.quick else None)
            code, seconds, out = run_tests(pristine, pytest_command(pristine, tests, args.seed), env)
            print(f"baseline (unmutated): pytest exit {code} in {seconds:.0f} s", flush=True)
            if code != 0:
                print(out[-3000:])
                return 2
        rows = [(m, *run_mutant(m, pristine, work, env, args)) for m in mutants]
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    total = time.perf_counter() - start
    print("\n" + table(rows, args.runs))
    always = sum(all(r.result == "killed" for r in runs) for _, _, runs in rows)
    print(f"\n{always}/{len(rows)} mutants killed in every one of {args.runs} run(s), {total / 60:.1f} min "
          f"({sys.executable}, HYPOTHESIS_PROFILE={env['HYPOTHESIS_PROFILE']}, "
          f"{selection(args)})")
    if args.keep:
        print(f"copies kept under {work}")
    return 0 if always == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
