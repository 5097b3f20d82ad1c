"""Smoke inputs of a released encoder, per family (numpy only): one random image at each of the release
smoke sizes (`SIZES`: 224x224, 336x336, 448x448, 512x384), laid out as the family's processor lays out
an image of that size, with the settings of the package's `preprocessor_config.json`. Packaging records
the outputs' shapes at these inputs in the manifest; `verify` runs every variant at them and checks
the shapes. Also per family: how `verify` proves `preprocessor_config.json` loads as the processor.

Qwen3-VL: resize to multiples of patch * merge (`layouts.smart_resize`): pixel_values float32
[h*w, 3*Tp*P*P] (random), grid_thw int64 [[1, h, w]] (h, w in patches). Its processor loads with
transformers' AutoImageProcessor (the torch-free PIL backend).
Phi-4-multimodal: a random RGB image through the processor port (runtime/preprocess/phi4_mm.py):
pixel_values float32 [1, crops, 3, 448, 448], image_attention_mask float32 [1, crops, 32, 32],
image_sizes int64 [1, 2]. Its transformers processor needs torchvision, so the port's loader checks it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core.errors import UsageError
from runtime import layouts

SEED = 0
#: (height, width) of the release smoke images. The validation layouts add larger ones (1024x1024),
#: which at published dims need gigabytes for attention: `verify` stays a quick check.
SIZES = [(224, 224), (336, 336), (448, 448), (512, 384)]
PROCESSOR_FILE = "preprocessor_config.json"


@dataclass(frozen=True)
class SmokeFamily:
    """settings(folder) -> processor settings; inputs(height, width, settings, rng) -> {name: array};
    load_processor(folder) raises when preprocessor_config.json does not load as the model's processor."""

    settings: Callable[[Path], dict]
    inputs: Callable[[int, int, dict, np.random.Generator], dict[str, np.ndarray]]
    load_processor: Callable[[Path], object]


def _json_settings(folder: Path) -> dict:
    import json

    try:
        return json.loads((Path(folder) / PROCESSOR_FILE).read_text())
    except (OSError, ValueError) as err:
        raise UsageError(f"{Path(folder) / PROCESSOR_FILE} is missing or not JSON ({err})") from None


def qwen3_vl_inputs(height: int, width: int, settings: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """{'pixel_values': float32 [h*w, 3*Tp*P*P], 'grid_thw': int64 [[1, h, w]]} of one image (h, w in
    patches) of `height` x `width` pixels, as the processor settings grid it."""
    patch, merge, temporal = (int(settings[k]) for k in ("patch_size", "merge_size", "temporal_patch_size"))
    h, w = layouts.smart_resize(height, width, patch * merge)
    pixels, grid = layouts.random_pixels([[1, h // patch, w // patch]], 3 * temporal * patch * patch, rng)
    return {"pixel_values": pixels, "grid_thw": grid}


def _auto_image_processor(folder: Path):
    from transformers import AutoImageProcessor

    return AutoImageProcessor.from_pretrained(str(folder))


def phi4_mm_inputs(height: int, width: int, settings: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """{'pixel_values', 'image_attention_mask', 'image_sizes'} of one random RGB image through the port."""
    from runtime.preprocess import phi4_mm

    image = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    pack = phi4_mm.preprocess([image], settings)
    return {name: value for name, value in pack.items() if isinstance(value, np.ndarray)}


def _phi4_mm_settings(folder: Path) -> dict:
    from runtime.preprocess import phi4_mm

    return phi4_mm.load_config(folder)


FAMILIES: dict[str, SmokeFamily] = {
    "qwen3-vl": SmokeFamily(_json_settings, qwen3_vl_inputs, _auto_image_processor),
    "phi-4-mm": SmokeFamily(_phi4_mm_settings, phi4_mm_inputs, _phi4_mm_settings),
}


def family(name: str) -> SmokeFamily:
    if name not in FAMILIES:
        raise UsageError(f"no smoke inputs for the family {name!r}; known: {', '.join(FAMILIES)}")
    return FAMILIES[name]


def smoke_cases(family_name: str, folder: str | Path, seed: int = SEED) -> list[tuple[str, dict[str, np.ndarray]]]:
    """[('224x224', feeds), ...] for the smoke sizes (height x width) with the processor settings in
    `folder`/preprocessor_config.json, random pixels under `seed`."""
    fam = family(family_name)
    settings = fam.settings(Path(folder))
    rng = np.random.default_rng(seed)
    try:
        return [(f"{h}x{w}", fam.inputs(h, w, settings, rng)) for h, w in SIZES]
    except (KeyError, TypeError, ValueError) as err:
        raise UsageError(f"{PROCESSOR_FILE} lacks or garbles a setting the {family_name} smoke inputs need "
                         f"({type(err).__name__}: {err})") from None
