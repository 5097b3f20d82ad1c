"""Export-time rewrite of the Qwen3-VL vision attention, as a patcher that always restores.

The eager attention splits q/k/v per frame with `torch.split(..., lengths.tolist())`: traced, the split
sizes become constants of the export grid (wrong or failing at any other layout); under torch.export it
raises GuardOnDataDependentSymNode. The patched form hands q, k, v and `grid_thw` to the custom op of
`segment_attention`, which both exporters lower to a Loop over the frames computed from `grid_thw`
inside the graph (one fused attention per frame, no N x N tensor: see that module for the decision).
"""


import torch
from transformers.models.qwen3_vl import modeling_qwen3_vl as qwen3_vl

from builders.patching import swapped
from builders.qwen3_vl.segment_attention import segment_attention

GRID_KWARG = "segment_grid_thw"


def segment_attention_forward(
    self: qwen3_vl.Qwen3VLVisionAttention,
    hidden_states: torch.Tensor,
    cu_seqlens: torch.Tensor | None = None,
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
    **kwargs,
) -> torch.Tensor:
    """hidden_states [N, hidden] -> [N, hidden]; kwargs[GRID_KWARG] is grid_thw int64 [I, 3].

    cu_seqlens is accepted for signature compatibility and ignored: the op derives the frames itself.
    """
    grid_thw = kwargs.get(GRID_KWARG)
    if grid_thw is None:
        raise ValueError(f"segment attention needs the {GRID_KWARG!r} keyword argument")
    qkv = self.qkv(hidden_states).reshape(-1, 3, self.num_heads, self.head_dim)  # [N, 3, H, D]
    query, key, value = qkv.permute(1, 0, 2, 3).unbind(0)  # each [N, H, D]
    cos, sin = position_embeddings
    query, key = qwen3_vl.apply_rotary_pos_emb_vision(query, key, cos, sin)
    query, key, value = (x.reshape(1, -1, self.dim) for x in (query, key, value))  # [1, N, H*D]
    attended = segment_attention(query, key, value, grid_thw, self.num_heads, self.scaling)  # [1, N, H*D]
    return self.proj(attended.reshape(-1, self.dim))


def segment_attention_patch():
    """Swap `Qwen3VLVisionAttention.forward` for the segment form inside the block; restore on exit."""
    return swapped(qwen3_vl.Qwen3VLVisionAttention, "forward", segment_attention_forward)
