"""Image layouts for validation: what the Qwen processor makes of common sizes (one of them large,
1024x1024 = 4,096 patches, so that a buffer quadratic in the patch count shows), packs, videos, and
layouts with the export example's patch count but another shape (where traced graphs lie).

A case is (name, pixel_values float32 [N, C*Tp*P*P], grid_thw int64 [I, 3]).
"""

import numpy as np
from PIL import Image
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from vlm_vision_onnx.families.qwen_vl.generations import QWEN3_VL, Generation
from vlm_vision_onnx.families.qwen_vl.layouts import (
    SMOKE_SIZES,
    random_pixels,
    same_patch_count_layouts,
    synthetic_packs,
)


def image_processor(patch: int, merge: int, temporal: int,
                    generation: Generation = QWEN3_VL) -> Qwen2VLImageProcessorPil:
    """The Qwen image processor (PIL backend, no torchvision) as the generation publishes it, at the model's
    patch, merge and temporal patch sizes."""
    min_pixels, max_pixels = generation.pixel_bounds
    return Qwen2VLImageProcessorPil(
        patch_size=patch,
        merge_size=merge,
        temporal_patch_size=temporal,
        size={"shortest_edge": min_pixels, "longest_edge": max_pixels},
        image_mean=generation.processor["image_mean"],
        image_std=generation.processor["image_std"],
    )


def processed_images(sizes: list[tuple[int, int]], processor, rng: np.random.Generator) -> tuple:
    """Random RGB images of the given (height, width), through the processor: (pixel_values, grid_thw)."""
    images = [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in sizes]
    out = processor(images=images, return_tensors="np")
    return out["pixel_values"].astype(np.float32), out["image_grid_thw"].astype(np.int64)


def validation_cases(example: list, patch: int, merge: int, temporal: int, channels: int = 3,
                     seed: int = 0, generation: Generation = QWEN3_VL,
                     window: int = 0) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """The export stage's validation suite, deterministic for a seed (the window packs where the tower has
    windows: `window` > 0, their side in patches)."""
    rng = np.random.default_rng(seed)
    processor = image_processor(patch, merge, temporal, generation)
    patch_dim = channels * temporal * patch * patch
    cases = []
    for h, w in SMOKE_SIZES:
        cases.append((f"image {h}x{w}", *processed_images([(h, w)], processor, rng)))
    cases.append(("pack 448x448 + 336x336", *processed_images([(448, 448), (336, 336)], processor, rng)))
    cases += [(name, *random_pixels(grid, patch_dim, rng)) for name, grid in synthetic_packs(window)]
    cases.append(("export example", *random_pixels(example, patch_dim, rng)))
    for number, grid in enumerate(same_patch_count_layouts(example, merge), 1):
        cases.append((f"same patch count #{number}", *random_pixels(grid, patch_dim, rng)))
    return cases


def random_grids(rng: np.random.Generator, merge: int, count: int, max_side: int = 32) -> list:
    """Random packs of 1-3 items, each an image or (1 in 4) a video of t in 2..3; h, w multiples of merge."""
    packs = []
    for _ in range(count):
        pack = []
        for _ in range(int(rng.integers(1, 4))):
            t = int(rng.integers(2, 4)) if rng.random() < 0.25 else 1
            h, w = (merge * int(rng.integers(1, max_side // merge + 1)) for _ in range(2))
            pack.append([t, h, w])
        packs.append(pack)
    return packs
