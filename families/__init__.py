"""Model families, torch-free: the registry of declared `Family` objects (see `families.base`).

Adding a family: its folder here (`families/<family>/`: I/O contract, layouts, release and processing
facts, numpy only), its folder in `builders/` (eager model, patcher, checkpoint loading), its configs,
and one entry in `FAMILIES` below.
"""

from __future__ import annotations

from pathlib import Path

from core.errors import UsageError
from families.base import Family, Inputs, Metadata
from families.phi4_mm import FAMILY as PHI4_MM
from families.qwen_vl import FAMILIES as QWEN_FAMILIES
from families.qwen_vl import QWEN2_5_VL, QWEN2_VL, QWEN3_5, QWEN3_VL
from families.qwen_vl.generations import BY_MODEL_TYPE as _QWEN_MODEL_TYPES

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
    from core.onnx_light import DTYPE_NAMES

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


def of_model(metadata: Metadata, path: str | Path) -> Family:
    """The family an exported model records in its metadata (`family`), or UsageError saying so."""
    if "family" not in metadata:
        raise UsageError(f"{path} records no `family` in its metadata: it was not made by "
                         f"`python -m builders.vision` (re-export it)")
    return family(metadata["family"], str(path))
