"""`python -m runtime.sample_photos`: runs `vlm_vision_onnx.runtime.sample_photos` (runtime/__init__.py says why)."""

import runpy

if __name__ == "__main__":
    runpy.run_module("vlm_vision_onnx.runtime.sample_photos", run_name="__main__", alter_sys=True)
