"""Qwen video preprocessing: a numpy port of transformers' `Qwen3VLVideoProcessor` (Qwen3-VL, Qwen3.5) and
`Qwen2VLVideoProcessor` (Qwen2-VL, Qwen2.5-VL), 5.23.

Those processors need torchvision; this port does the same steps on frames that are already sampled
(as `processor(videos=[frames], do_sample_frames=False)`, the per-frame cap off):
1. `smart_resize`: multiples of patch*merge, pixels within the budget, over (frames, height, width) for
   Qwen3-VL (the budget is the clip's), over (height, width) for Qwen2-VL (`budget` "frame": each frame's);
2. antialiased bicubic resize of the uint8 frames (torch's uint8 kernel, see `resample`);
3. fused rescale + normalise in float32: (x - mean/rescale) / (std/rescale);
4. temporal patching: the last frame repeated up to a multiple of the temporal patch, then patches
   ordered (t, h-block, w-block, h-in-block, w-in-block) with rows (channel, frame-in-patch, y, x).
Output: pixel_values float32 [t*h*w, 1536], grid_thw int64 [1, 3] = (t, h, w) with t = ceil(frames / 2).
"""

import json
import math
from pathlib import Path

import numpy as np

from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.families.qwen_vl.generations import CLIP_MEAN, CLIP_STD
from vlm_vision_onnx.families.qwen_vl.layouts import smart_resize as image_smart_resize
from vlm_vision_onnx.families.resample import normalize, resize_uint8_aa

CONFIG_FILE = "video_preprocessor_config.json"
#: Qwen3VLVideoProcessor's class defaults in transformers 5.23 (the test checks them against the class).
DEFAULTS = {
    "size": {"shortest_edge": 128 * 32 * 32, "longest_edge": 32 * 32 * 768},
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "rescale_factor": 1 / 255,
}
#: Qwen2VLVideoProcessor's class defaults in transformers 5.23 (Qwen2-VL's and Qwen2.5-VL's video processor).
QWEN2_DEFAULTS = {**DEFAULTS, "size": {"shortest_edge": 128 * 28 * 28, "longest_edge": 28 * 28 * 768},
                  "patch_size": 14, "image_mean": CLIP_MEAN, "image_std": CLIP_STD}
#: Which processor's budget a generation's video follows: the whole clip's pixels (Qwen3) or each frame's (Qwen2).
BUDGETS = ("clip", "frame")


def settings(folder: str | Path | None = None, image_config: dict | None = None, defaults: dict = DEFAULTS,
             budget: str = "clip") -> dict:
    """The video processor's settings: FOLDER/video_preprocessor_config.json when present, else the class
    `defaults` (DEFAULTS: Qwen3-VL's, QWEN2_DEFAULTS) with the image processor's patch, temporal patch and merge
    sizes; `budget` (BUDGETS) rides along for `preprocess`."""
    values = {**defaults, "budget": budget}
    path = Path(folder) / CONFIG_FILE if folder is not None else None
    if path is not None and path.is_file():
        try:
            values.update({k: v for k, v in json.loads(path.read_text()).items() if k in DEFAULTS})
        except (OSError, ValueError) as err:
            raise UsageError(f"{path} is not valid JSON ({err})") from None
    elif image_config:
        values.update({k: image_config[k] for k in ("patch_size", "temporal_patch_size", "merge_size")
                       if k in image_config})
    return values


def smart_resize(num_frames: int, height: int, width: int, temporal_factor: int, factor: int,
                 min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """transformers' video smart_resize: (height, width) multiples of `factor`, t*h*w within the budget."""
    if num_frames < temporal_factor:
        raise UsageError(f"a video needs at least {temporal_factor} frames, got {num_frames}")
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    if max(height, width) / min(height, width) > 200:
        raise UsageError(f"video frames {width}x{height}: aspect ratio above 200")
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    t_bar = round(num_frames / temporal_factor) * temporal_factor
    if t_bar * h_bar * w_bar > max_pixels:
        beta = math.sqrt((num_frames * height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (num_frames * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def frame_smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Qwen2VLVideoProcessor's resize: the image smart_resize of one frame (aspect ratio above 200 refused)."""
    if max(height, width) / min(height, width) > 200:
        raise UsageError(f"video frames {width}x{height}: aspect ratio above 200")
    return image_smart_resize(height, width, factor, min_pixels, max_pixels)


def patchify(frames: np.ndarray, patch: int, merge: int, temporal: int) -> tuple[np.ndarray, tuple]:
    """float32 [T, C, H, W] -> ([t*h*w, C*temporal*patch*patch], (t, h, w)); the last frame repeats to fill t."""
    if pad := -frames.shape[0] % temporal:
        frames = np.concatenate([frames, np.repeat(frames[-1:], pad, axis=0)])
    num, channels, height, width = frames.shape
    t, h, w = num // temporal, height // patch, width // patch
    x = frames.reshape(t, temporal, channels, h // merge, merge, patch, w // merge, merge, patch)
    x = x.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return np.ascontiguousarray(x).reshape(t * h * w, channels * temporal * patch * patch), (t, h, w)


def preprocess(frames: list[np.ndarray], config: dict) -> tuple[np.ndarray, np.ndarray]:
    """RGB uint8 frames [H, W, 3] (one size) -> (pixel_values float32 [t*h*w, 1536], grid_thw int64 [1, 3])."""
    shapes = {f.shape for f in frames}
    if len(shapes) != 1:
        raise UsageError(f"video frames must all have one size, got {sorted(s[:2] for s in shapes)} (H, W)")
    video = np.stack(frames).transpose(0, 3, 1, 2)  # [T, 3, H, W] uint8
    factor = config["patch_size"] * config["merge_size"]
    bounds = config["size"]["shortest_edge"], config["size"]["longest_edge"]
    if config.get("budget", "clip") == "frame":
        height, width = frame_smart_resize(video.shape[2], video.shape[3], factor, *bounds)
    else:
        height, width = smart_resize(video.shape[0], video.shape[2], video.shape[3], config["temporal_patch_size"],
                                     factor, *bounds)
    video = resize_uint8_aa(video, (height, width), "bicubic")
    pixels = normalize(video, config["image_mean"], config["image_std"], config["rescale_factor"])
    patches, grid = patchify(pixels, config["patch_size"], config["merge_size"], config["temporal_patch_size"])
    return patches, np.array([grid], dtype=np.int64)
