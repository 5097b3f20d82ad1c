"""Model configs: `configs/NAME.yaml` (architecture + export settings), strict about keys."""

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from core.errors import UsageError

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
TOP_KEYS = {"family", "vision", "export"}
EXPORT_KEYS = {"opset", "example_grid_thw", "tolerance"}


@dataclass
class ModelConfig:
    """One config file: `vision` goes to the family's vision config class; the rest drives export."""

    name: str
    family: str
    vision: dict
    opset: int = 18
    example_grid_thw: list = field(default_factory=lambda: [[1, 16, 16], [1, 12, 20]])
    tolerance: float = 1e-4
    path: str = ""


def config_names() -> list[str]:
    """Names accepted by --model: every configs/*.yaml plus the aliases."""
    return sorted([p.stem for p in CONFIG_DIR.glob("*.yaml") if p.stem != "aliases"] + list(_aliases()))


def _aliases() -> dict:
    path = CONFIG_DIR / "aliases.yaml"
    return yaml.safe_load(path.read_text()) if path.exists() else {}


def resolve_name(model: str) -> str:
    """Map an alias (`qwen3-vl`) to its config name (`qwen3-vl-2b`)."""
    return _aliases().get(model, model)


def load_config(model: str | None = None, path: str | Path | None = None) -> ModelConfig:
    """Load `--config FILE` if given, else `configs/<resolved model>.yaml`; raise UsageError on any bad key."""
    if path is None:
        if model is None:
            raise UsageError("give --model NAME or --config FILE")
        name = resolve_name(model)
        path = CONFIG_DIR / f"{name}.yaml"
        if not path.exists():
            raise UsageError(f"unknown model {model!r}; known: {', '.join(config_names())}")
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"config file {str(path)!r} does not exist")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise UsageError(f"config {path} is not valid YAML: {str(err).splitlines()[0]}") from None
    if not isinstance(raw, dict):
        raise UsageError(f"config {path} must be a mapping with keys {sorted(TOP_KEYS)}")
    _reject_unknown(raw, TOP_KEYS, path, "")
    for key in ("family", "vision"):
        if key not in raw:
            raise UsageError(f"config {path} lacks the key {key!r}")
    export = raw.get("export") or {}
    _reject_unknown(export, EXPORT_KEYS, path, "export.")
    return ModelConfig(
        name=path.stem,
        family=raw["family"],
        vision=dict(raw["vision"]),
        path=str(path),
        **export,
    )


def _reject_unknown(mapping: dict, allowed: set, path: Path, prefix: str) -> None:
    unknown = sorted(set(mapping) - allowed)
    if unknown:
        raise UsageError(
            f"config {path}: unknown key {prefix}{unknown[0]!r}; allowed: {', '.join(sorted(allowed))}"
        )
