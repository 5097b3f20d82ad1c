"""Model families, torch-free: the registry of declared `Family` objects (see `families.base`).

Adding a family: its folder here (`families/<family>/`: I/O contract, layouts, release and processing
facts, numpy only), its folder in `builders/` (eager model, patcher, checkpoint loading), its configs,
and one entry in `FAMILIES` below.
"""

from __future__ import annotations

import json
from pathlib import Path

from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.families.base import Family, Inputs, Metadata
from vlm_vision_onnx.families.phi4_mm import FAMILY as PHI4_MM
from vlm_vision_onnx.families.qwen_vl import FAMILIES as QWEN_FAMILIES
from vlm_vision_onnx.families.qwen_vl import QWEN2_5_VL, QWEN2_VL, QWEN3_5, QWEN3_VL
from vlm_vision_onnx.families.qwen_vl.generations import BY_MODEL_TYPE as _QWEN_MODEL_TYPES

FAMILIES: dict[str, Family] = {**QWEN_FAMILIES, PHI4_MM.name: PHI4_MM}  # the registry: one entry per family
#: A checkpoint's config.json `model_type` -> the family that exports it.
MODEL_TYPES: dict[str, str] = {**_QWEN_MODEL_TYPES, "phi4_multimodal": PHI4_MM.name}

__all__ = ["FAMILIES", "MODEL_TYPES", "PHI4_MM", "QWEN2_5_VL", "QWEN2_VL", "QWEN3_5", "QWEN3_VL", "Family", "Inputs",
           "Metadata", "family", "of_model"]


def family(name: str | None, where: str = "") -> Family:
    """The family called `name`, or UsageError naming the known ones."""
    if name not in FAMILIES:
        prefix = f"{where}: " if where else ""
        raise UsageError(f"{prefix}unknown model family {name!r}; known: {', '.join(FAMILIES)}")
    return FAMILIES[name]


def check_graph_inputs(fam: Family, graph, path: str | Path) -> None:
    """UsageError when a graph input the family takes (`graph`: an onnx or core.onnx_light GraphProto) has another
    element type or rank than the family's contract (`Family.input_types`): a model such a file claims to be would
    fail at its first run, in a runtime's error."""
    from vlm_vision_onnx.core.onnx_light import DTYPE_NAMES

    for value in graph.input:
        if value.name not in fam.input_types:
            continue
        dtype, rank = fam.input_types[value.name]
        tensor = value.type.tensor_type
        found = (DTYPE_NAMES.get(tensor.elem_type, f"type {tensor.elem_type}"), len(tensor.shape.dim))
        if found != (dtype, rank):
            raise UsageError(f"{path}: input {value.name!r} is {found[0]} of rank {found[1]}, but a {fam.name} "
                             f"encoder takes {dtype} of rank {rank} (the file is corrupt or not an export of this "
                             "tool)")


#: Metadata values the stages and the runtime read as numbers: (low, high) of each.
METADATA_INTS = {"export_num_patches": (1, 2**24), "export_num_tokens": (1, 2**24), "spatial_merge_size": (1, 64),
                 "patch_dim": (1, 2**16), "out_hidden_size": (1, 2**16), "window_patches": (0, 2**16),
                 "export_num_crops": (1, 2**10), "crop_size": (1, 2**14), "patch_size": (1, 2**10),
                 "feature_layer": (-2**10, 2**10), "num_attention_heads": (1, 2**10),
                 "vision_hidden_size": (1, 2**16), "static_num_crops": (1, 2**10)}
#: Metadata values read as JSON, and the kind each must be.
METADATA_JSON = {"export_grid_thw": list, "deepstack_visual_indexes": list, "export_image_sizes": list,
                 "optimize_passes": list, "static_inputs": (list, type(None))}


def check_metadata(metadata: Metadata, path: str | Path) -> None:
    """UsageError when a metadata value a stage or the runtime parses is not what the export writes (found by
    tools/fuzz: an empty `patch_dim` ended in int()'s ValueError)."""
    for key, (low, high) in METADATA_INTS.items():
        if key in metadata:
            value = metadata[key]
            try:
                ok = low <= int(value) <= high
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise UsageError(f"{path}: metadata {key} = {value[:40]!r} is not an integer in {low}..{high}: the "
                                 "file is corrupt or not an export of this tool")
    for key, kind in METADATA_JSON.items():
        if key in metadata:
            try:
                ok = isinstance(json.loads(metadata[key]), kind)
            except ValueError:
                ok = False
            if not ok:
                raise UsageError(f"{path}: metadata {key} = {metadata[key][:40]!r} is not the JSON the export "
                                 "writes: the file is corrupt or not an export of this tool")


def of_model(metadata: Metadata, path: str | Path) -> Family:
    """The family an exported model records in its metadata (`family`), its parsed values checked
    (`check_metadata`), or UsageError saying what is wrong."""
    if "family" not in metadata:
        raise UsageError(f"{path} records no `family` in its metadata: it was not made by "
                         f"`python -m builders.vision` (re-export it)")
    found = family(metadata["family"], str(path))
    check_metadata(metadata, path)
    return found
