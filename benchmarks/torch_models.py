"""ResNet-50 and MobileNetV2 in plain PyTorch (torchvision's architectures), for the
cuDNN baseline. Random weights: only timing is compared."""

from __future__ import annotations

import torch
from torch import nn


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


def build_torch_model(name: str) -> nn.Module:
    return {"resnet50": resnet50, "mobilenet_v2": mobilenet_v2}[name]()
