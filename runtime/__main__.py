"""`python -m runtime`: runs `vlm_vision_onnx.runtime` (runtime/__init__.py says why this name exists)."""

import runpy

runpy.run_module("vlm_vision_onnx.runtime", run_name="__main__", alter_sys=True)
