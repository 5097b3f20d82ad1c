"""Qwen-VL image preprocessing (every generation), numpy and pillow only: a port of transformers 5.23's
`Qwen2VLImageProcessorPil`, configured from a package's preprocessor_config.json.

The runtime never imports transformers (nor torch, which transformers imports where it finds it): this module is
what `runtime embed`, `verify`, `encode` and `embed-collection` preprocess with. It takes the processor's own steps
in the same order and dtypes, so its output equals the processor's bit for bit (tests/test_preprocess_qwen3_vl.py
compares them on every generation's settings, at tiny, huge, extreme-aspect, grayscale, RGBA, 16-bit, palette
and EXIF-rotated images):
1. `smart_resize` to multiples of patch * merge within [min_pixels, max_pixels] (aspect ratio above 200 refused);
2. pillow's `Image.resize` of the uint8 RGB image with the config's filter (`resample`, 3 = bicubic);
3. rescale in float64 (x * rescale_factor), cast to float32; normalise in float32: (x - mean) / std per channel;
4. patchify: rows ordered (h-block, w-block, h-in-block, w-in-block), each (channel, temporal copy, y, x).
Output of `preprocess`: pixel_values float32 [sum(h*w), C*Tp*P*P] (P = 14 or 16, Tp = 2: each image repeated over
the temporal patch) and grid_thw int64 [num_images, 3] = (1, h, w) in patches.

Writing a package's preprocessor_config.json goes through transformers' own class (release side only:
`families/qwen_vl/processor_files.py`), so that transformers reads back what this module reads.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.families.qwen_vl.generations import CLIP_MEAN, CLIP_STD, QWEN3_VL
from vlm_vision_onnx.families.qwen_vl.layouts import smart_resize
from vlm_vision_onnx.families.untrusted import refuse_code

CONFIG_FILE = "preprocessor_config.json"
#: Qwen3-VL's image processor settings (Qwen/Qwen3-VL-*-Instruct preprocessor_config.json); every generation's
#: are its `Generation.processor`.
SETTINGS = QWEN3_VL.processor
#: The most extreme aspect ratio the processor accepts (its smart_resize's check).
MAX_ASPECT = 200


@dataclass(frozen=True)
class ImageProcessor:
    """The settings of `Qwen2VLImageProcessorPil` that change its output; the defaults are the class's own
    (transformers 5.23: Qwen2-VL's patch 14, CLIP normalisation, 56*56 to 28*28*1280 pixels, bicubic)."""

    min_pixels: int = 56 * 56
    max_pixels: int = 28 * 28 * 1280
    patch_size: int = 14
    temporal_patch_size: int = 2
    merge_size: int = 2
    do_resize: bool = True
    resample: int = 3
    do_rescale: bool = True
    rescale_factor: float = 1 / 255
    do_normalize: bool = True
    image_mean: tuple[float, ...] = tuple(CLIP_MEAN)
    image_std: tuple[float, ...] = tuple(CLIP_STD)

    def to_dict(self) -> dict:
        """The settings under transformers' keys (`size` = {shortest_edge, longest_edge}), as
        `Qwen2VLImageProcessorPil.to_dict()` names them."""
        values = asdict(self)
        values["size"] = {"shortest_edge": values.pop("min_pixels"), "longest_edge": values.pop("max_pixels")}
        values["image_mean"], values["image_std"] = list(self.image_mean), list(self.image_std)
        return values


def from_config(config: dict) -> ImageProcessor:
    """The processor a preprocessor_config.json dict configures, resolved as the class's constructor does: a null
    or absent key takes the class default; `min_pixels` / `max_pixels` keys override `size`."""
    values = {k: v for k, v in config.items() if k in ImageProcessor.__dataclass_fields__ and v is not None}
    size = config.get("size")
    if size is not None:
        if not isinstance(size, dict):
            raise ValueError(f"size must be a dict with shortest_edge and longest_edge, got {size!r}")
        if size.get("shortest_edge") is not None:
            values.setdefault("min_pixels", size["shortest_edge"])
        if size.get("longest_edge") is not None:
            values.setdefault("max_pixels", size["longest_edge"])
    for key in ("image_mean", "image_std"):
        if key in values:
            value = values[key]
            values[key] = tuple(float(v) for v in value) if isinstance(value, (list, tuple)) else (float(value),) * 3
    for key in ("min_pixels", "max_pixels", "patch_size", "temporal_patch_size", "merge_size", "resample"):
        if key in values and (isinstance(values[key], bool) or not isinstance(values[key], (int, float))
                              or values[key] != int(values[key]) or values[key] < (0 if key == "resample" else 1)):
            raise ValueError(f"{key} must be a positive integer, got {values[key]!r}")
        if key in values:
            values[key] = int(values[key])
    for key in ("do_resize", "do_rescale", "do_normalize"):
        if key in values and not isinstance(values[key], bool):
            raise ValueError(f"{key} must be true or false, got {values[key]!r}")
    if "rescale_factor" in values and (isinstance(values["rescale_factor"], bool)
                                       or not isinstance(values["rescale_factor"], (int, float))):
        raise ValueError(f"rescale_factor must be a number, got {values['rescale_factor']!r}")
    found = ImageProcessor(**values)
    if len(found.image_mean) != 3 or len(found.image_std) != 3 or 0.0 in found.image_std:
        raise ValueError("image_mean and image_std must hold 3 values each (std nonzero)")
    if found.min_pixels > found.max_pixels:
        raise ValueError(f"min pixels {found.min_pixels} exceed max pixels {found.max_pixels}")
    return found


def processor(settings: dict = SETTINGS, **overrides) -> ImageProcessor:
    """The processor with a generation's settings (Qwen3-VL's by default; keyword arguments override them)."""
    return from_config({**settings, **overrides})


def load_processor(folder: str | Path) -> ImageProcessor:
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
        return from_config(config)
    except (TypeError, ValueError) as err:
        raise UsageError(f"{path} does not configure the Qwen image processor ({err})") from None


def max_pixels(proc: ImageProcessor) -> int:
    """The most pixels the processor keeps of one image (its `size.longest_edge`, transformers' max_pixels)."""
    return proc.max_pixels


def _resize(image: np.ndarray, proc: ImageProcessor) -> np.ndarray:
    """uint8 [H, W, 3] -> uint8 [h, w, 3], h and w multiples of patch * merge (pillow, the config's filter)."""
    height, width = image.shape[:2]
    if max(height, width) / min(height, width) > MAX_ASPECT:
        raise UsageError(f"cannot preprocess the images: absolute aspect ratio must be smaller than {MAX_ASPECT}, "
                         f"got {max(height, width) / min(height, width)}")
    h, w = smart_resize(height, width, proc.patch_size * proc.merge_size, proc.min_pixels, proc.max_pixels)
    return np.asarray(Image.fromarray(image).resize((w, h), resample=proc.resample))


def _patchify(image: np.ndarray, proc: ImageProcessor) -> tuple[np.ndarray, int, int]:
    """float32 [C, H, W] -> (rows float32 [gh*gw, C*Tp*P*P], gh, gw)."""
    channels, height, width = image.shape
    p, m, t = proc.patch_size, proc.merge_size, proc.temporal_patch_size
    gh, gw = height // p, width // p
    if gh * p != height or gw * p != width or gh % m or gw % m:
        raise UsageError(f"cannot preprocess the images: {width}x{height} is not a multiple of patch x merge "
                         f"({p * m}) and the processor does not resize (do_resize false)")
    patches = image.reshape(channels, gh // m, m, p, gw // m, m, p).transpose(1, 4, 2, 5, 0, 3, 6)
    patches = np.broadcast_to(patches[:, :, :, :, :, None], (*patches.shape[:5], t, p, p))
    return patches.reshape(gh * gw, channels * t * p * p), gh, gw


def preprocess_one(proc: ImageProcessor, image: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """RGB uint8 [H, W, 3] -> (rows float32 [h*w, 3*Tp*P*P], [1, h, w])."""
    if proc.do_resize:
        image = _resize(image, proc)
    values = image.transpose(2, 0, 1)  # [C, H, W]
    if proc.do_rescale:
        values = (values.astype(np.float64) * proc.rescale_factor).astype(np.float32)
    if proc.do_normalize:
        values = values if np.issubdtype(values.dtype, np.floating) else values.astype(np.float32)
        mean = np.asarray(proc.image_mean, dtype=values.dtype)[:, None, None]
        std = np.asarray(proc.image_std, dtype=values.dtype)[:, None, None]
        values = (values - mean) / std
    rows, gh, gw = _patchify(np.asarray(values, dtype=np.float32), proc)
    return rows, [1, gh, gw]


def preprocess(proc: ImageProcessor, images: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """RGB uint8 images [H, W, 3] -> (pixel_values float32 [N, C*Tp*P*P], grid_thw int64 [num_images, 3])."""
    done = [preprocess_one(proc, image) for image in images]
    return (np.concatenate([rows for rows, _ in done], axis=0),
            np.asarray([grid for _, grid in done], dtype=np.int64))
