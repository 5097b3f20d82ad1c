"""Export-time rewrite of the Phi-4-multimodal vision attention, as a patcher that always restores.

transformers sets `Phi4MultimodalVisionAttention.is_causal = True`: with sdpa (and no padded patch,
when the mask is dropped) the vision attention then runs causal, which the model was not trained for.
Inside the block the attention is the eager math, bidirectional by construction (an additive key
mask, no `is_causal` path), written so ONNX Runtime's Attention fusion keeps the mask:
softmax(q k^T / sqrt(d) + mask) v. The eager `* scaling` is a Div here: two Mul parents of the
mask Add (scores and BERT's mask) hide the mask from the fusion's pattern matcher. Outside the block
the class is untouched.
"""

import math

import torch
from transformers.models.phi4_multimodal import modeling_phi4_multimodal as phi4

from builders.patching import swapped


def bidirectional_attention_forward(
    self: phi4.Phi4MultimodalVisionAttention,
    hidden_states: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """hidden_states [B, S, D], attention_mask additive [B, 1, 1, S] -> ([B, S, D], None)."""
    if attention_mask is None:
        raise ValueError("the export attention needs the additive key mask")
    shape = (*hidden_states.shape[:-1], -1, self.head_dim)
    query = self.q_proj(hidden_states).view(shape).transpose(1, 2)  # [B, H, S, d]
    key = self.k_proj(hidden_states).view(shape).transpose(1, 2)
    value = self.v_proj(hidden_states).view(shape).transpose(1, 2)
    scores = torch.matmul(query, key.transpose(2, 3)) / math.sqrt(self.head_dim) + attention_mask
    out = torch.matmul(torch.softmax(scores, dim=-1), value)  # [B, H, S, d]
    out = out.transpose(1, 2).reshape(*hidden_states.shape[:-1], -1)
    return self.out_proj(out), None


def bidirectional_attention():
    """Swap `Phi4MultimodalVisionAttention.forward` for the export form inside the block; restore on exit."""
    return swapped(phi4.Phi4MultimodalVisionAttention, "forward", bidirectional_attention_forward)
