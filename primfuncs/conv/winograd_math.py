"""Winograd F(m x m, 3 x 3) transform matrices and the host-side weight transform.

NumPy only (no TVM): the kernels in :mod:`primfuncs.conv.winograd`, the
Relax pass and the benchmarks' TVM-free run path all use these.
"""

from __future__ import annotations

import numpy as np

from ..lanes import LANES, blocked


#: Output tile sizes ``m`` of F(m x m, 3 x 3) that we implement.
TILE_SIZES = (2, 4)

# Transform matrices (Lavin & Gray 2016; interpolation points 0, 1, -1 and 0, +-1, +-2, plus infinity).
# B^T and A^T have small integer entries, exact in float16 too; G's fractions are applied on the host.
_MATRICES = {
    2: dict(
        BT=[[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        G=[[1, 0, 0], [1 / 2, 1 / 2, 1 / 2], [1 / 2, -1 / 2, 1 / 2], [0, 0, 1]],
        AT=[[1, 1, 1, 0], [0, 1, -1, -1]],
    ),
    4: dict(
        BT=[
            [4, 0, -5, 0, 1, 0],
            [0, -4, -4, 1, 1, 0],
            [0, 4, -4, -1, 1, 0],
            [0, -2, -1, 2, 1, 0],
            [0, 2, -1, -2, 1, 0],
            [0, 4, 0, -5, 0, 1],
        ],
        G=[
            [1 / 4, 0, 0],
            [-1 / 6, -1 / 6, -1 / 6],
            [-1 / 6, 1 / 6, -1 / 6],
            [1 / 24, 1 / 12, 1 / 6],
            [1 / 24, -1 / 12, 1 / 6],
            [0, 0, 1],
        ],
        AT=[[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
    ),
}


def check_tile(m) -> int:
    if m not in TILE_SIZES:
        raise ValueError(f"m (the Winograd output tile) must be one of {TILE_SIZES}, got {m!r}")
    return int(m)


def winograd_matrices(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(B^T, G, A^T)`` of F(m x m, 3 x 3) in float64: shapes (alpha, alpha), (alpha, 3), (m, alpha)."""
    mats = _MATRICES[check_tile(m)]
    return tuple(np.array(mats[k], np.float64) for k in ("BT", "G", "AT"))


def winograd_weight_transform(w_oihw, m: int, dtype=None) -> np.ndarray:
    """``U = G g G^T`` of OIHW 3x3 weights, packed as the GEMM kernel reads them.

    Computed in float64 and cast once to ``dtype`` (default: the weights' dtype).
    Returns ``[alpha^2 * O/4, 4 * ceil(C/4), 4]``: ``U[e * O/4 + o // 4, c, o % 4]``
    is output channel ``o``, input channel ``c`` at position ``e = a * alpha + b``;
    padded channels are zero.
    """
    w = np.asarray(w_oihw)
    if w.ndim != 4 or w.shape[2:] != (3, 3):
        raise ValueError(f"w_oihw must be OIHW with a 3x3 kernel, got shape {w.shape}")
    dtype = np.dtype(dtype or w.dtype)
    _, g, _ = winograd_matrices(m)
    alpha = g.shape[0]
    o, c = w.shape[:2]
    o4, c4 = blocked(o), blocked(c)
    u = np.einsum("ak,ockl,bl->aboc", g, w.astype(np.float64), g).reshape(alpha * alpha, o, c)
    packed = np.zeros((alpha * alpha, o4 * LANES, c4 * LANES))
    packed[:, :o, :c] = u
    packed = packed.reshape(alpha * alpha, o4, LANES, c4 * LANES).transpose(0, 1, 3, 2)
    return np.ascontiguousarray(packed.reshape(alpha * alpha * o4, c4 * LANES, LANES)).astype(dtype)
