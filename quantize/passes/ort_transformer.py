"""ONNX Runtime's transformer optimizer (python fusions only, opt_level 0: the saved graph stays
portable across ORT versions and execution providers).

model_type 'vit' with the attention mask kept as a mask (AttentionMaskFormat.AttentionMask): on this
encoder it fuses Gelu / FastGelu / BiasGelu and LayerNormalization; its Attention and
SkipLayerNormalization fusions find nothing (packed qkv, 2D RoPE, custom mask, rank-2 activations),
which the project's own passes then handle.
"""

import logging

import onnx_ir as ir
from onnxruntime.transformers.fusion_options import AttentionMaskFormat, FusionOptions
from onnxruntime.transformers.optimizer import optimize_model

from core import onnx_io

MODEL_TYPE = "vit"


def apply(model: ir.Model, num_heads: int, hidden_size: int) -> tuple[ir.Model, dict[str, int]]:
    """Return (optimized model, {fused op type: count} as ORT reports them, zero counts dropped)."""
    options = FusionOptions(MODEL_TYPE)
    options.attention_mask_format = AttentionMaskFormat.AttentionMask
    proto = onnx_io.to_proto(model)
    logging.getLogger("onnxruntime.transformers").setLevel(logging.ERROR)
    optimized = optimize_model(proto, model_type=MODEL_TYPE, num_heads=num_heads, hidden_size=hidden_size,
                               optimization_options=options, opt_level=0, only_onnxruntime=False)
    stats = {k: v for k, v in optimized.get_fused_operator_statistics().items() if v}
    result = ir.serde.deserialize_model(optimized.model)
    return result, stats
