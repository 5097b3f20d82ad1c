"""Inputs of a static Qwen encoder (`builders.vision --static`): a photo resized to the model's one size (torch-free).

A static model takes only pixel_values float32 [t*h*w, C*Tp*P*P] of its grid (ONNX metadata `static_grid_thw`,
`static_size`). An image of any size is resized (PIL bicubic) to exactly WIDTHxHEIGHT — the aspect ratio is not
kept: that is the difference from the dynamic model, whose processor keeps it — then rescaled and normalised
with the generation's mean and std and cut into patches in the processor's merge-block order, the image repeated
over the temporal patch as the processor repeats it.
"""

from __future__ import annotations

import json

import numpy as np
from PIL import Image

from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.families.qwen_vl.generations import GENERATIONS
from vlm_vision_onnx.families.qwen_vl.preprocess_video import patchify
from vlm_vision_onnx.families.resample import normalize

#: The facts of a static model's one layout (`layout`): its grid, as `runtime embed` writes an entry's.
LAYOUT_KEYS = ("grid_thw",)


def static_grid(metadata: dict[str, str]) -> list[int]:
    """[t, h, w] of a static model; UsageError for a model without one (a dynamic export)."""
    if "static_grid_thw" not in metadata:
        raise UsageError("the model is not a static export (no static_grid_thw in its metadata): export one with "
                         "python -m builders.vision --static WIDTHxHEIGHT")
    return json.loads(metadata["static_grid_thw"])[0]


def layout(metadata: dict[str, str]) -> dict:
    """{grid_thw: [t, h, w]} of a static model (families.base.StaticForm.layout)."""
    return {"grid_thw": static_grid(metadata)}


def feeds(rgb: np.ndarray, metadata: dict[str, str]) -> dict[str, np.ndarray]:
    """{pixel_values} of one RGB uint8 image [H, W, 3] of any size at the model's size (`pixels`)."""
    return {"pixel_values": pixels(rgb, metadata)}


def pixels(rgb: np.ndarray, metadata: dict[str, str]) -> np.ndarray:
    """uint8 [H, W, 3] of any size -> pixel_values float32 [t*h*w, 3*Tp*P*P] at the model's static size."""
    settings = GENERATIONS[metadata["family"]].processor
    patch, merge, temporal = settings["patch_size"], settings["merge_size"], settings["temporal_patch_size"]
    t, h, w = static_grid(metadata)
    if t != 1:
        raise UsageError(f"the model is a static video of t={t}: give frames, not one image")
    image = np.asarray(Image.fromarray(rgb).convert("RGB").resize((w * patch, h * patch), Image.Resampling.BICUBIC))
    frames = normalize(np.repeat(image.transpose(2, 0, 1)[None], temporal, axis=0), settings["image_mean"],
                       settings["image_std"], 1 / 255)  # [Tp, 3, H, W]
    out, _ = patchify(frames, patch, merge, temporal)
    if out.shape[1] != int(metadata.get("patch_dim", out.shape[1])):
        raise UsageError(f"the model's patch_dim {metadata['patch_dim']} is not {out.shape[1]} of the "
                         f"{metadata['family']} processor")
    return out
