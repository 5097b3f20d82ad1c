"""`genai_config.json` and `processor_config.json` of an onnxruntime-genai package (genai 0.18.0's schema).

genai_config.json: the decoder's config as genai's builder wrote it, with
- `model.type` the family's (`families.shipping.Shipping.genai`, declared per generation: `qwen3_vl`, `qwen2_5_vl`, `qwen3_5`; for Qwen3-VL the
  builder writes `qwen3vl`, a type genai's own runtime refuses: "Unsupported model_type in config.json: qwen3vl");
- `image_token_id`, `video_token_id`, `vision_start_token_id` from the checkpoint's config.json;
- an `embedding` section (input_ids, image_features -> inputs_embeds) and a `vision` section (pixel_values,
  image_grid_thw -> image_features, the processor file, spatial_merge_size and patch_size), each with the
  decoder's session options.

processor_config.json: the onnxruntime-extensions pipeline genai's Qwen processor runs, with the settings of
the model's own image processor (`Qwen2VLImageProcessorPil`): decode, RGB, Qwen's smart resize (min and
max pixels, patch and merge size) with its resample filter, rescale, normalize (with the family's flag,
`qwen3_vl` or `qwen2_5_vl`: without the `qwen3_vl` one that genai's own Qwen3-VL test package sets, the values
differ by up to 1.94), patchify into
[num_patches, 3 * temporal_patch_size * patch_size**2].
"""

from __future__ import annotations

import copy

from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.families.shipping import GenaiType

CONFIG = "genai_config.json"
PROCESSOR = "processor_config.json"
TOKEN_KEYS = ("image_token_id", "video_token_id", "vision_start_token_id")
#: PIL resample filter (transformers' `resample`) -> the name onnxruntime-extensions' Resize takes.
RESAMPLE = {0: "NEAREST", 1: "LANCZOS", 2: "LINEAR", 3: "CUBIC"}


def processor_config(settings: dict, kind: GenaiType) -> dict:
    """processor_config.json from the image processor's `to_dict()` (Qwen2VLImageProcessorPil), with the
    family's processor name and Normalize flags (`kind`)."""
    for flag in ("do_resize", "do_rescale", "do_normalize", "do_convert_rgb"):
        if not settings.get(flag, True):
            raise UsageError(f"the model's image processor sets {flag}=False, which genai's Qwen processor cannot "
                             "express (it always converts, resizes, rescales and normalizes)")
    resample = int(settings.get("resample", 3))
    if resample not in RESAMPLE:
        raise UsageError(f"the model's image processor resamples with PIL filter {resample}; genai's Resize "
                         f"supports only {', '.join(f'{k} ({v})' for k, v in RESAMPLE.items())}")
    size = settings.get("size") or {}
    patch, merge, temporal = settings["patch_size"], settings["merge_size"], settings["temporal_patch_size"]

    def op(name: str, kind: str, **attrs) -> dict:
        return {"operation": {"name": name, "type": kind, **({"attrs": attrs} if attrs else {})}}

    return {"processor": {"name": kind.processor, "transforms": [
        op("decode_image", "DecodeImage", color_space="RGB"),
        op("convert_to_rgb", "ConvertRGB"),
        op("resize", "Resize", smart_resize=1, min_pixels=int(size.get("shortest_edge", settings.get("min_pixels"))),
           max_pixels=int(size.get("longest_edge", settings.get("max_pixels"))), patch_size=patch, merge_size=merge,
           interpolation=RESAMPLE[resample]),
        op("rescale", "Rescale", rescale_factor=float(settings["rescale_factor"])),
        op("normalize", "Normalize", mean=[float(v) for v in settings["image_mean"]],
           std=[float(v) for v in settings["image_std"]], **kind.normalize),
        op("patch_image", "PatchImage", patch_size=patch, temporal_patch_size=temporal, merge_size=merge),
    ]}}


def genai_config(decoder: dict, token_ids: dict, vision: dict, embedding: dict, vision_config: dict,
                 kind: GenaiType) -> dict:
    """The package's genai_config.json from the decoder's (`decoder`, as genai's builder wrote it), the
    checkpoint's token ids ({key: id} of TOKEN_KEYS), the vision and embedding models' facts ({file, inputs,
    outputs}) and the checkpoint's vision config."""
    config = copy.deepcopy(decoder)
    model = config["model"]
    options = model["decoder"].get("session_options", {"log_id": "onnxruntime-genai", "provider_options": []})
    model["type"] = kind.type
    model.update({key: int(token_ids[key]) for key in TOKEN_KEYS})
    model["embedding"] = {"filename": embedding["file"], "inputs": {n: n for n in embedding["inputs"]},
                          "outputs": {n: n for n in embedding["outputs"]}, "session_options": copy.deepcopy(options)}
    model["vision"] = {"filename": vision["file"], "config_filename": PROCESSOR,
                       "spatial_merge_size": int(vision_config["spatial_merge_size"]),
                       "patch_size": int(vision_config["patch_size"]),
                       "inputs": {n: n for n in vision["inputs"]}, "outputs": {n: n for n in vision["outputs"]},
                       "session_options": copy.deepcopy(options)}
    return config
