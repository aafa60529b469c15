"""The distinct conv2d layers of ResNet-50 and MobileNetV2 (batch 1, 224x224, fp32).

Written out by hand from torchvision's definitions (``resnet50``: Bottleneck
v1.5, stride on the 3x3 conv; ``mobilenet_v2``: width 1.0, inverted residual
table t/c/n/s = 1/16/1/1, 6/24/2/2, 6/32/3/2, 6/64/4/2, 6/96/3/1, 6/160/3/2,
6/320/1/1). Layers of identical shape and attributes are listed once with
``count`` = how often they occur (e.g. ResNet-50's first downsample equals
layer1's 64->256 expansion). NCHW data, OIHW weight, padding symmetric
(pad_h, pad_w), dilation 1. No TVM import: the benchmark's run-only path uses it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ConvLayer:
    model: str
    name: str
    data_shape: tuple[int, int, int, int]  # N, C, H, W
    weight_shape: tuple[int, int, int, int]  # O, C/groups, KH, KW
    strides: tuple[int, int]
    padding: tuple[int, int]  # (pad_h, pad_w), both sides
    groups: int = 1
    count: int = 1
    dilation: tuple[int, int] = (1, 1)

    @property
    def key(self) -> str:
        return f"{self.model}.{self.name}"

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        n, _, h, w = self.data_shape
        o, _, kh, kw = self.weight_shape
        (sh, sw), (ph, pw), (dh, dw) = self.strides, self.padding, self.dilation
        return (n, o, (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1)

    @property
    def flops(self) -> int:
        """2 * N * O * Hout * Wout * (C/groups) * KH * KW."""
        n, o, oh, ow = self.out_shape
        _, ci, kh, kw = self.weight_shape
        return 2 * n * o * oh * ow * ci * kh * kw

    @property
    def depthwise(self) -> bool:
        return self.groups > 1 and self.groups == self.data_shape[1] == self.weight_shape[0]

    @property
    def description(self) -> str:
        _, c, h, w = self.data_shape
        o, _, kh, kw = self.weight_shape
        g = f" g{self.groups}" if self.groups > 1 else ""
        return f"{c}->{o} {kh}x{kw}/{self.strides[0]} @{h}x{w}{g}"

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "name": self.name,
            "data_shape": list(self.data_shape),
            "weight_shape": list(self.weight_shape),
            "strides": list(self.strides),
            "padding": list(self.padding),
            "dilation": list(self.dilation),
            "groups": self.groups,
            "count": self.count,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "ConvLayer":
        return cls(
            d["model"],
            d["name"],
            tuple(d["data_shape"]),
            tuple(d["weight_shape"]),
            tuple(d["strides"]),
            tuple(d["padding"]),
            d["groups"],
            d["count"],
            tuple(d["dilation"]),
        )


@dataclass
class PlanLayer:
    """A kernel as a model's plan calls it (taken from the plan by ``benchmarks/conv_configs.py
    --grid fused|stem``): ``kernel``: the keyword arguments of the factory :attr:`FACTORY` but
    ``config``, as JSON (dataclasses as dicts; shapes, scopes, dtype as planned); ``info``: the
    plan's op info of the kernel (what ``tir_adreno.tools.workbench.reference_case`` builds the
    float64 reference from); ``config``: the planned ``ConvConfig`` as a dict and its ``source``
    ("default" or "records"); ``count`` launches over ``models``. Subclasses name the op
    (:attr:`OP`, the op info's "op"), the factory and the ``kind`` of their JSON (:attr:`KIND`,
    also the sweep's ``--grid``)."""

    KIND = ""
    OP = ""
    FACTORY = ""  # "module:function"

    model: str
    name: str
    kernel: dict
    info: dict
    config: dict
    source: str = "default"
    count: int = 1
    models: tuple = ()

    @property
    def key(self) -> str:
        return f"{self.model}.{self.name}"

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        return tuple(self.info["output"])

    @property
    def placement(self) -> str:
        """Where its activations live: "texture" or "buffer" (the plan's input scope)."""
        return "buffer" if self.kernel["scope"] == "global" else "texture"

    def to_dict(self) -> dict:
        return {"kind": self.KIND, "model": self.model, "name": self.name, "kernel": self.kernel, "info": self.info,
                "config": self.config, "source": self.source, "count": self.count, "models": list(self.models)}

    @classmethod
    def from_dict(cls, d: dict) -> "PlanLayer":
        return cls(d["model"], d["name"], d["kernel"], d["info"], d["config"], d["source"], d["count"], tuple(d["models"]))


class FusedLayer(PlanLayer):
    """A depthwise conv and the 1x1 conv reading it, run as one kernel
    (``primfuncs.conv.depthwise_pointwise_nchw4c``) as a model's plan has it (``--grid fused``)."""

    KIND = "fused"
    OP = "depthwise_pointwise"
    FACTORY = "primfuncs.conv:depthwise_pointwise_nchw4c"

    @property
    def flops(self) -> int:
        """2 x the multiply-adds of the two convs (without the depthwise work a tile recomputes)."""
        (n, c, _, _), (o, cg, _, _) = self.info["inputs"][0], self.info["weight"]
        _, _, kh, kw = self.info["depthwise"]["weight"]
        _, _, oh, ow = self.out_shape
        return 2 * n * oh * ow * (c * kh * kw + o * cg)

    @property
    def description(self) -> str:
        """"dw3x3/2 32@112x112 hardswish -> 16 g1 +res buf" (the 1x1's bias and activation after its width)."""
        (_, c, h, w), (o, _, _, _) = self.info["inputs"][0], self.info["weight"]
        _, _, kh, kw = self.info["depthwise"]["weight"]
        attrs, dw_epi, epi = self.info["attrs"], self.info["depthwise"]["epilogue"], self.info["epilogue"]
        act = f" {epi['activation']}" if epi["activation"] else ""
        res = " +res" if epi["residual"] else ""
        return (f"dw{kh}x{kw}/{attrs['strides'][0]} {c}@{h}x{w} {dw_epi['activation'] or 'linear'} -> {o} "
                f"g{attrs.get('groups', 1)}{act}{res} {self.placement[:3]}")


class StemLayer(PlanLayer):
    """A model's first dense conv (its stem: 3 input channels) as the plan runs it
    (``tir_adreno.strategy.conv.direct_conv2d``: the direct or the tiled kernel, the plain NCHW
    input read directly; ``--grid stem``)."""

    KIND = "stem"
    OP = "nn.conv2d"
    FACTORY = "tir_adreno.strategy.conv:direct_conv2d"

    @property
    def flops(self) -> int:
        """2 x N x O x Hout x Wout x C x KH x KW."""
        (n, c, _, _), (o, _, kh, kw) = self.info["inputs"][0], self.info["weight"]
        _, _, oh, ow = self.out_shape
        return 2 * n * o * oh * ow * c * kh * kw

    @property
    def description(self) -> str:
        """"3->8 3x3/2 @224x224 hardswish buf"."""
        (_, c, h, w), (o, _, kh, kw) = self.info["inputs"][0], self.info["weight"]
        act = self.info["epilogue"]["activation"] or ("bias" if self.info["epilogue"]["bias"] else "linear")
        return f"{c}->{o} {kh}x{kw}/{self.info['attrs']['strides'][0]} @{h}x{w} {act} {self.placement[:3]}"


class StridedLayer(StemLayer):
    """A dense conv past the stem with a window and a stride > 1 (a 3x3/2 downsample; not a 1x1 nor
    a patchify conv, which run tiled as 1x1s) as the plan runs it (``--grid strided``)."""

    KIND = "strided"


#: The :class:`PlanLayer` classes by their ``kind``.
PLAN_LAYERS = {cls.KIND: cls for cls in (FusedLayer, StemLayer, StridedLayer)}


def layer_from_dict(d: dict):
    """A :class:`ConvLayer` or a :class:`PlanLayer` (``"kind"``: :data:`PLAN_LAYERS`) from its ``to_dict``."""
    cls = PLAN_LAYERS.get(d.get("kind"))
    return cls.from_dict(d) if cls else ConvLayer.from_dict(d)


def _conv(model, name, c, hw, o, k, stride=1, groups=1, count=1):
    """A square conv of a square input: ``c`` -> ``o`` channels, ``k`` x ``k``, padding k // 2."""
    return ConvLayer(
        model, name, (1, c, hw, hw), (o, c // groups, k, k), (stride, stride), (k // 2, k // 2), groups, count
    )


def _r(name, c, hw, o, k, stride=1, count=1):
    return _conv("resnet50", name, c, hw, o, k, stride, 1, count)


# ResNet-50: stem, then 3/4/6/3 bottlenecks (width 64/128/256/512, out x4).
# The first block of each stage has a 1x1 downsample conv (stride 2 from layer2 on).
RESNET50 = (
    _r("conv1", 3, 224, 64, 7, stride=2),
    # layer1 @56: block0 reduces 64->64, blocks 1-2 reduce 256->64
    _r("layer1.0.conv1", 64, 56, 64, 1),
    _r("layer1.conv2", 64, 56, 64, 3, count=3),
    _r("layer1.conv3+ds", 64, 56, 256, 1, count=4),  # 3 x conv3, and block0's downsample (64->256, stride 1)
    _r("layer1.conv1", 256, 56, 64, 1, count=2),
    # layer2 @56 -> 28
    _r("layer2.0.conv1", 256, 56, 128, 1),
    _r("layer2.0.conv2", 128, 56, 128, 3, stride=2),
    _r("layer2.conv3", 128, 28, 512, 1, count=4),
    _r("layer2.0.downsample", 256, 56, 512, 1, stride=2),
    _r("layer2.conv1", 512, 28, 128, 1, count=3),
    _r("layer2.conv2", 128, 28, 128, 3, count=3),
    # layer3 @28 -> 14
    _r("layer3.0.conv1", 512, 28, 256, 1),
    _r("layer3.0.conv2", 256, 28, 256, 3, stride=2),
    _r("layer3.conv3", 256, 14, 1024, 1, count=6),
    _r("layer3.0.downsample", 512, 28, 1024, 1, stride=2),
    _r("layer3.conv1", 1024, 14, 256, 1, count=5),
    _r("layer3.conv2", 256, 14, 256, 3, count=5),
    # layer4 @14 -> 7
    _r("layer4.0.conv1", 1024, 14, 512, 1),
    _r("layer4.0.conv2", 512, 14, 512, 3, stride=2),
    _r("layer4.conv3", 512, 7, 2048, 1, count=3),
    _r("layer4.0.downsample", 1024, 14, 2048, 1, stride=2),
    _r("layer4.conv1", 2048, 7, 512, 1, count=2),
    _r("layer4.conv2", 512, 7, 512, 3, count=2),
)


def _m(name, c, hw, o, k, stride=1, groups=1, count=1):
    return _conv("mobilenetv2", name, c, hw, o, k, stride, groups, count)


def _dw(name, c, hw, stride=1, count=1):
    return _m(name, c, hw, c, 3, stride, groups=c, count=count)


# MobileNetV2: blocks numbered as torchvision's features[i]; "exp" = 1x1 expand
# (t = 6), "dw" = 3x3 depthwise, "proj" = 1x1 project. Repeats of a block share
# one entry; an expand/dw of the first block of a stage that equals the
# previous stage's repeats is folded into that entry's count.
MOBILENETV2 = (
    _m("features.0", 3, 224, 32, 3, stride=2),
    _dw("features.1.dw", 32, 112),
    _m("features.1.proj", 32, 112, 16, 1),
    # 24 channels, n=2, s=2
    _m("features.2.exp", 16, 112, 96, 1),
    _dw("features.2.dw", 96, 112, stride=2),
    _m("features.2.proj", 96, 56, 24, 1),
    _m("features.3-4.exp", 24, 56, 144, 1, count=2),
    _dw("features.3.dw", 144, 56),
    _m("features.3.proj", 144, 56, 24, 1),
    # 32 channels, n=3, s=2
    _dw("features.4.dw", 144, 56, stride=2),
    _m("features.4.proj", 144, 28, 32, 1),
    _m("features.5-7.exp", 32, 28, 192, 1, count=3),
    _dw("features.5-6.dw", 192, 28, count=2),
    _m("features.5-6.proj", 192, 28, 32, 1, count=2),
    # 64 channels, n=4, s=2
    _dw("features.7.dw", 192, 28, stride=2),
    _m("features.7.proj", 192, 14, 64, 1),
    _m("features.8-11.exp", 64, 14, 384, 1, count=4),
    _dw("features.8-11.dw", 384, 14, count=4),
    _m("features.8-10.proj", 384, 14, 64, 1, count=3),
    # 96 channels, n=3, s=1
    _m("features.11.proj", 384, 14, 96, 1),
    _m("features.12-14.exp", 96, 14, 576, 1, count=3),
    _dw("features.12-13.dw", 576, 14, count=2),
    _m("features.12-13.proj", 576, 14, 96, 1, count=2),
    # 160 channels, n=3, s=2
    _dw("features.14.dw", 576, 14, stride=2),
    _m("features.14.proj", 576, 7, 160, 1),
    _m("features.15-17.exp", 160, 7, 960, 1, count=3),
    _dw("features.15-17.dw", 960, 7, count=3),
    _m("features.15-16.proj", 960, 7, 160, 1, count=2),
    # 320 channels, n=1, s=1
    _m("features.17.proj", 960, 7, 320, 1),
    _m("features.18", 320, 7, 1280, 1),
)

# MambaOut-Femto (timm): its dense 3x3 stride-2 convs, the stem's second and the three downsamples.
MAMBAOUT = (
    _conv("mambaout", "stem.conv2", 24, 112, 48, 3, stride=2),
    _conv("mambaout", "downsample1", 48, 56, 96, 3, stride=2),
    _conv("mambaout", "downsample2", 96, 28, 192, 3, stride=2),
    _conv("mambaout", "downsample3", 192, 14, 288, 3, stride=2),
)

MODELS = {"resnet50": RESNET50, "mobilenetv2": MOBILENETV2, "mambaout": MAMBAOUT}

#: torchvision's ``mobilenet_v2`` inverted residual settings: expansion t, channels c, repeats n, stride s.
MOBILENETV2_SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                        (6, 320, 1, 1))


def _mobilenetv2_blocks() -> list[tuple[ConvLayer, ...]]:
    """MobileNetV2's inverted-residual blocks (features.1-17) in order, each its convs as a chain
    (each conv reads the previous one's output, through batch norm and ReLU6): expand (t > 1), dw, proj.
    Unnamed geometry, matched to the rows of :data:`MOBILENETV2` by :func:`_row_of`."""
    blocks, c, hw = [], 32, 112
    for t, out, n, s in MOBILENETV2_SETTINGS:
        for i in range(n):
            stride, mid = s if i == 0 else 1, c * t
            chain = [_m("", c, hw, mid, 1)] if t != 1 else []
            chain.append(_dw("", mid, hw, stride))
            hw //= stride
            chain.append(_m("", mid, hw, out, 1))
            blocks.append(tuple(chain))
            c = out
    return blocks


def _geometry(layer: ConvLayer) -> tuple:
    return layer.data_shape, layer.weight_shape, layer.strides, layer.padding, layer.dilation, layer.groups


def _row_of(model: str, layer: ConvLayer) -> ConvLayer:
    """The distinct-layer row of ``model`` with ``layer``'s geometry (rows are distinct, so at most one)."""
    (row,) = [r for r in MODELS[model] if _geometry(r) == _geometry(layer)]
    return row


#: Per model, its conv chains (convs that read the previous conv's output); models without
#: depthwise convs have no depthwise -> 1x1 pairs to list.
CHAINS = {"mobilenetv2": _mobilenetv2_blocks}


@dataclass(frozen=True)
class ConvPair:
    """A depthwise conv row and the 1x1 conv row reading its output, in ``count`` blocks of the model
    (what ``strategy.fusion.fuse_depthwise_pointwise`` may run as one kernel)."""

    depthwise: ConvLayer
    pointwise: ConvLayer
    count: int

    @property
    def key(self) -> str:
        return f"{self.depthwise.key}+{self.pointwise.name}"


def pairs(selected: list[ConvLayer]) -> list[ConvPair]:
    """The depthwise -> 1x1 pairs among ``selected`` rows (both rows selected), derived from each
    model's block structure (:data:`CHAINS`; a merged row may feed several 1x1 rows)."""
    keys = {layer.key for layer in selected}
    out = []
    for model in dict.fromkeys(layer.model for layer in selected):
        counts: dict[tuple[ConvLayer, ConvLayer], int] = {}
        for chain in CHAINS[model]() if model in CHAINS else ():
            for a, b in zip(chain, chain[1:]):
                if a.depthwise and b.weight_shape[2:] == (1, 1) and b.groups == 1:
                    pair = (_row_of(model, a), _row_of(model, b))
                    counts[pair] = counts.get(pair, 0) + 1
        out += [ConvPair(dw, pw, n) for (dw, pw), n in counts.items() if {dw.key, pw.key} <= keys]
    return out


#: Conv layers per model in torchvision and their multiply-adds (MACs), for a self-check.
EXPECTED = {"resnet50": (53, 4_087_136_256), "mobilenetv2": (52, 299_494_272)}


def layers(models=("resnet50", "mobilenetv2"), limit: int | None = None) -> list[ConvLayer]:
    """The distinct layers of ``models`` (each model's first ``limit`` when given)."""
    out = []
    for model in models:
        if model not in MODELS:
            raise ValueError(f"unknown model {model!r}; choose from {sorted(MODELS)}")
        out.extend(MODELS[model][:limit] if limit is not None else MODELS[model])
    return out


def totals(model: str) -> tuple[int, int]:
    """(number of conv layers, multiply-adds) of ``model``, counts included."""
    rows = MODELS[model]
    return sum(r.count for r in rows), sum(r.count * r.flops // 2 for r in rows)
