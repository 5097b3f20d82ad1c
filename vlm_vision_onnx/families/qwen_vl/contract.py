"""The Qwen vision encoders' I/O contract (every generation) and the checks that enforce it (numpy only).

Inputs:  pixel_values float32 [num_patches, C*Tp*P*P] (1536 for 3 x 2 x 16 x 16, 1176 for 3 x 2 x 14 x 14),
         grid_thw     int64   [num_images, 3] (t, h, w in patches; h, w multiples of the merge size).
Outputs: image_features [num_tokens, out_hidden] (`families.base.FEATURES`, the name transformers.js and
         onnxruntime-genai read), then (Qwen3-VL) deepstack_embeds_0..k-1 [num_tokens, out_hidden],
         num_tokens = sum(t*h*w) / merge**2.
"""

from collections.abc import Sequence

import numpy as np

from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.families.base import FEATURES

INPUT_NAMES = ("pixel_values", "grid_thw")
#: {input: (dtype, rank)} of every export and variant (quantized and fp16 ones keep float32 pixel values).
INPUT_TYPES = {"pixel_values": ("float32", 2), "grid_thw": ("int64", 2)}
IMAGE_EMBEDS = FEATURES
DIM_PATCHES, DIM_IMAGES, DIM_TOKENS = "num_patches", "num_images", "num_tokens"
#: Largest patch count of one pack: beyond it sizes overflow int32 index math (and no machine has the memory).
MAX_PATCHES = 2**31 - 1


def output_names(num_deepstack: int) -> list[str]:
    """['image_features', 'deepstack_embeds_0', ..., 'deepstack_embeds_{k-1}']."""
    return [IMAGE_EMBEDS] + [f"deepstack_embeds_{i}" for i in range(num_deepstack)]


def check_grid(grid_thw: Sequence[Sequence[int]] | np.ndarray, merge: int) -> np.ndarray:
    """Return grid_thw as int64 [num_images, 3], or raise UsageError saying what is wrong."""
    grid = np.asarray(grid_thw)
    if grid.ndim != 2 or grid.shape[1] != 3 or grid.shape[0] == 0:
        raise UsageError(f"grid_thw must have shape [num_images, 3] with num_images >= 1, got {list(grid.shape)}")
    if not np.issubdtype(grid.dtype, np.integer):
        raise UsageError(f"grid_thw must hold integers (t, h, w in patches), got dtype {grid.dtype}")
    rows = grid.tolist()  # Python ints: products below cannot overflow
    total = 0
    for i, (t, h, w) in enumerate(rows):
        if min(t, h, w) < 1:
            raise UsageError(f"grid_thw[{i}] = {[t, h, w]}: t, h and w must be >= 1")
        total += t * h * w
        if total > MAX_PATCHES:
            raise UsageError(f"grid_thw {rows if len(rows) < 5 else '...'} needs {total:,} patches at image {i}, more "
                             f"than the {MAX_PATCHES:,} any pack can hold (int32 indices in the graph); split it")
    grid = grid.astype(np.int64)
    for i, (t, h, w) in enumerate(rows):
        if h % merge or w % merge:
            raise UsageError(
                f"grid_thw[{i}] = {[t, h, w]}: h and w must be multiples of the spatial merge size {merge} "
                f"(resize the image to a multiple of {merge} patches)"
            )
    return grid


def num_patches(grid_thw: np.ndarray) -> int:
    """sum(t*h*w) over the images of a checked grid."""
    return int(np.prod(grid_thw, axis=1).sum())


def check_inputs(pixel_values: np.ndarray, grid_thw: np.ndarray, merge: int, patch_dim: int) -> np.ndarray:
    """Check one pack against the contract; return the checked int64 grid or raise UsageError."""
    grid = check_grid(grid_thw, merge)
    if pixel_values.ndim != 2 or pixel_values.shape[1] != patch_dim:
        raise UsageError(
            f"pixel_values must have shape [num_patches, {patch_dim}], got {list(pixel_values.shape)}"
        )
    expected = num_patches(grid)
    if pixel_values.shape[0] != expected:
        raise UsageError(
            f"pixel_values has {pixel_values.shape[0]} rows but grid_thw {grid.tolist()} needs "
            f"sum(t*h*w) = {expected}"
        )
    return grid
