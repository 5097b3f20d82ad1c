"""Export-time rewrite of the Qwen3-VL vision attention, as a patcher that always restores.

The eager attention splits q/k/v per frame with `torch.split(..., lengths.tolist())`: traced, the split
sizes become constants of the export grid (wrong or failing at any other layout); under torch.export it
raises GuardOnDataDependentSymNode. The packed form runs one attention over all N patches with the
additive block-diagonal bias of `grid.frame_attention_bias`, which is exactly the per-frame softmax.
"""

import contextlib

import torch
from transformers.models.qwen3_vl import modeling_qwen3_vl as qwen3_vl

BIAS_KWARG = "attention_bias"


def packed_attention_forward(
    self: qwen3_vl.Qwen3VLVisionAttention,
    hidden_states: torch.Tensor,
    cu_seqlens: torch.Tensor | None = None,
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
    **kwargs,
) -> torch.Tensor:
    """hidden_states [N, hidden] -> [N, hidden]; kwargs[BIAS_KWARG] is the [1, 1, N, N] bias.

    cu_seqlens is accepted for signature compatibility and ignored: the bias carries the segments.
    """
    bias = kwargs.get(BIAS_KWARG)
    if bias is None:
        raise ValueError(f"packed attention needs the {BIAS_KWARG!r} keyword argument")
    qkv = self.qkv(hidden_states).reshape(-1, 3, self.num_heads, self.head_dim)  # [N, 3, H, D]
    query, key, value = qkv.permute(1, 0, 2, 3).unbind(0)  # each [N, H, D]
    cos, sin = position_embeddings
    query, key = qwen3_vl.apply_rotary_pos_emb_vision(query, key, cos, sin)
    query, key, value = (x.transpose(0, 1).unsqueeze(0) for x in (query, key, value))  # [1, H, N, D]
    attn_output, _ = qwen3_vl.eager_attention_forward(
        self, query, key, value, attention_mask=bias, scaling=self.scaling
    )  # [1, N, H, D]
    return self.proj(attn_output.reshape(-1, self.dim))


@contextlib.contextmanager
def packed_attention():
    """Swap `Qwen3VLVisionAttention.forward` for the packed form inside the block; restore on exit."""
    original = qwen3_vl.Qwen3VLVisionAttention.forward
    qwen3_vl.Qwen3VLVisionAttention.forward = packed_attention_forward
    try:
        yield
    finally:
        qwen3_vl.Qwen3VLVisionAttention.forward = original
