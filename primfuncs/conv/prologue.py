"""The input side of a conv kernel, as :class:`~primfuncs.epilogue.Epilogue` is its output side.

A :class:`Prologue` says how a conv reads what it multiplies and how it sums the products: the
layout of ``X`` and the scope of ``W``, an input gate multiplied in, a norm of ``X`` folded in
(layer, group or GRN), the fused depthwise conv's own epilogue, Winograd's tiles, the
accumulators' dtype. Every conv factory takes one ``prologue`` argument instead of a keyword per
fusion, so a new input-side fusion is a field here, not one more parameter on four factories.
The default is a plain conv: NCHW4c ``X``, ``W`` in the weight texture (texture ``scope``) or a
buffer, accumulators in the kernel's dtype.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from ..epilogue import Epilogue


@dataclass(frozen=True)
class Prologue:
    """How a conv kernel reads and sums its inputs (each field's kernel arguments in the
    factories' docstrings)."""

    weight_scope: str | None = None  # W's scope; None: the weight texture for a texture scope, else a buffer
    data_layout: str = "NCHW4c"  # "NCHW": X a plain buffer (a model's first conv); "NHWC": channels-last (tokens)
    gate_scope: str | None = None  # X is read times the input gate ``Gate`` held in this scope
    norm_eps: float | None = None  # X is read through a layer norm over its channels (primfuncs.conv.norm)
    group_norm: object | None = None  # a primfuncs.conv.norm.GroupNormFold: a group norm of X folded in
    grn_eps: float | None = None  # with gate_scope: GRN's scale folded in, its sums of squares in the gate's place
    acc_dtype: str | None = None  # the accumulators' dtype (None: the kernel's dtype)
    tile_scope: str | None = None  # Winograd: the scope of the transformed tiles V and M (None: X's scope)
    depthwise: Epilogue = Epilogue()  # depthwise_pointwise_nchw4c: the depthwise conv's epilogue (no residual)
    x_view: tuple = ()  # X read through primfuncs.gather steps (plain: a channel slice of a Linear's output; blocked: a window of whole channel blocks)

    def __post_init__(self):
        # a prologue rebuilt from a saved plan's JSON has lists where it had tuples
        object.__setattr__(self, "x_view", tuple(self.x_view or ()))


#: The fields each factory reads (any other set field is refused: it would be ignored).
DIRECT = ("weight_scope", "data_layout", "gate_scope", "norm_eps", "group_norm", "grn_eps", "acc_dtype", "x_view")
DEPTHWISE = ("weight_scope", "data_layout", "acc_dtype", "x_view")
FUSED = ("weight_scope", "acc_dtype", "depthwise")
WINOGRAD = ("weight_scope", "acc_dtype", "tile_scope")


def check_prologue(prologue: Prologue, factory: str, takes: tuple[str, ...]) -> Prologue:
    """``prologue``, ValueError naming a field ``factory`` does not read (set, it would be ignored)."""
    if not isinstance(prologue, Prologue):
        raise ValueError(f"prologue must be a Prologue, got {prologue!r}")
    for f in fields(Prologue):
        if f.name not in takes and getattr(prologue, f.name) != f.default:
            raise ValueError(f"{factory} takes no prologue.{f.name} (got {getattr(prologue, f.name)!r}); it reads {', '.join(takes)}")
    return prologue
