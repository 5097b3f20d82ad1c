"""What a release package needs to know of each model family (torch-free): its vision `config.json`,
its `preprocessor_config.json`, and what the symbolic dims of its I/O mean.

A family entry is a `Family` in `FAMILIES`; adding a family is one entry here plus its smoke inputs
in `runtime/smoke.py`.

Phi-4-multimodal: `config.json` is `Phi4MultimodalVisionConfig.save_pretrained` (from the checkpoint's
config, else the config file's `vision` section) with `out_hidden_size`, the projection width;
`preprocessor_config.json` is the checkpoint's, else what the processor writes with its defaults
(written by the torch-free port, runtime/preprocess/phi4_mm.py: the processor needs torchvision).

Qwen3-VL:
- `config.json` is `Qwen3VLVisionConfig.save_pretrained`: from the checkpoint's `config.json`
  (`vision_config`) when the export used a checkpoint, else from the `vision` section of the config
  file the export recorded (configs/NAME.yaml). Its facts are checked against the ONNX metadata.
- `preprocessor_config.json` is what the model's own processor writes with `save_pretrained`: the
  checkpoint's processor when the checkpoint ships one, else transformers' `Qwen2VLImageProcessorPil`
  (torch-free) with Qwen3-VL's settings (`runtime.preprocess.qwen3_vl.SETTINGS`: patch 16, merge 2,
  temporal patch 2, mean = std = 0.5, pixels between `runtime.layouts.MIN_PIXELS` and `MAX_PIXELS`),
  patch, temporal patch and merge sizes taken from the vision config.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from core.errors import UsageError


@dataclass(frozen=True)
class Family:
    """Release facts of one family; `write_config` and `write_processor` take (export report, ONNX
    metadata, destination folder) and write `config.json` / `preprocessor_config.json` there."""

    name: str
    title: str
    write_config: Callable[[dict, dict, Path], dict]
    write_processor: Callable[[dict, dict, Path], dict]
    symbols: dict[str, str]
    accepts: str  # what one call takes, for the model card
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
    from transformers import AutoImageProcessor

    from runtime.preprocess import qwen3_vl

    checkpoint = _checkpoint(report)
    if checkpoint is not None and (checkpoint / "preprocessor_config.json").is_file():
        AutoImageProcessor.from_pretrained(checkpoint, backend="pil").save_pretrained(dest)
    else:
        config = _read_json(dest / "config.json")
        qwen3_vl.save_config(dest, patch_size=config["patch_size"], temporal_patch_size=config["temporal_patch_size"],
                             merge_size=config["spatial_merge_size"])
    written = _read_json(dest / "preprocessor_config.json")
    merge = written.get("merge_size")
    if str(merge) != str(metadata.get("spatial_merge_size", merge)):
        raise UsageError(f"the processor's merge_size {merge} differs from the model's spatial_merge_size "
                         f"{metadata.get('spatial_merge_size')}")
    return written


def phi4_mm_config(report: dict, metadata: dict, dest: Path) -> dict:
    """Write `dest/config.json` (Phi4MultimodalVisionConfig + `out_hidden_size`, the projection width) and return it."""
    from transformers.models.phi4_multimodal.configuration_phi4_multimodal import (
        Phi4MultimodalConfig,
        Phi4MultimodalVisionConfig,
    )

    checkpoint = _checkpoint(report)
    if checkpoint is not None:
        full = Phi4MultimodalConfig.from_dict(_read_json(checkpoint / "config.json"))
        config, out_hidden, source = full.vision_config, full.hidden_size, f"{checkpoint}/config.json"
    else:
        values = _config_vision(report)
        out_hidden = values.pop("out_hidden_size", Phi4MultimodalConfig().hidden_size)
        config, source = Phi4MultimodalVisionConfig(**values), report["config"]
    config.out_hidden_size = out_hidden  # the image embedding's output width (the language model's hidden size)
    _check_against_metadata({"out_hidden_size": out_hidden, "patch_size": config.patch_size,
                             "crop_size": config.crop_size, "feature_layer": config.feature_layer}, metadata, source)
    config.save_pretrained(dest)
    return _read_json(dest / "config.json")


def phi4_mm_processor(report: dict, metadata: dict, dest: Path) -> dict:
    """Write `dest/preprocessor_config.json`: the checkpoint's as it is, else what Phi4MultimodalImageProcessor's
    `save_pretrained` writes with its defaults (runtime/preprocess/phi4_mm.py: the processor itself needs
    torchvision, which has no CPU build here)."""
    from runtime.preprocess import phi4_mm

    checkpoint = _checkpoint(report)
    source = checkpoint / "preprocessor_config.json" if checkpoint is not None else None
    if source is not None and source.is_file():
        shutil.copyfile(source, dest / "preprocessor_config.json")
    else:
        phi4_mm.save_config(dest)
    return _read_json(dest / "preprocessor_config.json")


PHI4_MM_USAGE = """\
import numpy as np
import onnxruntime as ort
from PIL import Image
from runtime.preprocess import phi4_mm  # numpy port of Phi4MultimodalImageProcessor (whose own code needs torchvision)

config = phi4_mm.load_config("PACKAGE")
batch = phi4_mm.preprocess([np.asarray(Image.open("photo.jpg").convert("RGB"))], config)
session = ort.InferenceSession("PACKAGE/onnx/FILE", providers=["CPUExecutionProvider"])
(image_features,) = session.run(None, {name: batch[name] for name in
                                       ("pixel_values", "image_attention_mask", "image_sizes")})
"""

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
        accepts="every image size, image count and video length the model accepts, mixed in one pack",
        usage=QWEN3_VL_USAGE,
    ),
    "phi-4-mm": Family(
        name="phi-4-mm",
        title="Phi-4-multimodal image embedding",
        write_config=phi4_mm_config,
        write_processor=phi4_mm_processor,
        symbols={
            "num_images": "images in the pack",
            "max_num_crops": "crops of the image with the most (1 global + its HD tiles); others padded with "
                             "zero crops and all-ones masks",
            "num_image_tokens": "image tokens of the pack, in the order the model scatters them into inputs_embeds",
        },
        accepts="every image size and image count the model accepts (its HD crop layouts), mixed in one call",
        usage=PHI4_MM_USAGE,
    ),
}


def family(name: str) -> Family:
    if name not in FAMILIES:
        raise UsageError(f"no release packaging for the family {name!r}; known: {', '.join(FAMILIES)}")
    return FAMILIES[name]
