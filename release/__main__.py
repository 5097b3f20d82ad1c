"""`python -m release`: runs `vlm_vision_onnx.release` (release/__init__.py says why this name exists)."""

import runpy

runpy.run_module("vlm_vision_onnx.release", run_name="__main__", alter_sys=True)
