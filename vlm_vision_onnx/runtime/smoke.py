"""Smoke inputs of a released encoder: one random RGB image at each of the release smoke sizes (`SIZES`:
224x224, 336x336, 448x448, 512x384) through the family's processor configured from the package's
`preprocessor_config.json` (`Family.processing`), so the inputs are laid out exactly as for a photo of
that size. Packaging records the outputs' shapes at these inputs in the manifest; `verify` runs every
variant at them and checks the shapes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.families import family

SEED = 0
#: (height, width) of the release smoke images. The validation layouts add larger ones (1024x1024),
#: which at published dims need gigabytes for attention: `verify` stays a quick check.
SIZES = [(224, 224), (336, 336), (448, 448), (512, 384)]
PROCESSOR_FILE = "preprocessor_config.json"


def smoke_cases(family_name: str, folder: str | Path, seed: int = SEED) -> list[tuple[str, dict[str, np.ndarray]]]:
    """[('224x224', feeds), ...] for the smoke sizes (height x width): random RGB images under `seed` through
    the processor of `folder`/preprocessor_config.json."""
    fam = family(family_name).processing
    processor = fam.processor(Path(folder))
    rng = np.random.default_rng(seed)
    try:
        return [(f"{h}x{w}", fam.image_inputs(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), processor))
                for h, w in SIZES]
    except (KeyError, TypeError, ValueError) as err:
        raise UsageError(f"{PROCESSOR_FILE} lacks or garbles a setting the {family_name} smoke inputs need "
                         f"({type(err).__name__}: {err})") from None


def integer_values(feeds: dict[str, np.ndarray]) -> dict[str, list]:
    """The values of the integer inputs (grid_thw, image_sizes): small, and what the processor decided."""
    return {name: value.tolist() for name, value in feeds.items() if np.issubdtype(value.dtype, np.integer)}
