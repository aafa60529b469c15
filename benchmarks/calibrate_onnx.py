"""Condition an ONNX CNN with random weights like a trained one: every conv's output ~N(0, 1).

A torchvision export with random weights (``zoo.py``: BatchNorm folded into the convs) lets
activations drift by orders of magnitude with depth: EfficientNet-B0's squeeze-excitation
blocks halve them each block, to ~1e-11 by the last stage (measured on the H200:
``float16.py --diagnose``), far below half's smallest normal (6.1e-5), so a half build
underflows to zero while the float32 one computes noise no trained net produces. Here each
conv, in graph order, gets its weights and bias rescaled so that its output channels have mean 0
and variance 1 on a seeded calibration batch (the squeeze-excitation convs on 1x1 maps excepted), as ``tir_adreno/frontend/models.py`` does with
the batch-norm statistics of the built-in models.

    python benchmarks/calibrate_onnx.py IN.onnx OUT.onnx
"""

from __future__ import annotations

import argparse

import numpy as np


def _initializers(model) -> dict:
    from onnx import numpy_helper

    return {t.name: (t, numpy_helper.to_array(t)) for t in model.graph.initializer}


def _source(model, name: str) -> str:
    """The initializer behind ``name`` through Identity nodes (the exporter's shared weights)."""
    producers = {o: n for n in model.graph.node for o in n.output}
    while name in producers and producers[name].op_type == "Identity":
        name = producers[name].input[0]
    return name


def calibrate(model, batch: int = 8, seed: int = 0):
    """``model`` (an onnx ModelProto, changed in place) with every Conv's output ~N(0, 1) per channel."""
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    x = np.random.default_rng(seed).standard_normal((batch, 1, 3, 224, 224)).astype(np.float32)  # one image a run
    inits = _initializers(model)
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    for conv in convs:
        probe = onnx.ModelProto()
        probe.CopyFrom(model)
        probe.graph.output.append(onnx.helper.make_tensor_value_info(conv.output[0], onnx.TensorProto.FLOAT, None))
        session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
        y = np.concatenate([session.run([conv.output[0]], {model.graph.input[0].name: xi})[0] for xi in x]).astype(np.float64)
        if y.shape[2] * y.shape[3] == 1:  # a squeeze-excitation conv: its input, a global average of
            continue  # noise, barely varies between images; normalizing by that spread would blow it up
        mean, std = y.mean(axis=(0, 2, 3)), y.std(axis=(0, 2, 3)) + 1e-6
        w_name = _source(model, conv.input[1])
        w = inits[w_name][1] / std[:, None, None, None]
        b = -mean / std if len(conv.input) < 3 else (inits[_source(model, conv.input[2])][1] - mean) / std
        _replace(model, inits, w_name, w.astype(np.float32))
        if len(conv.input) < 3:
            b_name = f"{conv.output[0]}_calibrated_bias"
            model.graph.initializer.append(numpy_helper.from_array(b.astype(np.float32), b_name))
            inits[b_name] = (model.graph.initializer[-1], b)
            conv.input.append(b_name)
        else:
            _replace(model, inits, _source(model, conv.input[2]), b.astype(np.float32))
    return model


def _replace(model, inits, name, value):
    from onnx import numpy_helper

    tensor, _ = inits[name]
    tensor.CopyFrom(numpy_helper.from_array(value, name))
    inits[name] = (tensor, value)


def main():
    import onnx

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("src")
    parser.add_argument("dst")
    args = parser.parse_args()
    onnx.save(calibrate(onnx.load(args.src)), args.dst)
    print(f"wrote {args.dst}")


if __name__ == "__main__":
    main()
