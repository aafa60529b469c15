"""MobileViT's patch unfold and fold, each exported as reshape (6-d) -> permute -> reshape (4-d):
one ``patch_unfold`` / ``patch_fold`` kernel (a pixel gather, channels kept), so the attention
between them stays in NCHW4c."""

from __future__ import annotations

from primfuncs import patches

from tir_adreno.passes.graph import Node, static_shape
from tir_adreno.passes.kernel_index import kernel
from tir_adreno.passes.op_info import elementwise_info
from tir_adreno.passes.rewriter import Rewriter, blocked_shape
from tir_adreno.passes.rules.base import rule

#: ``permute_dims`` axes of the 6-d views: unfold ``[N, C, nh, ph, nw, pw] -> [N, C, ph, pw, nh, nw]``,
#: fold the way back from ``[N, C, ph, pw, nh, nw]``.
UNFOLD, FOLD = (0, 1, 3, 5, 2, 4), (0, 1, 4, 2, 5, 3)


def _chain(rw: Rewriter, node: Node):
    """(permute, final reshape) nodes when ``node`` is the 6-d reshape of such a chain, each the
    previous one's only user, else None."""
    g = rw.graph
    perm = g.sole_user(node.var)
    if perm is None or perm.op != "relax.permute_dims" or perm.attrs.axes is None:
        return None
    back = g.sole_user(perm.var)
    if back is None or back.op != "relax.reshape" or len(static_shape(back.var) or ()) != 4:
        return None
    return perm, back


def _patch_size(x_nchw, split, axes, out_shape) -> tuple[int, int, bool] | None:
    """(ph, pw, inverse) of the chain on NCHW ``x_nchw``: its 6-d view ``split``, permute ``axes``
    and 4-d result ``out_shape``; None when it is no unfold or fold of these shapes."""
    n, c, h, w = x_nchw
    if split[:2] != (n, c) or out_shape[:2] != (n, c):
        return None
    if axes == UNFOLD:
        nh, ph, nw, pw = split[2:]
        if (nh * ph, nw * pw) == (h, w) and out_shape[2:] == (ph * pw, nh * nw):
            return ph, pw, False
    if axes == FOLD:
        ph, pw, nh, nw = split[2:]
        if (ph * pw, nh * nw) == (h, w) and out_shape[2:] == (nh * ph, nw * pw):
            return ph, pw, True
    return None


@rule("relax.reshape")
def patch_unfold(rw: Rewriter, node: Node):
    """``reshape [N, C, nh, ph, nw, pw] -> permute (0, 1, 3, 5, 2, 4) -> reshape [N, C, ph*pw, nh*nw]``
    (unfold) or ``reshape [N, C, ph, pw, nh, nw] -> permute (0, 1, 4, 2, 5, 3) -> reshape [N, C, H, W]``
    (fold) of an NCHW activation: one kernel (the permute and the last reshape fused)."""
    split = static_shape(node.var)
    x = rw.activation(node.args[0]) if split is not None and len(split) == 6 else None
    chain = _chain(rw, node) if x is not None and x.layout == "NCHW" else None
    if chain is None:
        return None
    perm, back = chain
    out_shape = static_shape(back.var)
    found = _patch_size(x.nchw, split, tuple(int(a) for a in perm.attrs.axes), out_shape)
    if found is None:
        return None
    ph, pw, inverse = found
    image = x.nchw if not inverse else out_shape
    in5, out5 = x.shape5, blocked_shape(out_shape)
    scope = rw.scope_for(in5, out5)
    func = kernel(patches.patch_unfold, blocked_shape(image), ph, pw, inverse, scope=scope)
    info = elementwise_info("patch_fold" if inverse else "patch_unfold", [node, perm, back], [x.nchw], patch=[ph, pw])
    info["output"] = list(out_shape)
    out = rw.emit_kernel(func, [rw.blocked(x, scope)], out5, op_info=info)
    perm.fused = back.fused = True
    rw.define(back.var, out, scope, out_shape)
    return out
