"""Torch-free validation layouts of Phi-4-multimodal: packs of original image sizes the processor accepts.

A pack is a list of [height, width] in pixels; `crops.layout` turns each into the processor's crop grid
and mask. The token counts in the names follow from `crops.ImageLayout.num_tokens`.
"""

import numpy as np

from vlm_vision_onnx.families.phi4_mm import crops

# The export example: two images with different crop grids (a one-image or one-crop example lets
# torch.export specialise), one with padded patch rows (250x600 -> 1x2 crops, 27 of 32 patch rows;
# 448x448 -> 1x1), padded to 3 crops each: 6 crops in all, as few as that allows (TorchScript's trace
# memory grows with the example's crops).
EXAMPLE_IMAGES = [[250, 600], [448, 448]]

# (name, pack) every validation runs besides the export example; few crops each (the eager reference
# at published dims costs seconds per crop).
FIXED_PACKS = [
    ("one crop 448x448", [[448, 448]]),
    ("1 + 4 crops 896x896", [[896, 896]]),
    ("1 + 12 crops 1344x1792", [[1344, 1792]]),
    ("three images 2, 3, 5 crops", [[448, 448], [448, 896], [896, 896]]),
    ("padded patch rows 250x600", [[250, 600]]),  # 1x2 crops, 27 of 32 patch rows (odd)
    ("padded patch columns 600x250", [[600, 250]]),  # 2x1 crops, 27 of 32 patch columns
    # Same input shapes [1, 3, ...] and the same 657 tokens from two crop arrangements.
    ("same tokens 1x2 crops 320x450", [[320, 450]]),
    ("same tokens 2x1 crops 870x300", [[870, 300]]),
]


def pack(images: list, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """{name: array} with random pixels for a pack of [height, width] images (see `crops.random_inputs`)."""
    return crops.random_inputs([crops.layout(int(h), int(w)) for h, w in images], rng)


def validation_layouts(example: list) -> list[tuple[str, list]]:
    """(name, pack): the export example first, then the fixed packs."""
    return [(f"export example {example}", [list(x) for x in example])] + FIXED_PACKS
