"""Image layouts for validation: what the Qwen processor makes of common sizes, packs, videos, and
layouts with the export example's patch count but another shape (where traced graphs lie).

A case is (name, pixel_values float32 [N, 1536], grid_thw int64 [I, 3]).
"""

import numpy as np
from PIL import Image
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

# The smoke sizes (height, width) in pixels.
SMOKE_SIZES = [(224, 224), (336, 336), (448, 448), (512, 384)]
# Qwen3-VL's preprocessor settings: pixels between 256*256 and 4096*4096, mean/std 0.5.
MIN_PIXELS, MAX_PIXELS = 65536, 16777216


def image_processor(patch: int, merge: int, temporal: int) -> Qwen2VLImageProcessorPil:
    """The Qwen image processor (PIL backend, no torchvision) as Qwen3-VL configures it."""
    return Qwen2VLImageProcessorPil(
        patch_size=patch,
        merge_size=merge,
        temporal_patch_size=temporal,
        size={"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS},
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )


def processed_images(sizes: list[tuple[int, int]], processor, rng: np.random.Generator) -> tuple:
    """Random RGB images of the given (height, width), through the processor: (pixel_values, grid_thw)."""
    images = [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in sizes]
    out = processor(images=images, return_tensors="np")
    return out["pixel_values"].astype(np.float32), out["image_grid_thw"].astype(np.int64)


def random_pixels(grid_thw, patch_dim: int, rng: np.random.Generator) -> tuple:
    """Normal(0, 1) pixel rows for a grid (the encoder does not care where pixels come from)."""
    grid = np.asarray(grid_thw, dtype=np.int64)
    return rng.standard_normal((int(np.prod(grid, 1).sum()), patch_dim), dtype=np.float32), grid


def same_patch_count_layouts(example: list, merge: int, count: int = 5) -> list[list[list[int]]]:
    """Grids with exactly the example's patch count but other shapes (tall, wide, reordered, video)."""
    grid = np.asarray(example, dtype=np.int64)
    blocks = int(np.prod(grid, 1).sum()) // (merge * merge)  # merge-blocks to distribute
    divisors = [d for d in range(1, blocks + 1) if blocks % d == 0]
    layouts = []
    # single images, the most extreme aspect ratios first
    for d in sorted(divisors, key=lambda d: -max(d, blocks // d) / min(d, blocks // d))[:2]:
        layouts.append([[1, merge * d, merge * (blocks // d)]])
    if len(grid) > 1:
        layouts.append(grid[::-1].tolist())  # same images, other order
        layouts.append([[1, int(h), int(w)] for _, w, h in grid.tolist()])  # every image transposed
    if blocks % 2 == 0:  # the same patches as a 2-frame video
        half = blocks // 2
        d = max(x for x in divisors if half % x == 0 and x * x <= half)
        layouts.append([[2, merge * d, merge * (half // d)]])
    seen = {str(grid.tolist())}
    unique = [g for g in layouts if str(g) not in seen and not seen.add(str(g))]
    return unique[:count]


def validation_cases(example: list, patch: int, merge: int, temporal: int, channels: int = 3,
                     seed: int = 0) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """The export stage's validation suite, deterministic for a seed."""
    rng = np.random.default_rng(seed)
    processor = image_processor(patch, merge, temporal)
    patch_dim = channels * temporal * patch * patch
    cases = []
    for h, w in SMOKE_SIZES:
        cases.append((f"image {h}x{w}", *processed_images([(h, w)], processor, rng)))
    cases.append(("pack 448x448 + 336x336", *processed_images([(448, 448), (336, 336)], processor, rng)))
    cases.append(("video t=2 256x256", *random_pixels([[2, 16, 16]], patch_dim, rng)))
    cases.append(("pack image + video t=2 + image", *random_pixels([[1, 12, 20], [2, 8, 8], [1, 6, 4]],
                                                                   patch_dim, rng)))
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
