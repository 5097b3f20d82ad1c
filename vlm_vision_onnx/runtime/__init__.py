"""Torch-free runtime: input checks for the I/O contract and an ONNX Runtime session wrapper."""
