"""Release facts of the Qwen vision generations (torch-free): the vision `config.json`, the
`preprocessor_config.json`, usage.

- `config.json` is the whole model's config class's `save_pretrained` (`Qwen2VLConfig`, `Qwen2_5_VLConfig`,
  `Qwen3VLConfig`, `Qwen3_5Config`), so that its `model_type` (`qwen2_vl`, `qwen2_5_vl`, `qwen3_vl`, `qwen3_5`)
  and `architectures` name the generation as a checkpoint's do (transformers' and transformers.js's AutoConfig
  pick the model's own classes from them): the checkpoint's `config.json` when the export used a checkpoint,
  else the class's defaults with `vision_config` from the `vision` section of the config file the export
  recorded (configs/NAME.yaml). Its vision facts are checked against the ONNX metadata.
- `preprocessor_config.json` is what the model's own processor writes with `save_pretrained`: the
  checkpoint's processor when the checkpoint ships one, else transformers' `Qwen2VLImageProcessorPil`
  (torch-free) with the generation's published settings (`Generation.processor`: Qwen2-VL and Qwen2.5-VL
  patch 14 and CLIP normalisation, Qwen3-VL and Qwen3.5 patch 16 and mean = std = 0.5), patch, temporal patch
  and merge sizes taken from the vision config.
"""

from __future__ import annotations

import json
from pathlib import Path

from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.families import export_facts
from vlm_vision_onnx.families.qwen_vl.generations import Generation

ACCEPTS = "every image size, image count and video length the model accepts, mixed in one pack"

def config_writer(generation: Generation):
    """`write_config(report, metadata, dest)` of a generation: writes `dest/config.json`, the whole model's config
    (`model_type` the generation's, e.g. `qwen2_5_vl`, its `vision_config` the exported tower's) and returns it."""

    def write_config(report: dict, metadata: dict, dest: Path) -> dict:
        model_class = generation.model_config_class()
        checkpoint = export_facts.checkpoint(report)
        if checkpoint is not None:
            config = model_class(**export_facts.read_json(checkpoint / "config.json"))
            source = f"{checkpoint}/config.json"
        else:
            vision = generation.vision_config_class()(**export_facts.config_vision(report))
            config = model_class(vision_config=vision.to_dict())
            source = report["config"]
        vision = config.vision_config
        patch_dim = vision.in_channels * vision.temporal_patch_size * vision.patch_size**2
        export_facts.check_against_metadata({
            "spatial_merge_size": vision.spatial_merge_size,
            "out_hidden_size": getattr(vision, generation.out_hidden_key),
            "patch_dim": patch_dim,
            "deepstack_visual_indexes": json.dumps(list(getattr(vision, "deepstack_visual_indexes", []))),
        }, metadata, source)
        config.architectures = [generation.architecture]
        config.save_pretrained(dest)
        return export_facts.read_json(dest / "config.json")

    return write_config


def processor_writer(generation: Generation):
    """`write_processor(report, metadata, dest)` of a generation: writes `dest/preprocessor_config.json` through
    the processor's own `save_pretrained` (the checkpoint's when it ships one, else the generation's settings)."""

    def write_processor(report: dict, metadata: dict, dest: Path) -> dict:
        from vlm_vision_onnx.families.qwen_vl import processor_files

        checkpoint = export_facts.checkpoint(report)
        if checkpoint is not None and (checkpoint / "preprocessor_config.json").is_file():
            # the explicit PIL class, not AutoImageProcessor: a checkpoint's auto_map never runs (it is refused)
            processor_files.copy_config(checkpoint, dest)
        else:
            config = export_facts.read_json(dest / "config.json")["vision_config"]
            processor_files.save_config(dest, generation.processor, patch_size=config["patch_size"],
                                        temporal_patch_size=config["temporal_patch_size"],
                                        merge_size=config["spatial_merge_size"])
        written = export_facts.read_json(dest / "preprocessor_config.json")
        merge = written.get("merge_size")
        if str(merge) != str(metadata.get("spatial_merge_size", merge)):
            raise UsageError(f"the processor's merge_size {merge} differs from the model's spatial_merge_size "
                             f"{metadata.get('spatial_merge_size')}")
        return written

    return write_processor


USAGE = """\
import numpy as np
import onnxruntime as ort
from PIL import Image
from transformers import AutoImageProcessor

processor = AutoImageProcessor.from_pretrained("PACKAGE")  # Qwen2VLImageProcessorPil: no torch needed
batch = processor(images=[Image.open("photo.jpg")], return_tensors="np")
session = ort.InferenceSession("PACKAGE/onnx/FILE", providers=["CPUExecutionProvider"])
image_features, *deepstack = session.run(None, {"pixel_values": batch["pixel_values"].astype(np.float32),
                                              "grid_thw": batch["image_grid_thw"].astype(np.int64)})
"""
