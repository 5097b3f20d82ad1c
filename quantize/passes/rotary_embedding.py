"""2D rotary embedding (rotate_half form) -> com.microsoft RotaryEmbedding, one cos/sin row per patch.

Target, x [N, H, D], cos = Concat(c, c, axis=-1) and sin = Concat(s, s, axis=-1) [N, D] with
c, s [N, D/2] (the Qwen towers' 2D RoPE: per-patch row/column frequencies; Qwen2.5-VL permutes the rows of
cos and sin into window order, which the cache then replays on c and s), feeding the packed layout:
    y = Reshape(x * Unsqueeze(cos, [-2]) + Concat(-x[..., D/2:], x[..., :D/2]) * Unsqueeze(sin, [-2]),
                [1, -1, H*D])                                                    # [1, N, H*D]
Replacement:
    y = RotaryEmbedding(Reshape(x, [1, -1, H*D]), position_ids=[arange(N)], cos_cache=c, sin_cache=s,
                        num_heads=H, interleaved=0)
The cache is indexed by patch: row i of c holds patch i's angles, so position id i = i. Reshape
[1, -1, H*D] is what the attention fusion feeds MultiHeadAttention; run that fusion first.
"""

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass
from onnxscript.rewriter.pattern import MatchResult, RewriteRuleClassBase, RewriteRuleSet

from quantize.passes import _rules

INT64_MAX = np.iinfo(np.int64).max


def _ends_in_minus_one(shape: ir.Value) -> bool:
    """A Reshape shape whose last entry is -1 (constant, or the last input of the Concat building it)."""
    value = _rules.const(shape)
    if value is not None:
        return value.size > 0 and int(value.ravel()[-1]) == -1
    concat = shape.producer()
    return concat is not None and concat.op_type == "Concat" and _rules.is_const(concat.inputs[-1], [-1])


def _row_permutation(table: ir.Value) -> tuple[ir.Value, tuple] | None:
    """(inner, (shape1, index, shape2)) when `table` is Reshape(Gather(Reshape(inner, shape1), index, axis=0),
    shape2) with both shapes ending in -1: the rows of `inner` permuted in groups (Qwen2.5-VL's window order,
    `permute_input_for_window_attn`), which permutes a half-width table the same way; else None."""
    outer = table.producer()
    if outer is None or outer.op_type != "Reshape" or not _ends_in_minus_one(outer.inputs[1]):
        return None
    gather = outer.inputs[0].producer()
    if gather is None or gather.op_type != "Gather" or gather.attributes.get_int("axis", 0) != 0:
        return None
    inner = gather.inputs[0].producer()
    if inner is None or inner.op_type != "Reshape" or not _ends_in_minus_one(inner.inputs[1]):
        return None
    return inner.inputs[0], (inner.inputs[1], gather.inputs[1], outer.inputs[1])


def _half_table(table: ir.Value) -> tuple[ir.Value, tuple | None] | None:
    """(t [N, D/2], permutation) when `table` is Unsqueeze(Concat(t, t, axis=-1), [-2 or 1]) [N, 1, D], its rows
    possibly permuted in between (`_row_permutation`: then permutation names how, to be applied to t); else None."""
    unsqueeze = table.producer()
    if unsqueeze is None or unsqueeze.op_type != "Unsqueeze" or not (
            _rules.is_const(unsqueeze.inputs[1], [-2]) or _rules.is_const(unsqueeze.inputs[1], [1])):
        return None
    full, permutation = unsqueeze.inputs[0], None
    if (permuted := _row_permutation(full)) is not None:
        full, permutation = permuted
    concat = full.producer()
    if concat is None or concat.op_type != "Concat" or len(concat.inputs) != 2 \
            or concat.inputs[0] is not concat.inputs[1] or concat.attributes.get_int("axis", 0) not in (-1, 1):
        return None
    return concat.inputs[0], permutation


def _cache(op, table: ir.Value, width: int) -> ir.Value:
    """The RotaryEmbedding cache [N, D/2 = width] of a matched cos/sin table: t, permuted as the table's rows were
    (reshaped back to the constant [-1, width], the same rows as the table's own [N, -1]: a runtime that infers
    shapes itself, OpenVINO, then knows the cache's width, which its RotaryEmbedding needs)."""
    half, permutation = _half_table(table)
    if permutation is None:
        return half
    shape1, index, _ = permutation
    rows = op.Constant(value=ir.tensor(np.array([-1, width], dtype=np.int64)))
    return op.Reshape(op.Gather(op.Reshape(half, shape1), index, axis=0), rows)


class RotaryEmbedding2D(RewriteRuleClassBase):
    def pattern(self, op, x, cos, sin, s1, e1, a1, t1, s2, e2, a2, t2, shape):
        # cos, sin [N, 1, D] are shared by q and k: matched as inputs, their producers checked below
        first = op.Slice(x, s2, e2, a2, t2)
        rotated = op.Concat(op.Neg(op.Slice(x, s1, e1, a1, t1)), first, axis=-1)
        y = op.Add(op.Mul(x, cos), op.Mul(rotated, sin))
        return op.Reshape(y, shape, _allow_other_attributes=True)

    def check(self, context, x, cos, sin, s1, e1, a1, t1, s2, e2, a2, t2, shape, **_) -> MatchResult:
        result = MatchResult()
        dims = _rules.static_dims(x, 3)
        if dims is None or not all(isinstance(d, int) for d in dims[1:]) or dims[2] % 2:
            return result.fail("x is not [N, H, D] with static H and even D", x)
        half, full = dims[2] // 2, dims[2]
        if not all(_rules.is_const(a, [-1]) or _rules.is_const(a, [2]) for a in (a1, a2)):
            return result.fail("slices are not on the last axis")
        if not (_rules.is_const(t1, [1]) and _rules.is_const(t2, [1])):
            return result.fail("slice steps are not 1")
        end1 = _rules.const(e1)
        if not (_rules.is_const(s1, [half]) and end1 is not None and end1.size == 1 and end1.ravel()[0] >= full):
            return result.fail("second half slice is not [D/2:]")
        if not (_rules.is_const(s2, [0]) and _rules.is_const(e2, [half])):
            return result.fail("first half slice is not [:D/2]")
        for table in (cos, sin):
            if _half_table(table) is None:
                return result.fail("cos/sin is not Unsqueeze(Concat(t, t, axis=-1), [-2])", table)
        if not _rules.is_const(shape, [1, -1, dims[1] * full]):
            return result.fail("not followed by Reshape [1, -1, H*D]", shape)
        return result

    def rewrite(self, op, x, cos, sin, shape, **_):
        heads = x.shape[1]
        num_patches = op.Gather(op.Shape(x), op.Constant(value=ir.tensor(np.array(0, dtype=np.int64))), axis=0)
        zero, one = (op.Constant(value=ir.tensor(np.array(v, dtype=np.int64))) for v in (0, 1))
        position_ids = op.Unsqueeze(op.Range(zero, num_patches, one),
                                    op.Constant(value=ir.tensor(np.array([0], dtype=np.int64))))
        cos_cache, sin_cache = _cache(op, cos, x.shape[2] // 2), _cache(op, sin, x.shape[2] // 2)
        return op.RotaryEmbedding(op.Reshape(x, shape), position_ids, cos_cache, sin_cache,
                                  num_heads=heads, interleaved=0, _domain="com.microsoft")


RULES = RewriteRuleSet([RotaryEmbedding2D.rule()], commute=True)


def apply(model: ir.Model) -> int:
    """Fuse every 2D rotary embedding that feeds the packed attention; return how many. Every fused node then reads
    the first one's position ids (`share_position_ids`)."""
    count = _rules.apply(RULES, model)
    share_position_ids(model)
    return count


def share_position_ids(model: ir.Model) -> int:
    """Point every RotaryEmbedding's position ids at the first one's; return how many were re-pointed.

    Each fused node's ids are arange(N) of its own input's N rows, and every block rotates the same packed
    sequence, so they are one value: read once, a runtime that keeps the integer math on its CPU uploads it once,
    not once per call (ONNX Runtime's WebGPU EP: 48 uploads of about 1 ms each per run at Qwen3-VL-2B's 24 blocks,
    bench.gpu_webgpu's profile). The unread chains are removed."""
    nodes = [n for n in model.graph if n.op_type == "RotaryEmbedding" and n.domain == "com.microsoft"]
    if len(nodes) < 2:
        return 0
    first = nodes[0].inputs[1]
    moved = 0
    for node in nodes[1:]:
        if node.inputs[1] is not first:
            node.replace_input_with(1, first)
            moved += 1
    if moved:
        RemoveUnusedNodesPass()(model)
    return moved
