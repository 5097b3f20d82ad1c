"""The torch-free core every stage uses: errors and exit codes, progress, ONNX load/save, the ONNX
Runtime session, parity metrics, staged output folders and stage reports. One home per concept."""
