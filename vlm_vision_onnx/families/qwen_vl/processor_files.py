"""A package's preprocessor_config.json for the Qwen generations, written through transformers' own
`Qwen2VLImageProcessorPil` (release and builders side: the runtime reads it with `families/qwen_vl/preprocess.py`,
which never imports transformers). Written by the processor class, the file is what transformers and
onnxruntime-genai users load with `AutoImageProcessor.from_pretrained(PACKAGE)`."""

from __future__ import annotations

from pathlib import Path

from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.families.qwen_vl.preprocess import CONFIG_FILE, SETTINGS, load_processor


def reference(proc):
    """transformers' processor with the settings of `proc` (a `preprocess.ImageProcessor`): what the port is
    checked against."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    values = proc.to_dict()
    size = values.pop("size")
    return Qwen2VLImageProcessorPil(min_pixels=size["shortest_edge"], max_pixels=size["longest_edge"], **values)


def save_config(folder: str | Path, settings: dict = SETTINGS, **overrides) -> Path:
    """Write FOLDER/preprocessor_config.json with the processor's own `save_pretrained` (a generation's settings,
    keyword arguments overriding them)."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    Qwen2VLImageProcessorPil(**{**settings, **overrides}).save_pretrained(str(folder))
    return Path(folder) / CONFIG_FILE


def copy_config(checkpoint: str | Path, dest: str | Path) -> None:
    """DEST/preprocessor_config.json from a checkpoint's, read by the explicit class (never AutoImageProcessor: a
    checkpoint's auto_map never runs; a config that asks for code is refused by `load_processor` first)."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    load_processor(checkpoint)  # the checks the runtime makes: missing, not Qwen, code of its own
    try:
        Qwen2VLImageProcessorPil.from_pretrained(str(checkpoint)).save_pretrained(str(dest))
    except (TypeError, ValueError, KeyError, AttributeError, OSError) as err:
        raise UsageError(f"{Path(checkpoint) / CONFIG_FILE} does not configure the Qwen image processor "
                         f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})") from None
