"""Smoke inputs of a released encoder (numpy only): one random image at each of the release smoke sizes
(`SIZES`: 224x224, 336x336, 448x448, 512x384), laid out as the family's
processor lays out an image of that size. Packaging records the outputs' shapes at these inputs in
the manifest; `verify` runs every variant at them and checks the shapes.

Qwen3-VL: the processor resizes to multiples of patch * merge (`layouts.smart_resize`) and emits
pixel_values float32 [t*h*w, 3*Tp*P*P] with grid_thw int64 [1, 3] = (1, H/P, W/P).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from core.errors import UsageError
from runtime import layouts

SEED = 0
#: (height, width) of the release smoke images. The validation layouts add larger ones (1024x1024),
#: which at published dims need gigabytes for attention: `verify` stays a quick check.
SIZES = [(224, 224), (336, 336), (448, 448), (512, 384)]


def qwen3_vl(height: int, width: int, processor: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """{'pixel_values': float32 [h*w, 3*Tp*P*P], 'grid_thw': int64 [[1, h, w]]} of one image (h, w in
    patches) of `height` x `width` pixels, as the package's preprocessor_config grids it."""
    patch, merge, temporal = (int(processor[k]) for k in ("patch_size", "merge_size", "temporal_patch_size"))
    h, w = layouts.smart_resize(height, width, patch * merge)
    pixels, grid = layouts.random_pixels([[1, h // patch, w // patch]], 3 * temporal * patch * patch, rng)
    return {"pixel_values": pixels, "grid_thw": grid}


SMOKE_INPUTS: dict[str, Callable[..., dict[str, np.ndarray]]] = {"qwen3-vl": qwen3_vl}


def smoke_cases(family: str, processor: dict, seed: int = SEED) -> list[tuple[str, dict[str, np.ndarray]]]:
    """[('224x224', feeds), ...] for the smoke sizes (height x width), random pixels under `seed`."""
    if family not in SMOKE_INPUTS:
        raise UsageError(f"no smoke inputs for the family {family!r}; known: {', '.join(SMOKE_INPUTS)}")
    rng = np.random.default_rng(seed)
    make = SMOKE_INPUTS[family]
    try:
        return [(f"{h}x{w}", make(h, w, processor, rng)) for h, w in SIZES]
    except (KeyError, TypeError, ValueError) as err:
        raise UsageError(f"preprocessor_config.json lacks or garbles a setting the {family} smoke inputs need "
                         f"({type(err).__name__}: {err})") from None
