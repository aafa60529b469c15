"""Config sweep of our direct conv kernels (``primfuncs.conv``) on one device.

For a representative subset of ResNet-50 / MobileNetV2 conv layers (early and
late, 1x1, 3x3 and 7x7, stride 2, depthwise; :data:`SWEEP_LAYERS`) this builds
the texture kernel (NCHW4c activations, OIHW4o weights) for a grid of
``ConvConfig``: register tiles ``oc_block`` x ``w_block`` in {1, 2, 4}^2, work
groups of 32 to 256 items, ``split_k`` (a tile's input channel blocks split
over its work group) 1 to 16; plus each layer's default configs
(``default_config`` of every device class, and the rule before this sweep as
``old_default``). Every kernel runs on the device with inputs packed on the
host (``tir_adreno.strategy.packing``), is checked against a float64 NumPy conv
(relative error <= 1e-4, output poisoned first) and timed (median OpenCL event
time). Prints per layer the best configs and the defaults; writes JSON.

Run here (TVM + PoCL):           python benchmarks/conv_configs.py --grid cpu
Split (a device without TVM):    python benchmarks/conv_configs.py --build-only DIR   # with TVM
                                 python benchmarks/conv_configs.py --from DIR         # numpy + pyopencl only

``--grid gpu`` (default) is the full grid (~700 kernels); ``--grid cpu`` the
tiles with two work groups and no split (a CPU OpenCL ignores work-group
shape); ``--grid defaults`` (use with ``--layers all``) the old and the "gpu"
default of each layer; ``--grid refine`` the neighbourhood of the "gpu"
default (tiles x split_k halved / doubled), and that default with buffer
weights ("wbuf") and on buffers ("buf"). Identical configs are built and run
once. Results go to ``conv_configs[_<grid>]-<device>.json``, rewritten after
every layer (a run cut short keeps what it measured).

``--grid fused`` sweeps the fused depthwise -> 1x1 kernel
(``primfuncs.conv.depthwise_pointwise_nchw4c``) instead: its layers are the fused
kernels of the ``--target`` profile's plans of ONNX exports (``--onnx-dir``,
``--models``; :data:`PLAN_MODELS`), each as planned (shapes, epilogues, scopes,
dtype), deduplicated over the models (``count``: launches). Per layer the default
(``strategy.defaults.default_config(pw, profile, prologue=True)``, what
``strategy.fusion.fuse_depthwise_pointwise`` plans without a record), the plan's own
config, and :func:`fused_grid`; checked against the float64 NumPy reference of the
plan's op info (``tools.workbench.reference_case``). Prints per layer the best
config, the default's time and the ratio, then a table for deriving a rule;
writes ``conv_configs_fused-<device>.json``::

    python benchmarks/conv_configs.py --grid fused --target nvidia-h200 --onnx-dir /work/exports --build-only DIR
    python benchmarks/conv_configs.py --from DIR --jobs 16      # on the device (numpy + pyopencl)

``--grid stem`` takes, the same way (``plan_layers``), each model's first dense conv (its stem: 3
input channels, the plain NCHW input read directly) with its epilogue and placement as planned
(keys ``<model>.stem``) and sweeps :func:`stem_grid`: the default (today ``defaults.TILED_STEM``),
the plan's config, the direct kernel (the profile's direct rule and a few tiles), and the tiled
kernel's work groups gx x gy (gy fitted to the output blocks, 32-256 items, at least one work group
per compute unit); ``conv_configs_stem-<device>.json``, its rule table with each config's work groups.

``--grid strided`` takes every dense conv past the stem with a window and a stride > 1 (3x3/2
downsamples; ``strategy.defaults.is_strided``) as planned (keys ``<model>.s<i>``, equal kernels of
several models merged) and sweeps :func:`strided_grid` (~17 configs a layer): the default, the plan's config, the
direct kernel's tiles with and without split_k, and the tiled kernel's configs (the rule's, the
stem's, four of :data:`TILED_GRID`); ``conv_configs_strided-<device>.json``, the same rule table
(the best tiled and the best direct config of each layer)."""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import hashlib
import importlib
import json
import sys
import time
import traceback
from pathlib import Path

import numpy as np

import common  # noqa: E402  (puts the repository root on sys.path)
import layers as layer_lists
from conv_layers import reference_conv2d

from tir_adreno.strategy.packing import pack_nchw4c, pack_oihw4o, unpack_nchw4c
from tir_adreno.runtime.bundle import KernelModule
from tir_adreno.reference import relative_error
from tir_adreno.runtime.texture import is_texture_scope
from tir_adreno.tools.workbench import reference_case

NAME = "conv_configs"
RTOL = 1e-4
KERNELS_FILE = "kernels.json.gz"

#: The swept layers (keys of benchmarks/layers.py): early/late, 1x1/3x3/7x7, stride 2, depthwise.
SWEEP_LAYERS = (
    "resnet50.conv1",
    "resnet50.layer1.conv2",
    "resnet50.layer1.conv3+ds",
    "resnet50.layer2.0.conv2",
    "resnet50.layer2.conv1",
    "resnet50.layer3.conv1",
    "resnet50.layer3.conv2",
    "resnet50.layer4.conv1",
    "resnet50.layer4.conv2",
    "resnet50.layer4.conv3",
    "mobilenetv2.features.2.proj",
    "mobilenetv2.features.8-11.exp",
    "mobilenetv2.features.15-16.proj",
    "mobilenetv2.features.18",
    "mobilenetv2.features.2.dw",
    "mobilenetv2.features.3.dw",
    "mobilenetv2.features.8-11.dw",
    "mobilenetv2.features.14.dw",
)

#: Device classes whose default config is part of every layer's cases (``defaults.kind_profile(kind)``'s).
DEFAULT_KINDS = ("gpu", "cpu", "mobile")

#: The exports (``<name>.onnx`` in ``--onnx-dir``) whose plans give ``--grid fused`` and ``--grid stem``
#: their layers (issue 21's models; those whose plan has no fused depthwise -> 1x1 kernel add none to the first).
PLAN_MODELS = ("efficientvit_b0", "edgenext_xx_small", "fastvit_t8", "mobilevitv2_050", "mixnet_s",
                "efficientnet_b0", "mobilenetv3_small_100", "convnextv2_atto")


# ---------------------------------------------------------------------------------------------
# the grid (needs TVM: primfuncs)
def old_default(geom, depthwise: bool):
    """``default_config`` before this sweep: 4x4 tile shrunk until 1024 work items, work group (8, 4, 1)."""
    from primfuncs import conv
    from primfuncs.conv import ConvConfig

    if depthwise:
        return ConvConfig(1, 4, (8, 4, 1))
    ocb, wb = 4, 4

    def items(ocb, wb):
        return conv.direct_work_items(geom, ocb, wb)

    while ocb > 1 and items(ocb, wb) < 1024:
        ocb //= 2
    while wb > 1 and items(ocb, wb) < 1024:
        wb //= 2
    return ConvConfig(ocb, wb, (8, 4, 1))


def candidates(layer, grid: str, placement: str = "texture", profile=None):
    """(kind, ConvConfig) pairs to build for ``layer``: kind "sweep", "old_default" or "default_<class>"
    (``grid`` "fused" / "stem": :func:`fused_grid` / :func:`stem_grid` for ``profile``)."""
    from primfuncs import conv
    from tir_adreno.strategy import defaults

    if grid == "fused":
        return fused_grid(layer, profile)
    if grid == "stem":
        return stem_grid(layer, profile)
    if grid == "strided":
        return strided_grid(layer, profile)
    geom = conv.conv2d_geometry(
        layer.data_shape, layer.weight_shape, layer.strides, layer.padding, layer.dilation, layer.groups
    )
    depthwise = layer.depthwise
    if placement == "buffer" and grid == "gpu":
        return buffer_grid(geom, depthwise)
    if grid == "refine":
        return refine(geom, depthwise) if layer.key in SWEEP_LAYERS else []
    if grid == "tiled":
        return tiled_grid(geom, depthwise)
    out = [("old_default", old_default(geom, depthwise))]
    if grid == "defaults":
        return out + [("default_gpu", defaults.default_config(geom, defaults.kind_profile("gpu")))]
    for kind in DEFAULT_KINDS:
        out.append((f"default_{kind}", defaults.default_config(geom, defaults.kind_profile(kind))))

    def extents(ocb, wb):
        return conv.direct_extents(geom, ocb, wb)

    def add(ocb, wb, wg, split=1):
        out.append(("sweep", conv.ConvConfig(ocb, wb, tuple(wg), split)))

    tiles_dw = [(1, 1), (1, 2), (1, 4), (2, 1), (2, 2), (2, 4)]
    tiles = [(o, w) for o in (1, 2, 4) for w in (1, 2, 4)]
    if grid == "cpu":
        for ocb, wb in tiles_dw if depthwise else tiles:
            add(ocb, wb, (8, 4, 1))
            add(ocb, wb, conv.fill_work_group(extents(ocb, wb), 64, max_x=16))
        return out
    for ocb, wb in tiles_dw if depthwise else tiles:
        add(ocb, wb, conv.fill_work_group(extents(ocb, wb), 64, max_x=16))
        add(ocb, wb, conv.fill_work_group(extents(ocb, wb), 128, max_x=16))
        if depthwise or (ocb, wb) in ((2, 2), (2, 4), (4, 2), (4, 4)):
            add(ocb, wb, (8, 4, 1))
            add(ocb, wb, conv.fill_work_group(extents(ocb, wb), 256, max_x=32))
            add(ocb, wb, conv.fill_work_group(extents(ocb, wb), 32, max_x=8))
    blocks = geom.cg // 4 if geom.groups > 1 else geom.c // 4
    if depthwise or blocks < 8:
        return out
    for split in (2, 4, 8, 16):
        for ocb, wb in ((1, 4), (2, 2), (2, 4), (4, 4)):
            if split == 16 and (blocks < 128 or ocb * wb > 4):
                continue
            # Partial sums in local memory: split x items x tile x 16 bytes <= 32 KiB, items <= 256 / split.
            out.append(("sweep", defaults.split_config(geom, ocb, wb, split)))
    return out


#: Work items (x split_k) below which the buffer grid skips a config: under ~16 per SM of a big
#: GPU (H200: 132 SMs), the 7x7 maps' big tiles (the texture sweep never picked one there); a
#: layer with fewer than twice that many 1x1 tiles keeps those at half its 1x1-tile count or more.
BUFFER_MIN_ITEMS = 2048


def buffer_grid(geom, depthwise: bool):
    """The buffer sweep (``--placement buffer --grid gpu``), sized for ~25 kernels a layer:
    the "gpu" default on buffers ("default_gpu") and on textures ("texture_default_gpu", the
    placement today's strategy runs); tiles {1, 2, 4}^2 in 2-D groups of 128 items, the 1-D
    grid in output order (``flat``) in groups of 128, both also at 64 and 256 for the tiles
    2x2 and 2x4; split_k 2-16 for 2x2 and 2x4 (``defaults.split_config``). Configs with fewer than
    :data:`BUFFER_MIN_ITEMS` work items are left out (the named ones never). ~810 kernels on
    the 31 pointwise layers (``--layers pointwise``)."""
    from primfuncs import conv
    from tir_adreno.strategy import defaults

    gpu = defaults.default_config(geom, defaults.kind_profile("gpu"))
    out = [("default_gpu", gpu), ("texture_default_gpu", gpu)]
    if depthwise:
        return out  # depthwise: benchmarks/depthwise.py sweeps them on buffers

    def items(ocb, wb):
        return conv.direct_work_items(geom, ocb, wb)

    least = min(BUFFER_MIN_ITEMS, items(1, 1) // 2)  # small layers: keep their few smallest tiles

    def add(ocb, wb, config):
        if items(ocb, wb) * config.split_k >= least:
            out.append(("sweep", config))

    for ocb in (1, 2, 4):
        for wb in (1, 2, 4):
            for threads in (64, 128, 256) if (ocb, wb) in ((2, 2), (2, 4)) else (128,):
                extents = conv.direct_extents(geom, ocb, wb)
                add(ocb, wb, conv.ConvConfig(ocb, wb, conv.fill_work_group(extents, threads, max_x=16)))
                add(ocb, wb, conv.ConvConfig(ocb, wb, (threads, 1, 1), flat=True))
    blocks = geom.cg // 4 if geom.groups > 1 else geom.c // 4
    aligned = geom.groups == 1 or (geom.cg % 4 == 0 and geom.og % 4 == 0)
    for split in (2, 4, 8, 16):
        if aligned and split * 2 <= blocks:  # each slice keeps >= 2 channel blocks, as default_config
            for ocb, wb in ((2, 2), (2, 4)):
                add(ocb, wb, defaults.split_config(geom, ocb, wb, split))
    return out


#: (oc_block, w_block, work group x, y, k_chunk, split_k) of the tiled grid; "T": also on textures.
TILED_GRID = (
    (2, 4, 16, 8, 4, 1, "T"), (4, 4, 16, 8, 4, 1, ""), (2, 2, 16, 8, 4, 1, "T"), (2, 4, 16, 16, 4, 1, ""),
    (1, 2, 16, 8, 8, 1, ""), (2, 4, 32, 4, 4, 1, ""), (1, 1, 16, 8, 8, 1, ""), (2, 4, 16, 8, 8, 1, ""),
    (1, 4, 16, 8, 4, 1, "T"), (1, 1, 8, 8, 8, 1, ""),
    # split_k: K slices side by side for the small maps and long K (3x3 convs, 1x1 with 1-2k channels)
    (1, 2, 16, 8, 4, 2, ""), (1, 2, 16, 4, 4, 4, ""), (1, 1, 16, 4, 4, 4, ""), (1, 2, 16, 8, 8, 2, ""),
    (1, 4, 16, 4, 4, 4, ""), (1, 1, 16, 8, 4, 2, ""), (2, 2, 16, 4, 4, 4, ""), (1, 2, 8, 8, 4, 4, ""),
    (1, 1, 8, 8, 4, 4, ""), (1, 2, 16, 2, 4, 8, ""), (1, 1, 16, 2, 4, 8, ""), (1, 1, 8, 4, 4, 8, ""),
)


def tiled_grid(geom, depthwise: bool):
    """``--grid tiled``: the "gpu" default on textures ("texture_default_gpu") and buffers
    ("default_gpu"), then the local-memory tiled kernel (``ConvConfig.tiled``) in the configs
    of :data:`TILED_GRID` on buffers, those marked "T" also on textures ("texture_tiled")."""
    from primfuncs import conv
    from tir_adreno.strategy import defaults

    gpu = defaults.default_config(geom, defaults.kind_profile("gpu"))
    out = [("default_gpu", gpu), ("texture_default_gpu", gpu)]
    if depthwise or geom.groups != 1:
        return out
    for ocb, wb, gx, gy, kc, split, where in TILED_GRID:
        config = conv.ConvConfig(ocb, wb, (gx, gy, 1), split_k=split, tiled=True, k_chunk=kc)
        out.append(("sweep", config))
        if where:
            out.append(("texture_tiled", config))
    return out




def refine(geom, depthwise: bool):
    """Second pass around the "gpu" default: tiles 2x4, 2x2, 1x4 x its split_k halved,
    kept, doubled; then that default with its weights in a buffer ("wbuf") and with
    every tensor in buffers ("buf")."""
    from primfuncs import conv
    from tir_adreno.strategy import defaults

    gpu = defaults.default_config(geom, defaults.kind_profile("gpu"))
    variants = [("variant_wbuf", gpu), ("variant_buf", gpu)]
    blocks = geom.cg // 4 if geom.groups > 1 else geom.c // 4
    if depthwise or blocks < 2:
        return variants
    out = [("default_gpu", gpu)]
    for ocb, wb in ((gpu.oc_block, gpu.w_block), (2, 4), (2, 2), (1, 4)):
        for split in (gpu.split_k, gpu.split_k // 2, gpu.split_k * 2):
            if 1 <= split <= min(32, blocks):
                if split == 1:
                    extents = (geom.n * -(-geom.ow // wb), geom.oh, -(-geom.o4 // ocb))
                    out.append(("sweep", conv.ConvConfig(ocb, wb, conv.fill_work_group(extents, 64, max_x=16))))
                else:
                    out.append(("sweep", defaults.split_config(geom, ocb, wb, split)))
    return out + variants


# -- fused depthwise -> 1x1 layers (--grid fused) ----------------------------------------------
def _plain(value):
    """Factory arguments as JSON: dataclasses (epilogues, configs) as dicts, tuples as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value


def plan_factory(layer_cls):
    """The kernel factory of a :class:`layers.PlanLayer` class (its ``FACTORY``, "module:function")."""
    module, function = layer_cls.FACTORY.split(":")
    return getattr(importlib.import_module(module), function)


def plan_layers(model, name: str, profile, grid: str) -> list:
    """The kernels of ``model``'s plan (ONNX path or model) on ``profile`` (float32, no records)
    that ``grid`` sweeps, one :class:`layers.PlanLayer` of :data:`layers.PLAN_LAYERS` ``[grid]``
    per distinct kernel in launch order, ``count`` its launches: "fused", the fused depthwise ->
    1x1 kernels (``<name>.dwpw<i>``); "stem", the first dense conv (``<name>.stem``). Each is the
    factory call the pass made, read from its stub (``passes.kernel_index``), nothing built."""
    from tvm import relax

    from tir_adreno.compiler import import_model, lower
    from tir_adreno.passes import OP_ATTR, SOURCE_ATTR, kernel_index
    from tir_adreno.strategy.defaults import is_strided

    cls = layer_lists.PLAN_LAYERS[grid]
    factory = plan_factory(cls)
    mod, _ = import_model(model)
    mod = lower(mod, profile, lazy=True)
    launches: dict[str, int] = {}  # kernel name -> launches, in launch order
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and getattr(value.op, "name", "") == "relax.call_tir":
                gname = value.args[0].name_hint
                launches[gname] = launches.get(gname, 0) + 1
    out = []
    for gname, count in launches.items():
        func = mod[gname]
        info = json.loads(str(func.attrs[OP_ATTR])) if func.attrs is not None and OP_ATTR in func.attrs else {}
        if info.get("op") != cls.OP or (grid in ("stem", "strided") and info["attrs"].get("groups", 1) != 1):
            continue
        if not kernel_index.is_stub(func):
            raise RuntimeError(f"{name}: {cls.OP} kernel {gname} has no kernel-index stub (unkeyed factory arguments)")
        call = kernel_index.call_of(func)
        if grid == "strided" and call.factory is not factory:  # a conv the plan runs as another kernel (a GEMM)
            continue
        if call.factory is not factory or call.args or call.stage is not None:
            raise RuntimeError(f"{name}: {gname} is not a {factory.__name__}(**kwargs) call: {call}")
        kwargs = dict(call.kwargs)
        if grid == "strided" and not is_strided(kwargs["geometry"]):
            continue
        config = _plain(kwargs.pop("config"))
        source = str(dict(call.attrs).get(SOURCE_ATTR, "default"))
        info.pop("node", None)  # the graph's variable name: differs between equal layers
        info.pop("choice", None)  # the strategy's choice: its config is the layer's
        label = {"stem": "stem", "strided": f"s{len(out)}"}.get(grid, f"dwpw{len(out)}")
        out.append(cls(name, label, _plain(kwargs), info, config, source, count, (name,)))
        if grid == "stem":  # the first dense conv only
            break
    return out


def plans_layers(models, onnx_dir: Path, profile, grid: str = "fused") -> list:
    """:func:`plan_layers` of each model's ``<name>.onnx`` in ``onnx_dir``, deduplicated:
    a kernel equal to an earlier one (all factory arguments but the config) adds its launches and
    model to that one's ``count`` and ``models``. Missing exports are logged and skipped."""
    seen: dict[str, layer_lists.PlanLayer] = {}
    for name in models:
        path = Path(onnx_dir) / f"{name}.onnx"
        if not path.exists():
            common.log(f"skip {name}: no {path}")
            continue
        t0 = time.perf_counter()
        found = plan_layers(path, name, profile, grid)
        new = 0
        for layer in found:
            key = json.dumps(layer.kernel, sort_keys=True)
            if key in seen:
                first = seen[key]
                first.count += layer.count
                first.models = first.models + tuple(m for m in layer.models if m not in first.models)
            else:
                seen[key], new = layer, new + 1
        common.log(f"{name} on {profile.name}: {sum(lay.count for lay in found)} {grid} launches, {len(found)} kernels "
                   f"({new} new) in {time.perf_counter() - t0:.0f} s")
    return list(seen.values())


def plan_kwargs(layer, config) -> dict:
    """The factory arguments of plan ``layer`` (its ``FACTORY``) with ``config``: as planned (scopes
    included), epilogues, the geometry and shapes rebuilt from the JSON."""
    from primfuncs.conv.geometry import ConvGeometry
    from primfuncs.conv.prologue import Prologue
    from primfuncs.epilogue import Epilogue

    def tuples(value):
        return tuple(value) if isinstance(value, list) else value

    def epilogue(value):
        return Epilogue(**{k: tuples(v) for k, v in value.items()})

    kwargs = {k: tuples(v) for k, v in layer.kernel.items()}
    if "epilogue" in kwargs:
        kwargs["epilogue"] = epilogue(kwargs["epilogue"])
    if "prologue" in kwargs:  # the fused kernel's: its depthwise conv's epilogue inside
        kwargs["prologue"] = Prologue(**{**kwargs["prologue"], "depthwise": epilogue(kwargs["prologue"]["depthwise"])})
    if "geometry" in kwargs:
        kwargs["geometry"] = ConvGeometry(**{k: tuples(v) for k, v in kwargs["geometry"].items()})
    return {**kwargs, "config": config}


def conv_config(cfg: dict):
    """A ``ConvConfig`` from its JSON (``_plain``'s or ``config_dict``'s; other keys ignored)."""
    from primfuncs.conv import ConvConfig

    names = {f.name for f in dataclasses.fields(ConvConfig)}
    return ConvConfig(**{k: tuple(v) if k == "work_group" else v for k, v in cfg.items() if k in names})


def fused_geometry(layer):
    """(depthwise, 1x1) ``ConvGeometry`` of fused ``layer``."""
    from primfuncs import conv

    k = layer.kernel
    return conv.depthwise_pointwise_geometry(k["data_shape"], k["dw_weight_shape"], k["pw_weight_shape"], tuple(k["strides"]),
                                             tuple(k["padding"]), tuple(k["dilation"]), k["groups"])


#: (oc_block, w_block) of the fused grid's configs without split_k: each in work groups of 64 items,
#: the first five also of 128, the first two also of 256, the first also of 32.
FUSED_TILES = ((4, 1), (2, 2), (4, 2), (2, 4), (1, 4), (2, 1), (1, 2), (1, 1), (4, 4))
#: (oc_block, w_block) of the fused grid's split_k configs; the first also with half the work items.
FUSED_SPLIT_TILES = ((4, 1), (4, 2), (2, 2), (2, 1), (1, 2))
#: The 1x1 conv's split_k values the fused grid tries (each at most the channel blocks of a group).
FUSED_SPLITS = (2, 4, 8, 16, 32)


def fused_grid(layer, profile):
    """(kind, ConvConfig) pairs of fused ``layer``: "default" (``defaults.default_config(pw,
    profile, prologue=True)``: what ``strategy.fusion.fuse_depthwise_pointwise`` plans without a
    record), "plan" (the plan's config), then "sweep": the 1x1 conv's tiles :data:`FUSED_TILES`
    without split_k; split_k :data:`FUSED_SPLITS` up to the channel blocks of a group for the
    tiles :data:`FUSED_SPLIT_TILES`, ``per_slice`` items as the "gpu" rule (``min(64, 256 /
    split)``, partial sums within 32 KiB). Work groups from ``fill_work_group`` (x first, at most
    16 along x, 64 / split along z). 17 configs without split_k, 6 per split_k: 47 at most (~40
    a layer; sized for the H200's compile: ~0.1-0.25 s a kernel)."""
    from primfuncs.lanes import LANES
    from tir_adreno.strategy import defaults

    _, pw = fused_geometry(layer)
    out = [("default", defaults.default_config(pw, profile, prologue=True)), ("plan", conv_config(layer.config))]

    def add(ocb, wb, threads, split=1):
        if threads >= 1:
            out.append(("sweep", defaults.split_config(pw, ocb, wb, split, threads)))

    for i, (ocb, wb) in enumerate(FUSED_TILES):
        for threads, first in ((64, 9), (128, 5), (256, 2), (32, 1)):
            if i < first:
                add(ocb, wb, threads)
    blocks = pw.cg // LANES  # input channel blocks of a group (fusable: block-aligned groups)
    for split in (s for s in FUSED_SPLITS if s <= blocks):
        for i, (ocb, wb) in enumerate(FUSED_SPLIT_TILES):
            per_slice = defaults.split_items(ocb, wb, split)
            add(ocb, wb, per_slice, split)
            if i == 0:
                add(ocb, wb, per_slice // 2, split)
    return out


# -- stem convs (--grid stem) -------------------------------------------------------------------
#: Register tiles (oc_block, w_block) of the stem grid's tiled configs (at most 4 outputs an item:
#: a stem's K is its 9 or 16 taps, so a big tile only cuts the work items).
STEM_TILES = ((1, 1), (1, 2), (1, 4), (2, 1), (2, 2), (4, 1))
#: Work-group rows (gy: channel-block rows) of the stem grid, each at most the output blocks of its tile.
STEM_ROWS = (1, 2, 4, 8)
#: Work-group sizes (gx x gy items) of the stem grid; 32 only where one group's rows hold every output block.
STEM_ITEMS = (32, 64, 128, 256)
#: Register tiles of the stem grid's direct-kernel configs (64-item groups), besides the profile's direct rule.
STEM_DIRECT_TILES = ((1, 1), (1, 2), (2, 2), (1, 4))


def stem_grid(layer, profile):
    """(kind, ConvConfig) pairs of stem ``layer`` (its kernel as planned: epilogue, plain input,
    placement): "default" (``defaults.default_config(geom, profile)``: what the strategy plans
    without a record; ``defaults.TILED_STEM`` where it launches ``profile.tiled_min_groups``
    work groups, else the direct rule), "plan" (the plan's config), "<kind>_default" (the profile
    class's direct rule: ``gpu_default`` on the H200), "direct" (:data:`STEM_DIRECT_TILES` in
    64-item groups), then "sweep": the tiled kernel with tiles :data:`STEM_TILES` (oc_block up to
    the output blocks), gy in :data:`STEM_ROWS` up to the output blocks of the tile, groups of
    :data:`STEM_ITEMS` items, k_chunk ``defaults.stem_k_chunk``, split_k 1, each launching at least one
    work group per compute unit (``profile.compute_units``). ~30-60 configs a layer (8 output
    channels: ~20)."""
    from primfuncs import conv
    from primfuncs.lanes import ceildiv
    from tir_adreno.strategy import defaults

    geom = plan_kwargs(layer, None)["geometry"]
    out = [("default", defaults.default_config(geom, profile)), ("plan", conv_config(layer.config)),
           (f"{profile.kind}_default", defaults.DIRECT_DEFAULTS[profile.kind](geom))]
    for ocb, wb in STEM_DIRECT_TILES:
        extents = conv.direct_extents(geom, ocb, wb)
        out.append(("direct", conv.ConvConfig(ocb, wb, conv.fill_work_group(extents, 64, max_x=16))))
    for ocb, wb in STEM_TILES:
        if ocb > geom.o4:
            continue
        for gy in (g for g in STEM_ROWS if g <= ceildiv(geom.o4, ocb)):
            for items in STEM_ITEMS:
                if items == 32 and gy * ocb < geom.o4:
                    continue
                wg = (items // gy, gy, 1)
                if defaults.tiled_work_groups(geom, ocb, wb, wg) >= profile.compute_units:
                    kc = defaults.stem_k_chunk(geom, ocb, wb, wg)
                    out.append(("sweep", conv.ConvConfig(ocb, wb, wg, tiled=True, k_chunk=kc)))
    return out


# -- dense strided convs past the stem (--grid strided) -----------------------------------------
#: Register tiles (oc_block, w_block) of the strided grid's direct configs without split_k (64-item
#: groups) and with it (``defaults.split_config``, split_k 4 and 16 where each slice keeps >= 2 blocks).
STRIDED_DIRECT_TILES = ((1, 1), (1, 2), (2, 2))
STRIDED_SPLIT_TILES = ((1, 1), (2, 2))
#: The strided grid's tiled configs besides ``defaults.TILED_CONFIGS`` and the stem's: entries of
#: :data:`TILED_GRID` (big tiles without split_k, small ones with K split 4 and 8 ways).
STRIDED_TILED = ((2, 4, 16, 8, 4, 1), (1, 2, 16, 8, 8, 1), (1, 1, 16, 4, 4, 4), (1, 1, 8, 4, 4, 8))


def strided_grid(layer, profile):
    """(kind, ConvConfig) pairs of strided ``layer`` (a 3x3/2 downsample as planned), sized for all
    of a catalogue's such layers in one device call (~17 a layer): "default"
    (``defaults.default_config(geom, profile)``: what the strategy plans without a record), "plan",
    "<kind>_default" (the profile class's direct rule), "direct" (:data:`STRIDED_DIRECT_TILES`,
    :data:`STRIDED_SPLIT_TILES`), then "sweep": the tiled kernel in ``defaults.TILED_CONFIGS``, the
    stem's two configs (``TILED_STEM``, ``TILED_STEM_WIDE``, all taps' K in the fewest steps) and
    :data:`STRIDED_TILED`."""
    from primfuncs import conv
    from tir_adreno.strategy import defaults

    geom = plan_kwargs(layer, None)["geometry"]
    out = [("default", defaults.default_config(geom, profile)), ("plan", conv_config(layer.config)),
           (f"{profile.kind}_default", defaults.DIRECT_DEFAULTS[profile.kind](geom))]
    for ocb, wb in STRIDED_DIRECT_TILES:
        out.append(("direct", conv.ConvConfig(ocb, wb, conv.fill_work_group(conv.direct_extents(geom, ocb, wb), 64, max_x=16))))
    for split in (s for s in (4, 16) if 2 * s <= geom.c4):
        for ocb, wb in STRIDED_SPLIT_TILES:
            out.append(("direct", defaults.split_config(geom, ocb, wb, split)))
    entries = [*defaults.TILED_CONFIGS, defaults.TILED_STEM, defaults.TILED_STEM_WIDE,
               *((ocb, wb, (gx, gy, 1), kc, split) for ocb, wb, gx, gy, kc, split in STRIDED_TILED)]
    out += [("sweep", defaults.tiled_config(geom, entry)) for entry in entries]
    return out


def config_dict(config, placement: str) -> dict:
    """The JSON of a case's config: ``placement`` "texture" or "buffer" (activations and weights)."""
    return {
        "oc_block": config.oc_block,
        "w_block": config.w_block,
        "work_group": list(config.work_group),
        "split_k": config.split_k,
        "flat": config.flat,
        "tiled": config.tiled,
        "k_chunk": config.k_chunk,
        "placement": placement,
    }


def label(cfg: dict) -> str:
    wg = "x".join(str(g) for g in cfg["work_group"])
    split = f" s{cfg['split_k']}" if cfg.get("split_k", 1) > 1 else ""
    flat = (" flat" if cfg.get("flat") else "") + (f" tiled c{cfg['k_chunk']}" if cfg.get("tiled") else "")
    # "scope": JSON written before placements (the refine grid's buffer variant)
    on_buffers = cfg.get("placement") == "buffer" or "scope" in cfg
    where = " buf" if on_buffers else " wbuf" if "weights" in cfg else ""
    return f"{cfg['oc_block']}x{cfg['w_block']} wg{wg}{split}{flat}{where}"


def case_primfunc(layer, config, scope: str, weight_scope):
    """The PrimFunc of one case: a conv layer's direct conv in ``scope`` / ``weight_scope``, a
    plan layer's kernel as planned (its factory, its own scopes)."""
    from primfuncs import conv
    from tir_adreno.strategy import conv as strategy

    if isinstance(layer, layer_lists.PlanLayer):
        return plan_factory(type(layer))(**plan_kwargs(layer, config))
    geom = conv.conv2d_geometry(layer.data_shape, layer.weight_shape, layer.strides, layer.padding,
                                layer.dilation, layer.groups)
    return strategy.direct_conv2d(geom, config=config, scope=scope, weight_scope=weight_scope)


def build_all(selected, grid: str, out_dir: Path | None, placement: str = "texture", profile=None):
    """Build every (layer, config) kernel, tensors placed by ``placement`` ("texture": NCHW4c
    images, OIHW4o weight images; "buffer": both in buffers) unless a named kind says
    otherwise (fused layers: as planned); ``profile``: the fused grid's device profile;
    returns (meta, {kernel id: KernelModule})."""
    import tvm

    from primfuncs._common import BUFFER, TEXTURE
    from tir_adreno.codegen import build

    cases, modules, by_source = [], {}, {}
    for layer in selected:
        t0 = time.perf_counter()
        seen = {}
        for kind, config in candidates(layer, grid, placement, profile):
            where = {"variant_buf": "buffer", "texture_default_gpu": "texture", "texture_tiled": "texture"}.get(kind, placement)
            if grid in layer_lists.PLAN_LAYERS:
                where = layer.placement
            cfg = config_dict(config, where)
            scope, weight_scope = (BUFFER, BUFFER) if where == "buffer" else (TEXTURE, None)
            if kind == "variant_wbuf":  # texture activations, weights in a buffer
                weight_scope = cfg["weights"] = BUFFER
            key = json.dumps(cfg, sort_keys=True)
            if key in seen:  # the same config (a default equal to a swept one): one case, several kinds
                seen[key]["kinds"].append(kind)
                continue
            case = {"layer": layer.key, "kinds": [kind], "config": cfg, "label": label(cfg)}
            seen[key] = case
            build_case(case, lambda: case_primfunc(layer, config, scope, weight_scope), by_source, modules, layer.key)
            cases.append(case)
        common.log(f"built {layer.key}: {len(seen)} configs in {time.perf_counter() - t0:.0f} s")
    meta = {
        "tvm": tvm.__version__,
        "grid": grid,
        "placement": "plan" if grid in layer_lists.PLAN_LAYERS else placement,  # fused, stem: each layer's (layers[i].kernel)
        "layers": [layer.to_dict() for layer in selected],
        "cases": cases,
    }
    if grid in layer_lists.PLAN_LAYERS:
        meta["target"] = profile.name
    if out_dir is not None:
        save_kernels(out_dir, by_source, meta)
    return meta, modules


def build_case(case: dict, make, by_source: dict, modules: dict, what: str) -> None:
    """Build ``make()`` (a PrimFunc) for ``case`` (of ``what``: a layer, a shape): its kernel id and
    function into ``case``, the module into ``modules`` and its JSON into ``by_source`` (keyed by
    its hash: identical kernels saved once); a failure recorded in ``case["error"]``, never dropped."""
    from tir_adreno.codegen import build

    try:
        module = build.build_cached(make())
        text = module.to_json()
        kid = hashlib.sha1(text.encode()).hexdigest()[:16]
        by_source.setdefault(kid, text)
        modules[kid] = module
        (function,) = module.functions
        case.update(kernel=kid, function=function)
    except Exception as err:  # recorded and reported; never dropped silently
        case["error"] = f"build: {type(err).__name__}: {err}"
        common.log(f"  build failed {what} {case['label']}: {case['error']}")


def save_kernels(out_dir: Path, by_source: dict, meta: dict) -> None:
    """A ``--build-only`` directory: the kernels (``KERNELS_FILE``) and the cases file (``meta``); :func:`load_cases` reads it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with gzip.open(out_dir / KERNELS_FILE, "wt") as f:
        json.dump(by_source, f)
    common.write_cases(out_dir, meta)


def load_cases(src: Path):
    meta = common.read_cases(src)
    with gzip.open(src / KERNELS_FILE, "rt") as f:
        texts = json.load(f)
    return meta, {kid: KernelModule.from_json(text) for kid, text in texts.items()}


# ---------------------------------------------------------------------------------------------
# run (no TVM)
def layer_inputs(layer, rng) -> tuple[list, np.ndarray, int]:
    """(two sets of the kernels' inputs, blocked as they read them, in parameter order; the float64
    reference output of the first, NCHW; its channels). A conv layer: X and W; a plan layer: the
    inputs ``tools.workbench.reference_case`` makes of the plan's op info (fused: X, W_dw [Bias_dw]
    W [Bias] [Residual]; stem: X as planned (plain NCHW), W [Bias])."""
    if isinstance(layer, layer_lists.PlanLayer):
        sets = [reference_case(layer.info, rng) for _ in range(2)]
        return [inputs for inputs, _, _ in sets], sets[0][1], sets[0][2]
    raw = [
        (rng.standard_normal(layer.data_shape).astype(np.float32), rng.standard_normal(layer.weight_shape).astype(np.float32))
        for _ in range(2)
    ]
    return [[pack_nchw4c(x), pack_oihw4o(w)] for x, w in raw], reference_conv2d(*raw[0], layer), layer.out_shape[1]


def as_reference(y: np.ndarray, ref: np.ndarray, channels) -> np.ndarray:
    """A kernel's output ``y`` in its reference's form: as it is where the reference has its shape
    (a plan layer's plain output, ``out_layout`` "NHWC" or "NCHW": ``reference_case`` gives it so),
    else the blocked NCHW4c unpacked to NCHW."""
    return y if y.shape == ref.shape else unpack_nchw4c(y, channels)


def run_layer(dev, layer, cases, modules, budget_s: float, seed: int, deadline: float, verbose=False) -> list[dict]:
    rng = np.random.default_rng(seed)
    inputs, ref, channels = layer_inputs(layer, rng)
    uploaded = {}  # input specs -> input sets, shared by the layer's kernels
    outs = {}
    results = []
    for case in cases:
        res = {k: case[k] for k in ("kinds", "config", "label")}
        if "error" in case:
            results.append({**res, "error": case["error"]})
            continue
        if time.perf_counter() > deadline:
            results.append({**res, "error": "skipped: time limit"})
            continue
        t0 = time.perf_counter()
        try:
            module = modules[case["kernel"]]
            function = case["function"]
            specs = module[function].params
            if len(specs) != len(inputs[0]) + 1:
                raise RuntimeError(f"expected {len(inputs[0])} inputs and the output, got {[p.name for p in specs]}")
            for spec in specs:
                if is_texture_scope(spec.scope) and not dev.limits.fits(spec.shape, spec.scope):
                    raise RuntimeError(f"{spec.name} {spec.shape} does not fit {dev.name}'s images")
            key = tuple(specs[:-1])
            if key not in uploaded:
                uploaded[key] = [
                    [dev.empty(spec).upload(np.ascontiguousarray(a, spec.dtype)) for spec, a in zip(key, arrays)]
                    for arrays in inputs
                ]
            sets = uploaded[key]
            if specs[-1] not in outs:
                outs[specs[-1]] = dev.empty(specs[-1])
            out = outs[specs[-1]].poison()
            t_load = time.perf_counter()
            loaded = dev.load(module)
            res["compile_s"] = round(time.perf_counter() - t_load, 3)
            first_s = loaded(function, *sets[0], out)
            err = relative_error(as_reference(out.numpy(), ref, channels), ref)
            knobs = (
                dict(warmup=1, min_repeat=3, max_repeat=20, budget_s=budget_s)
                if first_s * 5 > budget_s
                else dict(warmup=2, min_repeat=10, max_repeat=100, budget_s=budget_s)
            )
            median, samples = common.median_time(lambda s: loaded(function, *s, out), sets, **knobs)
            res.update(
                time_s=median, samples=len(samples), rel_err=err, ok=err <= RTOL, gflops=layer.flops / median * 1e-9
            )
        except Exception as err:
            res["error"] = f"run: {type(err).__name__}: {err}"
            common.log(traceback.format_exc())
        res["wall_s"] = round(time.perf_counter() - t0, 3)
        results.append(res)
        if verbose:
            common.log(
                f"  {layer.key} {res['label']}: "
                + (f"{res['gflops']:.0f} GF/s" if "gflops" in res else res.get("error", "?")[:100])
                + f" (load {res.get('compile_s', 0):.2f} s, wall {res['wall_s']:.2f} s)"
            )
    return results


def precompile(dev, sources, jobs: int, deadline: float = float("inf")) -> int:
    """Build the programs in ``jobs`` threads (pyopencl releases the GIL while the driver
    compiles); :meth:`Device.load` then reads the cached binaries. Failures show up there. None is
    started after ``deadline`` (``--time-limit``: the cases then run out of time and are recorded
    as skipped, the JSON written, not a call cut off before any layer ran); returns how many started."""
    from concurrent.futures import ThreadPoolExecutor

    t0, started = time.perf_counter(), []

    def one(source):
        if time.perf_counter() > deadline:
            return
        started.append(source)
        try:
            dev.build_program(source)
        except Exception:  # reported by the case that loads it
            pass

    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(one, sorted(sources)))
    common.log(f"compiled {len(started)} of {len(sources)} programs in {time.perf_counter() - t0:.1f} s ({jobs} threads)")
    return len(started)


# ---------------------------------------------------------------------------------------------
# report
def _good(r):
    return r.get("ok") and "time_s" in r


def layer_summary(row) -> dict:
    good = [r for r in row["results"] if _good(r)]
    s = {"kernels": len(row["results"]), "ok": len(good)}
    s["wrong"] = [r["label"] for r in row["results"] if "ok" in r and not r["ok"]]
    s["errors"] = [r["label"] for r in row["results"] if "error" in r]
    if good:
        best = min(good, key=lambda r: r["time_s"])
        s["best"] = {"label": best["label"], "config": best["config"], "gflops": best["gflops"], "time_s": best["time_s"]}
    for r in row["results"]:
        for kind in r["kinds"]:
            if kind != "sweep":
                s[kind] = {"label": r["label"], "gflops": r.get("gflops"), "time_s": r.get("time_s"), "ok": r.get("ok")}
                if kind in ("default", "plan"):  # the fused grid's: the rule table needs their configs
                    s[kind]["config"] = r["config"]
    if good and s.get("default", {}).get("time_s"):
        s["default_over_best"] = s["default"]["time_s"] / s["best"]["time_s"]
    return s


def print_tops(rows, top: int, value) -> None:
    """Each layer's ``top`` configs (``value(result)`` after the label), then the wrong or failed kernels."""
    for row in rows:
        good = sorted((r for r in row["results"] if _good(r)), key=lambda r: r["time_s"])
        top_s = ", ".join(f"{r['label']} {value(r)}" for r in good[:top])
        print(f"{row['key']:34s} top: {top_s}")
    bad = [(row["key"], lab) for row in rows for lab in row["summary"]["wrong"] + row["summary"]["errors"]]
    if bad:
        print(f"\n{len(bad)} wrong or failed kernels:")
        for key, lab in bad:
            print(f"  {key}: {lab}")


def _us(seconds) -> str:
    return common.fmt(seconds and seconds * 1e6, ".1f")


#: A config "near the best" of its layer (the rule table's count): within this factor of its time.
NEAR_BEST = 1.05


#: Per plan grid: the report's title, the layer column and what the saved time is of.
PLAN_REPORTS = {"fused": ("fused depthwise -> 1x1", "fused convs", "fused-kernel"), "stem": ("stem conv", "conv", "stem"),
                "strided": ("strided dense conv", "conv", "strided-conv")}


def print_plan_report(rows, device_name, grid: str, top: int = 3) -> dict:
    """``--grid fused|stem|strided``: per layer the best config, the default's time and default / best; the
    top configs and failures; the geomean of default / best (weighted by launches) and the time the
    best configs would save per inference; printed last, the grid's table for deriving a rule
    (:func:`fused_rule_table`, :func:`stem_rule_table`)."""
    title, what, saved_of = PLAN_REPORTS[grid]
    headers = ["layer", what, "launches", "ok", "best config", "best us", "default config", "default us", "default/best"]
    table, pairs, saved = [], [], 0.0
    for row in rows:
        s, layer = row["summary"], layer_lists.layer_from_dict(row["layer"])
        best, default = s.get("best"), s.get("default", {})
        ratio = best and default.get("time_s") and default["time_s"] / best["time_s"]
        if ratio:
            pairs.append((ratio, layer.count))
            saved += layer.count * (default["time_s"] - best["time_s"])
        table.append([row["key"], layer.description, layer.count, f"{s['ok']}/{s['kernels']}", best["label"] if best else "-",
                      _us(best and best["time_s"]), default.get("label", "-") + ("" if default.get("ok") in (None, True) else "!"),
                      _us(default.get("time_s")), common.fmt(ratio)])
    print()
    common.print_table(headers, table, title=f"{title} config sweep on {device_name} (fp32; ! = wrong)")
    print()
    print_tops(rows, top, lambda r: _us(r["time_s"]) + " us")
    geo = common.weighted_geomean(pairs)
    print(f"\ngeomean default/best (weighted by launches): {common.fmt(geo)}; best configs save "
          f"{saved * 1e6:.1f} us of {saved_of} time per inference over all launches")
    headers, table, title = (fused_rule_table if grid == "fused" else stem_rule_table)(rows)
    print()
    common.print_table(headers, table, title=title)
    return {"default_over_best": geo, "saved_us": saved * 1e6}


def fused_rule_table(rows):
    """(headers, rows, title) of the fused grid's rule table: each layer's shape (channels, groups,
    channel blocks per group, output map, window, work items of the default 4x1 tile without
    split_k), the default and the best config, the best of the default's tile (what work group and
    split_k alone give), how many configs lie within :data:`NEAR_BEST`."""
    headers = ["layer", "C", "O", "g", "blk/g", "map", "k/s", "items 4x1", "default", "best", "def/best",
               "best at def tile", "def/that", f"<= {NEAR_BEST}x best"]
    table = []
    for row in rows:
        s, layer = row["summary"], layer_lists.layer_from_dict(row["layer"])
        (n, c, _, _), (o, cg, _, _) = layer.info["inputs"][0], layer.info["weight"]
        _, _, kh, _ = layer.info["depthwise"]["weight"]
        _, _, oh, ow = layer.out_shape
        default, best = s.get("default", {}), s.get("best")
        good = [r for r in row["results"] if _good(r)]
        dcfg = default.get("config") or {}
        same_tile = [r for r in good if dcfg and (r["config"]["oc_block"], r["config"]["w_block"]) == (dcfg["oc_block"], dcfg["w_block"])]
        tile_best = min(same_tile, key=lambda r: r["time_s"]) if same_tile else None
        near = sum(r["time_s"] <= NEAR_BEST * best["time_s"] for r in good) if best else 0
        dt = default.get("time_s")
        table.append([row["key"], c, o, layer.info["attrs"].get("groups", 1), cg // 4, f"{oh}x{ow}",
                      f"{kh}/{layer.info['attrs']['strides'][0]}", n * oh * ow * -(-(o // 4) // 4),
                      default.get("label", "-"), best["label"] if best else "-", common.fmt(best and dt and dt / best["time_s"]),
                      tile_best["label"] if tile_best else "-", common.fmt(tile_best and dt and dt / tile_best["time_s"]), near])
    return headers, table, ("for a rule: layer shape, default vs best (blk/g: input channel blocks per 1x1 group; "
                            "items 4x1: work items of the 4x1 tile without split_k)")


def work_groups(cfg: dict, n: int, o4: int, oh: int, ow: int) -> int:
    """Work groups a config (its JSON) launches for an output of ``o4`` channel blocks x ``oh`` x
    ``ow`` (batch ``n``): the tiled kernel's (``defaults.tiled_work_groups``' count), the flat
    grid's, or the direct kernel's (each group extent shrunk to the grid); split_k not counted."""
    ocb, wb, (gx, gy, gz) = cfg["oc_block"], cfg["w_block"], cfg["work_group"]
    if cfg.get("tiled"):
        return n * -(-oh * ow // (gx * wb)) * -(-o4 // (gy * ocb))
    extents = (n * -(-ow // wb), oh, -(-o4 // ocb))
    if cfg.get("flat"):
        return -(-extents[0] * extents[1] * extents[2] // gx)
    return int(np.prod([-(-e // min(g, e)) for e, g in zip(extents, (gx, gy, gz))]))


def stem_rule_table(rows):
    """(headers, rows, title) of the stem and strided grids' rule table: each layer's shape (input
    and output channels, output blocks, output map, window / stride), the default, the best, the
    best tiled and the best direct config, each with the work groups it launches, and how many
    configs lie within :data:`NEAR_BEST`."""
    headers = ["layer", "C", "O", "blk", "map", "k/s", "default", "wgs", "best", "wgs", "def/best", "best tiled", "wgs",
               "best direct", "wgs", "def/direct", f"<= {NEAR_BEST}x best"]
    table = []
    for row in rows:
        s, layer = row["summary"], layer_lists.layer_from_dict(row["layer"])
        (n, o, oh, ow), (_, _, kh, _) = layer.out_shape, layer.info["weight"]
        o4 = -(-o // 4)
        default, best = s.get("default", {}), s.get("best")
        good = sorted((r for r in row["results"] if _good(r)), key=lambda r: r["time_s"])
        tiled = next((r for r in good if r["config"].get("tiled")), None)
        direct = next((r for r in good if not r["config"].get("tiled")), None)
        near = sum(r["time_s"] <= NEAR_BEST * best["time_s"] for r in good) if best else 0
        dt = default.get("time_s")

        def groups(r):
            return work_groups(r["config"], n, o4, oh, ow) if r and r.get("config") else "-"

        table.append([row["key"], layer.info["inputs"][0][1], o, o4, f"{oh}x{ow}", f"{kh}/{layer.info['attrs']['strides'][0]}",
                      default.get("label", "-"), groups(default), best["label"] if best else "-", groups(best),
                      common.fmt(best and dt and dt / best["time_s"]), tiled["label"] if tiled else "-", groups(tiled),
                      direct["label"] if direct else "-", groups(direct), common.fmt(direct and dt and dt / direct["time_s"]), near])
    return headers, table, "for a rule: stem shape, default vs best (wgs: work groups launched; blk: output channel blocks)"


def print_report(rows, device_name, placement: str = "texture", top: int = 3):
    """The table (GF/s of the best and of the named kinds), top configs, failures, geomeans over
    the baseline kind: ``old_default`` (textures) or the "gpu" default on buffers (buffers)."""
    if placement == "buffer":
        base, kinds = "default_gpu", ["default_gpu", "texture_default_gpu"]
    else:
        base, kinds = "old_default", ["old_default"] + [f"default_{k}" for k in DEFAULT_KINDS]
    headers = ["layer", "conv", "ok", "best config", "best GF/s"]
    headers += [f"{k.replace('texture_default_', 'tex def ').replace('default_', 'def ')} GF/s" for k in kinds]
    headers += [f"best/{base.replace('default_', 'def ')}"]
    table = []
    for row in rows:
        s = row["summary"]
        layer = layer_lists.ConvLayer.from_dict(row["layer"])
        best = s.get("best")
        cells = [row["key"], layer.description, f"{s['ok']}/{s['kernels']}"]
        cells += [best["label"] if best else "-", common.fmt(best and best["gflops"], ".0f")]
        for k in kinds:
            d = s.get(k)
            cells.append(common.fmt(d and d.get("gflops"), ".0f") + ("" if not d or d.get("ok") in (None, True) else "!"))
        old = s.get(base, {}).get("time_s")
        cells.append(common.fmt(best and old and old / best["time_s"]))
        table.append(cells)
    print()
    common.print_table(headers, table, title=f"conv config sweep on {device_name} ({placement} kernels, fp32; ! = wrong)")
    print()
    print_tops(rows, top, lambda r: f"{r['gflops']:.0f}")
    geo = {}
    for k in ["best", *kinds]:
        pairs = [
            (row["summary"][base]["time_s"] / row["summary"][k]["time_s"], 1)
            for row in rows
            if row["summary"].get(k, {}).get("time_s") and row["summary"].get(base, {}).get("time_s")
        ]
        geo[k] = common.weighted_geomean(pairs)
    print(f"\ngeomean speed-up over {base}: " + ", ".join(f"{k} {common.fmt(v)}" for k, v in geo.items()))
    return geo


# ---------------------------------------------------------------------------------------------
def is_pointwise(layer) -> bool:
    """A dense 1x1 stride-1 conv (ResNet-50's reduce/expand, MobileNetV2's expand/project)."""
    return layer.groups == 1 and layer.weight_shape[2:] == (1, 1) and layer.strides == (1, 1)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_device_argument(p)
    common.add_split_arguments(p)
    p.add_argument(
        "--grid", choices=("gpu", "cpu", "defaults", "refine", "tiled", *layer_lists.PLAN_LAYERS), default="gpu",
        help="config grid (default gpu; defaults: old and gpu default; refine: around the gpu default; "
        "fused: the fused depthwise -> 1x1 kernels of the --target plans of --models; stem: their first dense convs; strided: their dense convs past the stem with a window and a stride > 1)",
    )
    common.add_target_argument(p)
    p.add_argument("--onnx-dir", type=Path, default=None, help="--grid fused|stem|strided: folder of the <model>.onnx exports")
    p.add_argument("--models", default=",".join(PLAN_MODELS),
                   help=f"--grid fused|stem|strided: comma-separated exports whose plans give the layers (default {','.join(PLAN_MODELS)})")
    p.add_argument(
        "--placement", choices=("texture", "buffer"), default="texture",
        help="where the swept kernels keep activations and weights (default texture; buffer: both in buffers, "
        "its own grid with --grid gpu; with --from the build's placement is used)",
    )
    p.add_argument(
        "--layers", default=None,
        help="comma-separated layer keys, all, or pointwise (the non-depthwise 1x1 stride-1 convs); "
        "default: the sweep's subset (--grid fused|stem|strided: all its layers, keys <model>.dwpw<i> | <model>.stem | <model>.s<i>; --from: all built)",
    )
    p.add_argument("--budget", type=float, default=0.05, help="seconds of timing per kernel (default 0.05)")
    p.add_argument("--time-limit", type=float, default=None, help="stop starting kernels after this many seconds")
    p.add_argument("--jobs", type=int, default=1, help="threads compiling OpenCL programs up front (default 1: none)")
    p.add_argument("--verbose", action="store_true", help="log every kernel (compile and wall time)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    args.keys = None if args.layers is None else tuple(k.strip() for k in args.layers.split(",") if k.strip())
    args.selected = None  # --grid fused|stem|strided and --from: chosen in main (from the plans, from the build)
    planned = args.grid in layer_lists.PLAN_LAYERS
    if planned and not args.src and args.onnx_dir is None:
        p.error(f"--grid {args.grid} needs --onnx-dir (the exports whose plans give the layers)")
    if not planned and not args.src:
        known = {layer.key: layer for layer in layer_lists.layers(tuple(layer_lists.MODELS))}
        args.selected, bad = select_layers(known, args.keys or SWEEP_LAYERS)
        if bad:
            p.error(f"--layers: unknown layer key(s) {bad}")
    return args


def select_layers(available: dict, keys) -> tuple[list, list]:
    """(the layers of ``available`` (key -> layer) that ``keys`` names, the keys it lacks): keys
    ``("all",)``, ``("pointwise",)`` (its 1x1 stride-1 conv layers) or layer keys."""
    if keys == ("all",):
        return list(available.values()), []
    if keys == ("pointwise",):
        return [lay for lay in available.values() if isinstance(lay, layer_lists.ConvLayer) and is_pointwise(lay)], []
    return [available[k] for k in keys if k in available], [k for k in keys if k not in available]


def result_name(meta) -> str:
    """conv_configs (the full grid), conv_configs_cpu, conv_configs_refine; "_buffer" appended
    for the buffer placement (conv_configs_buffer, conv_configs_cpu_buffer, ...)."""
    grid = meta.get("grid", "gpu")
    name = NAME if grid == "gpu" else f"{NAME}_{grid}"
    return name + ("_buffer" if meta.get("placement") == "buffer" else "")


def main(argv=None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    profile = None
    if args.grid in layer_lists.PLAN_LAYERS and not args.src:  # the layers: the plans' kernels
        profile = common.target_profile(args, build_only=bool(args.build_only))
        found = plans_layers([m.strip() for m in args.models.split(",") if m.strip()], args.onnx_dir, profile, args.grid)
        args.selected, bad = select_layers({layer.key: layer for layer in found}, args.keys or ("all",))
        if bad:
            common.log(f"--layers: no {args.grid} layer of the plans: {bad} (there: {[layer.key for layer in found]})")
            return 2
        common.log(f"{len(args.selected)} {args.grid} layers ({sum(lay.count for lay in args.selected)} launches) "
                   f"on {profile.name}")
    if args.build_only:
        meta, _ = build_all(args.selected, args.grid, args.build_only, args.placement, profile)
        failed = [c for c in meta["cases"] if "error" in c]
        common.log(
            f"wrote {len(meta['cases']) - len(failed)} kernels to {args.build_only} "
            f"({len(failed)} failed) in {time.perf_counter() - started:.0f} s"
        )
        return 1 if failed else 0

    from tir_adreno.runtime import opencl as runtime

    dev = runtime.get_device(args.device)
    common.log(f"device: {dev.name}")
    if args.src:
        meta, modules = load_cases(args.src)
        built = {layer.key: layer for layer in map(layer_lists.layer_from_dict, meta["layers"])}
        args.selected, missing = select_layers(built, args.keys or ("all",))
        if missing:
            common.log(f"not in {args.src}: {missing} (rebuild with --build-only)")
    else:
        meta, modules = build_all(args.selected, args.grid, None, args.placement, profile)
    deadline = started + args.time_limit if args.time_limit else float("inf")
    if args.jobs > 1:  # compile the OpenCL programs in parallel first (binaries land in the disk cache)
        keys = {layer.key for layer in args.selected}  # the selected layers' kernels only (--layers of a bundle)
        precompile(dev, {modules[c["kernel"]].source for c in meta["cases"] if c["layer"] in keys and "kernel" in c}, args.jobs,
                   deadline)
    build_s = time.perf_counter() - started
    cl = dev.cl_device
    payload = {
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "selected"},
        "rtol": RTOL,
        "tvm": meta.get("tvm"),
        "grid": meta.get("grid"),
        "placement": meta.get("placement", "texture"),
        "target": meta.get("target"),
        "device_info": {
            "name": dev.name,
            "version": cl.version.strip(),
            "driver": cl.driver_version.strip(),
            "compute_units": int(cl.max_compute_units),
            "max_work_group_size": int(cl.max_work_group_size),
            "local_mem_size": int(cl.local_mem_size),
        },
        "timing": "median OpenCL event time after warm-up, 2 input sets rotated",
        "build_s": round(build_s, 1),
        "layers": [],
    }
    rows = payload["layers"]
    for layer in args.selected:
        cases = [c for c in meta["cases"] if c["layer"] == layer.key]
        t0 = time.perf_counter()
        results = run_layer(dev, layer, cases, modules, args.budget, args.seed, deadline, args.verbose)
        row = {"layer": layer.to_dict(), "key": layer.key, "flops": layer.flops, "results": results}
        row["summary"] = layer_summary(row)
        rows.append(row)
        best = row["summary"].get("best")
        common.log(
            f"{layer.key:34s} {len(results)} kernels {time.perf_counter() - t0:.0f} s; best "
            + (f"{best['label']} {best['gflops']:.0f} GF/s" if best else "-")
        )
        payload["run_s"] = round(time.perf_counter() - started - build_s, 1)
        path = common.write_json(result_name(meta), dev.name, payload, args.results_dir)  # after every layer: partial results survive
    placement = payload["placement"]
    if payload["grid"] in layer_lists.PLAN_LAYERS:
        payload[payload["grid"]] = print_plan_report(rows, dev.name, payload["grid"])
    else:
        base = "default_gpu" if placement == "buffer" else "old_default"
        payload[f"geomean_speedup_over_{base}"] = print_report(rows, dev.name, placement)
    path = common.write_json(result_name(meta), dev.name, payload, args.results_dir)
    common.log(f"build {build_s:.0f} s, run {payload.get('run_s', 0):.0f} s; wrote {path}")
    bad = [1 for row in rows for r in row["results"] if "error" in r or not r.get("ok", False)]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
