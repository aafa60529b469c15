"""Built-in CNNs defined in Relax with seeded random weights (bound as constants).

``resnet18`` is the main job's default model; ``mobilenet_v2`` and
``resnet50`` serve the end-to-end benchmarks. The architectures follow
torchvision; weights are conditioned the way a trained net's are: He-initialised convs, and
batch norms whose running statistics are those of the activations (measured by
a float64 NumPy forward pass of a seeded calibration batch while the model is
built) with gamma near 1 and small beta, so every pre-activation is ~N(0, 1).
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from tir_adreno import reference

MODELS = ("resnet18", "resnet50", "mobilenet_v2")
#: Calibration batch (images of 3 x SIZE x SIZE) whose activations set the batch-norm statistics.
CALIBRATION_BATCH, CALIBRATION_SIZE = 4, 64


class _Builder:
    def __init__(self, bb: relax.BlockBuilder, seed: int):
        self.bb = bb
        self.rng = np.random.default_rng(seed)
        # var -> its float64 value for the calibration batch, while every op on the way is one
        # of the builder's (a body that emits other ops gets drawn statistics past them)
        self.values = {}

    def calibrate(self, x):
        self.values[x] = self.rng.standard_normal((CALIBRATION_BATCH, 3, CALIBRATION_SIZE, CALIBRATION_SIZE))

    def _track(self, out, fn, *args):
        if all(a in self.values for a in args):
            self.values[out] = fn(*(self.values[a] for a in args))
        return out

    def const(self, array):
        return relax.const(np.ascontiguousarray(array, dtype=np.float32))

    def conv_bn(self, x, out_channels, kernel, stride=1, groups=1, act="relu"):
        in_channels = x.ty.shape.values[1]
        in_channels = int(in_channels)
        fan_in = in_channels // groups * kernel * kernel
        w = self.rng.standard_normal((out_channels, in_channels // groups, kernel, kernel)) * np.sqrt(2.0 / fan_in)
        pad = kernel // 2
        y = self.bb.emit(relax.op.nn.conv2d(x, self.const(w), strides=stride, padding=pad, groups=groups))
        gamma, beta = self.rng.uniform(0.9, 1.1, out_channels), self.rng.standard_normal(out_channels) * 0.1
        if x in self.values:  # the running statistics of this conv's output
            conv = reference.conv2d_nchw(self.values[x], w, (stride, stride), (pad,) * 4, groups=groups)
            # the floor keeps a channel that is nearly constant on the batch from being blown up
            mean, var = conv.mean(axis=(0, 2, 3)), conv.var(axis=(0, 2, 3)) + 1e-3
        else:
            mean, var = self.rng.standard_normal(out_channels) * 0.1, self.rng.uniform(0.5, 1.5, out_channels)
        bn = relax.op.nn.batch_norm(
            y, self.const(gamma), self.const(beta), self.const(mean), self.const(var), axis=1, training=False
        )
        y = self.bb.emit(relax.TupleGetItem(self.bb.emit(bn), 0))
        if x in self.values:
            scale = gamma / np.sqrt(var + 1e-5)  # relax's batch_norm epsilon
            self.values[y] = (conv - mean[:, None, None]) * scale[:, None, None] + beta[:, None, None]
        return self.activate(y, act)

    def activate(self, y, act):
        if act == "relu":
            return self._track(self.bb.emit(relax.op.nn.relu(y)), lambda v: np.maximum(v, 0), y)
        if act == "relu6":
            return self._track(self.bb.emit(relax.op.clip(y, 0.0, 6.0)), lambda v: np.clip(v, 0, 6), y)
        return y

    def add(self, a, b):
        return self._track(self.bb.emit(relax.op.add(a, b)), np.add, a, b)

    def max_pool(self, x):
        """3x3 max pool, stride 2, padding 1 (the ResNet stem)."""
        out = self.bb.emit(relax.op.nn.max_pool2d(x, 3, 2, 1))
        return self._track(out, lambda v: reference.pool2d(v, "max", (3, 3), (2, 2), (1,) * 4), x)

    def classifier(self, x, num_classes):
        channels = int(x.ty.shape.values[1])
        x = self.bb.emit(relax.op.nn.adaptive_avg_pool2d(x, 1))
        x = self.bb.emit(relax.op.reshape(x, (int(x.ty.shape.values[0]), channels)))
        w = self.rng.standard_normal((channels, num_classes)) * np.sqrt(1.0 / channels)
        x = self.bb.emit(relax.op.matmul(x, self.const(w)))
        return self.bb.emit(relax.op.add(x, self.const(self.rng.standard_normal(num_classes) * 0.1)))


def _model(name, body, batch, image_size, seed):
    bb = relax.BlockBuilder()
    x = relax.Var("input", relax.TensorType((batch, 3, image_size, image_size), "float32"))
    with bb.function("main", [x]), reference.single_threaded_blas():  # small calibration matmuls
        with bb.dataflow():
            m = _Builder(bb, seed)
            m.calibrate(x)
            out = bb.emit_output(body(m, x))
        bb.emit_func_output(out)
    mod = bb.get()
    return mod.with_attr("tir_adreno.model", name)


def resnet18(batch: int = 1, image_size: int = 224, num_classes: int = 1000, seed: int = 0) -> tvm.IRModule:
    return _resnet("resnet18", [2, 2, 2, 2], False, batch, image_size, num_classes, seed)


def resnet50(batch: int = 1, image_size: int = 224, num_classes: int = 1000, seed: int = 0) -> tvm.IRModule:
    return _resnet("resnet50", [3, 4, 6, 3], True, batch, image_size, num_classes, seed)


def _resnet(name, layers, bottleneck, batch, image_size, num_classes, seed):
    expansion = 4 if bottleneck else 1

    def block(m: _Builder, x, width, stride):
        in_channels = int(x.ty.shape.values[1])
        if bottleneck:
            y = m.conv_bn(x, width, 1)
            y = m.conv_bn(y, width, 3, stride)
            y = m.conv_bn(y, width * expansion, 1, act=None)
        else:
            y = m.conv_bn(x, width, 3, stride)
            y = m.conv_bn(y, width, 3, act=None)
        if stride != 1 or in_channels != width * expansion:
            x = m.conv_bn(x, width * expansion, 1, stride, act=None)
        return m.activate(m.add(y, x), "relu")

    def body(m: _Builder, x):
        x = m.conv_bn(x, 64, 7, 2)
        x = m.max_pool(x)
        for i, (count, width) in enumerate(zip(layers, [64, 128, 256, 512])):
            for j in range(count):
                x = block(m, x, width, 2 if i > 0 and j == 0 else 1)
        return m.classifier(x, num_classes)

    return _model(name, body, batch, image_size, seed)


def mobilenet_v2(batch: int = 1, image_size: int = 224, num_classes: int = 1000, seed: int = 0) -> tvm.IRModule:
    settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]

    def body(m: _Builder, x):
        x = m.conv_bn(x, 32, 3, 2, act="relu6")
        for expand, channels, repeats, stride in settings:
            for i in range(repeats):
                in_channels = int(x.ty.shape.values[1])
                s = stride if i == 0 else 1
                y = m.conv_bn(x, in_channels * expand, 1, act="relu6") if expand != 1 else x
                hidden = int(y.ty.shape.values[1])
                y = m.conv_bn(y, hidden, 3, s, groups=hidden, act="relu6")
                y = m.conv_bn(y, channels, 1, act=None)
                x = m.add(y, x) if s == 1 and in_channels == channels else y
        x = m.conv_bn(x, 1280, 1, act="relu6")
        return m.classifier(x, num_classes)

    return _model("mobilenet_v2", body, batch, image_size, seed)


def get_model(name: str, **kwargs) -> tvm.IRModule:
    builders = {"resnet18": resnet18, "resnet50": resnet50, "mobilenet_v2": mobilenet_v2}
    if name not in builders:
        raise ValueError(f"unknown built-in model {name!r}; choose from {MODELS}")
    return builders[name](**kwargs)
