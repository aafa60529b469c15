"""What a direct conv kernel's code is built from (:class:`DirectTiling`), derived once per factory
call: the register tile and grid, the split_k slices, the guards a tile needs and which input
channels its lanes read. The macros (:mod:`primfuncs.conv.direct_body`) and kernels
(:mod:`primfuncs.conv.direct`) read it; it makes no TIR of its own but index expressions."""

from __future__ import annotations

from tvm.script import tirx as T

from .._common import LANES, ceildiv, check_accumulator, dtype_bytes
from .config import MAX_LOCAL_BYTES, ConvConfig, fit_work_group
from .geometry import ConvGeometry, ConvWindow, InputLayout, all_of
from .norm import check_norm

#: Kernel windows up to this many taps are fully unrolled (3x3: +30% on PoCL buffers).
UNROLL_TAPS = 9
#: Accumulation bodies: "blocked" (input blocks of 4 lanes), "grouped" (each output lane finds its
#: group's input channel), "depthwise" (``groups == C``).
MODES = ("blocked", "grouped", "depthwise")


def blocked_oc_block(geom: ConvGeometry, oc_block: int) -> int:
    """The output blocks a blocked-path tile of ``geom`` holds for ``config.oc_block``: with groups,
    the largest divisor of a group's output blocks up to it (a tile must not straddle two groups:
    it shares its input pixels)."""
    if geom.groups == 1:
        return oc_block
    return max(d for d in range(1, oc_block + 1) if (geom.og // LANES) % d == 0)


class DirectTiling:
    """The sizes and index helpers of one direct conv kernel.

    ``mode`` is one of :data:`MODES`; ``prologue`` (a ``DepthwisePrologue``, a 1x1 conv only):
    X is the depthwise conv's input, computed into the 1x1 conv's input pixels in registers.
    ``gate_scope`` (the blocked path only): the conv reads ``X[n, c, h, w] * Gate[n, c]``, the
    input gate ``Gate [N, C/4, 1, 1, 4]`` in that scope (a squeeze-excitation's multiply).
    ``input_layout``: how X is read (default blocked).
    Raises ValueError for a config the conv cannot run (split_k off the blocked path, partial
    sums beyond local memory, register_window off multiplier-1 depthwise convs, a gate off the
    blocked path or with a prologue)."""

    def __init__(self, geom: ConvGeometry, mode: str, config: ConvConfig, dtype: str, prologue=None,
                 acc_dtype: str | None = None, gate_scope: str | None = None, input_layout: InputLayout | None = None,
                 norm_eps: float | None = None):
        self.geom, self.mode, self.config, self.dtype, self.prologue = geom, mode, config, dtype, prologue
        self.gated, self.gate_scope = gate_scope is not None, gate_scope
        if self.gated and (mode != "blocked" or prologue is not None):
            what = "a depthwise prologue" if prologue is not None else f"the {mode} path"
            raise ValueError(f"gate_scope={gate_scope!r}: an input gate is read by the blocked path "
                             f"(dense or block-aligned grouped convs) without prologue; this conv has {what}")
        # The tile's accumulators (and split_k partials); a depthwise prologue's stay in dtype.
        self.acc_dtype = check_accumulator(dtype, acc_dtype)
        self.converts = self.acc_dtype != dtype  # the tile is converted to dtype before its epilogue
        refusal = None if mode == "blocked" and prologue is None and not self.gated else (
            "a layer norm folds into the blocked path without prologue or input gate")
        self.normed = check_norm(geom, norm_eps, dtype, self.acc_dtype, refusal)
        self.norm_eps = norm_eps
        n, c, o, og = geom.n, geom.c, geom.o, geom.og
        ocb, wb = config.oc_block, config.w_block
        self.uses_lanes = mode == "grouped" or (mode == "depthwise" and o != c)
        if mode == "blocked":
            ocb = blocked_oc_block(geom, ocb)
        self.ocb, self.wb = ocb, wb
        self.acc_rows = ocb * wb + (wb if self.normed else 0)  # the tile, then a folded norm's statistics
        self.ot, self.wt = ceildiv(geom.o4, ocb), ceildiv(geom.ow, wb)
        self.cols = n * self.wt
        self.gx = fit_work_group(self.cols, config.work_group[0])
        self.gy = fit_work_group(geom.oh, config.work_group[1])
        self.gz = fit_work_group(self.ot, config.work_group[2])
        self.blocks_per_group = geom.cg // LANES if geom.groups > 1 else c // LANES
        self.split = self._split()
        self.win = ConvWindow(prologue.geometry if prologue else geom, self.wt, wb)
        self.fused = prologue is not None
        self.input = input_layout or InputLayout(geom, "NCHW4c", "global")
        self.x_shape = self.input.shape(geom, self.win.h, self.win.w)
        self.dw_taps = self.win.kh * self.win.kw if prologue else 1
        self.dw_shape = (geom.c4, 1, self.win.kh, self.win.kw, 4)
        self.ob_overhang = geom.o4 % ocb != 0
        self.ow_overhang = geom.ow % wb != 0
        # The per-lane body (general groups, depthwise x M) is a fallback: keep its code small.
        self.window = T.unroll if geom.kh * geom.kw <= UNROLL_TAPS and not self.uses_lanes else T.serial
        self.zero = T.Cast(dtype, 0)
        self.acc_zero = T.Cast(self.acc_dtype, 0)
        self.tail = 0 if geom.groups > 1 else c % LANES
        self.multiplier = o // c if mode == "depthwise" else 0
        self.register_window = self._register_window()
        # Do the 4 lanes of an output block read input channels of one input block?
        # Depthwise: when the multiplier divides 4 or 4 divides it; grouped: when a
        # block lies in one group (then they all read one channel).
        m = self.multiplier
        self.one_block = (LANES % m == 0 or m % LANES == 0) if m else og % LANES == 0
        self.span = self.win.span if self.register_window or self.fused else 1  # input pixels a depthwise row reads
        # config.flat: item k of the 1-D grid owns tile (image, channel tile, row, column tile)
        # in output memory order, k = ((nn * ot + t) * oh + r) * wt + column tile; reading a
        # channels-last (NHWC) input, channels fastest, k = ((nn * oh + r) * wt + column tile) * ot + t:
        # neighbouring items then read neighbouring channels of one pixel (coalesced), not pixels a
        # row of C channels apart.
        self.channels_fastest = config.flat and self.input.nhwc
        self.tiles = n * self.ot * geom.oh * self.wt
        self.gf = fit_work_group(self.tiles, config.work_group[0])

    def flat_tile(self, k) -> tuple:
        """(channel tile, row, column) of item ``k`` of the flat grid, in the order above."""
        ot, oh, wt = self.ot, self.geom.oh, self.wt
        if self.channels_fastest:
            return k % ot, k // (ot * wt) % oh, k // (ot * oh * wt) * wt + k // ot % wt
        return k // (oh * wt) % ot, k // wt % oh, k // (ot * oh * wt) * wt + k % wt

    def _split(self) -> int:
        """The split_k slices the kernel runs: no more than channel blocks (a C < 4 conv has none)."""
        split, config = self.config.split_k, self.config
        if split > 1 and self.mode != "blocked":
            raise ValueError(
                f"config.split_k={split} splits the input channel blocks of a dense (or block-aligned grouped) "
                f"conv; this conv takes the {self.mode} path (use split_k=1)"
            )
        split = max(1, min(split, self.blocks_per_group))
        items = self.gz * self.gy * self.gx
        partial_bytes = split * self.acc_rows * LANES * items * dtype_bytes(self.acc_dtype)
        if split > 1 and partial_bytes > MAX_LOCAL_BYTES:
            raise ValueError(
                f"config {config} needs {partial_bytes} bytes of local memory for the split_k partial sums, "
                f"more than {MAX_LOCAL_BYTES} (every OpenCL GPU has that much); use a smaller tile, work group or split_k"
            )
        return split

    def _register_window(self) -> bool:
        if self.config.register_window and self.multiplier != 1:
            what = f"multiplier {self.multiplier}" if self.multiplier else f"the {self.mode} path"
            raise ValueError(
                f"config.register_window=True is for depthwise convs with multiplier 1; this conv has {what} "
                f"(use register_window=False)"
            )
        return self.config.register_window

    def out_block(self, t, ob):
        """Output channel block of tile ``t``'s ``ob``-th block, clamped for reads."""
        return T.min(t * self.ocb + ob, self.geom.o4 - 1) if self.ob_overhang else t * self.ocb + ob

    def store_ok(self, t, ob, x):
        conds = []
        if self.ob_overhang:
            conds.append(t * self.ocb + ob < self.geom.o4)
        if self.ow_overhang:
            conds.append(x < self.geom.ow)
        return all_of(conds)

    def out_channel(self, t, ob, lane):
        """Logical output channel of a lane, clamped to a real one (padding lanes have zero weights)."""
        return T.min((t * self.ocb + ob) * LANES + lane, self.geom.o - 1)

    def in_channel(self, t, ob, lane, ci):
        """Input channel that output lane ``lane`` of block ``ob`` reads at its group's ``ci``-th channel."""
        if self.mode == "depthwise":
            return self.out_channel(t, ob, lane) // self.multiplier
        return self.out_channel(t, ob, lane) // self.geom.og * self.geom.cg + ci

    def first_block(self, t):
        """First input block of tile ``t``'s group (a tile lies in one group)."""
        return (t * self.ocb * LANES) // self.geom.og * self.blocks_per_group if self.geom.groups > 1 else 0
