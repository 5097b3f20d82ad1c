"""The embedding model of an onnxruntime-genai package: token embeddings with the image tokens replaced.

    input_ids       int64   [batch_size, sequence_length]
    image_features  float32 [num_image_tokens, hidden]     (the vision model's output; 0 rows for text only)
 -> inputs_embeds   float32 [batch_size, sequence_length, hidden]

`inputs_embeds[b, s] = embed_tokens[input_ids[b, s]]`, except at the positions holding `image_token_id`,
which take the rows of `image_features` in order (row-major over batch and sequence): the k-th image token
gets row k, as transformers' `masked_scatter` does. The graph pads `image_features` with one zero row and
gathers it at every other position, so a prompt without images (0 feature rows) runs the same graph.
genai 0.18 calls this model before the decoder at every step (prefill and each generated token).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx_ir as ir

from vlm_vision_onnx.core import onnx_io

FILE = "embedding.onnx"
OPSET = 18


def build(embed_tokens: np.ndarray, image_token_id: int) -> ir.Model:
    """The embedding model for `embed_tokens` float32 [vocab, hidden] and the image token's id."""
    vocab, hidden = embed_tokens.shape
    input_ids = ir.Value(name="input_ids", type=ir.TensorType(ir.DataType.INT64),
                         shape=ir.Shape(["batch_size", "sequence_length"]))
    features = ir.Value(name="image_features", type=ir.TensorType(ir.DataType.FLOAT),
                        shape=ir.Shape(["num_image_tokens", hidden]))
    tape = ir.tape.Tape()
    weight = tape.initializer(ir.tensor(np.asarray(embed_tokens, dtype=np.float32), name="embed_tokens.weight"))

    def const(value, name: str) -> ir.Value:
        return tape.initializer(ir.tensor(np.asarray(value, dtype=np.int64), name=name))

    minus_one, zero, one = const([-1], "minus_one"), const(0, "zero"), const([1], "one")
    text = tape.op("Gather", [weight, input_ids])                                     # [B, S, H]
    is_image = tape.op("Equal", [input_ids, const(image_token_id, "image_token_id")])  # [B, S]
    flat = tape.op("Reshape", [tape.op("Cast", [is_image], {"to": ir.DataType.INT64}), minus_one])
    rank = tape.op("Sub", [tape.op("CumSum", [flat, zero]), one])                     # k-th image token -> k
    rank = tape.op("Reshape", [rank, tape.op("Shape", [input_ids])])                  # [B, S]
    rows = tape.op("Shape", [features], {"start": 0, "end": 1})                       # [1]: num_image_tokens
    index = tape.op("Where", [is_image, rank, tape.op("Squeeze", [rows])])            # text -> the zero row
    width = tape.op("Shape", [features], {"start": 1, "end": 2})
    zero_row = tape.op("ConstantOfShape", [tape.op("Concat", [one, width], {"axis": 0})],
                       {"value": ir.tensor(np.zeros(1, np.float32))})
    padded = tape.op("Concat", [features, zero_row], {"axis": 0})                     # [N + 1, H]
    image = tape.op("Gather", [padded, index])                                        # [B, S, H]
    embeds = tape.op("Where", [tape.op("Unsqueeze", [is_image, minus_one]), image, text])
    embeds.name = "inputs_embeds"
    embeds.type = ir.TensorType(ir.DataType.FLOAT)
    embeds.shape = ir.Shape(["batch_size", "sequence_length", hidden])
    graph = ir.Graph([input_ids, features], [embeds], nodes=tape.nodes, initializers=tape.initializers,
                     opset_imports={"": OPSET}, name="embedding")
    model = ir.Model(graph, ir_version=onnx_io.MAX_IR_VERSION, producer_name="vlm-vision-onnx")
    model.metadata_props.update({"image_token_id": str(image_token_id), "vocab_size": str(vocab)})
    return model


def write(embed_tokens: np.ndarray, image_token_id: int, dest: Path) -> dict:
    """Write DEST/embedding.onnx (+ embedding.onnx.data when large); return its genai_config facts."""
    onnx_io.save(build(embed_tokens, image_token_id), dest / FILE)
    return {"file": FILE, "inputs": ["input_ids", "image_features"], "outputs": ["inputs_embeds"]}
