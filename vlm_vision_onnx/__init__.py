"""vlm-vision-onnx's torch-free packages under one import name, so that the wheel claims no generic top-level name
beyond the stages the design names (`builders`, `surgery`, `quantize`):

- `vlm_vision_onnx.core`: errors, progress, ONNX load/save, sessions, parity, reports, staged folders;
- `vlm_vision_onnx.families`: each family's I/O contract, layouts and numpy/PIL preprocessing;
- `vlm_vision_onnx.runtime`: the product runtime (`verify`, `embed`, `embed-collection`, `encode`, ...);
- `vlm_vision_onnx.release`: release packages.

The docs and docstrings name these folders and modules without the prefix (`core/engine.py`, `runtime.embed`).
In a checkout `python -m runtime` and `python -m release` are short for `python -m vlm_vision_onnx.runtime` and
`python -m vlm_vision_onnx.release` (runtime/ and release/ at the top hold only those entry points); installed, the
console command `vlm-vision-onnx runtime|release ...` is the same. Nothing is imported here: importing any module
of the project runs this file.
"""
