"""OpenVINO: each ScaledDotProductAttention written as the MatMul-Softmax-MatMul that the CPU plugin fuses with the
key's transpose inside (torch-free).

`untranspose_keys(model)` replaces, in an `openvino.Model` (in place, top level: `core.openvino_branches` has put
the taken If branches there), every non-causal ScaledDotProductAttention whose mask is a constant zero (or absent)
and whose scale is a constant (or absent: head_dim^-0.5) by

    q, k, v [B, H, S, D] -> MatMul(Softmax(MatMul(q * scale, k, transpose_b=True), -1), v)    [B, H, S, D]

the same attention. Why: OpenVINO 2026.4.1's CPU plugin decomposes the op (outside LLM-shaped stateful models) into
its MHA snippets `Subgraph` either way, but from the op it first transposes k to [B, H, D, S] in a node of its own,
run by the reference Transpose (`unknown_bf16` in the profile). A MatMul with transpose_b is taken into the
`Subgraph` with its transpose. One attention at Qwen3-VL-2B dims, 4096 patches (a 1024x1024 photo), bf16 on 2
threads of the AMX Xeon: 283 ms against 296 ms, the key's Transpose node (14.8 ms) gone (`python -m
bench.ov_attention_kernels`; docs/runtime-openvino.md, "The attention's key transpose"). The outputs equal the
op's within the precision's rounding (tests/test_openvino_attention.py): the scale is applied to q here, where the
plugin applies it to q or k; Qwen's head size 64 gives 1/8, exact wherever it is applied.
"""

from __future__ import annotations

import numpy as np

SDPA = "ScaledDotProductAttention"


def _constant(output) -> np.ndarray | None:
    """The value of `output` when it is a Constant (through ConvertLike / Convert), else None."""
    node = output.get_node()
    while node.get_type_name() in ("ConvertLike", "Convert"):
        node = node.input_value(0).get_node()
    return node.get_data() if node.get_type_name() == "Constant" else None


def _scale(op) -> float | None:
    """The scale of an SDPA `op` this rewrite can take (None: leave the op): non-causal, mask absent or a constant
    0, scale a constant scalar or absent with a static head size."""
    if op.get_attributes().get("causal", False):
        return None
    if op.get_input_size() > 3:
        mask = _constant(op.input_value(3))
        if mask is None or mask.size != 1 or float(mask.ravel()[0]) != 0.0:
            return None
    if op.get_input_size() > 4:
        scale = _constant(op.input_value(4))
        return float(scale.ravel()[0]) if scale is not None and scale.size == 1 else None
    head = op.input_value(0).get_partial_shape()
    if head.rank.is_dynamic or head[head.rank.get_length() - 1].is_dynamic:
        return None
    return float(head[head.rank.get_length() - 1].get_length()) ** -0.5


def untranspose_keys(model) -> int:
    """Rewrite `model`'s top-level ScaledDotProductAttention ops as described in the module docstring; returns how
    many."""
    from openvino import opset13 as ops

    count = 0
    for op in model.get_ordered_ops():
        if op.get_type_name() != SDPA or (scale := _scale(op)) is None:
            continue
        q, k, v = (op.input_value(i) for i in range(3))
        scaled = ops.multiply(q, ops.convert_like(ops.constant(np.float32(scale)), q))
        weights = ops.softmax(ops.matmul(scaled, k, transpose_a=False, transpose_b=True), -1)
        out = ops.matmul(weights, v, transpose_a=False, transpose_b=False)
        out.set_friendly_name(op.get_friendly_name())
        op.output(0).replace(out.output(0))
        count += 1
    if count:
        model.validate_nodes_and_infer_types()
    return count
