"""What the generic export command needs to know about the Phi-4-multimodal image embedding.

Inputs travel as {name: array}: pixel_values float32 [num_images, max_num_crops, 3, 448, 448],
image_attention_mask float32 [num_images, max_num_crops, 32, 32], image_sizes int64 [num_images, 2];
one output image_features [num_image_tokens, out_hidden]. An example (the export's, or a validation
layout) is a list of original image sizes [height, width] in pixels, laid out as the processor does.
"""

import json

import numpy as np
import torch

from builders.config import ModelConfig
from builders.onnx_export import IOSpec
from builders.phi4_mm.model import ImageFeatures, build_from_checkpoint, build_random, reference_outputs
from builders.phi4_mm.static_model import StaticImageFeatures, fixed_inputs
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.families.phi4_mm import FAMILY, crops, layouts, spec
from vlm_vision_onnx.families.static_size import StaticSize

NAME = "phi-4-mm"
INPUT_NAMES = list(spec.INPUT_NAMES)
OUTPUT_NAMES = [spec.OUTPUT_NAME]
OPTIMIZE_PASSES = spec.OPTIMIZE_PASSES
# Two images with different crop grids (a one-image or one-crop example lets torch.export specialise).
EXAMPLE_IMAGES = layouts.EXAMPLE_IMAGES


def build(config: ModelConfig, checkpoint: str | None, seed: int) -> tuple[torch.nn.Module, dict]:
    """The eager image embedding and facts for the report (`weights`: random | checkpoint)."""
    if checkpoint:
        embed, folder = build_from_checkpoint(checkpoint)
        return embed, {"weights": "checkpoint", "checkpoint": str(folder)}
    return build_random(config, seed), {"weights": "random", "seed": seed}


def io_spec(embed=None) -> IOSpec:
    """Names and symbolic dims: only the image count, the crop count and the token count vary."""
    return IOSpec(INPUT_NAMES, OUTPUT_NAMES, {name: dict(axes) for name, axes in spec.DYNAMIC_AXES.items()})


def export_module(embed, ops: str = "contrib") -> torch.nn.Module:
    """The traced module; its graph has standard ops only whatever `ops` (ORT fuses its attention at optimize)."""
    return ImageFeatures(embed).eval()


def check_inputs(inputs: dict[str, np.ndarray]) -> None:
    """UsageError unless the pack is one the Phi-4 image processor could produce."""
    crops.check_inputs(inputs)


def example_inputs(embed, images: list, seed: int) -> dict[str, torch.Tensor]:
    """Random pixels for the example images, as torch tensors by input name."""
    pack = layouts.pack(images, np.random.default_rng(seed))
    return {name: torch.from_numpy(array) for name, array in pack.items()}


def validation_cases(embed, images: list, seed: int) -> list[tuple[str, dict[str, np.ndarray]]]:
    """(name, inputs) for every parity layout (see `layouts.validation_layouts`)."""
    rng = np.random.default_rng(seed + 1)
    return [(name, layouts.pack(sizes, rng)) for name, sizes in layouts.validation_layouts(images)]


def reference(embed):
    """{name: array} -> [image_features] of the eager model (eager attention), numpy."""
    return lambda inputs: reference_outputs(embed, inputs)


def pytorch_run(embed, dtype: torch.dtype):
    """{name: array} -> [image_features] (float32) of the embedding at `dtype` with sdpa attention.
    transformers marks the vision attention `is_causal` (builders.phi4_mm.patcher), which sdpa honours when no
    patch is padded: cleared here, as a user who wants the model's bidirectional attention must."""
    embed.img_processor.config._attn_implementation = "sdpa"
    for module in embed.modules():
        if hasattr(module, "is_causal"):
            module.is_causal = False
    embed = embed.to(dtype)
    return torch.inference_mode()(lambda inputs: reference_outputs(embed, inputs))


def metadata(embed, images: list) -> dict:
    """Facts later stages read from the ONNX."""
    grids = [crops.layout(h, w) for h, w in images]
    config = embed.config
    return {
        "family": NAME,
        "export_image_sizes": json.dumps([list(x) for x in images]),
        "export_num_crops": max(g.crops for g in grids),
        "export_num_tokens": crops.num_tokens(grids),
        "crop_size": crops.CROP,
        "patch_size": crops.PATCH,
        "feature_layer": config.vision_config.feature_layer,
        "out_hidden_size": config.hidden_size,
        spec.METADATA_HEADS: config.vision_config.num_attention_heads,
        spec.METADATA_WIDTH: config.vision_config.hidden_size,
        "optimize_passes": json.dumps(list(spec.OPTIMIZE_PASSES)),
    }


def example(config: ModelConfig, embed, items: list[str] | None) -> list:
    """The export example: image sizes [height, width] (`--example-grid` is Qwen3-VL's; refused here)."""
    if items:
        raise UsageError("--example-grid is a Qwen3-VL option; the Phi-4-multimodal example is a fixed set of "
                         f"image sizes {EXAMPLE_IMAGES}")
    return [list(x) for x in EXAMPLE_IMAGES]


def trace_memory_bytes(embed, images: list) -> int:
    """Rough peak bytes of exporting and validating: weights plus every crop's activations (1024 patches
    of the vision width, MLP included, a few live copies) and its attention scores (heads x 1024²)."""
    vision = embed.config.vision_config
    grids = [crops.layout(h, w) for h, w in images]
    total_crops = len(images) * max(g.crops for g in grids)
    patches = (crops.CROP // crops.PATCH) ** 2
    per_crop = patches * vision.intermediate_size * 4 * 4 + vision.num_attention_heads * patches * patches * 4
    return sum(p.numel() for p in embed.parameters()) * 4 + total_crops * per_crop


# What a report records of a case: the torch-free family's layout facts (later stages rebuild inputs from them).
case_facts = FAMILY.case_layout


# ---------------------------------------------------------------- the static form (`--static WxH`, docs/npu.md)
#: A static model takes the pixels only; the layout's mask and sizes are its constants.
static_input_names = ("pixel_values",)


def static_grid(config: ModelConfig, checkpoint: str | None, size: StaticSize) -> list:
    """The example of a static model: one image of WIDTHxHEIGHT pixels, [[height, width]]. Every size has a crop
    layout (the processor resizes it to whole crops), so no size is off a grid; a video is refused."""
    if size.frames:
        raise UsageError(f"--static {size.name}: Phi-4-multimodal's image embedding takes no video; give WIDTHxHEIGHT")
    return [[size.height, size.width]]


def static_module(embed, images: list) -> torch.nn.Module:
    return StaticImageFeatures(ImageFeatures(embed), images).eval()


def static_fixed(images: list) -> dict[str, np.ndarray]:
    return fixed_inputs(images)


def static_metadata(images: list) -> dict[str, str]:
    """The one image's size [[height, width]] and its crop count (global + HD)."""
    return {"static_image_sizes": json.dumps([list(map(int, x)) for x in images]),
            "static_num_crops": str(crops.layout(*map(int, images[0])).crops)}
