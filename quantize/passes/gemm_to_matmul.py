"""Gemm(x, W, b) -> Add(MatMul(x, W'), b): the form MatMulNBitsQuantizer and ORT's fusions know.

x [N, K]; W a constant [K, M] (transB=0) or [M, K] (transB=1, stored transposed as W' [K, M]);
b [M] or absent; alpha = beta = 1, transA = 0. Both exporters emit Gemm for every nn.Linear.
"""

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter.pattern import MatchResult, RewriteRuleClassBase, RewriteRuleSet

from quantize.passes import _rules


class GemmToMatMulAdd(RewriteRuleClassBase):
    def __init__(self, name: str, with_bias: bool):
        super().__init__(name)
        self.with_bias = with_bias

    def pattern(self, op, x, w, b):
        inputs = (x, w, b) if self.with_bias else (x, w)
        return op.Gemm(*inputs, _allow_other_attributes=True, _outputs=["y"])

    def check(self, context, x, w, y, **_) -> MatchResult:
        result = MatchResult()
        gemm = y.producer()
        attrs = {name: gemm.attributes.get_float(name, 1.0) for name in ("alpha", "beta")}
        if attrs != {"alpha": 1.0, "beta": 1.0} or gemm.attributes.get_int("transA", 0) != 0:
            return result.fail("Gemm with alpha/beta != 1 or transA")
        weight = _rules.const(w)
        if weight is None or weight.ndim != 2:
            return result.fail("Gemm weight is not a 2-D constant", w)
        return result

    def rewrite(self, op, x, w, y, b=None, **_):
        weight = _rules.const(w)
        if y.producer().attributes.get_int("transB", 0):
            weight = np.ascontiguousarray(weight.T)
        matmul = op.MatMul(x, op.initializer(ir.tensor(weight), name=_free_name(w, f"{w.name}.matmul")))
        return op.Add(matmul, b) if self.with_bias else matmul


def _free_name(w: ir.Value, name: str) -> str:
    """`name`, or `name_1`, `name_2`, ... when the graph already holds an initializer of that name (Gemms sharing a
    weight: each gets its own MatMul weight, all of them in the graph)."""
    taken = w.graph.initializers if w.graph is not None else {}
    candidate, number = name, 0
    while candidate in taken:
        number += 1
        candidate = f"{name}_{number}"
    return candidate


RULES = RewriteRuleSet([GemmToMatMulAdd.rule("gemm_bias", True), GemmToMatMulAdd.rule("gemm", False)])


def apply(model: ir.Model) -> int:
    """Rewrite every Gemm with a constant weight; return how many."""
    return _rules.apply(RULES, model)
