"""Tiny ONNX files and saved-model folders for the reliability tests (issue 36): what a folder
holds, whether it is one whole model, and bad models a user might hand the command line."""

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tir_adreno.runtime import cache, saved


def value(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def save_onnx(path, nodes, inputs, outputs, inits=(), opset=13) -> Path:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), str(path))
    return Path(path)


def conv_relu(path, seed: int) -> Path:
    """conv 3x3 (3 -> 4 channels) + relu on a (1, 3, 6, 6) input "x"; the weights drawn from ``seed``
    (two seeds: two models of one architecture)."""
    w = numpy_helper.from_array(np.random.default_rng(seed).standard_normal((4, 3, 3, 3)).astype("float32"), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    return save_onnx(path, nodes, [value("x", (1, 3, 6, 6))], [value("y", (1, 4, 6, 6))], [w])


def files(folder) -> dict[str, bytes]:
    """Every file of ``folder`` by name (folders: an error, a saved model has none)."""
    return {p.name: p.read_bytes() for p in sorted(Path(folder).iterdir())}


def doc(folder) -> dict:
    """``model.json``'s document (its integrity frame checked)."""
    return json.loads(cache.read(Path(folder) / saved.MODEL_FILE))


def is_whole(folder) -> bool:
    """Every file of ``folder`` checks out and is the one its ``model.json`` names; no other file."""
    folder = Path(folder)
    try:
        names = {p.name for p in folder.iterdir()}
        d = doc(folder)
    except (OSError, TypeError, ValueError):
        return False
    if names != {saved.MODEL_FILE, *d[saved.FILES_KEY]}:
        return False
    return all(cache.read(folder / n) is not None and saved.frame_digest(folder / n) == digest
               for n, digest in d[saved.FILES_KEY].items())


def without_digests(d: dict) -> dict:
    """A ``model.json`` document without the file digests (the weights' zip carries a timestamp)."""
    return {k: v for k, v in d.items() if k != saved.FILES_KEY}


def rewrite_doc(folder, change) -> None:
    """``model.json`` edited by ``change(doc)`` and checksummed again, as someone who knows the frame would."""
    d = doc(folder)
    change(d)
    cache.write(Path(folder) / saved.MODEL_FILE, json.dumps(d).encode())
