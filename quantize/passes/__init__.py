"""Graph passes of the optimize stage, one per module: `ir.Model -> count`, pattern + replacement + rule.

Each module exposes `RULES` (an onnxscript `RewriteRuleSet`) and `apply(model) -> int` (fusions made); the plain
onnx-ir passes (`unfuse_attention`, and the fp16 stage's `float16` with its `elem_types`) say what they return.
"""
