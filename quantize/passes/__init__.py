"""Graph passes of the optimize stage, one per module: `ir.Model -> count`, pattern + replacement + rule.

Each module exposes `RULES` (an onnxscript `RewriteRuleSet`) and `apply(model) -> int` (fusions made).
"""
