"""`python -m release ...` in a checkout: the short name of `python -m vlm_vision_onnx.release ...` (packaging,
vlm_vision_onnx/release/; installed, the same is `vlm-vision-onnx release ...`). Only the entry point lives here;
nothing imports this package, and the wheel does not ship it (it claims no generic top-level name)."""
