"""Phi-4-multimodal image embedding: the family object (torch-free). The torch side is builders/phi4_mm/.

Inputs pixel_values float32 [num_images, max_num_crops, 3, 448, 448], image_attention_mask float32
[num_images, max_num_crops, 32, 32], image_sizes int64 [num_images, 2]; output image_features
[num_image_tokens, out_hidden] (`spec`). A layout is {"layouts": [[rows, cols, valid_h, valid_w], ...]}
per image (`crops.ImageLayout`), from which the processor's mask and image_sizes follow.
"""

from __future__ import annotations

import json

import numpy as np

from vlm_vision_onnx.families.base import Family, Inputs, Metadata, Processing, Release, StaticForm
from vlm_vision_onnx.families.phi4_mm import crops, layouts, processing, release, spec, static_inputs
from vlm_vision_onnx.families.shipping import Shipping, int4_flags

METADATA_KEYS = ("family", "export_image_sizes", "export_num_crops", "export_num_tokens", "crop_size",
                 "patch_size", "feature_layer", "out_hidden_size", spec.METADATA_HEADS, spec.METADATA_WIDTH)


def case_layout(inputs: Inputs) -> dict:
    """image_sizes, crops (images x max crops) and each image's [rows, cols, valid_h, valid_w]."""
    grids = crops.check_inputs(inputs)
    return {"image_sizes": np.asarray(inputs["image_sizes"]).tolist(),
            "crops": int(inputs["pixel_values"].shape[0] * inputs["pixel_values"].shape[1]),
            "layouts": [[g.rows, g.cols, g.valid_h, g.valid_w] for g in grids]}


def layout_inputs(layout: dict, metadata: Metadata, rng: np.random.Generator) -> Inputs:
    """Random pixels on the real crops of the layout's images, the processor's mask and image_sizes."""
    return crops.random_inputs([crops.ImageLayout(*map(int, g)) for g in layout["layouts"]], rng)


def layout_pixels(layout: dict, metadata: Metadata) -> int:
    """The pixels of the layout's largest image as the model sees it: its valid patches (valid_h x valid_w of the
    HD grid) times the patch's area."""
    patch = int(metadata.get("patch_size", crops.PATCH))
    return max(int(g[2]) * int(g[3]) for g in layout["layouts"]) * patch * patch


def default_layouts(metadata: Metadata) -> list[tuple[str, dict]]:
    """The export stage's packs (the export example first), as layouts."""
    example = json.loads(metadata.get("export_image_sizes", json.dumps(layouts.EXAMPLE_IMAGES)))
    result = []
    for name, images in layouts.validation_layouts(example):
        grids = [crops.layout(int(h), int(w)) for h, w in images]
        result.append((name, {"layouts": [[g.rows, g.cols, g.valid_h, g.valid_w] for g in grids]}))
    return result


def optimize_options(metadata: Metadata) -> dict:
    """ORT needs the head count and width (the export's reshape shapes are not constants)."""
    return {"num_heads": int(metadata[spec.METADATA_HEADS]), "hidden_size": int(metadata[spec.METADATA_WIDTH])}


FAMILY = Family(
    name="phi-4-mm",
    title="Phi-4-multimodal image embedding",
    builder="builders.phi4_mm.family",
    input_names=spec.INPUT_NAMES,
    input_types=spec.INPUT_TYPES,
    output_names=lambda metadata: [spec.OUTPUT_NAME],
    dims={
        spec.DIM_IMAGES: "images in the pack",
        spec.DIM_CROPS: "crops of the image with the most (1 global + its HD tiles); others padded with "
                        "zero crops and all-ones masks",
        spec.DIM_TOKENS: "image tokens of the pack, in the order the model scatters them into inputs_embeds",
    },
    check_inputs=lambda inputs, metadata: crops.check_inputs(inputs) and None,
    metadata_keys=METADATA_KEYS,
    layout_keys=("layouts",),
    case_layout=case_layout,
    layout_inputs=layout_inputs,
    default_layouts=default_layouts,
    layout_pixels=layout_pixels,
    optimize_passes=spec.OPTIMIZE_PASSES,
    optimize_options=optimize_options,
    # No grid constants to debake (the crop geometry is fixed, the counts are computed at run time):
    # the surgery stage checks the declared dims at every layout.
    surgery_checks=("claims",),
    release=Release(release.write_config, release.write_processor, release.ACCEPTS, release.USAGE),
    processing=Processing(processing.processor, processing.image_inputs, processing.processor,
                          processing.embed_pack, processing.max_pixels),
    # Published dims (AMD EPYC with AVX-512 VNNI, sweep of 2026-11-25 16:16-16:37, docs/quantization.md): 72 of its
    # 158 MatMuls (after its fused attention is unfused) at 8 bits reach 0.96650 and 120 reach 0.97821, under the 0.98
    # floor; 144 reach 0.99626 (stress 0.99821): the only INT4 point meeting every floor. Re-timed 19:40-19:46
    # (bench/results/sweep-phi-4-mm.md): 1.67x fp32, 25.9% of its bytes (the INT8 variant, 2.39x and 25.5%, is as
    # small). Its tiny model reaches the OpenVINO INT8 outlier-stress gate only with SmoothQuant (0.93 without, 1.0
    # with alpha 0.5). The sweep's cases: one crop, three images of 2, 3 and 5 crops, padded patch rows and columns
    # (4 of 9; its export example is 250x600 + 448x448, both covered; the 13-crop 1344x1792 layout is left to `make
    # export`).
    shipping=Shipping(
        tiny_config="phi-4-mm-tiny", int4_matmuls=(72, 120, 144),
        flags={"int4": int4_flags(144), "ov-int8": ("--smooth-alpha", "0.5")},
        sweep_cases=("one crop 448x448", "three images 2, 3, 5 crops", "padded patch rows 250x600",
                     "padded patch columns 600x250"),
        genai="the genai package is made for the Qwen generations genai runs (qwen2.5-vl, qwen3-vl, qwen3.5); "
              "onnxruntime-genai's phi4mm pipeline: see docs/genai.md"),
    static=StaticForm(static_inputs.LAYOUT_KEYS, static_inputs.layout, static_inputs.feeds),
)
