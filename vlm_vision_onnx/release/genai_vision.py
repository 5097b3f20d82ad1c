"""The vision encoder of an onnxruntime-genai package: one of BUILD's encoders under genai's I/O names.

genai 0.18's Qwen pipelines feed `pixel_values` float32 [num_patches, 3*2*P*P] and `image_grid_thw` int64
[num_images, 3] (its processor's output names) and reads one output, `image_features` [num_tokens,
out_hidden]; its C++ pipeline has no DeepStack input. So the package's encoder is BUILD's with `grid_thw`
renamed `image_grid_thw` and the DeepStack outputs (`deepstack_embeds_0..k-1`) removed, together with the
merger layers that computed only them. Everything else (the graph, the weights, the metadata) is unchanged.
"""

from __future__ import annotations

from pathlib import Path

from onnx_ir.passes.common import RemoveUnusedNodesPass

from vlm_vision_onnx.core import onnx_io
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.families.base import FEATURES

FILE = "vision.onnx"
#: Our input name -> genai's (`model.vision.inputs` of genai_config.json).
INPUTS = {"pixel_values": "pixel_values", "grid_thw": "image_grid_thw"}


def write(model_file: Path, dest: Path) -> dict:
    """Write DEST/vision.onnx (+ vision.onnx.data when large) from `model_file`; return {"file", "inputs",
    "outputs", "dropped_outputs"} (names)."""
    model = onnx_io.load(model_file)
    names = [v.name for v in model.graph.inputs]
    if names != list(INPUTS):
        raise UsageError(f"{model_file}: inputs {names}, expected {list(INPUTS)} (a Qwen vision encoder)")
    outputs = list(model.graph.outputs)
    if outputs[0].name != FEATURES:
        raise UsageError(f"{model_file}: first output is {outputs[0].name!r}, not {FEATURES!r}; re-export it")
    for value in model.graph.inputs:
        value.name = INPUTS[value.name]
    model.graph.outputs.clear()
    model.graph.outputs.append(outputs[0])
    RemoveUnusedNodesPass()(model)
    model.metadata_props["genai_dropped_outputs"] = ",".join(v.name for v in outputs[1:])
    onnx_io.save(model, dest / FILE)
    return {"file": FILE, "inputs": list(INPUTS.values()), "outputs": [FEATURES],
            "dropped_outputs": [v.name for v in outputs[1:]]}
