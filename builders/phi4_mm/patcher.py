"""Export-time settings of the Phi-4-multimodal vision attention, as a patcher that always restores.

transformers sets `Phi4MultimodalVisionAttention.is_causal = True`: with sdpa (and no padded patch,
when the mask is dropped) the vision attention then runs causal, which the model was not trained for.
Inside the block every vision attention of `vision_model` is non-causal and dispatched to the eager
attention (an explicit additive mask, no `is_causal` path).
"""

import contextlib

import torch
from transformers.models.phi4_multimodal import modeling_phi4_multimodal as phi4


@contextlib.contextmanager
def bidirectional_eager_attention(vision_model: torch.nn.Module):
    """Set `is_causal = False` and eager attention on `vision_model`'s attentions; restore on exit."""
    config = vision_model.config
    attentions = [m for m in vision_model.modules() if isinstance(m, phi4.Phi4MultimodalVisionAttention)]
    saved = (config._attn_implementation, [m.is_causal for m in attentions])
    config._attn_implementation = "eager"
    for module in attentions:
        module.is_causal = False
    try:
        yield
    finally:
        config._attn_implementation = saved[0]
        for module, causal in zip(attentions, saved[1]):
            module.is_causal = causal
