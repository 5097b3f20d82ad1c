"""Phi-4-multimodal image preprocessing: a numpy port of transformers' `Phi4MultimodalImageProcessor`
(5.23), whose HD crop / pad / mask logic needs torchvision.

Per image (crop = 448, patch = 14, mask side = crop // patch = 32, dynamic_hd = max crops):
1. crop grid: ceil(W / 448) x ceil(H / 448) when it holds at most dynamic_hd crops, else the closest
   aspect ratio among the grids with at most dynamic_hd crops;
2. resize keeping the aspect ratio to fit the grid (antialiased bilinear on uint8, torch's kernel),
   pad right / bottom with white to the grid; the mask zeroes whole padded 14-pixel patches;
3. rescale + normalise (float32); the global crop is a plain bicubic resize of the normalised HD image
   to 448 x 448; crops are ordered row by row after the global crop;
4. a pack pads every image to the pack's largest crop count with zero crops and all-ones masks.
Outputs of `preprocess`: pixel_values float32 [num_images, max_num_crops, 3, 448, 448],
image_attention_mask float32 [num_images, max_num_crops, 32, 32], image_sizes int64 [num_images, 2]
(the HD image's height, width) and num_img_tokens (ints, the tokens the model emits per image).
"""

import json
import math
from pathlib import Path

import numpy as np

from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.core.report import read_json_object
from vlm_vision_onnx.families.resample import normalize, resize_bicubic, resize_uint8_aa
from vlm_vision_onnx.families.untrusted import refuse_code

CONFIG_FILE = "preprocessor_config.json"
#: Phi4MultimodalImageProcessor's class defaults in transformers 5.23 (the test checks them).
DEFAULTS = {
    "size": {"height": 448, "width": 448},
    "patch_size": 14,
    "dynamic_hd": 36,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "rescale_factor": 1 / 255,
}


def config_dict(**overrides) -> dict:
    """The preprocessor_config.json content the transformers processor would save (its class defaults)."""
    return {
        **DEFAULTS, "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "resample": 3,
        "image_processor_type": "Phi4MultimodalImageProcessor", **overrides,
    }


def save_config(folder: str | Path, **overrides) -> Path:
    """Write FOLDER/preprocessor_config.json (the processor cannot be built without torchvision)."""
    path = Path(folder) / CONFIG_FILE
    path.write_text(json.dumps(config_dict(**overrides), indent=2, sort_keys=True) + "\n")
    return path


def load_config(folder: str | Path) -> dict:
    """Settings from FOLDER/preprocessor_config.json (missing keys take the class defaults)."""
    path = Path(folder) / CONFIG_FILE
    if not path.is_file():
        raise UsageError(f"{path} is missing (a package holds the processor's preprocessor_config.json)")
    raw = read_json_object(path, "processor config", "build or unpack the package again")
    if "dynamic_hd" not in raw:
        raise UsageError(f"{path} is not a Phi-4-multimodal image processor config (no dynamic_hd)")
    refuse_code(raw, path)
    config = {**DEFAULTS, **{k: raw[k] for k in DEFAULTS if k in raw}}
    _check_types(config, path)
    if config["size"].get("height") != config["size"].get("width"):
        raise UsageError(f"{path}: size must be square, got {config['size']}")
    return config


def _number(value, low: float, high: float) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and low <= value <= high


def _check_types(config: dict, path: Path) -> None:
    """The values `preprocess` computes with, of the kinds and ranges the processor writes (found by tools/fuzz: an
    image_mean holding a mapping ended in numpy's TypeError)."""
    size = config["size"]
    checks = {
        "size": isinstance(size, dict) and all(_number(size.get(k), 14, 4096) for k in ("height", "width")),
        "patch_size": _number(config["patch_size"], 1, 448) and isinstance(config["patch_size"], int),
        "dynamic_hd": _number(config["dynamic_hd"], 1, 1024) and isinstance(config["dynamic_hd"], int),
        "image_mean": isinstance(config["image_mean"], list) and len(config["image_mean"]) == 3
        and all(_number(v, -1e6, 1e6) for v in config["image_mean"]),
        "image_std": isinstance(config["image_std"], list) and len(config["image_std"]) == 3
        and all(_number(v, 1e-9, 1e6) for v in config["image_std"]),
        "rescale_factor": _number(config["rescale_factor"], 1e-9, 1e6),
    }
    for key, ok in checks.items():
        if not ok:
            raise UsageError(f"{path}: {key} = {str(config[key])[:60]} is not what the processor writes")


def _closest_ratio(aspect: float, ratios: list, width: int, height: int, crop: int) -> tuple[int, int]:
    best_diff, best = float("inf"), (1, 1)
    area = width * height
    for ratio in ratios:
        diff = abs(aspect - ratio[0] / ratio[1])
        if diff < best_diff:
            best_diff, best = diff, ratio
        elif diff == best_diff and area > 0.5 * crop * crop * ratio[0] * ratio[1]:
            best = ratio
    return best


def crop_grid(height: int, width: int, crop: int, max_num: int) -> tuple[int, int]:
    """(crops across, crops down) for an image of height x width pixels."""
    w_num, h_num = math.ceil(width / float(crop)), math.ceil(height / float(crop))
    if w_num * h_num <= max_num:
        return w_num, h_num
    ratios = sorted({(i, j) for n in range(1, max_num + 1) for i in range(1, n + 1) for j in range(1, n + 1)
                     if 1 <= i * j <= max_num}, key=lambda x: x[0] * x[1])
    return _closest_ratio(width / height, ratios, width, height, crop)


def hd_image(image: np.ndarray, crop: int, patch: int, max_num: int) -> tuple[np.ndarray, np.ndarray]:
    """uint8 [3, H, W] -> (padded HD image uint8 [3, rows*crop, cols*crop], mask float32 [rows*m, cols*m])."""
    height, width = image.shape[-2:]
    new_h, new_w, mask = hd_geometry(height, width, crop, patch, max_num)
    target_h, target_w = mask.shape[0] // (crop // patch) * crop, mask.shape[1] // (crop // patch) * crop
    resized = resize_uint8_aa(image, (new_h, new_w), "bilinear")
    padded = np.full((3, target_h, target_w), 255, dtype=np.uint8)
    padded[:, :new_h, :new_w] = resized
    return padded, mask


def hd_geometry(height: int, width: int, crop: int, patch: int, max_num: int) -> tuple[int, int, np.ndarray]:
    """(resized height, resized width, mask float32 [rows*m, cols*m]) of a height x width image: the
    layout half of the processor's `dynamic_preprocess`, without pixels."""
    cols, rows = crop_grid(height, width, crop, max_num)
    target_w, target_h = crop * cols, crop * rows
    ratio_w, ratio_h = target_w / width, target_h / height
    if ratio_w < ratio_h:
        new_w, new_h = target_w, int(height * ratio_w)
        pad_w, pad_h = 0, target_h - int(height * ratio_w)
    else:
        new_w, new_h = int(width * ratio_h), target_h
        pad_w, pad_h = target_w - int(width * ratio_h), 0
    side = crop // patch
    mask = np.ones((side * rows, side * cols), dtype=np.float32)
    if pad_w >= patch:
        mask[:, -math.floor(pad_w / patch):] = 0
    if pad_h >= patch:
        mask[-math.floor(pad_h / patch):, :] = 0
    if min(new_h, target_h) < 10 or min(new_w, target_w) < 10:
        raise UsageError(f"image {width}x{height}: the aspect ratio is too extreme (resized to {new_w}x{new_h})")
    return new_h, new_w, mask


def preprocess_one(image: np.ndarray, config: dict) -> tuple[np.ndarray, np.ndarray, list[int], int]:
    """RGB uint8 [H, W, 3] -> (crops float32 [1 + n, 3, crop, crop], masks float32 [1 + n, m, m],
    [hd height, hd width], image tokens)."""
    crop, patch = config["size"]["height"], config["patch_size"]
    side = crop // patch
    padded, mask = hd_image(image.transpose(2, 0, 1), crop, patch, config["dynamic_hd"])
    hd = normalize(padded, config["image_mean"], config["image_std"], config["rescale_factor"])
    global_crop = resize_bicubic(hd, (crop, crop))
    height, width = hd.shape[-2:]
    rows, cols = height // crop, width // crop
    crops = hd.reshape(3, rows, crop, cols, crop).transpose(1, 3, 0, 2, 4).reshape(-1, 3, crop, crop)
    masks = mask.reshape(rows, side, cols, side).transpose(0, 2, 1, 3).reshape(-1, side, side)
    # tokens: 256 global + 1 separator + the 2x-downsampled HD mask's ones + one newline per row + 16
    small = masks[:, 0::2, 0::2]
    half = side // 2 + side % 2
    small = small.reshape(rows, cols, half, half).transpose(0, 2, 1, 3).reshape(rows * half, cols * half)
    tokens = 256 + 1 + int(small.sum()) + int(small[:, 0].sum()) + 16
    crops = np.concatenate([global_crop[None], crops])
    masks = np.concatenate([np.ones((1, side, side), dtype=np.float32), masks])
    return crops, masks, [height, width], tokens


def pack(parts: list[tuple[np.ndarray, np.ndarray, list[int], int]]) -> dict[str, np.ndarray | list[int]]:
    """`preprocess_one` results -> one pack, every image padded to the largest crop count with zero crops
    and all-ones masks: {pixel_values, image_attention_mask, image_sizes, num_img_tokens} (shapes above)."""
    most = max(p[0].shape[0] for p in parts)
    pixel_values = np.zeros((len(parts), most) + parts[0][0].shape[1:], dtype=np.float32)
    masks = np.ones((len(parts), most) + parts[0][1].shape[1:], dtype=np.float32)
    for i, (crops, mask, _, _) in enumerate(parts):
        pixel_values[i, : len(crops)] = crops
        masks[i, : len(mask)] = mask
    return {
        "pixel_values": pixel_values,
        "image_attention_mask": masks,
        "image_sizes": np.array([p[2] for p in parts], dtype=np.int64),
        "num_img_tokens": [p[3] for p in parts],
    }


def preprocess(images: list[np.ndarray], config: dict) -> dict[str, np.ndarray | list[int]]:
    """RGB uint8 images -> {pixel_values, image_attention_mask, image_sizes, num_img_tokens} (shapes above)."""
    return pack([preprocess_one(image, config) for image in images])
