"""Compile a model for a target (the stages of :mod:`.pipeline`), and export it as standard ONNX."""
