"""Release facts of Phi-4-multimodal (torch-free): its vision `config.json`, `preprocessor_config.json`, usage.

`config.json` is `Phi4MultimodalVisionConfig.save_pretrained` (from the checkpoint's config, else the
config file's `vision` section) with `out_hidden_size`, the projection width; `preprocessor_config.json`
is the checkpoint's, else what the processor writes with its defaults (written by the torch-free port,
families/phi4_mm/preprocess.py: the processor needs torchvision).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from vlm_vision_onnx.families import export_facts

ACCEPTS = "every image size and image count the model accepts (its HD crop layouts), mixed in one call"

def write_config(report: dict, metadata: dict, dest: Path) -> dict:
    """Write `dest/config.json` (Phi4MultimodalVisionConfig + `out_hidden_size`, the projection width) and return it."""
    from transformers.models.phi4_multimodal.configuration_phi4_multimodal import (
        Phi4MultimodalConfig,
        Phi4MultimodalVisionConfig,
    )

    checkpoint = export_facts.checkpoint(report)
    if checkpoint is not None:
        full = Phi4MultimodalConfig.from_dict(export_facts.read_json(checkpoint / "config.json"))
        config, out_hidden, source = full.vision_config, full.hidden_size, f"{checkpoint}/config.json"
    else:
        values = export_facts.config_vision(report)
        out_hidden = values.pop("out_hidden_size", Phi4MultimodalConfig().hidden_size)
        config, source = Phi4MultimodalVisionConfig(**values), report["config"]
    config.out_hidden_size = out_hidden  # the image embedding's output width (the language model's hidden size)
    export_facts.check_against_metadata({"out_hidden_size": out_hidden, "patch_size": config.patch_size,
                             "crop_size": config.crop_size, "feature_layer": config.feature_layer}, metadata, source)
    config.save_pretrained(dest)
    return export_facts.read_json(dest / "config.json")


def write_processor(report: dict, metadata: dict, dest: Path) -> dict:
    """Write `dest/preprocessor_config.json`: the checkpoint's as it is, else what Phi4MultimodalImageProcessor's
    `save_pretrained` writes with its defaults (families/phi4_mm/preprocess.py: the processor itself needs
    torchvision, which has no CPU build here)."""
    from vlm_vision_onnx.families.phi4_mm import preprocess as phi4_mm

    checkpoint = export_facts.checkpoint(report)
    source = checkpoint / "preprocessor_config.json" if checkpoint is not None else None
    if source is not None and source.is_file():
        shutil.copyfile(source, dest / "preprocessor_config.json")
    else:
        phi4_mm.save_config(dest)
    return export_facts.read_json(dest / "preprocessor_config.json")


USAGE = """\
import numpy as np
import onnxruntime as ort
from PIL import Image
from vlm_vision_onnx.families.phi4_mm import preprocess as phi4_mm  # numpy port of Phi4MultimodalImageProcessor (whose own code needs torchvision)

config = phi4_mm.load_config("PACKAGE")
batch = phi4_mm.preprocess([np.asarray(Image.open("photo.jpg").convert("RGB"))], config)
session = ort.InferenceSession("PACKAGE/onnx/FILE", providers=["CPUExecutionProvider"])
(image_features,) = session.run(None, {name: batch[name] for name in
                                       ("pixel_values", "image_attention_mask", "image_sizes")})
"""
