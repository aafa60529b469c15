"""Whole models on PoCL against CPU references: the ONNX models shipped with ``onnx``
(weights replaced by seeded random values) and the built-in ResNet-18."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from tir_adreno import compile_model, load_model
from tir_adreno.frontend import models
from tir_adreno.frontend.onnx_import import data_inputs
from tir_adreno.frontend.onnx_models import light_model_path, randomize_weights, strip_final_softmax
from tir_adreno.reference import reference_outputs, relative_error

#: float32 whole models against onnxruntime / TVM's LLVM build (seeded inputs and weights, so
#: these are exact on PoCL): measured SqueezeNet 2.8e-7, ResNet-50 9.3e-7, VGG-19 2.6e-6,
#: MobileNetV2 (fused, 32x32) 4.3e-6, ResNet-18 (64x64, Winograd F(4x4)) 5.2e-6.
MODEL_RTOL = 1e-5


def _onnx(name):
    return strip_final_softmax(randomize_weights(onnx.load(light_model_path(name)), seed=3))


#: Models checked in a child process of their own: VGG-19's compile peaks at 3.6 GB, which in the
#: test process would come on top of what the tests before it left there (a CI worker: 5.5 GB).
IN_A_CHILD = ("vgg19",)
_CHILD = """
import pathlib, sys
sys.path[:0] = {paths!r}
from helpers.attributes import unknown_attribute_reads
import test_models
with unknown_attribute_reads() as misses:
    test_models.check_onnx_model({name!r}, pathlib.Path({folder!r}))
assert not misses, f"attribute names the op's attributes type does not have were read: {{misses}}"
"""


@pytest.mark.parametrize("name", ["squeezenet", "resnet50", "vgg19"])
def test_onnx_model_matches_onnxruntime(name, tmp_path):
    if name not in IN_A_CHILD:
        check_onnx_model(name, tmp_path)
        return
    here = Path(__file__).resolve().parent
    code = _CHILD.format(paths=[str(here), str(here.parent)], name=name, folder=str(tmp_path))
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=3600)
    assert child.returncode == 0, child.stderr[-6000:]


def check_onnx_model(name, tmp_path):
    """The ONNX model ``name`` compiled and run on the default device against onnxruntime, its
    convs ours on textures, layout transforms only at the boundaries."""
    # Through a file: onnxruntime, then the compile, each load the model and let it go, so no
    # copy of VGG-19's 575 MB of weights is held while the compile lowers it (peak 4.2 -> 3.6 GB).
    model, path = _onnx(name), tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    inputs = {data_inputs(model)[0].name: np.random.default_rng(7).standard_normal((1, 3, 224, 224)).astype("float32")}
    del model
    refs = reference_outputs(path, inputs)
    compiled = compile_model(path, progress=lambda _: None)
    assert compiled.input_names == list(inputs)
    outputs = compiled.run(inputs)
    assert len(outputs) == len(refs)
    for out, ref in zip(outputs, refs):
        assert out.shape == ref.shape
        assert relative_error(out, ref) <= MODEL_RTOL
    profile = compiled.profile()
    convs = [p for p in profile if p["op"].startswith("conv2d")]
    assert convs and all(p["ours"] and p["placement"] == "texture" for p in convs)
    # Layout transforms only at the boundaries: the input, the outputs, around upstream ops.
    transforms = [p for p in profile if p["op"].startswith(("nchw_to", "nchw4c_to"))]
    upstream = [p for p in profile if not p["ours"]]
    assert len(transforms) <= 2 * len(upstream) + 1 + len(outputs)
    if name == "resnet50":  # the image pool at least halves the activation memory
        pooled, unpooled = compiled.plan.memory_bytes(pool=True), compiled.plan.memory_bytes(pool=False)
        assert pooled["intermediates"] * 2 <= unpooled["intermediates"]


def test_default_model_matches_llvm_and_runs_saved_without_tvm(tmp_path):
    mod = models.resnet18(image_size=64)
    compiled = compile_model(mod, progress=lambda _: None)
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype("float32")
    (out,) = compiled.run({"input": x})
    (ref,) = reference_outputs(mod, {"input": x})
    assert relative_error(out, ref) <= MODEL_RTOL
    # The saved model runs in a process that cannot import TVM.
    compiled.save(tmp_path / "model")
    np.save(tmp_path / "x.npy", x)
    script = (
        "import sys; sys.modules['tvm'] = None\n"
        "import numpy as np\n"
        "from tir_adreno.runtime.executor import load_model\n"
        f"m = load_model({str(tmp_path / 'model')!r})\n"
        f"(y,) = m.run({{'input': np.load({str(tmp_path / 'x.npy')!r})}})\n"
        f"np.save({str(tmp_path / 'y.npy')!r}, y)\n"
    )
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), out)


def test_run_rejects_bad_inputs():
    said = []
    compiled = compile_model(models.resnet18(image_size=32, num_classes=10), progress=said.append)
    # the build counter counts distinct kernels, one by one to the total (calls share kernels)
    counts = [line.split("]")[0][1:].split("/") for line in said if line.startswith("[")]
    assert [int(i) for i, _ in counts] == list(range(1, len(counts) + 1)) and {int(n) for _, n in counts} == {len(counts)}, said
    assert len(counts) == len(compiled.kernels) < len(compiled.plan.calls), said
    x = np.zeros((1, 3, 32, 32), "float32")
    with pytest.raises(ValueError, match="missing input 'input'"):
        compiled.run({})
    with pytest.raises(ValueError, match="unknown input 'image'"):
        compiled.run({"input": x, "image": x})
    with pytest.raises(ValueError, match=r"input 'input' has shape \(1, 3, 31, 32\)"):
        compiled.run({"input": x[:, :, :31]})
    with pytest.raises(ValueError, match="input 'input' has dtype float64"):
        compiled.run({"input": x.astype("float64")})


def test_load_model_rejects_corrupt_files(tmp_path):
    with pytest.raises(ValueError, match="not a saved tir-adreno model"):
        load_model(tmp_path)


def test_tvm_compile_for_adreno_builds_every_kernel(device):
    """The dispatched module also goes through tvm.compile for qcom/adreno-opencl-texture,
    and every OpenCL kernel it emits builds on this device."""
    from tir_adreno.compiler import opencl_sources, tvm_compile

    executable = tvm_compile(models.resnet18(image_size=32, num_classes=10), device)
    (source,) = opencl_sources(executable)
    assert "image2d_array_t" in source and "write_imagef" in source
    program = device.build_program(source)
    kernels = {k.function_name for k in program.all_kernels()}
    assert any(k.startswith("conv2d") for k in kernels)
    assert kernels == set(re.findall(r"__kernel void (\w+)\(", source))


def test_mobilenet_v2_fuses_depthwise_into_pointwise():
    """Every inverted-residual block's depthwise conv (+ folded BN + ReLU6) runs inside its 1x1
    projection when the profile says launches are dear: 17 kernels fewer, same numbers, and the
    edge layout kernels gone (the stem reads the input, the logits are a view): 19 in all. (The
    unfused model is only lowered, not built: its kernels have their own tests.)"""
    import dataclasses

    from tvm import relax

    from tir_adreno.compiler import lower
    from tir_adreno.strategy.profile import get_profile, without_fusion

    def calls(lowered):
        return sum(isinstance(b.value, relax.Call) and b.value.op.name == "relax.call_tir"
                   for block in lowered["main"].body.blocks for b in block.bindings)

    mod = models.mobilenet_v2(image_size=32)
    profile = dataclasses.replace(get_profile("pocl"), launch_cost_macs=10**9)
    fused = compile_model(mod, profile=profile, progress=lambda _: None)
    x = np.random.default_rng(5).standard_normal((1, 3, 32, 32)).astype("float32")
    (out,) = fused.run({"input": x}, profile=True)
    (ref,) = reference_outputs(mod, {"input": x})
    assert relative_error(out, ref) <= MODEL_RTOL
    ops = [p["op"] for p in fused.profile()]
    assert sum(op.startswith("depthwise_pointwise") for op in ops) == 17
    assert not any(op.startswith("depthwise_conv2d") for op in ops)
    assert fused.launch_count == calls(lower(mod, profile))
    assert not any(op.startswith(("nchw_to_nchw4c", "nchw4c_to_nchw")) for op in ops), ops
    assert calls(lower(mod, without_fusion(profile))) - fused.launch_count == 17 + 2
