"""Optimize and INT4 stages (torch-free: onnx, onnx-ir, onnxscript, onnxruntime, numpy).

`python -m quantize optimize IN OUT` fuses the exported encoder for ONNX Runtime's CPU kernels;
`python -m quantize int4 IN OUT` quantizes its linear layers to weight-only INT4 (`MatMulNBits`).
"""
