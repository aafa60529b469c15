"""Model import: ONNX graphs made static, the light ONNX test models, built-in Relax CNNs."""
