"""Model configs: `configs/NAME.yaml` (architecture + export settings), strict about keys."""

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from vlm_vision_onnx.core.errors import UsageError

#: The model configs: package data of `builders` (the checkout's `configs/` is a link to this folder), so
#: `--model NAME` resolves from an installed wheel as from the checkout.
CONFIG_DIR = Path(__file__).resolve().parent / "configs"
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
    except (yaml.YAMLError, UnicodeDecodeError, OSError) as err:
        raise UsageError(f"config {path} is not valid YAML: {str(err).splitlines()[0]}") from None
    if not isinstance(raw, dict):
        raise UsageError(f"config {path} must be a mapping with keys {sorted(TOP_KEYS)}")
    _reject_unknown(raw, TOP_KEYS, path, "")
    for key in ("family", "vision"):
        if key not in raw:
            raise UsageError(f"config {path} lacks the key {key!r}")
    if not isinstance(raw["vision"], dict):
        raise UsageError(f"config {path}: vision must be a mapping of vision config keys, got {raw['vision']!r}")
    export = raw.get("export") or {}
    if not isinstance(export, dict):
        raise UsageError(f"config {path}: export must be a mapping with keys {', '.join(sorted(EXPORT_KEYS))}")
    _reject_unknown(export, EXPORT_KEYS, path, "export.")
    _check_export(export, path)
    _require_family_keys(raw, path)
    return ModelConfig(
        name=path.stem,
        family=raw["family"],
        vision=dict(raw["vision"]),
        path=str(path),
        **export,
    )


#: The largest integer a vision config value may be (a width, a depth, a count): the published towers' largest is
#: 4304 (intermediate_size); past this the model would not fit a machine, and building it would fail in torch's
#: allocator after minutes (found by tools/fuzz: out_hidden_size 10^12).
MAX_SIZE = 2**16


def _require_family_keys(raw: dict, path: Path) -> None:
    """The size keys of the family's checked-in configs (the integers they all state, with values that differ
    between them: depth, widths, heads): a config without one would take the config class's published default
    silently (found by tools/fuzz: a tiny Phi-4-multimodal config without num_hidden_layers built 27 layers). Keys
    all configs state alike (patch geometry) may be left to their defaults."""
    family = raw.get("family")
    configs = []
    for other in CONFIG_DIR.glob("*.yaml"):
        if other.stem == "aliases":
            continue
        config = yaml.safe_load(other.read_text())
        if isinstance(config, dict) and config.get("family") == family and isinstance(config.get("vision"), dict):
            configs.append(config["vision"])
    if set(raw["vision"]) - {key for config in configs for key in config}:
        return  # a key no config states (a typo): the family's builder names it
    shared = set.intersection(*(set(c) for c in configs)) if configs else set()
    sizes = {key for key in shared if all(_is_int(c[key]) for c in configs) and len({c[key] for c in configs}) > 1}
    missing = sorted(sizes - set(raw["vision"]))
    if missing:
        raise UsageError(f"config {path}: vision lacks {', '.join(map(repr, missing))} (every {family} config "
                         "states them)")


def _reject_unknown(mapping: dict, allowed: set, path: Path, prefix: str) -> None:
    unknown = sorted(set(mapping) - allowed)
    if unknown:
        raise UsageError(
            f"config {path}: unknown key {prefix}{unknown[0]!r}; allowed: {', '.join(sorted(allowed))}"
        )


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_export(export: dict, path: Path) -> None:
    """Types and ranges of the export keys; UsageError naming the key and the file."""
    if "opset" in export and not (_is_int(export["opset"]) and export["opset"] >= 1):
        raise UsageError(f"config {path}: export.opset must be a positive integer, got {export['opset']!r}")
    if "tolerance" in export:
        tol = export["tolerance"]
        if not (isinstance(tol, (int, float)) and not isinstance(tol, bool) and 0 < tol < float("inf")):
            raise UsageError(f"config {path}: export.tolerance must be a positive number, got {tol!r}")
    if "example_grid_thw" in export:
        grid = export["example_grid_thw"]
        if not (isinstance(grid, list) and grid and all(
                isinstance(row, list) and len(row) == 3 and all(_is_int(v) and v >= 1 for v in row) for row in grid)):
            raise UsageError(f"config {path}: export.example_grid_thw must be a list of [t, h, w] positive "
                             f"integers, got {grid!r}")


def check_values(values: dict, defaults: dict, path: str | Path, prefix: str = "vision.") -> None:
    """Each value has the type of the config class's default for that key (UsageError naming the key).

    Integers must be integers >= 1 (>= 0 where the default is 0) and at most MAX_SIZE (a token id, `*_id`, has no
    bound), numbers finite and >= 0 where the
    default is, strings strings, lists lists of the default's element type (integers >= 0 when empty),
    mappings mappings whose keys are checked the same way against the default's (`rope_parameters`).
    """
    for key, value in values.items():
        default = defaults.get(key)
        where = f"config {path}: {prefix}{key}"
        if isinstance(default, bool):
            ok, want = isinstance(value, bool), "true or false"
        elif _is_int(default):
            low = 0 if default == 0 else 1 if default > 0 else None
            high = None if key.endswith("_id") else MAX_SIZE  # a token id is no size
            ok = _is_int(value) and (low is None or value >= low)
            want = "an integer" + (f" >= {low}" if low is not None else "")
            if ok and high is not None and abs(value) > high:
                ok, want = False, f"an integer of at most {high} in size"
        elif isinstance(default, float):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) < float("inf")
            ok = ok and (default < 0 or value >= 0)
            want = "a finite number" + ("" if default < 0 else " >= 0")
        elif isinstance(default, str):
            ok, want = isinstance(value, str), "a string"
        elif isinstance(default, (list, tuple)):
            ints = not default or all(_is_int(v) for v in default)
            ok = isinstance(value, list) and (not ints or all(_is_int(v) and 0 <= v <= MAX_SIZE for v in value))
            want = f"a list of integers in 0..{MAX_SIZE}" if ints else "a list"
        elif isinstance(default, dict):
            if isinstance(value, dict):
                check_values(value, default, path, f"{prefix}{key}.")
            ok, want = isinstance(value, dict), "a mapping"
        else:
            continue
        if not ok:
            raise UsageError(f"{where} must be {want}, got {value!r}")
