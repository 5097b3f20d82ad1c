"""The torch side of each Qwen vision generation: transformers' classes the export builds and patches.

The towers differ in norm, MLP and position table, none of which the export touches: it hands every
grid-dependent tensor to the tower through the precompute keyword arguments all four share (`position_ids`,
`cu_seqlens`, and `interp_indices` / `interp_weights` where there is a position table, `window_index` /
`cu_window_seqlens` where there are windows) and swaps the attention's forward for the segment form
(`patcher`). Which class and function that is, per generation, is declared here.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl
from transformers.models.qwen2_vl import modeling_qwen2_vl
from transformers.models.qwen3_5 import modeling_qwen3_5
from transformers.models.qwen3_vl import modeling_qwen3_vl

from vlm_vision_onnx.families.qwen_vl import generations as declared
from vlm_vision_onnx.families.qwen_vl.generations import Generation


@dataclass(frozen=True)
class TorchGeneration:
    """A generation's declared facts plus its transformers classes.

    `vision_model`: the tower class (forward(pixel_values [N, C*Tp*P*P], grid_thw [I, 3], **precomputed));
    `attention`: its attention class, whose forward the export swaps; `modeling`: the module holding its
    `apply_rotary_pos_emb_vision`; `rotary_embedding`: the class that computes the non-persistent `inv_freq`
    (absent from checkpoints); `position_table`: the tower adds an interpolated learned position table.
    """

    facts: Generation
    modeling: ModuleType
    vision_model: type
    attention: type
    rotary_embedding: type
    position_table: bool

    @property
    def family(self) -> str:
        return self.facts.family

    def apply_rotary(self, query, key, cos, sin):
        """query, key [N, H, D]; cos, sin [N, D] -> the rotated (query, key), the generation's own function."""
        return self.modeling.apply_rotary_pos_emb_vision(query, key, cos, sin)

    def rotated_qkv(self, attention, hidden_states, position_embeddings):
        """The attention module's q, k, v of hidden_states [N, width], rotary applied to q and k: each [N, H, D]."""
        qkv = attention.qkv(hidden_states).reshape(-1, 3, attention.num_heads, attention.head_dim)  # [N, 3, H, D]
        query, key, value = qkv.permute(1, 0, 2, 3).unbind(0)
        cos, sin = position_embeddings
        query, key = self.apply_rotary(query, key, cos, sin)
        return query, key, value


QWEN2_VL = TorchGeneration(declared.QWEN2_VL, modeling_qwen2_vl, modeling_qwen2_vl.Qwen2VisionTransformerPretrainedModel,
                           modeling_qwen2_vl.VisionAttention, modeling_qwen2_vl.Qwen2VLVisionRotaryEmbedding, False)
QWEN2_5_VL = TorchGeneration(declared.QWEN2_5_VL, modeling_qwen2_5_vl,
                             modeling_qwen2_5_vl.Qwen2_5_VisionTransformerPretrainedModel,
                             modeling_qwen2_5_vl.Qwen2_5_VLVisionAttention,
                             modeling_qwen2_5_vl.Qwen2_5_VLVisionRotaryEmbedding, False)
QWEN3_VL = TorchGeneration(declared.QWEN3_VL, modeling_qwen3_vl, modeling_qwen3_vl.Qwen3VLVisionModel,
                           modeling_qwen3_vl.Qwen3VLVisionAttention, modeling_qwen3_vl.Qwen3VLVisionRotaryEmbedding,
                           True)
QWEN3_5 = TorchGeneration(declared.QWEN3_5, modeling_qwen3_5, modeling_qwen3_5.Qwen3_5VisionModel,
                          modeling_qwen3_5.Qwen3_5VisionAttention, modeling_qwen3_5.Qwen3_5VisionRotaryEmbedding, True)

TORCH_GENERATIONS: dict[str, TorchGeneration] = {g.family: g for g in (QWEN2_VL, QWEN2_5_VL, QWEN3_VL, QWEN3_5)}
