"""Qwen-VL image preprocessing (every generation): transformers' own PIL-backend processor, configured from a package.

`Qwen2VLImageProcessorPil` runs without torch and returns numpy; it is not re-implemented here.
Output of `preprocess`: pixel_values float32 [sum(h*w), 3*2*P*P] (3 channels x temporal patch 2 x P x P, P = 14 or 16,
each image repeated over the temporal patch) and grid_thw int64 [num_images, 3] = (1, h, w) in patches.
"""

import json
from pathlib import Path

import numpy as np
from PIL import Image
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from core.errors import UsageError
from families.qwen_vl.generations import QWEN3_VL
from families.untrusted import refuse_code

CONFIG_FILE = "preprocessor_config.json"
#: Qwen3-VL's image processor settings (Qwen/Qwen3-VL-*-Instruct preprocessor_config.json); every generation's
#: are its `Generation.processor`.
SETTINGS = QWEN3_VL.processor


def processor(settings: dict = SETTINGS, **overrides) -> Qwen2VLImageProcessorPil:
    """The processor with a generation's settings (Qwen3-VL's by default; keyword arguments override them)."""
    return Qwen2VLImageProcessorPil(**{**settings, **overrides})


def save_config(folder: str | Path, settings: dict = SETTINGS, **overrides) -> Path:
    """Write FOLDER/preprocessor_config.json with the processor's own `save_pretrained`."""
    processor(settings, **overrides).save_pretrained(str(folder))
    return Path(folder) / CONFIG_FILE


def load_processor(folder: str | Path) -> Qwen2VLImageProcessorPil:
    """The processor configured from FOLDER/preprocessor_config.json; UsageError if missing or not Qwen."""
    path = Path(folder) / CONFIG_FILE
    if not path.is_file():
        raise UsageError(f"{path} is missing (a package holds the processor's preprocessor_config.json)")
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise UsageError(f"{path} is not valid JSON ({err})") from None
    if not isinstance(config, dict) or "merge_size" not in config or "temporal_patch_size" not in config:
        raise UsageError(f"{path} is not a Qwen2-VL/Qwen3-VL image processor config (no merge_size / "
                         "temporal_patch_size)")
    refuse_code(config, path)
    try:
        return Qwen2VLImageProcessorPil.from_pretrained(str(folder))  # the explicit class: no code of the folder's
    except (TypeError, ValueError, KeyError, AttributeError, OSError) as err:
        raise UsageError(f"{path} does not configure the Qwen image processor ({type(err).__name__}: "
                         f"{str(err).splitlines()[0] if str(err) else ''})") from None


def max_pixels(proc: Qwen2VLImageProcessorPil) -> int:
    """The most pixels the processor keeps of one image (its `size.longest_edge`, transformers' max_pixels)."""
    return int(proc.size.longest_edge or SETTINGS["max_pixels"])


def preprocess(proc: Qwen2VLImageProcessorPil, images: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """RGB uint8 images [H, W, 3] -> (pixel_values float32 [N, 1536], grid_thw int64 [num_images, 3])."""
    try:
        out = proc([Image.fromarray(image) for image in images], return_tensors="np")
    except ValueError as err:  # e.g. an aspect ratio above 200
        raise UsageError(f"cannot preprocess the images: {str(err).splitlines()[0]}") from None
    return out["pixel_values"].astype(np.float32, copy=False), out["image_grid_thw"].astype(np.int64)
