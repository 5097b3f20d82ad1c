"""Torch-free validation layouts of Phi-4-multimodal: packs of original image sizes the processor accepts.

A pack is a list of [height, width] in pixels; `crops.layout` turns each into the processor's crop grid
and mask. The token counts in the names follow from `crops.ImageLayout.num_tokens`.
"""

import numpy as np

from builders.phi4_mm import crops

# The export example: two images with different crop grids, one with padded patch rows
# (896x1344 -> 2x3 crops, no padding; 500x700 -> 2x2 crops, 18 padded patch rows).
EXAMPLE_IMAGES = [[896, 1344], [500, 700]]

# (name, pack) every validation runs besides the export example.
FIXED_PACKS = [
    ("one crop 448x448", [[448, 448]]),
    ("1 + 4 crops 896x896", [[896, 896]]),
    ("1 + 12 crops 1344x1792", [[1344, 1792]]),
    ("three images 2, 5, 7 crops", [[448, 448], [896, 896], [700, 1000]]),
    ("padded patch rows 500x1000", [[500, 1000]]),
    ("padded patch columns 1000x500", [[1000, 500]]),
    ("odd padded columns 610x500", [[610, 500]]),
    # Same input shapes [1, 5, ...] and the same 1105 tokens, three crop arrangements.
    ("same tokens 1x4 crops 430x1350", [[430, 1350]]),
    ("same tokens 2x2 crops 590x450", [[590, 450]]),
    ("same tokens 4x1 crops 1670x300", [[1670, 300]]),
]


def pack(images: list, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """{name: array} with random pixels for a pack of [height, width] images (see `crops.random_inputs`)."""
    return crops.random_inputs([crops.layout(int(h), int(w)) for h, w in images], rng)


def validation_layouts(example: list) -> list[tuple[str, list]]:
    """(name, pack): the export example first, then the fixed packs."""
    return [(f"export example {example}", [list(x) for x in example])] + FIXED_PACKS
