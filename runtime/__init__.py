"""`python -m runtime ...` in a checkout: the short name of `python -m vlm_vision_onnx.runtime ...` (the product
runtime, vlm_vision_onnx/runtime/; installed, the same is `vlm-vision-onnx runtime ...`). Only the entry points live
here; nothing imports this package, and the wheel does not ship it (it claims no generic top-level name)."""
