"""The patch embedding as one MatMul: Reshape -> Conv (kernel = stride) -> Reshape  =>  MatMul [+ Add].

The Qwen towers embed patches with a Conv3d whose kernel equals its stride over an input reshaped to exactly one
kernel per row: pixel_values x [N, K] (K = C * T * P * P) -> Reshape [N, C, T, P, P] -> Conv(W [M, C, T, P, P])
-> [N, M, 1, 1, 1] -> Reshape [N, M]. That is x @ W.reshape(M, K).T: a MatMul, which ONNX Runtime and OpenVINO
run on their GEMM kernels (OpenVINO ran the Conv at 27 GFLOP/s on an AMX Xeon, 6.6% of its bf16 time at 1024²:
issue 33). The rewrite matches only that exact form: the first Reshape's target is [-1 or N, *W.shape[1:]], the
Conv has strides = kernel = W's spatial dims, no padding, dilation 1, one group, and the second Reshape's target
is [-1 or N, M]; anything else (Phi-4-multimodal's strided Conv2d over a whole image) is left alone.

The MatMul reads the model's pixel input: the quantizers keep it fp32 (`quantize.quantizers.quantizable`), as they
kept the Conv, so the INT8 and INT4 variants quantize the same layers as before.
"""

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter.pattern import MatchResult, RewriteRuleClassBase, RewriteRuleSet

from quantize.passes import _rules


class PatchConvToMatMul(RewriteRuleClassBase):
    def __init__(self, name: str, with_bias: bool):
        super().__init__(name)
        self.with_bias = with_bias

    def pattern(self, op, x, rows, w, b, flat):
        patches = op.Reshape(x, rows, _allow_other_attributes=True)
        conv = (op.Conv(patches, w, b, _allow_other_attributes=True, _outputs=["conv"]) if self.with_bias
                else op.Conv(patches, w, _allow_other_attributes=True, _outputs=["conv"]))
        return op.Reshape(conv, flat, _allow_other_attributes=True)

    def check(self, context, x, rows, w, flat, conv, **_) -> MatchResult:
        result = MatchResult()
        weight, target, out = _rules.const(w), _rules.const(rows), _rules.const(flat)
        if weight is None or weight.ndim < 3 or target is None or out is None:
            return result.fail("weight or reshape targets are not constants")
        node = conv.producer()
        kernel = list(weight.shape[2:])
        attrs = node.attributes
        if (list(attrs.get_ints("strides", [1] * len(kernel))) != kernel
                or list(attrs.get_ints("kernel_shape", kernel)) != kernel
                or any(attrs.get_ints("pads", [0] * 2 * len(kernel)))
                or any(d != 1 for d in attrs.get_ints("dilations", [1] * len(kernel)))
                or attrs.get_int("group", 1) != 1 or attrs.get_string("auto_pad", "NOTSET") != "NOTSET"):
            return result.fail("Conv is not one kernel per row (stride = kernel, no pads, dilation 1, 1 group)")
        if list(target[1:]) != list(weight.shape[1:]) or list(out[1:]) != [weight.shape[0]] or len(out) != 2:
            return result.fail("Reshapes do not give one kernel per row in and [rows, out channels] out")
        if x.shape is not None and (x.shape.rank() != 2 or (isinstance(x.shape[1], int)
                                                            and x.shape[1] != int(np.prod(weight.shape[1:])))):
            return result.fail("input is not [rows, kernel size]")
        return result

    def rewrite(self, op, x, w, b=None, **_):
        weight = _rules.const(w)
        matrix = np.ascontiguousarray(weight.reshape(weight.shape[0], -1).T)  # [K, M]
        matmul = op.MatMul(x, op.initializer(ir.tensor(matrix), name=f"{w.name}.matmul"))
        return op.Add(matmul, b) if self.with_bias else matmul


RULES = RewriteRuleSet([PatchConvToMatMul.rule("patch_conv_bias", True), PatchConvToMatMul.rule("patch_conv", False)])


def apply(model: ir.Model) -> int:
    """Rewrite every one-kernel-per-row patch Conv; return how many."""
    return _rules.apply(RULES, model)
