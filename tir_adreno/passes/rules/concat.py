"""Channel concat of any number of NCHW activations, with the elementwise chain after it as the last
concat's epilogue."""

from __future__ import annotations

from tvm import relax

from primfuncs import concat as kernels

from tir_adreno.passes.graph import Node
from tir_adreno.passes.kernel_index import kernel
from tir_adreno.passes.op_info import concat_info
from tir_adreno.passes.rewriter import Rewriter, blocked_shape
from tir_adreno.passes.rules.base import rule
from tir_adreno.passes.rules.common import emit_with_chain


@rule("relax.concat")
def concat(rw: Rewriter, node: Node):
    parts = node.args[0]
    if not isinstance(parts, relax.Tuple) or node.attrs.axis is None or int(node.attrs.axis) % 4 != 1:
        return None
    values = [rw.activation(f) for f in parts.fields]
    if any(v is None or v.layout != "NCHW" for v in values):
        return None
    if len(values) == 1:  # torch.cat([x]) (DenseNet's first layer of a block): x itself
        return rw.alias(node.var, values[0], "NCHW", values[0].nchw)
    n, _, h, w = values[0].nchw
    chans = [v.channels for v in values]
    scope = rw.scope_for(*[v.shape5 for v in values], blocked_shape((n, sum(chans), h, w)))
    parts = [(rw.blocked(v, scope), v.channels) for v in values]
    # More inputs than one kernel takes (DenseNet concatenates up to ~50): a tree of
    # concats of up to MAX_INPUTS each, so every channel is copied log4(inputs) times.
    while len(parts) > kernels.MAX_INPUTS:
        groups = [parts[i : i + kernels.MAX_INPUTS] for i in range(0, len(parts), kernels.MAX_INPUTS)]
        parts = [_emit_concat(rw, group, n, h, w, scope) if len(group) > 1 else group[0] for group in groups]
    # the last concat takes the elementwise chain after it as its epilogue (GhostNet's cat + shortcut)
    chans = [c for _, c in parts]
    out_nchw = (n, sum(chans), h, w)
    return emit_with_chain(rw, node, lambda **fused: _concat_kernel(chans, n, h, w, scope, **fused), blocked_shape(out_nchw), scope,
                           out_nchw, [e for e, _ in parts], concat_info(chans, n, h, w))


def _concat_kernel(chans, n, h, w, scope, epilogue=None, channels=None):
    # (``channels``, which emit_with_chain passes with an epilogue, is the sum of ``chans``)
    return kernel(kernels.concat_channels, n, chans, h, w, scope=scope, **({"epilogue": epilogue} if epilogue is not None else {}))


def _emit_concat(rw: Rewriter, parts, n, h, w, scope):
    chans = [c for _, c in parts]
    out5 = blocked_shape((n, sum(chans), h, w))
    return rw.emit_kernel(_concat_kernel(chans, n, h, w, scope), [e for e, _ in parts], out5, op_info=concat_info(chans, n, h, w)), sum(chans)
