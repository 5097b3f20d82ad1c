"""Phi-4-multimodal preprocessing in the product runtime (no torch), from a package folder.

The numpy + pillow port of its processor (families/phi4_mm/preprocess.py; the transformers processor
needs torchvision): pixel_values float32 [1, crops, 3, 448, 448], image_attention_mask float32
[1, crops, 32, 32], image_sizes int64 [1, 2] per image; the port's loader checks the file. Images only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.families.base import Pack
from vlm_vision_onnx.families.phi4_mm.spec import INPUT_NAMES


def processor(folder: Path) -> dict:
    from vlm_vision_onnx.families.phi4_mm import preprocess as phi4_mm

    return phi4_mm.load_config(folder)


def image_inputs(image: np.ndarray, settings: dict) -> dict[str, np.ndarray]:
    from vlm_vision_onnx.families.phi4_mm import preprocess as phi4_mm

    pack = phi4_mm.preprocess([image], settings)
    return {name: pack[name] for name in INPUT_NAMES}


def embed_pack(folder: Path, images: list[tuple[Path, np.ndarray]], frames: list[tuple[Path, np.ndarray]]) -> Pack:
    """Images through the numpy port of the Phi-4-multimodal processor (it takes no video)."""
    from vlm_vision_onnx.families.phi4_mm import preprocess as phi4_mm

    if frames:
        raise UsageError("--video needs a Qwen3-VL package; Phi-4-multimodal embeds images only")
    config = phi4_mm.load_config(folder)
    parts = []
    for path, rgb in images:
        try:
            parts.append(phi4_mm.preprocess_one(rgb, config))
        except UsageError as err:
            raise UsageError(f"{path}: {err}") from None
    packed = phi4_mm.pack(parts)
    pack = Pack(feeds={k: packed[k] for k in INPUT_NAMES})
    for i, ((path, _), (crops, _, size, tokens)) in enumerate(zip(images, parts)):
        pack.names.append(f"image_{i}")
        pack.sources.append([str(path)])
        pack.facts.append({"image_size": np.array(size, dtype=np.int64), "num_crops": np.int64(len(crops))})
        pack.tokens.append(tokens)
    return pack


def max_pixels(folder: Path) -> int:
    """The HD canvas's largest area: dynamic_hd crops of size x size pixels (larger images are resized to fit)."""
    from vlm_vision_onnx.families.phi4_mm import preprocess as phi4_mm

    config = phi4_mm.load_config(folder)
    try:
        return int(config["dynamic_hd"]) * int(config["size"]["height"]) ** 2
    except (TypeError, ValueError, KeyError, AttributeError):
        raise UsageError(f"{folder / phi4_mm.CONFIG_FILE}: dynamic_hd and size.height must be integers, got "
                         f"{config.get('dynamic_hd')!r} and {config.get('size')!r}") from None
