"""Gather(Shape(x), i) -> Constant when dim i of x is static (e.g. head_dim in rotate_half's slices).

TorchScript computes rotate_half's split point as Shape(x)[-1] // 2 at run time; with this fold and
onnxscript's constant folding it becomes the constant head_dim / 2 that the rotary fusion checks.
"""

import numpy as np
import onnx_ir as ir
import onnxscript.optimizer
from onnxscript.rewriter.pattern import MatchResult, RewriteRuleClassBase, RewriteRuleSet

from quantize.passes import _rules


class StaticDim(RewriteRuleClassBase):
    def pattern(self, op, x, index):
        return op.Gather(op.Shape(x, _allow_other_attributes=True, _outputs=["shape"]), index, axis=0)

    def check(self, context, x, index, shape, **_) -> MatchResult:
        result = MatchResult()
        i = _rules.const(index)
        sliced = any(name in shape.producer().attributes for name in ("start", "end"))
        if i is None or i.ndim > 1 or i.size != 1 or x.shape is None or sliced:
            return result.fail("index is not one constant")
        dim = x.shape[int(i.ravel()[0])]
        return result if isinstance(dim, int) else result.fail("dim is not static")

    def rewrite(self, op, x, index, **_):
        i = _rules.const(index)
        dim = x.shape[int(i.ravel()[0])]
        return op.Constant(value=ir.tensor(np.full(i.shape, dim, dtype=np.int64)))


RULES = RewriteRuleSet([StaticDim.rule()])


def apply(model: ir.Model) -> int:
    """onnxscript's optimizer (shape inference, constant folding, no-op removal), this fold, the
    optimizer again; return the number of dims folded."""
    onnxscript.optimizer.optimize(model)
    count = _rules.apply(RULES, model)
    onnxscript.optimizer.optimize(model)
    return count
