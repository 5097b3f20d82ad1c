"""Residual Add + LayerNormalization -> com.microsoft SkipLayerNormalization (rank 2 or 3).

Target: s = Add(a, b) or Add(a, Add(b, bias)); y = LayerNormalization(s, gamma, beta, axis=-1), where
a, b [N, D] (or [B, S, D]) are activations of the same shape and bias, gamma, beta [D] constants.
Replacement: y, _, _, s = SkipLayerNormalization(a, b, gamma, beta[, bias]); s (the residual sum,
output 3) feeds whatever else used the Add (the next residual, a deepstack merger).
ORT's optimizer skips this fusion on rank-2 inputs; ORT 1.31's CPU kernel runs rank 2 fine.
"""

import onnx_ir as ir
from onnxscript.rewriter.pattern import MatchResult, RewriteRuleClassBase, RewriteRuleSet

from quantize.passes import _rules


def _width(value: ir.Value) -> int | None:
    """D of an activation: its static last dim, else the last dim of the constant weight of the MatMul
    (optionally + bias) that produced it."""
    if value.shape is not None and value.shape.rank() and isinstance(value.shape[-1], int):
        return value.shape[-1]
    node = value.producer()
    if node is not None and node.op_type == "Add" and node.domain == "":
        node = next((i.producer() for i in node.inputs if i is not None and i.producer() is not None), None)
    if node is not None and node.op_type == "MatMul":
        weight = _rules.const(node.inputs[1])
        return None if weight is None else int(weight.shape[-1])
    return None


class SkipLayerNorm(RewriteRuleClassBase):
    def __init__(self, name: str, with_bias: bool):
        super().__init__(name)
        self.with_bias = with_bias

    def pattern(self, op, a, b, bias, gamma, beta):
        skip = op.Add(b, bias) if self.with_bias else b
        total = op.Add(a, skip, _outputs=["total"])
        return op.LayerNormalization(total, gamma, beta, _allow_other_attributes=True, _outputs=["y"]), total

    def check(self, context, a, b, gamma, beta, y, bias=None, **_) -> MatchResult:
        result = MatchResult()
        norm = y.producer()
        if len(norm.outputs) > 1 or norm.attributes.get_int("axis", -1) != -1:
            return result.fail("LayerNormalization with extra outputs or axis != -1")
        weights = [_rules.const(v) for v in (gamma, beta) + ((bias,) if self.with_bias else ())]
        if any(w is None or w.ndim != 1 for w in weights):
            return result.fail("gamma/beta/bias are not 1-D constants")
        if _rules.const(a) is not None or _rules.const(b) is not None:
            return result.fail("an Add input is a constant (not a residual)")
        width = weights[0].shape[0]
        if _width(a) not in (width, None) or _width(b) != width:
            return result.fail("Add inputs are not both [..., D]")
        if a.shape is not None and b.shape is not None and a.shape != b.shape:
            return result.fail("Add broadcasts", a)
        return result

    def rewrite(self, op, a, b, gamma, beta, y, bias=None, **_):
        epsilon = y.producer().attributes.get_float("epsilon", 1e-5)
        inputs = (a, b, gamma, beta) + ((bias,) if self.with_bias else ())
        out, _, _, total = op.SkipLayerNormalization(*inputs, epsilon=epsilon, _outputs=4, _domain="com.microsoft")
        return out, total


RULES = RewriteRuleSet([SkipLayerNorm.rule("skip_ln_bias", True), SkipLayerNorm.rule("skip_ln", False)],
                       commute=True)


def apply(model: ir.Model) -> int:
    """Fuse every residual Add + LayerNormalization; return how many."""
    return _rules.apply(RULES, model)
