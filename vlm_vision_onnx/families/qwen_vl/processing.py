"""Qwen preprocessing in the product runtime (no torch), from a package folder, for every generation.

Images: transformers' `Qwen2VLImageProcessorPil` configured from the package's preprocessor_config.json
(families/qwen_vl/preprocess.py): pixel_values float32 [h*w, 3*Tp*P*P], grid_thw int64 [[1, h, w]]
(h, w in patches). The processor is built by its explicit class, never through AutoImageProcessor (which would
follow the package's `auto_map` to code of its own; a config holding one is refused).
A video: the numpy port of Qwen3VLVideoProcessor / Qwen2VLVideoProcessor (families/qwen_vl/preprocess_video.py,
the generation's), one entry with t > 1.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import numpy as np

from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.families.base import Pack
from vlm_vision_onnx.families.qwen_vl import contract
from vlm_vision_onnx.families.qwen_vl.generations import Generation


def processor(folder: Path):
    from vlm_vision_onnx.families.qwen_vl import preprocess as qwen3_vl

    return qwen3_vl.load_processor(folder)


def image_inputs(image: np.ndarray, loaded) -> dict[str, np.ndarray]:
    from vlm_vision_onnx.families.qwen_vl import preprocess as qwen3_vl

    pixel_values, grid_thw = qwen3_vl.preprocess(loaded, [image])
    return {"pixel_values": pixel_values, "grid_thw": grid_thw}


def load_processor(folder: Path):
    """The package's processor, by its explicit class; UsageError when the config is not a Qwen one (what
    transformers' AutoImageProcessor resolves it to: `image_processor_type`) or asks for code of its own."""
    from vlm_vision_onnx.families.qwen_vl import preprocess as qwen3_vl

    loaded = qwen3_vl.load_processor(folder)
    declared = json.loads((Path(folder) / qwen3_vl.CONFIG_FILE).read_text()).get("image_processor_type")
    if declared is not None and not str(declared).startswith("Qwen2VLImageProcessor"):
        raise UsageError(f"{Path(folder) / qwen3_vl.CONFIG_FILE} names image_processor_type {declared!r}, not "
                         "Qwen2VLImageProcessor (the Qwen generations' processor)")
    return loaded


def max_pixels(folder: Path) -> int:
    from vlm_vision_onnx.families.qwen_vl import preprocess as qwen3_vl

    return qwen3_vl.max_pixels(qwen3_vl.load_processor(folder))


def embed_packer(generation: Generation):
    """`embed_pack` of a generation: its video through the port with the generation's video processor defaults."""
    from vlm_vision_onnx.families.qwen_vl import preprocess_video

    defaults = preprocess_video.DEFAULTS if generation.video_budget == "clip" else preprocess_video.QWEN2_DEFAULTS
    return partial(embed_pack, video_defaults=defaults, video_budget=generation.video_budget)


def embed_pack(folder: Path, images: list[tuple[Path, np.ndarray]], frames: list[tuple[Path, np.ndarray]],
               video_defaults: dict | None = None, video_budget: str = "clip") -> Pack:
    """Images through the transformers processor, the video through the port; one packed grid."""
    from vlm_vision_onnx.families.qwen_vl import preprocess as qwen3_vl
    from vlm_vision_onnx.families.qwen_vl import preprocess_video as qwen3_vl_video

    loaded = qwen3_vl.load_processor(folder)
    merge = loaded.merge_size
    pixels, grids, pack = [], [], Pack(feeds={})
    for i, (path, rgb) in enumerate(images):
        try:
            values, grid = qwen3_vl.preprocess(loaded, [rgb])
        except UsageError as err:
            raise UsageError(f"{path}: {err}") from None
        pixels.append(values)
        grids.append(grid)
        pack.names.append(f"image_{i}")
        pack.sources.append([str(path)])
    if frames:
        config = qwen3_vl_video.settings(folder, loaded.to_dict(), video_defaults or qwen3_vl_video.DEFAULTS,
                                         video_budget)
        try:
            values, grid = qwen3_vl_video.preprocess([rgb for _, rgb in frames], config)
        except UsageError as err:
            raise UsageError(f"video {frames[0][0].parent}: {err}") from None
        pixels.append(values)
        grids.append(grid)
        pack.names.append("video")
        pack.sources.append([str(p) for p, _ in frames])
    grid_thw = np.concatenate(grids).astype(np.int64)
    pixel_values = np.concatenate(pixels).astype(np.float32)
    contract.check_grid(grid_thw, merge)  # the row length is checked against the model's input
    pack.feeds = {"pixel_values": pixel_values, "grid_thw": grid_thw}
    pack.facts = [{"grid_thw": g} for g in grid_thw]
    pack.tokens = [int(np.prod(g)) // merge**2 for g in grid_thw]
    return pack
