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
from families.qwen3_vl import FAMILY as QWEN3_VL

FAMILIES: dict[str, Family] = {f.name: f for f in (QWEN3_VL, PHI4_MM)}  # the registry: one entry per family

__all__ = ["FAMILIES", "PHI4_MM", "QWEN3_VL", "Family", "Inputs", "Metadata", "family", "of_model"]


def family(name: str | None, where: str = "") -> Family:
    """The family called `name`, or UsageError naming the known ones."""
    if name not in FAMILIES:
        prefix = f"{where}: " if where else ""
        raise UsageError(f"{prefix}unknown model family {name!r}; known: {', '.join(FAMILIES)}")
    return FAMILIES[name]


def of_model(metadata: Metadata, path: str | Path) -> Family:
    """The family an exported model records in its metadata (`family`), or UsageError saying so."""
    if "family" not in metadata:
        raise UsageError(f"{path} records no `family` in its metadata: it was not made by "
                         f"`python -m builders.vision` (re-export it)")
    return family(metadata["family"], str(path))
