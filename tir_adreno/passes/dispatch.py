"""The Relax pass: a CNN's ops -> ``call_tir`` of our texture PrimFuncs.

:func:`DispatchToTextures` rewrites ``main`` of a static-shape Relax module:

- ``nn.conv2d`` becomes one conv kernel with its epilogue fused: a following
  per-channel bias ``add``, per-channel or scalar constant multiply/add/subtract/
  divide and ``nn.batch_norm`` are folded into the weights and bias at compile
  time, then a residual ``add`` and an activation run in the kernel's epilogue.
  Activations are recognized however the importer writes them (ReLU6 as
  ``maximum``/``minimum`` by scalars, HardSwish as ``x * relu6(x + 3) / 6``, SiLU
  as ``x * sigmoid(x)``, ...: ``passes.activations``). Weights are packed to
  OIHW4o here, once ("static textures").
- pooling, reductions over C/H/W, channel softmax, elementwise ops (activations,
  per-channel affine = batch norm after no conv, the squeeze-excitation gate
  multiply) and channel concat of any number of inputs map to their kernels when
  their operands are 4-d activations.
- Every PrimFunc emitted here carries ``OURS_ATTR``, so the profile tells our
  kernels from what TVM's importer or legalizer made.
- Activations stay NCHW4c between our kernels. A layout transform is emitted
  only where a value crosses to an op we do not cover (or comes from one), and
  each transform is emitted once per value, so back-to-back transforms cancel.
- Each blocked tensor is placed in the profile's ``activation_placement``: a
  buffer, or a texture when it fits the device's image limits (else a buffer); a
  kernel runs on textures when all its activations do, and a value in the other
  scope is copied over once. Convs read and write either scope (mixed-scope
  kernels): a conv reads its input where it is and writes its output where the
  dense convs that read it read (their plans' scope), else in its own placement
  (tuning records may set it) when only convs read it, else where the other ops
  want it, so a placement boundary costs no copy kernel.

First (:func:`merge_convs`), sums of parallel linear branches of one value (MobileOne / RepVGG
blocks, FastViT's RepMixer, exported without their reparameterization) become one conv
(``reparam``), and each mixed conv (MixNet: Split -> a conv per channel group -> Concat) one conv
where the strategy says so (``mixed_conv``), so their tails fuse as any conv's.

Where to look: ``graph`` (the bindings of ``main``), ``rewriter`` (values, kernel
emission, layouts, scopes), ``convs`` (which convs our kernels take), ``conv_emit`` (a conv
with its tail, gate or folded norm), ``affine`` and ``activations`` (the patterns folded into
kernels), ``op_info`` (what each kernel says about itself), ``patterns/`` (the fusion stage:
one module per fused pattern, registered in order in ``patterns.PATTERNS``, tried first),
``rules/`` (one module per single-op family, registered in order in ``rules.RULES``). Ops no
pattern or rule takes are left as they are, for ``LegalizeOps`` and dlight.
"""

from __future__ import annotations

import tvm

from tir_adreno.passes.linear_norm import fold_linear_norms
from tir_adreno.passes.mixed_conv import merge_mixed_convs
from tir_adreno.passes.reparam import reparameterize
from tir_adreno.passes.rewriter import Rewriter
from tir_adreno.passes.patterns import PATTERNS
from tir_adreno.passes.rules import RULES, by_op
from tir_adreno.strategy.profile import DeviceProfile, resolve


def dispatch_to_textures(mod: tvm.IRModule, profile: DeviceProfile, allow_buffer: bool = True, records=None,
                         precision: str = "float32", lazy: bool = False) -> tvm.IRModule:
    """Rewrite ``mod["main"]`` onto our kernels for ``profile`` (see the module docstring);
    ``records`` (``tir_adreno.strategy.records.Records``) gives tuned conv choices for ``precision``
    ("float32", "float16_acc32": float32 kernels on half textures, or "float16": half kernels). ``lazy``: kernels the
    index knows are body-less stubs (``passes.kernel_index``) that only ``compiler.plan_module``
    resolves; the default gives real PrimFuncs (``tvm.compile``, ``dump``). Convs are merged first
    (:func:`merge_convs`)."""
    return Rewriter(merge_convs(mod, profile), profile, by_op((*PATTERNS, *RULES)), allow_buffer, records, precision, lazy).run()


def merge_convs(mod: tvm.IRModule, profile: DeviceProfile) -> tvm.IRModule:
    """The graph rewrites before the rules (the module docstring): parallel branches summed into one
    conv, then mixed convs merged for ``profile``, then batch norms on a Linear's outputs folded into
    it (``linear_norm``). ``tune`` lists a model's layers after them too."""
    return fold_linear_norms(merge_mixed_convs(reparameterize(mod), profile))


def DispatchToTextures(profile: DeviceProfile | str = "adreno", allow_buffer: bool = True, records=None) -> tvm.transform.Pass:  # noqa: N802 (TVM pass naming)
    """The pass form of :func:`dispatch_to_textures` (default: the ``adreno`` profile)."""
    profile = resolve(profile=profile)

    @tvm.transform.module_pass(opt_level=0, name="DispatchToTextures")
    def _pass(mod, _ctx):
        return dispatch_to_textures(mod, profile, allow_buffer, records)

    return _pass
