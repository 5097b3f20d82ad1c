"""Torch-free image layouts shared by every stage's validation: smoke sizes (one large), fixed packs,
layouts with the export example's patch count but other shapes, and random inputs for a grid.

A grid is int64 [num_images, 3] (t, h, w in patches); h and w are multiples of the merge size.
"""

import math

import numpy as np

# The single-image sizes (height, width) in pixels every validation runs. The last is large: 64 x 64 =
# 4,096 patches in one frame, so that an attention buffer quadratic in the patch count (N x N) shows up
# in time and memory at every stage (cheap at the tiny config).
SMOKE_SIZES = [(224, 224), (336, 336), (448, 448), (512, 384), (1024, 1024)]
# Qwen3-VL's preprocessor settings: pixels between 256*256 and 4096*4096 (each generation's: `generations`).
MIN_PIXELS, MAX_PIXELS = 65536, 16777216
# Packs of synthetic frames every validation includes: (name, grid_thw).
SYNTHETIC_PACKS = [
    ("video t=2 256x256", [[2, 16, 16]]),
    ("pack image + video t=2 + image", [[1, 12, 20], [2, 8, 8], [1, 6, 4]]),
]
#: The window side, in patches, of the published Qwen2.5-VL (window_size 112 pixels / patch 14): what an export made
#: before the metadata carried `window_patches` has.
PUBLISHED_WINDOW_PATCHES = 8


def window_packs(window: int) -> list[tuple[str, list]]:
    """Window attention (Qwen2.5-VL) with windows of `window` x `window` patches: a frame whose sides are no
    multiple of the window, so that the right and bottom windows are partial (8: 10 x 14 patches), and a pack in
    which the windows of different images and frames would touch, each cut at its frame's edges."""
    return [(f"windows: partial edges {window + 2}x{2 * window - 2}", [[1, window + 2, 2 * window - 2]]),
            ("windows: partial windows of touching images",
             [[1, window - 2, window + 2], [2, window + 2, window - 2], [1, 2, 2 * window + 2]])]


def synthetic_packs(window: int = 0) -> list[tuple[str, list]]:
    """The synthetic packs of a generation's suite: SYNTHETIC_PACKS, and `window_packs(window)` where it has
    windows (`window` > 0, their side in patches)."""
    return SYNTHETIC_PACKS + (window_packs(window) if window else [])


def smart_resize(height: int, width: int, factor: int, min_pixels: int = MIN_PIXELS,
                 max_pixels: int = MAX_PIXELS) -> tuple[int, int]:
    """The Qwen processor's resize: multiples of `factor`, pixel count within [min_pixels, max_pixels]."""
    h, w = round(height / factor) * factor, round(width / factor) * factor
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h, w = (max(factor, math.floor(x / beta / factor) * factor) for x in (height, width))
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h, w = (math.ceil(x * beta / factor) * factor for x in (height, width))
    return h, w


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


def random_pixels(grid_thw, patch_dim: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Normal(0, 1) pixel_values float32 [sum(t*h*w), patch_dim] and grid_thw int64 [num_images, 3]."""
    grid = np.asarray(grid_thw, dtype=np.int64)
    return rng.standard_normal((int(np.prod(grid, 1).sum()), patch_dim), dtype=np.float32), grid


def default_layouts(example: list[list[int]], patch: int = 16, merge: int = 2,
                    pixel_bounds: tuple[int, int] = (MIN_PIXELS, MAX_PIXELS),
                    window: int = 0) -> list[tuple[str, dict]]:
    """(case, {"grid_thw"}) for a model whose report lists no cases: smoke sizes, a pack, a t=2 video,
    a mixed pack (and the window packs, `window` > 0: their side in patches), the export example and
    same-patch-count variants of it (the export stage's suite)."""
    def image(h: int, w: int) -> list[int]:
        rh, rw = smart_resize(h, w, patch * merge, *pixel_bounds)
        return [1, rh // patch, rw // patch]

    grids = [(f"image {h}x{w}", [image(h, w)]) for h, w in SMOKE_SIZES]
    grids.append(("pack 448x448 + 336x336", [image(448, 448), image(336, 336)]))
    grids += synthetic_packs(window)
    grids.append(("export example", example))
    grids += [(f"same patch count #{number}", grid)
              for number, grid in enumerate(same_patch_count_layouts(example, merge), 1)]
    return [(name, {"grid_thw": grid}) for name, grid in grids]
