"""Quantize a model, import it into TVM Relax, lower decode kernels, export ONNX, build."""
