"""Smoke inputs of a released encoder, per family: one random RGB image at each of the release smoke
sizes (`SIZES`: 224x224, 336x336, 448x448, 512x384) through the family's processor configured from the
package's `preprocessor_config.json`, so the inputs are laid out exactly as for a photo of that size.
Packaging records the outputs' shapes at these inputs in the manifest; `verify` runs every variant at
them and checks the shapes. Also per family: how `verify` proves `preprocessor_config.json` loads as
the model's processor.

Qwen3-VL: transformers' `Qwen2VLImageProcessorPil` (runtime/preprocess/qwen3_vl.py): pixel_values
float32 [h*w, 3*Tp*P*P], grid_thw int64 [[1, h, w]] (h, w in patches); the package must load with
transformers' AutoImageProcessor (its torch-free PIL backend).
Phi-4-multimodal: the processor port (runtime/preprocess/phi4_mm.py): pixel_values float32
[1, crops, 3, 448, 448], image_attention_mask float32 [1, crops, 32, 32], image_sizes int64 [1, 2]; its
transformers processor needs torchvision, so the port's loader checks the file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core.errors import UsageError

SEED = 0
#: (height, width) of the release smoke images. The validation layouts add larger ones (1024x1024),
#: which at published dims need gigabytes for attention: `verify` stays a quick check.
SIZES = [(224, 224), (336, 336), (448, 448), (512, 384)]
PROCESSOR_FILE = "preprocessor_config.json"


@dataclass(frozen=True)
class SmokeFamily:
    """processor(folder) -> the processor (or its settings) from preprocessor_config.json;
    inputs(image, processor) -> {name: array} for one RGB uint8 image [H, W, 3];
    load_processor(folder) raises when preprocessor_config.json does not load as the model's processor."""

    processor: Callable[[Path], object]
    inputs: Callable[[np.ndarray, object], dict[str, np.ndarray]]
    load_processor: Callable[[Path], object]


def _qwen3_vl_processor(folder: Path):
    from runtime.preprocess import qwen3_vl

    return qwen3_vl.load_processor(folder)


def _qwen3_vl_inputs(image: np.ndarray, processor) -> dict[str, np.ndarray]:
    from runtime.preprocess import qwen3_vl

    pixel_values, grid_thw = qwen3_vl.preprocess(processor, [image])
    return {"pixel_values": pixel_values, "grid_thw": grid_thw}


def _auto_image_processor(folder: Path):
    from transformers import AutoImageProcessor

    return AutoImageProcessor.from_pretrained(str(folder))


def _phi4_mm_settings(folder: Path) -> dict:
    from runtime.preprocess import phi4_mm

    return phi4_mm.load_config(folder)


def _phi4_mm_inputs(image: np.ndarray, settings: dict) -> dict[str, np.ndarray]:
    from runtime.preprocess import phi4_mm

    pack = phi4_mm.preprocess([image], settings)
    return {name: value for name, value in pack.items() if isinstance(value, np.ndarray)}


FAMILIES: dict[str, SmokeFamily] = {
    "qwen3-vl": SmokeFamily(_qwen3_vl_processor, _qwen3_vl_inputs, _auto_image_processor),
    "phi-4-mm": SmokeFamily(_phi4_mm_settings, _phi4_mm_inputs, _phi4_mm_settings),
}


def family(name: str) -> SmokeFamily:
    if name not in FAMILIES:
        raise UsageError(f"no smoke inputs for the family {name!r}; known: {', '.join(FAMILIES)}")
    return FAMILIES[name]


def smoke_cases(family_name: str, folder: str | Path, seed: int = SEED) -> list[tuple[str, dict[str, np.ndarray]]]:
    """[('224x224', feeds), ...] for the smoke sizes (height x width): random RGB images under `seed` through
    the processor of `folder`/preprocessor_config.json."""
    fam = family(family_name)
    processor = fam.processor(Path(folder))
    rng = np.random.default_rng(seed)
    try:
        return [(f"{h}x{w}", fam.inputs(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), processor))
                for h, w in SIZES]
    except (KeyError, TypeError, ValueError) as err:
        raise UsageError(f"{PROCESSOR_FILE} lacks or garbles a setting the {family_name} smoke inputs need "
                         f"({type(err).__name__}: {err})") from None


def integer_values(feeds: dict[str, np.ndarray]) -> dict[str, list]:
    """The values of the integer inputs (grid_thw, image_sizes): small, and what the processor decided."""
    return {name: value.tolist() for name, value in feeds.items() if np.issubdtype(value.dtype, np.integer)}
