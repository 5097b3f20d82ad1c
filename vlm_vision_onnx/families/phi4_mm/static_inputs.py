"""Inputs of a static Phi-4-multimodal model (`builders.vision --static WxH`): a photo resized to its one size
(torch-free).

A static model takes only pixel_values float32 [1, C, 3, 448, 448] of one image of WIDTHxHEIGHT pixels (ONNX
metadata `static_image_sizes` [[height, width]], `static_num_crops` C): the processor's crop layout of that size is
the model's constant. An image of any size is resized (PIL bicubic) to exactly WIDTHxHEIGHT (the aspect ratio is not
kept: the difference from the dynamic model, whose processor keeps it), then laid out by the processor's own steps
(`preprocess.preprocess_one`, its published settings) into the global crop and the HD crops.
"""

from __future__ import annotations

import json

import numpy as np
from PIL import Image

from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.families.phi4_mm import crops, preprocess

#: The facts of a static model's one layout (`layout`), as `runtime embed` writes a dynamic entry's.
LAYOUT_KEYS = ("image_size", "num_crops")


def static_size(metadata: dict[str, str]) -> tuple[int, int]:
    """(height, width) of a static model's one image; UsageError for a dynamic export."""
    if "static_image_sizes" not in metadata:
        raise UsageError("the model is not a static export (no static_image_sizes in its metadata): export one with "
                         "python -m builders.vision --static WIDTHxHEIGHT")
    height, width = json.loads(metadata["static_image_sizes"])[0]
    return int(height), int(width)


def layout(metadata: dict[str, str]) -> dict:
    """{image_size: [H, W] of the HD canvas (the processor's image_sizes: whole crops), num_crops: C (with the
    global crop)} of a static model (families.base.StaticForm.layout)."""
    grid = crops.layout(*static_size(metadata))
    return {"image_size": [grid.rows * crops.CROP, grid.cols * crops.CROP], "num_crops": grid.crops}


def feeds(rgb: np.ndarray, metadata: dict[str, str]) -> dict[str, np.ndarray]:
    """{pixel_values} of one RGB uint8 image [H, W, 3] of any size at the model's size (`pixels`)."""
    return {"pixel_values": pixels(rgb, metadata)}


def pixels(rgb: np.ndarray, metadata: dict[str, str]) -> np.ndarray:
    """uint8 [H, W, 3] of any size -> pixel_values float32 [1, C, 3, 448, 448] at the model's static size."""
    height, width = static_size(metadata)
    image = np.asarray(Image.fromarray(rgb).convert("RGB").resize((width, height), Image.Resampling.BICUBIC))
    crops, _, _, _ = preprocess.preprocess_one(image, preprocess.config_dict())
    expected = int(metadata.get("static_num_crops", len(crops)))
    if len(crops) != expected:
        raise UsageError(f"the processor lays {width}x{height} out as {len(crops)} crops, the model takes {expected}")
    return crops[None]
