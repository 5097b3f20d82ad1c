"""Load a sub-module's weights (e.g. the vision tower) from a `save_pretrained` folder or a hub id.

Safetensors only (never pickle); only the shards that hold the wanted prefix are read.
"""

import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from core.errors import UsageError
from core.report import read_json_object

INDEX = "model.safetensors.index.json"


def resolve_checkpoint(checkpoint: str, prefixes: tuple[str, ...]) -> Path:
    """A local folder as is; otherwise a hub id, fetching config.json and only the needed shards."""
    path = Path(checkpoint)
    if path.is_dir():
        return path
    if path.exists() or checkpoint.count("/") != 1 or checkpoint.startswith((".", "/")):
        raise UsageError(f"checkpoint {checkpoint!r} is not a folder (nor a hub id like 'Qwen/Qwen3-VL-2B-Instruct')")
    return _fetch_from_hub(checkpoint, prefixes)


def _fetch_from_hub(repo_id: str, prefixes: tuple[str, ...]) -> Path:
    from huggingface_hub import hf_hub_download

    try:
        config = Path(hf_hub_download(repo_id, "config.json"))
        try:
            index = json.loads(Path(hf_hub_download(repo_id, INDEX)).read_text())
            shards = sorted({f for k, f in index["weight_map"].items() if k.startswith(prefixes)})
        except Exception:  # noqa: BLE001 -- no index: a single-file checkpoint
            shards = ["model.safetensors"]
        for shard in shards:
            hf_hub_download(repo_id, shard)
    except Exception as err:  # noqa: BLE001 -- offline, unknown repo, gated: all mean "not served"
        raise UsageError(
            f"checkpoint {repo_id!r} is not a local folder and the hub could not serve it "
            f"({type(err).__name__}); download it and pass the folder"
        ) from None
    return config.parent


def checkpoint_config(checkpoint: str, prefixes: tuple[str, ...]) -> tuple[Path, dict]:
    """(the checkpoint folder, its config.json as a dict); UsageError when it has none or it is bad."""
    folder = resolve_checkpoint(checkpoint, prefixes)
    config_path = folder / "config.json"
    if not config_path.exists():
        raise UsageError(f"checkpoint folder {folder} has no config.json")
    return folder, read_config_json(config_path)


def read_config_json(path: Path) -> dict:
    """A checkpoint's JSON file (config.json, the shard index) as a dict; UsageError naming the file."""
    return read_json_object(path, "checkpoint file", "save the checkpoint again")


def load_prefixed_state_dict(folder: Path, prefixes: tuple[str, ...]) -> tuple[dict, str]:
    """Tensors whose names start with the first prefix found, with it stripped; and that prefix.

    Raises UsageError when the folder has no safetensors or none of its tensors has the prefix.
    """
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        pickles = [p.name for p in folder.glob("*.bin")] + [p.name for p in folder.glob("*.pt")]
        hint = f" (found {pickles[0]}: pickle files are never loaded; save with safe_serialization)" if pickles else ""
        raise UsageError(f"checkpoint folder {folder} has no *.safetensors files{hint}")
    index_path = folder / INDEX
    if index_path.exists():
        weight_map = read_config_json(index_path).get("weight_map")
        if not isinstance(weight_map, dict):
            raise UsageError(f"checkpoint {index_path} has no weight_map; save the checkpoint again")
        wanted = {folder / f for k, f in weight_map.items() if k.startswith(prefixes)}
        files = [f for f in files if f in wanted]
    for prefix in prefixes:
        state = {}
        for file in files:
            try:
                with safe_open(str(file), framework="pt") as reader:
                    for key in reader.keys():  # noqa: SIM118 -- safe_open is not a dict
                        if key.startswith(prefix):
                            state[key[len(prefix):]] = reader.get_tensor(key)
            except (SafetensorError, OSError, ValueError) as err:
                raise UsageError(f"checkpoint file {file} is not a readable safetensors file "
                                 f"({str(err).splitlines()[0] if str(err) else type(err).__name__}); "
                                 "copy it again or save the checkpoint again") from None
        if state:
            return state, prefix
    raise UsageError(
        f"checkpoint folder {folder} holds no vision weights (no tensor named {' or '.join(p + '*' for p in prefixes)})"
    )


def load_into(module: torch.nn.Module, state: dict, folder: Path) -> None:
    """Load `state` into `module` as float32; every parameter must be present (UsageError otherwise)."""
    state = {k: v.float() if v.is_floating_point() else v for k, v in state.items()}
    expected = module.state_dict()
    for key, tensor in state.items():
        if key in expected and tuple(expected[key].shape) != tuple(tensor.shape):
            raise UsageError(f"checkpoint {folder}: weight {key!r} has shape {list(tensor.shape)}, the config's "
                             f"model needs {list(expected[key].shape)}; config.json and weights disagree")
    missing, unexpected = module.load_state_dict(state, strict=False)
    if missing:
        raise UsageError(
            f"checkpoint {folder} lacks {len(missing)} vision weights (e.g. {missing[0]!r}); is it a checkpoint of this model?"
        )
    if unexpected:
        raise UsageError(f"checkpoint {folder} has {len(unexpected)} unexpected vision weights (e.g. {unexpected[0]!r})")


def family_of(checkpoint: str) -> tuple[str, Path]:
    """(the family a checkpoint's config.json names by its `model_type`, the checkpoint folder); UsageError when
    it names none this exporter knows (`families.MODEL_TYPES`)."""
    from families import MODEL_TYPES

    folder, config = checkpoint_config(checkpoint, ())
    model_type = config.get("model_type")
    if model_type not in MODEL_TYPES:
        raise UsageError(f"checkpoint {folder / 'config.json'} has model_type {model_type!r}; this exporter takes "
                         f"{', '.join(sorted(MODEL_TYPES))}")
    return MODEL_TYPES[model_type], folder
