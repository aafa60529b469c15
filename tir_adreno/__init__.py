"""tir-adreno: TVMScript texture kernels for Adreno-style GPUs, verified on real OpenCL.

``compile_model`` needs TVM; ``load_model`` and the runtime do not.
"""

from tir_adreno.runtime.executor import CompiledModel, load_model


def compile_model(model, device=None, **kwargs) -> CompiledModel:
    """Compile an ONNX model (ModelProto or path) or a Relax IRModule with bound weights;
    see :func:`tir_adreno.compiler.compile_model`."""
    from tir_adreno.compiler import compile_model as _compile

    return _compile(model, device, **kwargs)


__all__ = ["CompiledModel", "compile_model", "load_model"]
