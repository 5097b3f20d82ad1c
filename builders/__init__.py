"""Export stage: torch model (config or checkpoint) -> ONNX. The only package that imports torch."""
