"""Release facts of Qwen3-VL (torch-free): its vision `config.json`, its `preprocessor_config.json`, usage.

- `config.json` is `Qwen3VLVisionConfig.save_pretrained`: from the checkpoint's `config.json`
  (`vision_config`) when the export used a checkpoint, else from the `vision` section of the config
  file the export recorded (configs/NAME.yaml). Its facts are checked against the ONNX metadata.
- `preprocessor_config.json` is what the model's own processor writes with `save_pretrained`: the
  checkpoint's processor when the checkpoint ships one, else transformers' `Qwen2VLImageProcessorPil`
  (torch-free) with Qwen3-VL's settings (`families.qwen3_vl.preprocess.SETTINGS`: patch 16, merge 2,
  temporal patch 2, mean = std = 0.5, pixels between `families.qwen3_vl.layouts.MIN_PIXELS` and
  `MAX_PIXELS`), patch, temporal patch and merge sizes taken from the vision config.
"""

from __future__ import annotations

import json
from pathlib import Path

from core.errors import UsageError
from families import export_facts

ACCEPTS = "every image size, image count and video length the model accepts, mixed in one pack"

def write_config(report: dict, metadata: dict, dest: Path) -> dict:
    """Write `dest/config.json` (Qwen3VLVisionConfig) and return it."""
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLConfig, Qwen3VLVisionConfig

    checkpoint = export_facts.checkpoint(report)
    if checkpoint is not None:
        config = Qwen3VLConfig(**export_facts.read_json(checkpoint / "config.json")).vision_config
        source = f"{checkpoint}/config.json"
    else:
        config = Qwen3VLVisionConfig(**export_facts.config_vision(report))
        source = report["config"]
    patch_dim = config.in_channels * config.temporal_patch_size * config.patch_size**2
    export_facts.check_against_metadata({
        "spatial_merge_size": config.spatial_merge_size, "out_hidden_size": config.out_hidden_size,
        "patch_dim": patch_dim,
        "deepstack_visual_indexes": json.dumps(list(config.deepstack_visual_indexes)),
    }, metadata, source)
    config.save_pretrained(dest)
    return export_facts.read_json(dest / "config.json")


def write_processor(report: dict, metadata: dict, dest: Path) -> dict:
    """Write `dest/preprocessor_config.json` through the processor's own `save_pretrained`; return it."""
    from transformers import AutoImageProcessor

    from families.qwen3_vl import preprocess as qwen3_vl

    checkpoint = export_facts.checkpoint(report)
    if checkpoint is not None and (checkpoint / "preprocessor_config.json").is_file():
        AutoImageProcessor.from_pretrained(checkpoint, backend="pil").save_pretrained(dest)
    else:
        config = export_facts.read_json(dest / "config.json")
        qwen3_vl.save_config(dest, patch_size=config["patch_size"], temporal_patch_size=config["temporal_patch_size"],
                             merge_size=config["spatial_merge_size"])
    written = export_facts.read_json(dest / "preprocessor_config.json")
    merge = written.get("merge_size")
    if str(merge) != str(metadata.get("spatial_merge_size", merge)):
        raise UsageError(f"the processor's merge_size {merge} differs from the model's spatial_merge_size "
                         f"{metadata.get('spatial_merge_size')}")
    return written


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
