"""Packed ViT attention -> com.microsoft MultiHeadAttention with an additive attention bias.

Target (both exporters, after constant folding), q, k, v [N, H, D] (rotary already applied to q, k):
    q4 = Unsqueeze(Transpose(q, [1, 0, 2]), [0])                       # [1, H, N, D]
    kT = Transpose(Unsqueeze(Transpose(k, [1, 0, 2]), [0]), [0, 1, 3, 2])
    v4 = Unsqueeze(Transpose(v, [1, 0, 2]), [0])
    p  = Softmax(Add(Mul(MatMul(q4, kT), scale), bias), axis=-1)        # bias [1, 1, N, N]
    out = Reshape(Transpose(MatMul(p, v4), [0, 2, 1, 3]), [-1, H*D])   # [N, H*D]
Replacement:
    out = Reshape(MultiHeadAttention(Reshape(q, [1, -1, H*D]), Reshape(k, ...), Reshape(v, ...),
                                     attention_bias=bias, num_heads=H, scale=scale), [-1, H*D])
The bias is the block-diagonal frame mask (0 within a frame, float32 min across frames/images).
"""

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter.pattern import MatchResult, RewriteRuleClassBase, RewriteRuleSet

from quantize.passes import _rules


def _heads(op, x, axes):
    return op.Unsqueeze(op.Transpose(x, perm=[1, 0, 2]), axes)


class PackedAttention(RewriteRuleClassBase):
    def pattern(self, op, q, k, v, ax_q, ax_k, ax_v, scale, bias, shape):
        scores = op.MatMul(_heads(op, q, ax_q), op.Transpose(_heads(op, k, ax_k), perm=[0, 1, 3, 2]))
        probs = op.Softmax(op.Add(op.Mul(scores, scale), bias), axis=-1)
        context = op.Transpose(op.MatMul(probs, _heads(op, v, ax_v)), perm=[0, 2, 1, 3])
        return op.Reshape(context, shape, _allow_other_attributes=True)

    def check(self, context, q, k, v, ax_q, ax_k, ax_v, scale, bias, shape, **_) -> MatchResult:
        result = MatchResult()
        if not all(_rules.is_const(ax, [0]) for ax in (ax_q, ax_k, ax_v)):
            return result.fail("Unsqueeze axes are not [0]")
        dims = _rules.static_dims(q, 3)
        if dims is None or not all(isinstance(d, int) for d in dims[1:]):
            return result.fail("q is not [N, H, D] with static H, D", q)
        if any(_rules.static_dims(x, 3) not in (None, dims) for x in (k, v)) and k.shape != q.shape:
            return result.fail("k or v shape differs from q", k)
        s = _rules.const(scale)
        if s is None or s.size != 1:
            return result.fail("scale is not a constant scalar", scale)
        if not _rules.is_const(shape, [-1, dims[1] * dims[2]]):
            return result.fail("output reshape is not [-1, H*D]", shape)
        if bias.shape is not None and (bias.shape.rank() != 4 or list(bias.shape)[:2] != [1, 1]):
            return result.fail("bias is not [1, 1, N, N]", bias)
        return result

    def rewrite(self, op, q, k, v, scale, bias, shape, **_):
        _, heads, head_dim = q.shape
        packed = op.Constant(value=ir.tensor(np.array([1, -1, heads * head_dim], dtype=np.int64)))
        q3, k3, v3 = (op.Reshape(x, packed) for x in (q, k, v))
        attention = op.MultiHeadAttention(q3, k3, v3, None, None, bias, num_heads=heads,
                                          scale=float(_rules.const(scale).ravel()[0]), _domain="com.microsoft")
        return op.Reshape(attention, shape)


RULES = RewriteRuleSet([PackedAttention.rule()])


def apply(model: ir.Model) -> int:
    """Fuse every packed attention; return how many."""
    return _rules.apply(RULES, model)
