"""What a release package needs to know of each model family (torch-free): its vision `config.json`,
its `preprocessor_config.json`, and what the symbolic dims of its I/O mean.

A family entry is a `Family` in `FAMILIES`; adding a family is one entry here plus its smoke inputs
in `runtime/smoke.py`.

Qwen3-VL:
- `config.json` is `Qwen3VLVisionConfig.save_pretrained`: from the checkpoint's `config.json`
  (`vision_config`) when the export used a checkpoint, else from the `vision` section of the config
  file the export recorded (configs/NAME.yaml). Its facts are checked against the ONNX metadata.
- `preprocessor_config.json` is what the model's own processor writes with `save_pretrained`: the
  checkpoint's processor when the checkpoint ships one, else transformers' `Qwen2VLImageProcessorPil`
  (torch-free) with Qwen3-VL's settings — patch 16, merge 2, temporal patch 2, mean = std = 0.5
  (IMAGENET_STANDARD, as Qwen3-VL's published `preprocessor_config.json`), pixels between
  `runtime.layouts.MIN_PIXELS` and `MAX_PIXELS`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from core.errors import UsageError
from runtime import layouts


@dataclass(frozen=True)
class Family:
    """Release facts of one family; `write_config` and `write_processor` take (export report, ONNX
    metadata, destination folder) and write `config.json` / `preprocessor_config.json` there."""

    name: str
    title: str
    write_config: Callable[[dict, dict, Path], dict]
    write_processor: Callable[[dict, dict, Path], dict]
    symbols: dict[str, str]
    usage: str  # Python that runs the package on one photo (PACKAGE and FILE stand for the folder and model file)


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise UsageError(f"{path} is not readable JSON ({err})") from None


def _checkpoint(report: dict) -> Path | None:
    if report.get("weights") != "checkpoint":
        return None
    folder = Path(report.get("checkpoint", ""))
    if not folder.is_dir():
        raise UsageError(f"the export used the checkpoint {folder}, which is gone; the package needs its "
                         "config and the sha256 of its weights: restore it or re-export")
    return folder


def _config_vision(report: dict) -> dict:
    path = Path(report.get("config", ""))
    if not path.is_file():
        raise UsageError(f"the export's config file {path} is gone; the package's config.json is written from it")
    raw = yaml.safe_load(path.read_text()) or {}
    if not isinstance(raw.get("vision"), dict):
        raise UsageError(f"config {path} has no `vision` section")
    return dict(raw["vision"])


def _check_against_metadata(facts: dict, metadata: dict, source: str) -> None:
    """The config facts the ONNX also records must agree (a config edited after the export)."""
    for key, value in facts.items():
        if key in metadata and str(metadata[key]) != str(value):
            raise UsageError(f"{source}: {key} = {value} but the exported model records {metadata[key]}; "
                             "the config changed after the export: re-export")


def qwen3_vl_config(report: dict, metadata: dict, dest: Path) -> dict:
    """Write `dest/config.json` (Qwen3VLVisionConfig) and return it."""
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLConfig, Qwen3VLVisionConfig

    checkpoint = _checkpoint(report)
    if checkpoint is not None:
        config = Qwen3VLConfig(**_read_json(checkpoint / "config.json")).vision_config
        source = f"{checkpoint}/config.json"
    else:
        config = Qwen3VLVisionConfig(**_config_vision(report))
        source = report["config"]
    patch_dim = config.in_channels * config.temporal_patch_size * config.patch_size**2
    _check_against_metadata({
        "spatial_merge_size": config.spatial_merge_size, "out_hidden_size": config.out_hidden_size,
        "patch_dim": patch_dim,
        "deepstack_visual_indexes": json.dumps(list(config.deepstack_visual_indexes)),
    }, metadata, source)
    config.save_pretrained(dest)
    return _read_json(dest / "config.json")


def qwen3_vl_processor(report: dict, metadata: dict, dest: Path) -> dict:
    """Write `dest/preprocessor_config.json` through the processor's own `save_pretrained`; return it."""
    from transformers import AutoImageProcessor, Qwen2VLImageProcessorPil

    checkpoint = _checkpoint(report)
    if checkpoint is not None and (checkpoint / "preprocessor_config.json").is_file():
        processor = AutoImageProcessor.from_pretrained(checkpoint, backend="pil")
    else:
        config = _read_json(dest / "config.json")
        processor = Qwen2VLImageProcessorPil(
            patch_size=config["patch_size"], temporal_patch_size=config["temporal_patch_size"],
            merge_size=config["spatial_merge_size"],
            size={"shortest_edge": layouts.MIN_PIXELS, "longest_edge": layouts.MAX_PIXELS},
            image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])
    processor.save_pretrained(dest)
    written = _read_json(dest / "preprocessor_config.json")
    merge = written.get("merge_size")
    if str(merge) != str(metadata.get("spatial_merge_size", merge)):
        raise UsageError(f"the processor's merge_size {merge} differs from the model's spatial_merge_size "
                         f"{metadata.get('spatial_merge_size')}")
    return written


QWEN3_VL_USAGE = """\
import numpy as np
import onnxruntime as ort
from PIL import Image
from transformers import AutoImageProcessor

processor = AutoImageProcessor.from_pretrained("PACKAGE")  # Qwen2VLImageProcessorPil: no torch needed
batch = processor(images=[Image.open("photo.jpg")], return_tensors="np")
session = ort.InferenceSession("PACKAGE/onnx/FILE", providers=["CPUExecutionProvider"])
image_embeds, *deepstack = session.run(None, {"pixel_values": batch["pixel_values"].astype(np.float32),
                                              "grid_thw": batch["image_grid_thw"].astype(np.int64)})
"""

FAMILIES = {
    "qwen3-vl": Family(
        name="qwen3-vl",
        title="Qwen3-VL vision encoder",
        write_config=qwen3_vl_config,
        write_processor=qwen3_vl_processor,
        symbols={
            "num_patches": "patches in the pack: sum of t*h*w over its images and videos",
            "num_images": "images and videos in the pack (rows of grid_thw: t, h, w in patches)",
            "num_tokens": "merged tokens: num_patches / spatial_merge_size**2",
        },
        usage=QWEN3_VL_USAGE,
    ),
}


def family(name: str) -> Family:
    if name not in FAMILIES:
        raise UsageError(f"no release packaging for the family {name!r}; known: {', '.join(FAMILIES)}")
    return FAMILIES[name]
