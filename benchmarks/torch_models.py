"""PyTorch models for the cuDNN baseline: ResNet-50 and MobileNetV2 in plain PyTorch (torchvision's
architectures), any other model as a TorchScript trace exported here (``export_timm``), and, where
timm is installed (the GPU machine has it), the same timm model eager with the trace's weights
(``timm_eager``). Random weights: only timing is compared.

    python benchmarks/torch_models.py --timm efficientvit_b0,fastvit_t8 --out DIR   # DIR/<name>.onnx + .pt.xz
"""

from __future__ import annotations

import argparse
import io
import lzma
import sys
from pathlib import Path

import torch
from torch import nn

from trace_archive import traced_on


def _conv_bn(cin, cout, k, stride=1, groups=1, act=nn.ReLU):
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act(inplace=True))
    return nn.Sequential(*layers)


class _Bottleneck(nn.Module):
    def __init__(self, cin, width, stride):
        super().__init__()
        self.body = nn.Sequential(_conv_bn(cin, width, 1), _conv_bn(width, width, 3, stride), _conv_bn(width, width * 4, 1, act=None))
        self.down = _conv_bn(cin, width * 4, 1, stride, act=None) if stride != 1 or cin != width * 4 else nn.Identity()

    def forward(self, x):
        return torch.relu(self.body(x) + self.down(x))


def resnet50(num_classes=1000):
    layers, cin = [_conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)], 64
    for i, (count, width) in enumerate(zip([3, 4, 6, 3], [64, 128, 256, 512])):
        for j in range(count):
            layers.append(_Bottleneck(cin, width, 2 if i > 0 and j == 0 else 1))
            cin = width * 4
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes))


class _InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        layers = [_conv_bn(cin, hidden, 1, act=nn.ReLU6)] if expand != 1 else []
        layers += [_conv_bn(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6), _conv_bn(hidden, cout, 1, act=None)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


def mobilenet_v2(num_classes=1000):
    settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]
    layers, cin = [_conv_bn(3, 32, 3, 2, act=nn.ReLU6)], 32
    for expand, cout, repeats, stride in settings:
        for i in range(repeats):
            layers.append(_InvertedResidual(cin, cout, stride if i == 0 else 1, expand))
            cin = cout
    layers += [_conv_bn(cin, 1280, 1, act=nn.ReLU6), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1280, num_classes)]
    return nn.Sequential(*layers)


#: Suffix of a TorchScript export (xz-compressed: its weights are a repeating pattern, see export_timm).
TORCHSCRIPT_SUFFIX = ".pt.xz"


def build_torch_model(name: str, torchscript_dir: Path | None = None, device: str = "cpu") -> nn.Module | None:
    """The built-in ``name``, else ``torchscript_dir/<name>.pt.xz`` loaded onto ``device``, else
    None. Its traced constants stay on the CPU (``map_location="cpu"``; ``.to()`` moves parameters
    and buffers, not constants): they are the scalars of shape arithmetic (``int(C // heads)``),
    which on the GPU made each ``int()`` a device-to-host copy that CUDA graph capture refuses
    (CoaT, EfficientViT-M0, MobileNetV4-hybrid, TinyViT, XCiT); tensors the model makes itself are
    put on ``device`` by :func:`trace_archive.traced_on`."""
    builtin = {"resnet50": resnet50, "mobilenet_v2": mobilenet_v2}
    if name in builtin:
        return builtin[name]().to(device)
    path = torchscript_dir / f"{name}{TORCHSCRIPT_SUFFIX}" if torchscript_dir is not None else None
    if path is None or not path.exists():
        return None
    return torch.jit.load(io.BytesIO(traced_on(lzma.decompress(path.read_bytes()), device)), map_location="cpu").to(device)


def pattern_weights(net: nn.Module, seed: int = 0) -> nn.Module:
    """Every floating parameter and buffer of ``net`` set from a repeating N(0, 0.02)-like pattern
    (seeded): timing is value-independent away from denormals, and a trace of it compresses to
    ~1%. The same ``seed`` gives the same weights to the same architecture, so an eager timm model
    built on the GPU machine (:func:`timm_eager`) computes what the trace exported here does."""
    pattern = torch.randn(4096, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        for pname, t in [*net.named_parameters(), *((n, b) for n, b in net.named_buffers() if b.is_floating_point())]:
            tiled = pattern.repeat(t.numel() // pattern.numel() + 1)[: t.numel()].view_as(t)
            if t.dim() >= 2:  # He-scaled, so activations keep their size through depth (no denormals)
                t.copy_(tiled * (2.0 / max(1, t[0].numel())) ** 0.5)
            elif pname.endswith("running_var"):
                t.copy_(1.0 + 0.5 * tiled.abs())
            elif pname.endswith("weight") or pname.endswith("gamma"):
                t.copy_(1.0 + 0.1 * tiled)
            else:
                t.copy_(0.1 * tiled)
    return net


def timm_eager(name: str, device: str = "cpu", seed: int = 0) -> nn.Module | None:
    """``timm.create_model(name)`` with :func:`pattern_weights` (the weights of its TorchScript
    export), in eval mode on ``device``; None where timm is missing or does not know ``name``."""
    try:
        import timm
    except ImportError:
        return None
    if name not in timm.list_models():
        return None
    return pattern_weights(timm.create_model(name, pretrained=False).eval(), seed).to(device)


def _nontrivial(net: nn.Module) -> nn.Module:
    """Random weights that exercise every path: batch-norm statistics and gains re-drawn (1-D and
    2-D: timm zero-inits the last norm of a residual branch, e.g. LeViT's BatchNorm1d, which would
    silence the branch), and a matrix timm zero-inits (MLP-Mixer's and gMLP's classifier: a constant
    output, checking nothing) drawn N(0, 0.02)."""
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats and m.affine:
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0.0, 0.1)
        for p in net.parameters():
            if p.dim() >= 2 and not p.any():
                p.normal_(0.0, 0.02)
    return net


def export_timm(name: str, directory: Path, seed: int = 0) -> tuple[Path, Path]:
    """``timm.create_model(name)`` (random weights made nontrivial: :func:`_nontrivial`) as
    ``<name>.onnx`` (opset 17, TorchScript exporter) and, for the cuDNN baseline on a machine without
    timm, ``<name>.pt.xz``: a TorchScript trace whose parameters are a repeating N(0, 0.02) pattern
    (timing is value-independent away from denormals, and the pattern compresses to ~1% so it fits
    the GPU machine's transfer limit)."""
    import timm

    torch.manual_seed(seed)
    net = _nontrivial(timm.create_model(name, pretrained=False).eval())
    directory.mkdir(parents=True, exist_ok=True)
    x = torch.randn(1, 3, 224, 224)
    onnx_path, ts_path = directory / f"{name}.onnx", directory / f"{name}{TORCHSCRIPT_SUFFIX}"
    torch.onnx.export(net, x, str(onnx_path), dynamo=False, opset_version=17, input_names=["input"])
    pattern_weights(net, seed)
    buf = io.BytesIO()
    torch.jit.save(torch.jit.trace(net, x), buf)
    ts_path.write_bytes(lzma.compress(buf.getvalue(), preset=6))
    return onnx_path, ts_path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timm", required=True, help="comma-separated timm model names")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    for name in args.timm.split(","):
        onnx_path, ts_path = export_timm(name, args.out)
        print(f"{name}: {onnx_path} ({onnx_path.stat().st_size >> 20} MiB), {ts_path} ({ts_path.stat().st_size >> 10} KiB)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
