"""Phi-4-multimodal's image embedding at one static image layout (`python -m builders.vision --static WxH`).

A static model takes one image of WIDTHxHEIGHT pixels: the processor lays that size out as rows x cols HD crops of
448 pixels plus the global crop, with the padded patches its mask marks (`families.phi4_mm.crops.layout`); images of
other sizes are resized to it first. Everything that layout decides (the patch positions, the attention bias of the
padded patches, the HD merge's source rows and the token count) is computed here once, in eager, by the same
functions the dynamic export traces (`ImageFeatures.layout`), and enters the graph as constants: it takes
`pixel_values` [1, C, 3, 448, 448] only and returns image_features [T, out_hidden] with C and T those of the layout.
"""

from __future__ import annotations

import numpy as np
import torch

from builders.phi4_mm.model import ImageFeatures
from vlm_vision_onnx.families.phi4_mm import crops


def fixed_inputs(images: list) -> dict[str, np.ndarray]:
    """The inputs a static model of `images` ([[height, width]], one image) no longer takes: image_attention_mask
    float32 [1, C, 32, 32] and image_sizes int64 [1, 2], the processor's for that size."""
    masks, sizes = crops.pack_arrays([crops.layout(int(h), int(w)) for h, w in images])
    return {"image_attention_mask": masks, "image_sizes": sizes}


class StaticImageFeatures(torch.nn.Module):
    """pixel_values [1, C, 3, 448, 448] -> image_features [T, out_hidden] of `features`' embedding at the layout of
    `images`; the layout's positions [C, 1024], bias [C, 1, 1, 1024] and rows [T] are buffers (graph constants)."""

    def __init__(self, features: ImageFeatures, images: list):
        super().__init__()
        self.inner = features
        fixed = {name: torch.from_numpy(value) for name, value in fixed_inputs(images).items()}
        positions, bias, rows = features.layout(fixed["image_attention_mask"], fixed["image_sizes"])
        self.register_buffer("positions", positions, persistent=False)
        self.register_buffer("bias", bias, persistent=False)
        self.register_buffer("rows", rows, persistent=False)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.inner.features(pixel_values.flatten(0, 1), self.positions, self.bias, self.rows)
