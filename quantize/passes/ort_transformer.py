"""ONNX Runtime's transformer optimizer (python fusions only, opt_level 0: the saved graph stays
portable across ORT versions and execution providers).

model_type 'vit' with the attention mask kept as a mask (AttentionMaskFormat.AttentionMask): on this
encoder it fuses Gelu / FastGelu / BiasGelu and LayerNormalization; its Attention and
SkipLayerNormalization fusions find nothing (packed qkv, 2D RoPE, custom mask, rank-2 activations),
which the project's own passes then handle.

In a graph with subgraphs (Qwen3-VL's per-frame attention Loop in every block), large weights are held
out while ORT's optimizer runs (it gets data-less stand-ins and reads only small constants): its symbolic
shape inference copies every initializer of the main graph into each Loop body it infers, which with 24
Loops at 2B dims exhausts memory. A graph without subgraphs (Phi-4-multimodal) keeps its weights: the
Attention fusion reads the q, k, v weights to concatenate them.
"""

import logging

import onnx_ir as ir
from onnxruntime.transformers.fusion_options import AttentionMaskFormat, FusionOptions
from onnxruntime.transformers.optimizer import optimize_model

from core import onnx_io

MODEL_TYPE = "vit"
HOLD_OUT_BYTES = 1 << 16  # weights this large or larger never reach ORT's optimizer


def apply(model: ir.Model, num_heads: int, hidden_size: int) -> tuple[ir.Model, dict[str, int]]:
    """Return (optimized model, {fused op type: count} as ORT reports them, zero counts dropped)."""
    options = FusionOptions(MODEL_TYPE)
    options.attention_mask_format = AttentionMaskFormat.AttentionMask
    held = _hold_out_weights(model) if _has_subgraphs(model) else {}
    try:
        proto = onnx_io.to_proto(model)
    finally:
        _put_back(model, held)
    logging.getLogger("onnxruntime.transformers").setLevel(logging.ERROR)
    optimized = optimize_model(proto, model_type=MODEL_TYPE, num_heads=num_heads, hidden_size=hidden_size,
                               optimization_options=options, opt_level=0, only_onnxruntime=False)
    del proto
    stats = {k: v for k, v in optimized.get_fused_operator_statistics().items() if v}
    result = ir.serde.deserialize_model(optimized.model)
    _put_back(result, held)
    return result, stats


def _has_subgraphs(model: ir.Model) -> bool:
    return any(isinstance(attr.value, ir.Graph) or (isinstance(attr.value, list) and attr.value
                                                    and isinstance(attr.value[0], ir.Graph))
               for node in model.graph for attr in node.attributes.values())


def _hold_out_weights(model: ir.Model) -> dict[str, ir.TensorProtocol]:
    """Replace every initializer of HOLD_OUT_BYTES or more by an external-data stand-in with no data
    behind it; return {name: the real tensor}."""
    held = {}
    for name, value in model.graph.initializers.items():
        tensor = value.const_value
        if tensor is not None and tensor.nbytes >= HOLD_OUT_BYTES:
            held[name] = tensor
            value.const_value = ir.ExternalTensor(f"held-out/{name}", 0, tensor.nbytes, tensor.dtype,
                                                  shape=tensor.shape, name=name)
    return held


def _put_back(model: ir.Model, held: dict[str, ir.TensorProtocol]) -> None:
    """Give the initializers named in `held` their real tensors again (the optimizer keeps their names)."""
    for name, value in model.graph.initializers.items():
        if name in held:
            value.const_value = held[name]
