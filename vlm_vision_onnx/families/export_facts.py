"""What a family's release facts read from an export: the checkpoint folder, the config file's `vision`
section, and the consistency of a config with the ONNX metadata (shared by every family's release.py)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from vlm_vision_onnx.core.errors import UsageError


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise UsageError(f"{path} is not readable JSON ({err})") from None


def checkpoint(report: dict) -> Path | None:
    """The checkpoint folder the export read, or None for random weights (UsageError when it is gone)."""
    if report.get("weights") != "checkpoint":
        return None
    folder = Path(report.get("checkpoint", ""))
    if not folder.is_dir():
        raise UsageError(f"the export used the checkpoint {folder}, which is gone; the package needs its "
                         "config and the sha256 of its weights: restore it or re-export")
    return folder


def config_vision(report: dict) -> dict:
    """The `vision` section of the config file the export recorded."""
    path = Path(report.get("config", ""))
    if not path.is_file():
        raise UsageError(f"the export's config file {path} is gone; the package's config.json is written from it")
    raw = yaml.safe_load(path.read_text()) or {}
    if not isinstance(raw.get("vision"), dict):
        raise UsageError(f"config {path} has no `vision` section")
    return dict(raw["vision"])


def check_against_metadata(facts: dict, metadata: dict, source: str) -> None:
    """The config facts the ONNX also records must agree (a config edited after the export)."""
    for key, value in facts.items():
        if key in metadata and str(metadata[key]) != str(value):
            raise UsageError(f"{source}: {key} = {value} but the exported model records {metadata[key]}; "
                             "the config changed after the export: re-export")
