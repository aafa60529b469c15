"""Attention on an NCHW4c feature map's tokens, one module per kernel family:

- :mod:`.xca`: EdgeNeXt's transposed ("cross-covariance") attention (XCA);
- :mod:`.linear`: EfficientViT's ReLU linear attention (LiteMLA);
- :mod:`.separable`: MobileViT-v2's separable self-attention;
- :mod:`.softmax`: softmax attention of any export on plain tensors (``Q Kᵀ``, softmax, ``x V`` in one kernel);
- :mod:`.heads`: the heads' channel ranges, checked, shared by all three.

The tokens of a ``[B, N, C]`` sequence with ``N = H * W`` are the pixels of the NCHW4c map of
``[B, C, H, W]`` (the token layout, docs/kernels.md). The factories are re-exported here, so
``primfuncs.attention.linear_kv`` and the like keep their names.
"""

from .linear import (LINEAR_ATTENTION_MAX_MAPS, LINEAR_ATTENTION_THREADS, linear_apply, linear_attention,
                     linear_attention_shared_bytes, linear_attention_slices, linear_kv, linear_kv_finish, linear_kv_partials)
from .separable import SEPARABLE_THREADS, separable_attention
from .softmax import MAX_HEAD_DIM as SOFTMAX_ATTENTION_MAX_HEAD_DIM
from .softmax import MAX_KEYS as SOFTMAX_ATTENTION_MAX_KEYS
from .softmax import MAX_THREADS as SOFTMAX_ATTENTION_MAX_THREADS
from .softmax import shared_bytes as softmax_attention_shared_bytes
from .softmax import attention_geometry, scaled_dot_product_attention
from .xca import xca_apply, xca_finish, xca_partials, xca_weights

__all__ = [
    "LINEAR_ATTENTION_MAX_MAPS", "LINEAR_ATTENTION_THREADS", "SEPARABLE_THREADS", "linear_apply", "linear_attention",
    "linear_attention_shared_bytes", "linear_attention_slices", "linear_kv", "linear_kv_finish", "linear_kv_partials",
    "SOFTMAX_ATTENTION_MAX_HEAD_DIM", "SOFTMAX_ATTENTION_MAX_KEYS", "SOFTMAX_ATTENTION_MAX_THREADS",
    "softmax_attention_shared_bytes", "attention_geometry", "scaled_dot_product_attention",
    "separable_attention", "xca_apply", "xca_finish", "xca_partials", "xca_weights",
]
