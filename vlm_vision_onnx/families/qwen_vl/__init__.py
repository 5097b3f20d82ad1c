"""The Qwen vision generations' family objects (torch-free): Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5.

One `Family` per generation, made by `make_family` from its declared `generations.Generation`: they share the
I/O contract (`contract`), the layouts (`layouts`), the release facts (`release`) and the preprocessing
(`processing`); what differs is the generation's declared facts. The torch side is builders/qwen_vl/.

Inputs pixel_values float32 [num_patches, C*Tp*P*P], grid_thw int64 [num_images, 3]; outputs image_features
[num_tokens, out_hidden] and, for Qwen3-VL, deepstack_embeds_0..k-1 of the same shape (`contract`). A layout
is {"grid_thw": [[t, h, w], ...]}.
"""

from __future__ import annotations

import json
import math

import numpy as np

from vlm_vision_onnx.families.base import Family, Inputs, Metadata, Processing, Release, StaticForm
from vlm_vision_onnx.families.qwen_vl import (
    contract,
    generations,
    layouts,
    processing,
    release,
    static_inputs,
)
from vlm_vision_onnx.families.qwen_vl.generations import GENERATIONS, Generation

#: `window_patches`: the attention window's side in patches, written where the generation has windows.
METADATA_KEYS = ("family", "export_grid_thw", "export_num_patches", "export_num_tokens", "spatial_merge_size",
                 "patch_dim", "out_hidden_size", "deepstack_visual_indexes", "window_patches")


def output_names(metadata: Metadata) -> list[str]:
    return contract.output_names(len(json.loads(metadata.get("deepstack_visual_indexes", "[]"))))


def _merge(metadata: Metadata) -> int:
    return int(metadata.get("spatial_merge_size", 2))


def window_patches(metadata: Metadata, generation: Generation) -> int:
    """The attention window's side in patches (0: no windows); an export older than the `window_patches` key has
    the published Qwen2.5-VL's."""
    if not generation.windows:
        return 0
    return int(metadata.get("window_patches", layouts.PUBLISHED_WINDOW_PATCHES))


def _patch_dim(metadata: Metadata) -> int:
    return int(metadata.get("patch_dim", 1536))


def check_inputs(inputs: Inputs, metadata: Metadata) -> None:
    contract.check_inputs(inputs["pixel_values"], inputs["grid_thw"], _merge(metadata), _patch_dim(metadata))


def case_layout(inputs: Inputs) -> dict:
    return {"grid_thw": np.asarray(inputs["grid_thw"]).tolist(), "num_patches": int(inputs["pixel_values"].shape[0])}


def layout_inputs(layout: dict, metadata: Metadata, rng: np.random.Generator) -> Inputs:
    """Normal(0, 1) pixel_values [sum(t*h*w), patch_dim] and the layout's grid_thw int64 [num_images, 3]."""
    pixels, grid = layouts.random_pixels(layout["grid_thw"], _patch_dim(metadata), rng)
    return {"pixel_values": pixels, "grid_thw": grid}


def layout_pixels(layout: dict, metadata: Metadata) -> int:
    """The pixels of the layout's largest image or frame: max h * w of its grid_thw rows, times the patch's area
    (patch_dim = 3 channels * 2 temporal * patch**2)."""
    patch = math.isqrt(_patch_dim(metadata) // 6)
    return max(int(h) * int(w) for _, h, w in layout["grid_thw"]) * patch * patch


def make_family(generation: Generation) -> Family:
    """The family object of one Qwen vision generation."""

    def default_layouts(metadata: Metadata) -> list[tuple[str, dict]]:
        example = json.loads(metadata.get("export_grid_thw", "[[1, 16, 16], [1, 12, 20]]"))
        return layouts.default_layouts(example, generation.patch, _merge(metadata), generation.pixel_bounds,
                                       window_patches(metadata, generation))

    return Family(
        name=generation.family,
        title=generation.title,
        builder=f"builders.qwen_vl.family:{generation.family}",
        input_names=contract.INPUT_NAMES,
        input_types=contract.INPUT_TYPES,
        output_names=output_names,
        dims={
            contract.DIM_PATCHES: "patches in the pack: sum of t*h*w over its images and videos",
            contract.DIM_IMAGES: "images and videos in the pack (rows of grid_thw: t, h, w in patches)",
            contract.DIM_TOKENS: "merged tokens: num_patches / spatial_merge_size**2",
        },
        check_inputs=check_inputs,
        metadata_keys=METADATA_KEYS,
        layout_keys=("grid_thw",),
        case_layout=case_layout,
        layout_inputs=layout_inputs,
        default_layouts=default_layouts,
        layout_pixels=layout_pixels,
        # Attention needs no pass: the export runs it per frame (or window) as MultiHeadAttention inside a Loop.
        optimize_passes=("fold", "gemm", "patch", "ort", "rotary"),
        optimize_options=lambda metadata: {"num_heads": 0, "hidden_size": 0},
        surgery_checks=("debake", "audit", "claims"),
        release=Release(release.config_writer(generation), release.processor_writer(generation), release.ACCEPTS,
                        release.USAGE),
        processing=Processing(processing.processor, processing.image_inputs, processing.load_processor,
                              processing.embed_packer(generation), processing.max_pixels),
        shipping=generation.shipping,
        static=StaticForm(static_inputs.LAYOUT_KEYS, static_inputs.layout, static_inputs.feeds),
    )


FAMILIES: dict[str, Family] = {name: make_family(g) for name, g in GENERATIONS.items()}
QWEN2_VL, QWEN2_5_VL, QWEN3_VL, QWEN3_5 = (FAMILIES[g.family] for g in (generations.QWEN2_VL, generations.QWEN2_5_VL,
                                                                        generations.QWEN3_VL, generations.QWEN3_5))
